//! Broker configs (DescribeConfigs/AlterConfigs resource type BROKER): which of them may
//! change at run time (KIP-226), the checks a dynamic change must pass, and the read-only
//! settings a broker describes beside them.
//!
//! Dynamic broker configs live in the metadata store at two levels, as in Kafka: one
//! broker's own (`configs/brokers/<id>`, resource name `"<id>"`) and the cluster-wide
//! default (`configs/brokers/<default>`, resource name `""`). Precedence: dynamic
//! per-broker, dynamic default, static (flag, environment, file), built-in default.
//!
//! The dynamic ones are the broker-level defaults of the topic configs tern honours
//! (Kafka's `DynamicLogConfig.ReconfigurableConfigs`: `log.retention.ms`,
//! `log.segment.bytes`, `message.max.bytes`, `min.insync.replicas`, ...) and
//! `log.flush.interval.ms`, which Kafka also counts among them. Everything else a broker
//! describes is read-only, including `num.partitions` (not dynamic in Kafka either).
//! Kafka's other dynamic configs (`log.cleaner.threads`, listener and SSL settings,
//! quotas, `max.connections`) mean nothing in tern or are not reconfigurable here; they
//! are refused rather than stored to do nothing.

use std::collections::BTreeMap;

use super::topic_config::{self, ConfigSource, ConfigType, Synonym};

/// `log.flush.interval.ms`: how often every log is flushed; dynamic as in Kafka.
pub const LOG_FLUSH_INTERVAL_MS: &str = "log.flush.interval.ms";

/// Whether broker config `name` may be changed at run time.
pub fn is_dynamic(name: &str) -> bool {
    name == LOG_FLUSH_INTERVAL_MS || topic_config::by_broker_key(name).is_some()
}

/// The type of dynamic broker config `name`.
pub fn dynamic_kind(name: &str) -> Option<ConfigType> {
    if name == LOG_FLUSH_INTERVAL_MS {
        return Some(ConfigType::Long);
    }
    topic_config::by_broker_key(name).map(|d| d.kind)
}

fn check_value(name: &str, value: &str) -> Result<(), String> {
    if name == LOG_FLUSH_INTERVAL_MS {
        return match value.trim().parse::<i64>() {
            Ok(ms) if ms >= 1 => Ok(()),
            Ok(ms) => Err(format!("{ms} is below the minimum 1")),
            Err(_) => Err("Not a number of type LONG".into()),
        };
    }
    match topic_config::by_broker_key(name) {
        Some(def) => def.check(value),
        None => Err("not a dynamic config".into()),
    }
}

/// Why a change to broker configs is refused. Kafka answers every one of these with
/// INVALID_REQUEST (its `ConfigAdminManager` turns validation failures of BROKER
/// resources into `InvalidRequestException`, KAFKA-13609); the messages are Kafka's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerConfigError {
    #[error("Cannot update these configs dynamically: Set({})", .0.join(", "))]
    ReadOnly(Vec<String>),
    #[error("Cannot update these configs dynamically: Set({}) (tern has no such broker setting)", .0.join(", "))]
    Unknown(Vec<String>),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
    #[error("Null value not supported for : {0}")]
    NullValue(String),
    #[error("Error due to duplicate config keys")]
    DuplicateKeys,
    #[error("Unexpected broker id, expected {expected}, but received {received}")]
    OtherBroker { expected: i32, received: String },
    #[error("Node id must be an integer, but it is: {0}")]
    NotAnId(String),
}

/// The level a BROKER resource name addresses: `None` for `""` (the cluster-wide
/// default), `Some(me)` for this broker's own id. Another broker's id is refused, as in
/// Kafka: each broker alters only its own configs.
pub fn target(resource_name: &str, me: i32) -> Result<Option<i32>, BrokerConfigError> {
    if resource_name.is_empty() {
        return Ok(None);
    }
    let id: i32 = resource_name
        .trim()
        .parse()
        .map_err(|_| BrokerConfigError::NotAnId(resource_name.to_string()))?;
    if id != me {
        return Err(BrokerConfigError::OtherBroker {
            expected: me,
            received: resource_name.to_string(),
        });
    }
    Ok(Some(id))
}

