//! Topic configs: their names, types, defaults and validation, and how a topic's
//! effective settings resolve: topic override, then the broker-level value in Kafka's
//! order (dynamic per-broker, dynamic cluster-wide default, static, built-in). Also the
//! rules of the internal offsets topic, whose retention-free, compacted settings no
//! change may undo.
//!
//! Only configs tern honours are listed: DescribeConfigs must never describe a
//! setting that silently does nothing.

use std::collections::BTreeMap;

use crate::log::{CleanupPolicy, LogConfig};
use crate::model::is_internal;

/// Kafka's config types, with their DescribeConfigs v3+ wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
}

/// Where an effective value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    /// This broker's dynamic config (`configs/brokers/<id>`).
    DynamicBroker = 2,
    /// The cluster-wide dynamic default (`configs/brokers/<default>`).
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A group's own config (GROUP resources, `configs/groups/<id>`).
    DynamicGroup = 8,
}

/// One topic config and the broker config that supplies its default.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub broker_key: &'static str,
    pub kind: ConfigType,
    pub documentation: &'static str,
    validate: fn(&str) -> Result<(), String>,
}

fn long_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v| match v.trim().parse::<i64>() {
        Ok(n) if n >= min => Ok(()),
        Ok(n) => Err(format!("{n} is below the minimum {min}")),
        Err(_) => Err(format!("'{v}' is not an integer")),
    }
}

fn int_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v| match v.trim().parse::<i32>() {
        Ok(n) if i64::from(n) >= min => Ok(()),
        Ok(n) => Err(format!("{n} is below the minimum {min}")),
        Err(_) => Err(format!("'{v}' is not a 32-bit integer")),
    }
}

fn boolean(v: &str) -> Result<(), String> {
    match v.trim() {
        "true" | "false" => Ok(()),
        other => Err(format!("'{other}' is not true or false")),
    }
}

