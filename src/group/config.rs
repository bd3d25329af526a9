//! Group configs: the dynamic configs of one group (Kafka's GROUP config resources,
//! KIP-848 and KIP-932), set with IncrementalAlterConfigs and read with
//! DescribeConfigs. Each overrides, for one group, a broker-wide `group.*` setting:
//! the session timeout and heartbeat interval of consumer and share groups, and a
//! share group's record lock duration, where it starts reading a partition and whether
//! it delivers records of transactions not committed.
//!
//! Overrides are kept in the metadata store (apart from the group's own state, so a
//! group may be configured before it exists) and read on the request path: a member
//! is told a new heartbeat interval on its next heartbeat, a new lock applies to the
//! next acquisition. Values are checked when they are stored (`GroupConfigs::check`);
//! a stored value that no longer parses falls back to the broker's.
//!
//! Kafka bounds each override by its own `group.consumer.min.session.timeout.ms`-style
//! limits; tern bounds every session timeout by the classic group's
//! `group.min/max.session.timeout.ms`, and record locks by 1 s to 1 h.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use crate::model::Isolation;

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

/// The shortest and longest record lock a group may ask for.
const LOCK_DURATION_RANGE_MS: std::ops::RangeInclusive<i64> = 1_000..=3_600_000;

/// Where a share-partition with no stored state starts (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// At the log start.
    Earliest,
    /// At the high watermark when it is first used (Kafka's default).
    Latest,
}

impl std::str::FromStr for AutoOffsetReset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "earliest" => Ok(Self::Earliest),
            "latest" => Ok(Self::Latest),
            other => Err(format!(
                "share auto offset reset must be earliest or latest, not '{other}'"
            )),
        }
    }
}

/// A group config's value type, as DescribeConfigs names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupConfigKind {
    Int,
    String,
}

/// One group config: its name, type and what it does.
#[derive(Debug)]
pub struct GroupConfigDef {
    pub name: &'static str,
    pub kind: GroupConfigKind,
    pub documentation: &'static str,
}

/// Every group config, in the order DescribeConfigs lists them.
pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef {
        name: CONSUMER_SESSION_TIMEOUT_MS,
        kind: GroupConfigKind::Int,
        documentation:
            "The timeout to detect client failures when using the consumer group protocol.",
    },
    GroupConfigDef {
        name: CONSUMER_HEARTBEAT_INTERVAL_MS,
        kind: GroupConfigKind::Int,
        documentation: "The heartbeat interval given to the members of a consumer group.",
    },
    GroupConfigDef {
        name: SHARE_SESSION_TIMEOUT_MS,
        kind: GroupConfigKind::Int,
        documentation: "The timeout to detect client failures when using the share group protocol.",
    },
    GroupConfigDef {
        name: SHARE_HEARTBEAT_INTERVAL_MS,
        kind: GroupConfigKind::Int,
        documentation: "The heartbeat interval given to the members of a share group.",
    },
    GroupConfigDef {
        name: SHARE_RECORD_LOCK_DURATION_MS,
        kind: GroupConfigKind::Int,
        documentation: "The record acquisition lock duration in milliseconds for share groups.",
    },
    GroupConfigDef {
        name: SHARE_AUTO_OFFSET_RESET,
        kind: GroupConfigKind::String,
        documentation:
            "The strategy to initialize the share-partition start offset: earliest or latest.",
    },
    GroupConfigDef {
        name: SHARE_ISOLATION_LEVEL,
        kind: GroupConfigKind::String,
        documentation: "read_committed: only records of committed transactions are delivered (up to the last stable offset); read_uncommitted: every record.",
    },
];

/// What one group runs with: the broker's settings with the group's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSettings {
    pub consumer_session_timeout_ms: i32,
    pub consumer_heartbeat_interval_ms: i32,
    pub share_session_timeout_ms: i32,
    pub share_heartbeat_interval_ms: i32,
    pub share_record_lock_duration_ms: i64,
    pub share_auto_offset_reset: AutoOffsetReset,
    /// What a share group delivers of transactional records (read_uncommitted unless
    /// the group says otherwise, as in Kafka).
    pub share_isolation_level: Isolation,
}