/// Checks the complete set of dynamic configs a change would leave one level with.
/// `read_only` names the broker configs tern describes but does not change at run time.
pub fn validate_dynamic(
    configs: &BTreeMap<String, String>,
    read_only: &dyn Fn(&str) -> bool,
) -> Result<(), BrokerConfigError> {
    let mut fixed = Vec::new();
    let mut unknown = Vec::new();
    for name in configs.keys() {
        if is_dynamic(name) {
            continue;
        }
        if read_only(name) {
            fixed.push(name.clone());
        } else {
            unknown.push(name.clone());
        }
    }
    if !fixed.is_empty() {
        return Err(BrokerConfigError::ReadOnly(fixed));
    }
    if !unknown.is_empty() {
        return Err(BrokerConfigError::Unknown(unknown));
    }
    for (name, value) in configs {
        check_value(name, value).map_err(|reason| BrokerConfigError::Invalid {
            name: name.clone(),
            value: value.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// A read-only broker config as this broker runs with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticBrokerConfig {
    /// Kafka's name (`num.partitions`).
    pub name: &'static str,
    pub value: String,
    /// The built-in value, when the setting has one.
    pub default: Option<String>,
    /// Set by flag, environment or file (STATIC_BROKER_CONFIG) rather than built in.
    pub set_by_operator: bool,
    pub kind: ConfigType,
    pub documentation: &'static str,
}

impl StaticBrokerConfig {
    /// Its DescribeConfigs synonyms: the static setting, then the default.
    pub fn synonyms(&self) -> Vec<Synonym> {
        let mut out = Vec::new();
        if self.set_by_operator {
            out.push(Synonym {
                name: self.name,
                value: self.value.clone(),
                source: ConfigSource::StaticBroker,
            });
        }
        if let Some(default) = &self.default {
            out.push(Synonym {
                name: self.name,
                value: default.clone(),
                source: ConfigSource::Default,
            });
        }
        out
    }

    pub fn source(&self) -> ConfigSource {
        if self.set_by_operator {
            ConfigSource::StaticBroker
        } else {
            ConfigSource::Default
        }
    }
}

/// The synonyms of `log.flush.interval.ms` given its static setting and the dynamic
/// configs: dynamic per-broker, dynamic default, then the static ones.
pub fn flush_interval_synonyms(
    static_config: &StaticBrokerConfig,
    dynamic: &topic_config::DynamicBrokerConfigs,
) -> Vec<Synonym> {
    let mut out = Vec::new();
    if let Some(v) = dynamic.this_broker.get(LOG_FLUSH_INTERVAL_MS) {
        out.push(Synonym {
            name: static_config.name,
            value: v.clone(),
            source: ConfigSource::DynamicBroker,
        });
    }
    if let Some(v) = dynamic.cluster_default.get(LOG_FLUSH_INTERVAL_MS) {
        out.push(Synonym {
            name: static_config.name,
            value: v.clone(),
            source: ConfigSource::DynamicDefaultBroker,
        });
    }
    out.extend(static_config.synonyms());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn read_only(name: &str) -> bool {
        matches!(name, "num.partitions" | "broker.id")
    }

    #[test]
    fn topic_defaults_and_the_flush_interval_are_dynamic_the_rest_is_not() {
        for name in [
            "log.retention.ms",
            "log.retention.bytes",
            "log.segment.bytes",
            "log.roll.ms",
            "message.max.bytes",
            "min.insync.replicas",
            "log.cleanup.policy",
            "log.flush.interval.ms",
        ] {
            assert!(is_dynamic(name), "{name}");
        }
        for name in [
            "num.partitions",
            "broker.id",
            "log.cleaner.threads",
            "retention.ms",
        ] {
            assert!(!is_dynamic(name), "{name}");
        }
    }

    #[test]
    fn dynamic_changes_are_validated_like_kafka() {
        let ok = map(&[
            ("log.retention.ms", "3600000"),
            ("log.segment.bytes", "1048576"),
        ]);
        assert_eq!(validate_dynamic(&ok, &read_only), Ok(()));
        assert_eq!(
            validate_dynamic(&map(&[("num.partitions", "3")]), &read_only),
            Err(BrokerConfigError::ReadOnly(vec!["num.partitions".into()]))
        );
        assert_eq!(
            BrokerConfigError::ReadOnly(vec!["num.partitions".into()]).to_string(),
            "Cannot update these configs dynamically: Set(num.partitions)"
        );
        assert!(matches!(
            validate_dynamic(&map(&[("log.cleaner.threads", "2")]), &read_only),
            Err(BrokerConfigError::Unknown(_))
        ));
        assert!(matches!(
            validate_dynamic(&map(&[("log.retention.ms", "soon")]), &read_only),
            Err(BrokerConfigError::Invalid { .. })
        ));
        // The values a topic config refuses are refused as broker defaults too.
        assert!(validate_dynamic(&map(&[("log.cleanup.policy", "shred")]), &read_only).is_err());
        assert_eq!(
            validate_dynamic(&map(&[("log.cleanup.policy", "compact")]), &read_only),
            Ok(())
        );
        assert!(validate_dynamic(&map(&[("log.flush.interval.ms", "0")]), &read_only).is_err());
        assert_eq!(
            validate_dynamic(&map(&[("log.flush.interval.ms", "250")]), &read_only),
            Ok(())
        );
    }

    #[test]
    fn resource_names_address_the_default_or_this_broker_only() {
        assert_eq!(target("", 3), Ok(None));
        assert_eq!(target("3", 3), Ok(Some(3)));
        assert!(matches!(
            target("4", 3),
            Err(BrokerConfigError::OtherBroker { .. })
        ));
        assert!(matches!(target("x", 3), Err(BrokerConfigError::NotAnId(_))));
    }

    #[test]
    fn static_configs_report_their_source_and_synonyms() {
        let set = StaticBrokerConfig {
            name: "num.partitions",
            value: "3".into(),
            default: Some("1".into()),
            set_by_operator: true,
            kind: ConfigType::Int,
            documentation: "",
        };
        assert_eq!(set.source(), ConfigSource::StaticBroker);
        let sources: Vec<ConfigSource> = set.synonyms().iter().map(|s| s.source).collect();
        assert_eq!(
            sources,
            vec![ConfigSource::StaticBroker, ConfigSource::Default]
        );
        let dynamic = topic_config::DynamicBrokerConfigs {
            this_broker: BTreeMap::new(),
            cluster_default: map(&[("log.flush.interval.ms", "200")]),
        };
        let flush = StaticBrokerConfig {
            name: LOG_FLUSH_INTERVAL_MS,
            value: "1000".into(),
            default: Some("1000".into()),
            set_by_operator: false,
            kind: ConfigType::Long,
            documentation: "",
        };
        let first = flush_interval_synonyms(&flush, &dynamic);
        assert_eq!(
            (first[0].value.as_str(), first[0].source),
            ("200", ConfigSource::DynamicDefaultBroker)
        );
    }
}