/// Every topic config tern implements.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "archive.enable",
        broker_key: "archive.enable",
        kind: ConfigType::Boolean,
        documentation: "Write every segment retention would delete to the Parquet archive (--archive-dir or --archive-url) first; retention waits until the archive has it.",
        validate: boolean,
    },
    ConfigDef {
        name: "archive.on.failure",
        broker_key: "archive.on.failure",
        kind: ConfigType::String,
        documentation: "What retention does while the archive fails: 'wait' keeps the segments until an export succeeds; 'delete' deletes them unarchived (counted in tern_archive_skipped_segments_total).",
        validate: |v| match v.trim() {
            "wait" | "delete" => Ok(()),
            other => Err(format!("'{other}' is not wait or delete")),
        },
    },
    ConfigDef {
        name: "cleanup.policy",
        broker_key: "log.cleanup.policy",
        kind: ConfigType::List,
        documentation: "What happens to old segments: 'delete' removes them by retention.ms and retention.bytes, 'compact' keeps the latest record of every key (the log cleaner), 'compact,delete' does both.",
        validate: |v| match CleanupPolicy::parse(v) {
            Some(_) => Ok(()),
            None => Err(format!("'{}' is not a list of delete and compact", v.trim())),
        },
    },
    ConfigDef {
        name: "compression.type",
        broker_key: "compression.type",
        kind: ConfigType::String,
        documentation: "The topic's codec: 'producer' stores batches as the producer compressed them (no decompression on produce); 'uncompressed', 'gzip', 'snappy', 'lz4' or 'zstd' recompresses batches in another codec on the way in.",
        validate: |v| match codec_of(v) {
            Some(_) => Ok(()),
            None => Err(format!("'{}' is not one of producer, uncompressed, gzip, snappy, lz4, zstd", v.trim())),
        },
    },
    ConfigDef {
        name: "compression.gzip.level",
        broker_key: "compression.gzip.level",
        kind: ConfigType::Int,
        documentation: "The gzip level a topic with compression.type=gzip recompresses at: 1 (fastest) to 9 (smallest), or -1 for the default (6).",
        validate: |v| match v.trim().parse::<i32>() {
            Ok(-1 | 1..=9) => Ok(()),
            Ok(n) => Err(format!("{n} is not -1 or between 1 and 9")),
            Err(_) => Err(format!("'{v}' is not an integer")),
        },
    },
    ConfigDef {
        name: "delete.retention.ms",
        broker_key: "log.cleaner.delete.retention.ms",
        kind: ConfigType::Long,
        documentation: "How long a tombstone (a null value) in a compacted topic stays readable after the log cleaner first passed it, so that a consumer that read the key's earlier value sees the deletion.",
        validate: |v| long_at_least(0)(v),
    },
    ConfigDef {
        name: "flush.messages",
        broker_key: "log.flush.interval.messages",
        kind: ConfigType::Long,
        documentation: "Unflushed messages that make a write wait for an fsync before it is acknowledged (a follower fsyncs before fetching on): 1 puts every acknowledged write on disk on every in-sync replica; the default leaves flushing to log.flush.interval.ms.",
        validate: |v| long_at_least(1)(v),
    },
    ConfigDef {
        name: "index.interval.bytes",
        broker_key: "log.index.interval.bytes",
        kind: ConfigType::Int,
        documentation: "Bytes of log between two entries of the sparse offset index.",
        validate: |v| int_at_least(0)(v),
    },
    ConfigDef {
        name: "max.message.bytes",
        broker_key: "message.max.bytes",
        kind: ConfigType::Int,
        documentation: "Largest record batch the topic accepts.",
        validate: |v| int_at_least(0)(v),
    },
    ConfigDef {
        name: "message.timestamp.type",
        broker_key: "log.message.timestamp.type",
        kind: ConfigType::String,
        documentation: "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker clock.",
        validate: |v| match v.trim() {
            "CreateTime" | "LogAppendTime" => Ok(()),
            other => Err(format!("'{other}' is not CreateTime or LogAppendTime")),
        },
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        broker_key: "log.cleaner.max.compaction.lag.ms",
        kind: ConfigType::Long,
        documentation: "Longest a record of a compacted topic stays uncleaned: dirty data this old is cleaned whatever the dirty ratio, and the active segment is rolled at this age.",
        validate: |v| long_at_least(1)(v),
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_key: "log.cleaner.min.cleanable.ratio",
        kind: ConfigType::Double,
        documentation: "Share of a compacted log's cleanable bytes that must be dirty (written since the last cleaning) before the cleaner cleans it.",
        validate: |v| match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
            Ok(r) => Err(format!("{r} is not between 0 and 1")),
            Err(_) => Err(format!("'{v}' is not a number")),
        },
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        broker_key: "log.cleaner.min.compaction.lag.ms",
        kind: ConfigType::Long,
        documentation: "Shortest a record of a compacted topic stays uncleaned: a segment is cleaned only once its newest record is this old.",
        validate: |v| long_at_least(0)(v),
    },
    ConfigDef {
        name: "min.insync.replicas",
        broker_key: "min.insync.replicas",
        kind: ConfigType::Int,
        documentation: "Replicas that must hold a write for acks=all to succeed.",
        validate: |v| int_at_least(1)(v),
    },
    ConfigDef {
        name: "unclean.leader.election.enable",
        broker_key: "unclean.leader.election.enable",
        kind: ConfigType::Boolean,
        documentation: "Elect a replica outside the ISR when no in-sync replica is alive: the partition comes back at once, but acknowledged writes may be lost.",
        validate: boolean,
    },
    ConfigDef {
        name: "retention.bytes",
        broker_key: "log.retention.bytes",
        kind: ConfigType::Long,
        documentation: "Size a partition may grow to before its oldest segments are deleted; -1 for no limit.",
        validate: |v| long_at_least(-1)(v),
    },
    ConfigDef {
        name: "retention.ms",
        broker_key: "log.retention.ms",
        kind: ConfigType::Long,
        documentation: "Age after which a segment is deleted; -1 keeps data forever.",
        validate: |v| long_at_least(-1)(v),
    },
    ConfigDef {
        name: "segment.bytes",
        broker_key: "log.segment.bytes",
        kind: ConfigType::Int,
        documentation: "Size at which the active segment is rolled.",
        validate: |v| int_at_least(1024)(v),
    },
    ConfigDef {
        name: "segment.index.bytes",
        broker_key: "log.index.size.max.bytes",
        kind: ConfigType::Int,
        documentation: "Largest size of a segment's offset and time index files.",
        validate: |v| int_at_least(16)(v),
    },
    ConfigDef {
        name: "segment.ms",
        broker_key: "log.roll.ms",
        kind: ConfigType::Long,
        documentation: "Age at which the active segment is rolled.",
        validate: |v| long_at_least(1)(v),
    },
];