impl GroupSettings {
    /// The value of config `name`, as DescribeConfigs shows it.
    pub fn value_of(&self, name: &str) -> Option<String> {
        Some(match name {
            CONSUMER_SESSION_TIMEOUT_MS => self.consumer_session_timeout_ms.to_string(),
            CONSUMER_HEARTBEAT_INTERVAL_MS => self.consumer_heartbeat_interval_ms.to_string(),
            SHARE_SESSION_TIMEOUT_MS => self.share_session_timeout_ms.to_string(),
            SHARE_HEARTBEAT_INTERVAL_MS => self.share_heartbeat_interval_ms.to_string(),
            SHARE_RECORD_LOCK_DURATION_MS => self.share_record_lock_duration_ms.to_string(),
            SHARE_AUTO_OFFSET_RESET => match self.share_auto_offset_reset {
                AutoOffsetReset::Earliest => "earliest".to_string(),
                AutoOffsetReset::Latest => "latest".to_string(),
            },
            SHARE_ISOLATION_LEVEL => match self.share_isolation_level {
                Isolation::ReadCommitted => "read_committed".to_string(),
                Isolation::ReadUncommitted => "read_uncommitted".to_string(),
            },
            _ => return None,
        })
    }

    /// These settings with one override applied, or why it cannot be.
    fn with(mut self, name: &str, value: &str) -> Result<Self, GroupConfigError> {
        let invalid = |reason: String| GroupConfigError::Invalid {
            name: name.to_string(),
            reason,
        };
        let int = || {
            value
                .trim()
                .parse::<i32>()
                .map_err(|_| invalid(format!("'{value}' is not an integer")))
        };
        match name {
            CONSUMER_SESSION_TIMEOUT_MS => self.consumer_session_timeout_ms = int()?,
            CONSUMER_HEARTBEAT_INTERVAL_MS => self.consumer_heartbeat_interval_ms = int()?,
            SHARE_SESSION_TIMEOUT_MS => self.share_session_timeout_ms = int()?,
            SHARE_HEARTBEAT_INTERVAL_MS => self.share_heartbeat_interval_ms = int()?,
            SHARE_RECORD_LOCK_DURATION_MS => self.share_record_lock_duration_ms = i64::from(int()?),
            SHARE_AUTO_OFFSET_RESET => {
                self.share_auto_offset_reset = value.trim().parse().map_err(invalid)?
            }
            SHARE_ISOLATION_LEVEL => {
                self.share_isolation_level = match value.trim() {
                    "read_committed" => Isolation::ReadCommitted,
                    "read_uncommitted" => Isolation::ReadUncommitted,
                    other => {
                        return Err(invalid(format!(
                            "must be read_committed or read_uncommitted, not '{other}'"
                        )))
                    }
                }
            }
            _ => return Err(GroupConfigError::UnknownName(name.to_string())),
        }
        Ok(self)
    }
}

/// Why a set of group configs is refused (INVALID_CONFIG).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupConfigError {
    #[error("Unknown group config name: {0}")]
    UnknownName(String),
    #[error("{name}: {reason}")]
    Invalid { name: String, reason: String },
}

/// Where a group's overrides are read from (the metadata store, in a broker).
pub trait GroupConfigSource: Send + Sync + Debug {
    fn overrides(&self, group: &str) -> BTreeMap<String, String>;
}

/// The overrides the metadata store keeps (`MetadataStore::group_configs`).
#[derive(Debug)]
pub struct StoredGroupConfigs(pub Arc<dyn crate::cluster::MetadataStore>);

impl GroupConfigSource for StoredGroupConfigs {
    fn overrides(&self, group: &str) -> BTreeMap<String, String> {
        self.0.group_configs(group)
    }
}

/// The broker's group settings and where each group's overrides come from.
#[derive(Debug, Clone)]
pub struct GroupConfigs {
    defaults: GroupSettings,
    /// Bounds of every session timeout (`group.min/max.session.timeout.ms`).
    session_timeout_range_ms: (i32, i32),
    source: Option<Arc<dyn GroupConfigSource>>,
}

