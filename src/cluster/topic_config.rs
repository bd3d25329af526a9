//! Topic configs: their names, types, defaults and validation, and how a topic's
//! effective settings resolve (topic override, then broker default, then built-in).
//!
//! Only configs tern honours are listed: DescribeConfigs must never describe a
//! setting that silently does nothing.

use std::collections::BTreeMap;

use crate::log::LogConfig;

/// Kafka's config types, with their DescribeConfigs v3+ wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    List = 7,
}

/// Where an effective value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    StaticBroker = 4,
    Default = 5,
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

/// Every topic config tern implements.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "cleanup.policy",
        broker_key: "log.cleanup.policy",
        kind: ConfigType::List,
        documentation: "Retention policy for old segments. Only 'delete' is implemented (no compaction).",
        validate: |v| match v.trim() {
            "delete" => Ok(()),
            "compact" | "compact,delete" | "delete,compact" => Err("log compaction is not implemented".into()),
            other => Err(format!("'{other}' is not a cleanup policy")),
        },
    },
    ConfigDef {
        name: "compression.type",
        broker_key: "compression.type",
        kind: ConfigType::String,
        documentation: "Only 'producer' is implemented: batches are stored as the producer compressed them.",
        validate: |v| match v.trim() {
            "producer" => Ok(()),
            "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd" => Err("broker-side recompression is not implemented".into()),
            other => Err(format!("'{other}' is not a compression type")),
        },
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
        name: "min.insync.replicas",
        broker_key: "min.insync.replicas",
        kind: ConfigType::Int,
        documentation: "Replicas that must hold a write for acks=all to succeed.",
        validate: |v| int_at_least(1)(v),
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

pub fn definition(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
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
}

/// Checks every `(name, value)` against the definitions.
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, value) in configs {
        let def = definition(name).ok_or_else(|| ConfigError::Unknown(name.clone()))?;
        (def.validate)(value).map_err(|reason| ConfigError::Invalid {
            name: name.clone(),
            value: value.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// Broker-wide defaults for topic configs, keyed by the topic config name, with a flag
/// for values the operator set explicitly (reported as STATIC_BROKER_CONFIG).
#[derive(Debug, Clone, Default)]
pub struct TopicDefaults {
    values: BTreeMap<&'static str, (String, bool)>,
}

impl TopicDefaults {
    /// `set_by_operator` holds values from the command line, environment or file.
    pub fn new(
        builtin: &[(&'static str, String)],
        set_by_operator: &BTreeMap<&'static str, String>,
    ) -> Self {
        let mut values = BTreeMap::new();
        for (name, value) in builtin {
            values.insert(*name, (value.clone(), false));
        }
        for (name, value) in set_by_operator {
            values.insert(*name, (value.clone(), true));
        }
        Self { values }
    }

    /// The effective value of `name` for a topic with `overrides`, and its source.
    pub fn resolve<'a>(
        &'a self,
        overrides: &'a BTreeMap<String, String>,
        name: &str,
    ) -> Option<(&'a str, ConfigSource)> {
        if let Some(v) = overrides.get(name) {
            return Some((v, ConfigSource::DynamicTopic));
        }
        self.values.get(name).map(|(v, by_operator)| {
            let source = if *by_operator {
                ConfigSource::StaticBroker
            } else {
                ConfigSource::Default
            };
            (v.as_str(), source)
        })
    }

    /// The broker-level value (for synonyms and broker DescribeConfigs).
    pub fn broker_value(&self, name: &str) -> Option<(&str, ConfigSource)> {
        self.resolve(&EMPTY, name)
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

    /// The log settings for a topic with `overrides`.
    pub fn log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
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
            max_message_bytes: self.parse_or(
                overrides,
                "max.message.bytes",
                builtin.max_message_bytes,
            ),
            log_append_time: self
                .resolve(overrides, "message.timestamp.type")
                .is_some_and(|(v, _)| v.trim() == "LogAppendTime"),
        }
    }

    pub fn min_insync_replicas(&self, overrides: &BTreeMap<String, String>) -> i32 {
        self.parse_or(overrides, "min.insync.replicas", 1)
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> TopicDefaults {
        let builtin = vec![
            ("retention.ms", "604800000".to_string()),
            ("segment.bytes", "1073741824".to_string()),
        ];
        let mut operator = BTreeMap::new();
        operator.insert("segment.bytes", "4096".to_string());
        TopicDefaults::new(&builtin, &operator)
    }

    #[test]
    fn topic_override_wins_then_operator_then_builtin() {
        let d = defaults();
        let mut overrides = BTreeMap::new();
        assert_eq!(
            d.resolve(&overrides, "retention.ms"),
            Some(("604800000", ConfigSource::Default))
        );
        assert_eq!(
            d.resolve(&overrides, "segment.bytes"),
            Some(("4096", ConfigSource::StaticBroker))
        );
        overrides.insert("retention.ms".to_string(), "10".to_string());
        assert_eq!(
            d.resolve(&overrides, "retention.ms"),
            Some(("10", ConfigSource::DynamicTopic))
        );
        assert_eq!(d.log_config(&overrides).retention_ms, 10);
        assert_eq!(d.log_config(&overrides).segment_bytes, 4096);
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
        c.insert("cleanup.policy".to_string(), "compact".to_string());
        assert!(
            validate(&c).is_err(),
            "compaction is refused, not silently ignored"
        );
        c.clear();
        c.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        assert_eq!(validate(&c), Ok(()));
    }
}