/// A `compression.type` value as a Kafka codec id: `Some(None)` for `producer`.
fn codec_of(value: &str) -> Option<Option<i16>> {
    match value.trim() {
        "producer" => Some(None),
        "uncompressed" => Some(Some(0)),
        "gzip" => Some(Some(1)),
        "snappy" => Some(Some(2)),
        "lz4" => Some(Some(3)),
        "zstd" => Some(Some(4)),
        _ => None,
    }
}

pub fn definition(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The topic config whose broker-level default is broker config `key`.
pub fn by_broker_key(key: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.broker_key == key)
}

impl ConfigDef {
    /// Checks one value; the reason says what is wrong with it.
    pub fn check(&self, value: &str) -> Result<(), String> {
        (self.validate)(value)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("unknown topic config '{0}'")]
    Unknown(String),
    #[error("invalid value '{value}' for {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
    #[error("{topic} must keep {name}={required} (asked: {}): the log cleaner compacts it, and retention or another cleanup policy would age committed offsets out", requested.as_deref().unwrap_or("no value"))]
    Protected {
        topic: String,
        name: String,
        required: String,
        requested: Option<String>,
    },
}

/// Checks every `(name, value)` against the definitions, and the pairs that must
/// agree (`min.compaction.lag.ms` not above `max.compaction.lag.ms`, as Kafka's
/// `LogConfig.validate` requires).
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, value) in configs {
        let def = definition(name).ok_or_else(|| ConfigError::Unknown(name.clone()))?;
        (def.validate)(value).map_err(|reason| ConfigError::Invalid {
            name: name.clone(),
            value: value.clone(),
            reason,
        })?;
    }
    let lag = |name: &str| configs.get(name).and_then(|v| v.trim().parse::<i64>().ok());
    if let (Some(min), Some(max)) = (lag("min.compaction.lag.ms"), lag("max.compaction.lag.ms")) {
        if min > max {
            return Err(ConfigError::Invalid {
                name: "min.compaction.lag.ms".into(),
                value: min.to_string(),
                reason: format!("conflict: it is above max.compaction.lag.ms {max}"),
            });
        }
    }
    Ok(())
}

/// Broker-level values for topic configs, at the four levels Kafka resolves them from
/// (KIP-226): this broker's dynamic config, the cluster-wide dynamic default
/// (`<default>`), the operator's static setting (flag, environment, file), and the
/// built-in default. Static and built-in values are keyed by topic config name; dynamic
/// ones arrive keyed by broker config name (`log.retention.ms`), as they are stored.
#[derive(Debug, Clone, Default)]
pub struct TopicDefaults {
    builtin: BTreeMap<&'static str, String>,
    operator: BTreeMap<&'static str, String>,
    dynamic: DynamicBrokerConfigs,
}

/// The dynamic broker configs that apply to this broker, by broker config name: its own
/// (`configs/brokers/<id>`, DYNAMIC_BROKER_CONFIG) and the cluster-wide default
/// (`configs/brokers/<default>`, DYNAMIC_DEFAULT_BROKER_CONFIG).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicBrokerConfigs {
    pub this_broker: BTreeMap<String, String>,
    pub cluster_default: BTreeMap<String, String>,
}

impl DynamicBrokerConfigs {
    /// The dynamic value of broker config `key`, most specific level first.
    pub fn get(&self, key: &str) -> Option<(&str, ConfigSource)> {
        if let Some(v) = self.this_broker.get(key) {
            return Some((v, ConfigSource::DynamicBroker));
        }
        self.cluster_default
            .get(key)
            .map(|v| (v.as_str(), ConfigSource::DynamicDefaultBroker))
    }
}