impl GroupConfigs {
    /// Settings without overrides: every group runs with `defaults`.
    pub fn fixed(defaults: GroupSettings, session_timeout_range_ms: (i32, i32)) -> Self {
        Self {
            defaults,
            session_timeout_range_ms,
            source: None,
        }
    }

    /// Reads each group's overrides from `source`.
    pub fn with_source(mut self, source: Arc<dyn GroupConfigSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// The overrides stored for `group`.
    pub fn overrides(&self, group: &str) -> BTreeMap<String, String> {
        self.source
            .as_ref()
            .map(|s| s.overrides(group))
            .unwrap_or_default()
    }

    /// What `group` runs with now. An override that does not apply (it was stored by
    /// another version, say) is skipped.
    pub fn settings(&self, group: &str) -> GroupSettings {
        let mut settings = self.defaults;
        for (name, value) in &self.overrides(group) {
            if let Ok(next) = settings.with(name, value) {
                settings = next;
            }
        }
        settings
    }

    /// Whether `overrides` may be stored for a group: every name known, every value
    /// parsed and within its bounds, and each session timeout longer than its
    /// heartbeat interval once applied over the broker's settings (Kafka's
    /// `GroupConfig.validate`).
    pub fn check(&self, overrides: &BTreeMap<String, String>) -> Result<(), GroupConfigError> {
        let mut settings = self.defaults;
        for (name, value) in overrides {
            settings = settings.with(name, value)?;
        }
        let (min_session, max_session) = self.session_timeout_range_ms;
        let invalid = |name: &str, reason: String| GroupConfigError::Invalid {
            name: name.to_string(),
            reason,
        };
        for (name, value) in [
            (
                CONSUMER_SESSION_TIMEOUT_MS,
                settings.consumer_session_timeout_ms,
            ),
            (SHARE_SESSION_TIMEOUT_MS, settings.share_session_timeout_ms),
        ] {
            if !(min_session..=max_session).contains(&value) {
                return Err(invalid(
                    name,
                    format!("must be within group.min.session.timeout.ms ({min_session}) and group.max.session.timeout.ms ({max_session})"),
                ));
            }
        }
        for (name, interval, session, session_name) in [
            (
                CONSUMER_HEARTBEAT_INTERVAL_MS,
                settings.consumer_heartbeat_interval_ms,
                settings.consumer_session_timeout_ms,
                CONSUMER_SESSION_TIMEOUT_MS,
            ),
            (
                SHARE_HEARTBEAT_INTERVAL_MS,
                settings.share_heartbeat_interval_ms,
                settings.share_session_timeout_ms,
                SHARE_SESSION_TIMEOUT_MS,
            ),
        ] {
            if interval < 1 {
                return Err(invalid(name, "must be at least 1".to_string()));
            }
            if session <= interval {
                return Err(invalid(
                    session_name,
                    format!("must be greater than {name}"),
                ));
            }
        }
        if !LOCK_DURATION_RANGE_MS.contains(&settings.share_record_lock_duration_ms) {
            return Err(invalid(
                SHARE_RECORD_LOCK_DURATION_MS,
                format!(
                    "must be within {} and {}",
                    LOCK_DURATION_RANGE_MS.start(),
                    LOCK_DURATION_RANGE_MS.end()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> GroupSettings {
        GroupSettings {
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            share_session_timeout_ms: 45_000,
            share_heartbeat_interval_ms: 5_000,
            share_record_lock_duration_ms: 30_000,
            share_auto_offset_reset: AutoOffsetReset::Latest,
            share_isolation_level: Isolation::ReadUncommitted,
        }
    }

    #[derive(Debug)]
    struct Fixed(BTreeMap<String, String>);

    impl GroupConfigSource for Fixed {
        fn overrides(&self, group: &str) -> BTreeMap<String, String> {
            if group == "configured" {
                self.0.clone()
            } else {
                BTreeMap::new()
            }
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn configs(overrides: &[(&str, &str)]) -> GroupConfigs {
        GroupConfigs::fixed(defaults(), (6_000, 1_800_000))
            .with_source(Arc::new(Fixed(map(overrides))))
    }

    #[test]
    fn a_group_runs_with_its_overrides_and_every_other_group_with_the_brokers() {
        let configs = configs(&[
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "2000"),
            (SHARE_RECORD_LOCK_DURATION_MS, "15000"),
            (SHARE_AUTO_OFFSET_RESET, "earliest"),
            (SHARE_ISOLATION_LEVEL, "read_committed"),
        ]);
        let mine = configs.settings("configured");
        assert_eq!(mine.consumer_heartbeat_interval_ms, 2_000);
        assert_eq!(mine.consumer_session_timeout_ms, 45_000);
        assert_eq!(mine.share_record_lock_duration_ms, 15_000);
        assert_eq!(mine.share_auto_offset_reset, AutoOffsetReset::Earliest);
        assert_eq!(mine.share_isolation_level, Isolation::ReadCommitted);
        assert_eq!(configs.settings("other"), defaults());
        assert_eq!(
            mine.value_of(SHARE_AUTO_OFFSET_RESET).as_deref(),
            Some("earliest")
        );
        for def in GROUP_CONFIGS {
            assert!(
                mine.value_of(def.name).is_some(),
                "{} has a value",
                def.name
            );
        }
    }

    #[test]
    fn a_stored_override_that_does_not_parse_falls_back_to_the_brokers_setting() {
        let configs = configs(&[
            (CONSUMER_SESSION_TIMEOUT_MS, "soon"),
            ("unknown.config", "1"),
        ]);
        assert_eq!(configs.settings("configured"), defaults());
    }

    #[test]
    fn unknown_names_unparsable_values_and_values_out_of_bounds_are_refused() {
        let configs = configs(&[]);
        let refused = |pairs: &[(&str, &str)]| configs.check(&map(pairs)).expect_err("refused");
        assert_eq!(
            refused(&[("consumer.session.timeout", "1")]),
            GroupConfigError::UnknownName("consumer.session.timeout".into())
        );
        for (name, value) in [
            (CONSUMER_SESSION_TIMEOUT_MS, "ten"),
            (CONSUMER_SESSION_TIMEOUT_MS, "5999"),
            (SHARE_SESSION_TIMEOUT_MS, "1800001"),
            (SHARE_HEARTBEAT_INTERVAL_MS, "0"),
            (SHARE_RECORD_LOCK_DURATION_MS, "999"),
            (SHARE_RECORD_LOCK_DURATION_MS, "3600001"),
            (SHARE_AUTO_OFFSET_RESET, "none"),
            (SHARE_ISOLATION_LEVEL, "serializable"),
        ] {
            assert!(
                matches!(refused(&[(name, value)]), GroupConfigError::Invalid { name: n, .. } if n == name),
                "{name}={value}"
            );
        }
        assert!(configs
            .check(&map(&[
                (CONSUMER_SESSION_TIMEOUT_MS, "6000"),
                (CONSUMER_HEARTBEAT_INTERVAL_MS, "1000"),
                (SHARE_RECORD_LOCK_DURATION_MS, "1000"),
                (SHARE_AUTO_OFFSET_RESET, "earliest"),
            ]))
            .is_ok());
    }

    #[test]
    fn a_session_timeout_must_outlast_its_heartbeat_interval_once_applied() {
        let configs = configs(&[]);
        // The broker's heartbeat interval (5 s) against a 5 s session: refused.
        let refused = configs
            .check(&map(&[
                (CONSUMER_SESSION_TIMEOUT_MS, "6000"),
                (CONSUMER_HEARTBEAT_INTERVAL_MS, "6000"),
            ]))
            .expect_err("refused");
        assert!(
            matches!(&refused, GroupConfigError::Invalid { name, .. } if name == CONSUMER_SESSION_TIMEOUT_MS),
            "{refused:?}"
        );
        assert!(configs
            .check(&map(&[(SHARE_HEARTBEAT_INTERVAL_MS, "45000")]))
            .is_err());
        assert!(configs
            .check(&map(&[(SHARE_HEARTBEAT_INTERVAL_MS, "44999")]))
            .is_ok());
    }
}