/// One level at which a config has a value (a DescribeConfigs synonym).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    pub name: &'static str,
    pub value: String,
    pub source: ConfigSource,
}

impl TopicDefaults {
    /// `set_by_operator` holds values from the command line, environment or file.
    pub fn new(
        builtin: &[(&'static str, String)],
        set_by_operator: &BTreeMap<&'static str, String>,
    ) -> Self {
        Self {
            builtin: builtin.iter().cloned().collect(),
            operator: set_by_operator.clone(),
            dynamic: DynamicBrokerConfigs::default(),
        }
    }

    /// The same static values under another set of dynamic broker configs.
    pub fn with_dynamic(&self, dynamic: DynamicBrokerConfigs) -> Self {
        Self {
            dynamic,
            ..self.clone()
        }
    }

    pub fn dynamic(&self) -> &DynamicBrokerConfigs {
        &self.dynamic
    }

    /// Every broker-level value of topic config `name`, in Kafka's order of precedence
    /// (dynamic per-broker, dynamic default, static, default), named by the broker key.
    pub fn broker_synonyms(&self, name: &str) -> Vec<Synonym> {
        let Some(def) = definition(name) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut push = |value: Option<&String>, source| {
            if let Some(value) = value {
                out.push(Synonym {
                    name: def.broker_key,
                    value: value.clone(),
                    source,
                });
            }
        };
        push(
            self.dynamic.this_broker.get(def.broker_key),
            ConfigSource::DynamicBroker,
        );
        push(
            self.dynamic.cluster_default.get(def.broker_key),
            ConfigSource::DynamicDefaultBroker,
        );
        push(self.operator.get(def.name), ConfigSource::StaticBroker);
        push(self.builtin.get(def.name), ConfigSource::Default);
        out
    }

    /// The effective value of `name` for a topic with `overrides`, and its source.
    pub fn resolve(
        &self,
        overrides: &BTreeMap<String, String>,
        name: &str,
    ) -> Option<(String, ConfigSource)> {
        if let Some(v) = overrides.get(name) {
            return Some((v.clone(), ConfigSource::DynamicTopic));
        }
        self.broker_value(name)
    }

    /// The broker-level value (for synonyms and broker DescribeConfigs).
    pub fn broker_value(&self, name: &str) -> Option<(String, ConfigSource)> {
        self.broker_synonyms(name)
            .into_iter()
            .next()
            .map(|s| (s.value, s.source))
    }

    fn parse_or<T: std::str::FromStr>(
        &self,
        overrides: &BTreeMap<String, String>,
        name: &str,
        fallback: T,
    ) -> T {
        self.resolve(overrides, name)
            .and_then(|(v, _)| v.trim().parse().ok())
            .unwrap_or(fallback)
    }

    /// The log settings of topic `topic` with `overrides`. The offsets topic never has
    /// retention, whatever its configs or the broker's say (the log cleaner compacts
    /// it), and fsyncs every commit.
    pub fn log_config_for(&self, topic: &str, overrides: &BTreeMap<String, String>) -> LogConfig {
        let mut config = self.log_config(overrides);
        if is_internal(topic) {
            config.retention_ms = -1;
            config.retention_bytes = -1;
            // Commits are small and few next to data: each is on disk on every in-sync
            // replica before it is acknowledged, so no power loss makes a group re-read.
            config.flush_messages = 1;
            config.archive = false;
        }
        config
    }

    /// The log settings for a topic with `overrides`, before the offsets topic's pinned
    /// ones: private, so no caller can bypass [`Self::log_config_for`].
    fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let builtin = LogConfig::default();
        LogConfig {
            segment_bytes: self.parse_or(overrides, "segment.bytes", builtin.segment_bytes),
            segment_ms: self.parse_or(overrides, "segment.ms", builtin.segment_ms),
            index_bytes: self.parse_or(overrides, "segment.index.bytes", builtin.index_bytes),
            index_interval_bytes: self.parse_or(
                overrides,
                "index.interval.bytes",
                builtin.index_interval_bytes,
            ),
            retention_ms: self.parse_or(overrides, "retention.ms", builtin.retention_ms),
            retention_bytes: self.parse_or(overrides, "retention.bytes", builtin.retention_bytes),
            producer_id_expiration_ms: builtin.producer_id_expiration_ms,
            archive: self
                .resolve(overrides, "archive.enable")
                .map_or(builtin.archive, |(v, _)| v.trim() == "true"),
            archive_failure_deletes: self
                .resolve(overrides, "archive.on.failure")
                .map_or(builtin.archive_failure_deletes, |(v, _)| {
                    v.trim() == "delete"
                }),
            max_message_bytes: self.parse_or(
                overrides,
                "max.message.bytes",
                builtin.max_message_bytes,
            ),
            log_append_time: self
                .resolve(overrides, "message.timestamp.type")
                .is_some_and(|(v, _)| v.trim() == "LogAppendTime"),
            flush_messages: self.parse_or(overrides, "flush.messages", builtin.flush_messages),
            cleanup: self
                .resolve(overrides, "cleanup.policy")
                .and_then(|(v, _)| CleanupPolicy::parse(&v))
                .unwrap_or(builtin.cleanup),
            delete_retention_ms: self.parse_or(
                overrides,
                "delete.retention.ms",
                builtin.delete_retention_ms,
            ),
            min_cleanable_dirty_ratio: self.parse_or(
                overrides,
                "min.cleanable.dirty.ratio",
                builtin.min_cleanable_dirty_ratio,
            ),
            min_compaction_lag_ms: self.parse_or(
                overrides,
                "min.compaction.lag.ms",
                builtin.min_compaction_lag_ms,
            ),
            max_compaction_lag_ms: self.parse_or(
                overrides,
                "max.compaction.lag.ms",
                builtin.max_compaction_lag_ms,
            ),
            compression: self
                .resolve(overrides, "compression.type")
                .and_then(|(v, _)| codec_of(&v).flatten())
                .map(|codec| {
                    let level = self.parse_or(overrides, "compression.gzip.level", -1i32);
                    (codec, u32::try_from(level).ok().filter(|_| codec == 1))
                }),
        }
    }

    pub fn min_insync_replicas(&self, overrides: &BTreeMap<String, String>) -> i32 {
        self.parse_or(overrides, "min.insync.replicas", 1)
    }
}

/// Whether the controller may elect a replica outside the ISR for a topic with these
/// configs when no in-sync replica is alive: the topic's override, else the dynamic
/// cluster-wide default, else false (Kafka's default).
pub fn unclean_leader_election(
    topic: &BTreeMap<String, String>,
    cluster_default: Option<&BTreeMap<String, String>>,
) -> bool {
    const NAME: &str = "unclean.leader.election.enable";
    topic
        .get(NAME)
        .or_else(|| cluster_default.and_then(|d| d.get(NAME)))
        .is_some_and(|v| v.trim() == "true")
}

/// The configs `__consumer_offsets` is created with, Kafka's: `cleanup.policy=compact`
/// (the log cleaner keeps each group's and each committed partition's latest record),
/// `compression.type=producer`, 100 MiB segments (`offsets.topic.segment.bytes`).
/// Retention is `-1` for both: only the cleaner may remove a commit, once a newer
/// one or a tombstone supersedes it.
pub const OFFSETS_TOPIC_CONFIGS: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("compression.type", "producer"),
    ("retention.bytes", "-1"),
    ("retention.ms", "-1"),
    ("segment.bytes", "104857600"),
];

/// The offsets-topic configs no change may alter: another cleanup policy or any retention
/// would age committed offsets out.
const OFFSETS_TOPIC_PINNED: &[&str] = &["cleanup.policy", "retention.bytes", "retention.ms"];

/// `configs` with the offsets topic's required values filled in (missing ones only).
pub fn with_offsets_topic_configs(
    mut configs: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for (name, value) in OFFSETS_TOPIC_CONFIGS {
        if OFFSETS_TOPIC_PINNED.contains(name) || !configs.contains_key(*name) {
            configs.insert((*name).to_string(), (*value).to_string());
        }
    }
    configs
}

/// Checks the complete set of explicit configs a change would leave topic `topic` with.
/// User topics go through `validate`; the offsets topic must also keep its pinned values.
pub fn validate_for_topic(
    topic: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    if !is_internal(topic) {
        return validate(configs);
    }
    for name in OFFSETS_TOPIC_PINNED {
        let required = OFFSETS_TOPIC_CONFIGS
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| *v);
        let actual = configs.get(*name).map(|v| v.trim());
        if actual != Some(required) {
            return Err(ConfigError::Protected {
                topic: topic.to_string(),
                name: (*name).to_string(),
                required: required.to_string(),
                requested: actual.map(str::to_string),
            });
        }
    }
    let rest: BTreeMap<String, String> = configs
        .iter()
        .filter(|(name, _)| !OFFSETS_TOPIC_PINNED.contains(&name.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    validate(&rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> TopicDefaults {
        let builtin = vec![
            ("retention.ms", "604800000".to_string()),
            ("retention.bytes", "-1".to_string()),
            ("segment.bytes", "1073741824".to_string()),
        ];
        let mut operator = BTreeMap::new();
        operator.insert("segment.bytes", "4096".to_string());
        TopicDefaults::new(&builtin, &operator)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn resolved(
        d: &TopicDefaults,
        o: &BTreeMap<String, String>,
        name: &str,
    ) -> (String, ConfigSource) {
        d.resolve(o, name).expect("every listed config resolves")
    }

    #[test]
    fn topic_override_wins_then_operator_then_builtin() {
        let d = defaults();
        let mut overrides = BTreeMap::new();
        assert_eq!(
            resolved(&d, &overrides, "retention.ms"),
            ("604800000".into(), ConfigSource::Default)
        );
        assert_eq!(
            resolved(&d, &overrides, "segment.bytes"),
            ("4096".into(), ConfigSource::StaticBroker)
        );
        overrides.insert("retention.ms".to_string(), "10".to_string());
        assert_eq!(
            resolved(&d, &overrides, "retention.ms"),
            ("10".into(), ConfigSource::DynamicTopic)
        );
        assert_eq!(d.log_config(&overrides).retention_ms, 10);
        assert_eq!(d.log_config(&overrides).segment_bytes, 4096);
    }

    #[test]
    fn dynamic_broker_configs_beat_static_ones_and_per_broker_beats_default() {
        let d = defaults().with_dynamic(DynamicBrokerConfigs {
            this_broker: map(&[("log.segment.bytes", "2048")]),
            cluster_default: map(&[("log.segment.bytes", "8192"), ("log.retention.ms", "60000")]),
        });
        let none = BTreeMap::new();
        assert_eq!(
            resolved(&d, &none, "segment.bytes"),
            ("2048".into(), ConfigSource::DynamicBroker)
        );
        assert_eq!(
            resolved(&d, &none, "retention.ms"),
            ("60000".into(), ConfigSource::DynamicDefaultBroker)
        );
        assert_eq!(d.log_config(&none).segment_bytes, 2048);
        assert_eq!(d.log_config(&none).retention_ms, 60000);
        // A topic override still wins over every broker level.
        let over = map(&[("retention.ms", "5")]);
        assert_eq!(d.log_config(&over).retention_ms, 5);
        // Synonyms list every level that has a value, most specific first.
        let levels: Vec<(&str, String, ConfigSource)> = d
            .broker_synonyms("segment.bytes")
            .into_iter()
            .map(|s| (s.name, s.value, s.source))
            .collect();
        assert_eq!(
            levels,
            vec![
                (
                    "log.segment.bytes",
                    "2048".into(),
                    ConfigSource::DynamicBroker
                ),
                (
                    "log.segment.bytes",
                    "8192".into(),
                    ConfigSource::DynamicDefaultBroker
                ),
                (
                    "log.segment.bytes",
                    "4096".into(),
                    ConfigSource::StaticBroker
                ),
                (
                    "log.segment.bytes",
                    "1073741824".into(),
                    ConfigSource::Default
                ),
            ]
        );
        // Dropping the dynamic configs brings the static value back.
        let back = d.with_dynamic(DynamicBrokerConfigs::default());
        assert_eq!(back.log_config(&none).segment_bytes, 4096);
    }

    #[test]
    fn the_offsets_topic_never_has_retention() {
        let d = defaults().with_dynamic(DynamicBrokerConfigs {
            this_broker: map(&[("log.retention.ms", "1"), ("log.retention.bytes", "1")]),
            cluster_default: BTreeMap::new(),
        });
        // Even with retention overrides that validation would refuse (an old store).
        let configs = map(&[("retention.ms", "1000"), ("retention.bytes", "10")]);
        let log = d.log_config_for(crate::model::OFFSETS_TOPIC, &configs);
        assert_eq!((log.retention_ms, log.retention_bytes), (-1, -1));
        let user = d.log_config_for("orders", &BTreeMap::new());
        assert_eq!((user.retention_ms, user.retention_bytes), (1, 1));
    }

    #[test]
    fn the_offsets_topic_keeps_compact_and_no_retention() {
        let topic = crate::model::OFFSETS_TOPIC;
        let pinned = with_offsets_topic_configs(map(&[("segment.bytes", "1048576")]));
        assert_eq!(validate_for_topic(topic, &pinned), Ok(()));
        assert_eq!(
            pinned.get("segment.bytes").map(String::as_str),
            Some("1048576")
        );
        assert_eq!(
            pinned.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        for (name, bad) in [
            ("cleanup.policy", Some("delete")),
            ("cleanup.policy", None),
            ("retention.ms", Some("1000")),
            ("retention.bytes", Some("1")),
        ] {
            let mut c = pinned.clone();
            match bad {
                Some(v) => c.insert(name.to_string(), v.to_string()),
                None => c.remove(name),
            };
            assert!(
                matches!(
                    validate_for_topic(topic, &c),
                    Err(ConfigError::Protected { .. })
                ),
                "{name}={bad:?} must be refused"
            );
        }
        // Other configs are still checked.
        let mut c = pinned.clone();
        c.insert("segment.bytes".into(), "tiny".into());
        assert!(matches!(
            validate_for_topic(topic, &c),
            Err(ConfigError::Invalid { .. })
        ));
        // User topics may ask for compaction, in Kafka's list forms.
        for policy in ["compact", "compact,delete", "delete, compact", "delete"] {
            assert_eq!(
                validate_for_topic("orders", &map(&[("cleanup.policy", policy)])),
                Ok(()),
                "{policy}"
            );
        }
        assert!(validate_for_topic("orders", &map(&[("cleanup.policy", "shred")])).is_err());
        // Old stores' pinned values are replaced by the required ones.
        let upgraded = with_offsets_topic_configs(map(&[("retention.ms", "5")]));
        assert_eq!(upgraded.get("retention.ms").map(String::as_str), Some("-1"));
    }

    #[test]
    fn validation_names_the_problem() {
        let mut c = BTreeMap::new();
        c.insert("retention.ms".to_string(), "soon".to_string());
        assert!(matches!(validate(&c), Err(ConfigError::Invalid { .. })));
        c.clear();
        c.insert("no.such.config".to_string(), "1".to_string());
        assert_eq!(
            validate(&c),
            Err(ConfigError::Unknown("no.such.config".into()))
        );
        c.clear();
        c.insert("min.cleanable.dirty.ratio".to_string(), "1.5".to_string());
        assert!(matches!(validate(&c), Err(ConfigError::Invalid { .. })));
        c.clear();
        c.insert("min.compaction.lag.ms".to_string(), "10".to_string());
        c.insert("max.compaction.lag.ms".to_string(), "5".to_string());
        assert!(
            matches!(validate(&c), Err(ConfigError::Invalid { .. })),
            "a minimum lag above the maximum is a conflict, as in Kafka"
        );
        c.clear();
        c.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        assert_eq!(validate(&c), Ok(()));
    }
}
