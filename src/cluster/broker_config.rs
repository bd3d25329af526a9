//! Broker configs (DescribeConfigs/AlterConfigs resource type BROKER): which of them may
//! change at run time (KIP-226), the checks a dynamic change must pass, and the read-only
//! settings a broker describes beside them.
//!
//! Dynamic broker configs live in the metadata store at two levels, as in Kafka: one
//! broker's own (`configs/brokers/<id>`, resource name `"<id>"`) and the cluster-wide
//! default (`configs/brokers/<default>`, resource name `""`). Precedence: dynamic
//! per-broker, dynamic default, static (flag, environment, file), built-in default.
//!
//! The dynamic ones are Kafka 4.1's: the broker-level defaults of the topic configs
//! (`DynamicLogConfig`: `log.retention.ms`, `log.segment.bytes`, `log.flush.interval.ms`,
//! ...) and the rest of `DynamicBrokerConfig.AllDynamicConfigs`
//! ([`super::dynamic_broker_configs`]), some of them also under a listener prefix
//! (`listener.name.<listener>.<config>`). The checks are Kafka's, in its order: known but
//! not dynamic, TLS key material without its listener prefix, the value, and per-broker
//! configs at the cluster-wide level. A name tern does not know is refused, where Kafka
//! would keep it as a custom property.

use std::collections::BTreeMap;

use super::config_value::{self, ConfigType, Validator};
use super::dynamic_broker_configs::{self, Scope};
use super::topic_config::{self, ConfigSource, Support, Synonym};

/// What a dynamic broker config name stands for.
#[derive(Debug, Clone, Copy)]
pub struct Dynamic {
    pub kind: ConfigType,
    pub default: Option<&'static str>,
    validator: Validator,
    scope: Scope,
    pub support: Support,
    pub documentation: &'static str,
}

impl Dynamic {
    /// Whether only one broker's level may hold it.
    fn per_broker(&self) -> bool {
        self.scope != Scope::Cluster
    }

    /// A password: stored, never described (DescribeConfigs `is_sensitive`).
    pub fn sensitive(&self) -> bool {
        self.kind == ConfigType::Password
    }
}

const PER_LISTENER_KEPT: &str =
    "a per-listener limit is kept and described, not applied: tern's limits span all listeners";

/// Listener configs that a cluster-wide default may hold even under a listener prefix
/// (Kafka's `ClusterLevelListenerConfigs`).
const CLUSTER_LEVEL_LISTENER_CONFIGS: &[&str] = &[
    "max.connections",
    "max.connection.creation.rate",
    "num.network.threads",
];

/// The config under a listener prefix: `listener.name.<l>.<base>`, where a SASL
/// mechanism's JAAS config is `listener.name.<l>.<mechanism>.sasl.jaas.config`.
fn listener_base(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("listener.name.")?;
    let (_, base) = rest.split_once('.')?;
    match base.split_once('.') {
        Some((_, jaas)) if jaas == "sasl.jaas.config" => Some(jaas),
        _ => Some(base),
    }
}

/// The dynamic broker config `name` addresses, if it is one.
pub fn dynamic(name: &str) -> Option<Dynamic> {
    if let Some(def) = topic_config::by_broker_key(name) {
        return Some(Dynamic {
            kind: def.kind,
            default: def.default,
            validator: broker_validator(name).unwrap_or(def.validator),
            scope: Scope::Cluster,
            support: def.support,
            documentation: def.documentation,
        });
    }
    let (base, prefixed) = match listener_base(name) {
        Some(base) => (base, true),
        None => (name, false),
    };
    let config = dynamic_broker_configs::lookup(base)?;
    let listener_config =
        config.scope != Scope::Cluster || CLUSTER_LEVEL_LISTENER_CONFIGS.contains(&base);
    if prefixed && !listener_config {
        return None;
    }
    let scope = match (prefixed, config.scope) {
        (true, _) if CLUSTER_LEVEL_LISTENER_CONFIGS.contains(&base) => Scope::Cluster,
        (true, _) => Scope::PerBroker,
        (false, scope) => scope,
    };
    // Limits are applied over all listeners: one listener's own is kept, not applied.
    let support = match config.support {
        Support::Honoured if prefixed => Support::Stored(PER_LISTENER_KEPT),
        support => support,
    };
    Some(Dynamic {
        kind: config.kind,
        default: config.default,
        validator: config.validator,
        scope,
        support,
        documentation: config.documentation(),
    })
}

/// Where a broker default is checked otherwise than its topic config (`KafkaConfig`'s
/// own definitions): `log.retention.ms` takes any negative value as unlimited but not 0,
/// `log.flush.interval.ms` has no bound.
fn broker_validator(name: &str) -> Option<Validator> {
    match name {
        "log.retention.ms" => Some(Validator::Custom(broker_retention_ms)),
        "log.flush.interval.ms" => Some(Validator::Any),
        _ => None,
    }
}

/// `KafkaConfig`'s rule for `log.retention.ms`: a negative value is unlimited, 0 is not
/// a retention.
fn broker_retention_ms(value: &str) -> Result<(), String> {
    match value.parse::<i64>() {
        Ok(0) => Err("requirement failed: log.retention.ms must be unlimited (-1) or, greater than or equal to 1".into()),
        _ => Ok(()),
    }
}

/// The thread pools Kafka resizes at run time, which may change by at most half down or
/// double up at a time (`DynamicThreadPool.validateReconfiguration`).
const THREAD_POOLS: &[&str] = &[
    "background.threads",
    "num.io.threads",
    "num.network.threads",
    "num.recovery.threads.per.data.dir",
    "num.replica.fetchers",
    "remote.log.manager.copier.thread.pool.size",
    "remote.log.manager.expiration.thread.pool.size",
    "remote.log.reader.threads",
];

/// Kafka's check of a thread count changed from `current` to `new`, in its words.
fn check_thread_count(name: &str, current: i64, new: i64) -> Result<(), String> {
    if name == "log.cleaner.threads" {
        return if new < 1 {
            Err("Log cleaner threads should be at least 1".into())
        } else if new < current / 2 {
            Err(format!("Log cleaner threads cannot be reduced to less than half the current value {current}"))
        } else if new > current.saturating_mul(2) {
            Err(format!("Log cleaner threads cannot be increased to more than double the current value {current}"))
        } else {
            Ok(())
        };
    }
    let failed = format!("Dynamic thread count update validation failed for {name}={new}");
    if new < 1 {
        Err(format!("{failed}, value should be at least 1"))
    } else if new < current / 2 {
        Err(format!(
            "{failed}, value should be at least half the current value {current}"
        ))
    } else if new > current.saturating_mul(2) {
        Err(format!(
            "{failed}, value should not be greater than double the current value {current}"
        ))
    } else {
        Ok(())
    }
}

/// A broker config's value once the change is made, as a number.
fn number(after: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<i64> {
    after(name).and_then(|v| v.trim().parse::<i64>().ok())
}

/// `KafkaConfig`'s requirement that each cleaner thread gets more than 1 MiB of the
/// dedupe buffer, on the values the change would leave.
fn check_cleaner_buffer(after: &dyn Fn(&str) -> Option<String>) -> Result<(), BrokerConfigError> {
    const BUFFER: &str = "log.cleaner.dedupe.buffer.size";
    const THREADS: &str = "log.cleaner.threads";
    match (number(after, BUFFER), number(after, THREADS)) {
        (Some(buffer), Some(threads)) if threads > 0 && buffer / threads <= 1024 * 1024 => {
            Err(BrokerConfigError::Reconfiguration(format!(
                "requirement failed: {BUFFER} must be at least 1MB per cleaner thread."
            )))
        }
        _ => Ok(()),
    }
}

/// `DynamicLogConfig`'s check of the local retention against the whole retention, on
/// the values the change would leave: -2 follows it, -1 (forever) is refused while the
/// retention is bounded, and more than it is refused.
fn check_local_retention(after: &dyn Fn(&str) -> Option<String>) -> Result<(), BrokerConfigError> {
    for (local, whole, unbounded) in [
        ("log.local.retention.ms", "log.retention.ms", -1),
        ("log.local.retention.bytes", "log.retention.bytes", i64::MIN),
    ] {
        let (Some(local_value), Some(whole_value)) = (number(after, local), number(after, whole))
        else {
            continue;
        };
        let bounded = if unbounded == -1 {
            whole_value != -1
        } else {
            whole_value > -1
        };
        if !bounded || local_value == -2 {
            continue;
        }
        let reason = if local_value == -1 {
            format!("Value must not be -1 as {whole} value is set as {whole_value}.")
        } else if local_value > whole_value {
            format!("Value must not be more than {whole} property value: {whole_value}")
        } else {
            continue;
        };
        return Err(BrokerConfigError::Invalid {
            name: local.to_string(),
            value: local_value.to_string(),
            reason,
        });
    }
    Ok(())
}

/// `KafkaConfig`'s requirement that a zero per-address limit comes with overrides.
fn check_per_ip_limit(after: &dyn Fn(&str) -> Option<String>) -> Result<(), BrokerConfigError> {
    let overrides = after("max.connections.per.ip.overrides").unwrap_or_default();
    if number(after, "max.connections.per.ip") == Some(0) && overrides.trim().is_empty() {
        return Err(BrokerConfigError::Reconfiguration(
            "requirement failed: max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.".into(),
        ));
    }
    Ok(())
}

/// Whether broker config `name` may be changed at run time.
pub fn is_dynamic(name: &str) -> bool {
    dynamic(name).is_some()
}

/// The type of dynamic broker config `name`.
pub fn dynamic_kind(name: &str) -> Option<ConfigType> {
    dynamic(name).map(|d| d.kind)
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
    #[error("These security configs can be dynamically updated only per-listener using the listener prefix: Set({})", .0.join(", "))]
    ListenerPrefixRequired(Vec<String>),
    #[error("Cannot update these configs at default cluster level, broker id must be specified: Set({})", .0.join(", "))]
    PerBrokerOnly(Vec<String>),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
    /// Refused by the check of the change itself (Kafka's `validateReconfiguration`).
    #[error("{0}")]
    Reconfiguration(String),
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

/// Checks the complete set of dynamic configs a change would leave one level with
/// (`per_broker`: a broker's own level, else the cluster-wide default), in Kafka's order
/// (`DynamicBrokerConfig.validateConfigs`). `read_only` names the broker configs tern
/// describes but does not change at run time.
pub fn validate_dynamic(
    configs: &BTreeMap<String, String>,
    per_broker: bool,
    read_only: &dyn Fn(&str) -> bool,
    current: &dyn Fn(&str) -> Option<String>,
) -> Result<(), BrokerConfigError> {
    let names = |keep: &dyn Fn(&str, Option<Dynamic>) -> bool| -> Vec<String> {
        configs
            .keys()
            .filter(|name| keep(name, dynamic(name)))
            .cloned()
            .collect()
    };
    let fixed = names(&|name, d| d.is_none() && read_only(name));
    if !fixed.is_empty() {
        return Err(BrokerConfigError::ReadOnly(fixed));
    }
    let unknown = names(&|_, d| d.is_none());
    if !unknown.is_empty() {
        return Err(BrokerConfigError::Unknown(unknown));
    }
    let bare = names(&|_, d| d.is_some_and(|d| d.scope == Scope::Listener));
    if !bare.is_empty() {
        return Err(BrokerConfigError::ListenerPrefixRequired(bare));
    }
    for (name, value) in configs {
        let Some(d) = dynamic(name) else { continue };
        config_value::check(d.kind, d.validator, value).map_err(|reason| {
            BrokerConfigError::Invalid {
                name: name.clone(),
                value: value.clone(),
                reason,
            }
        })?;
    }
    if !per_broker {
        let own = names(&|_, d| d.is_some_and(|d| d.per_broker()));
        if !own.is_empty() {
            return Err(BrokerConfigError::PerBrokerOnly(own));
        }
    }
    let after = |name: &str| {
        configs
            .get(name)
            .cloned()
            .or_else(|| current(name))
            .or_else(|| dynamic(name).and_then(|d| d.default.map(String::from)))
    };
    check_cleaner_buffer(&after)?;
    check_local_retention(&after)?;
    check_per_ip_limit(&after)?;
    for (name, value) in configs {
        if !THREAD_POOLS.contains(&name.as_str()) && name != "log.cleaner.threads" {
            continue;
        }
        let was = current(name).or_else(|| dynamic(name).and_then(|d| d.default.map(String::from)));
        let (Some(was), Ok(new)) = (
            was.and_then(|w| w.trim().parse().ok()),
            value.trim().parse(),
        ) else {
            continue;
        };
        if was != new {
            check_thread_count(name, was, new).map_err(BrokerConfigError::Reconfiguration)?;
        }
    }
    Ok(())
}

/// Every level at which dynamic broker config `name` (not a topic default) has a value,
/// most specific first: this broker's, the cluster default, then the static setting
/// tern runs with (`flag`, if it has one: its own synonyms) or else Kafka's default.
pub fn dynamic_levels(
    name: &str,
    levels: &topic_config::DynamicBrokerConfigs,
    flag: Option<&StaticBrokerConfig>,
) -> Vec<Synonym> {
    let named = |value: &str, source| Synonym {
        name: name.to_string(),
        value: value.to_string(),
        source,
    };
    let mut out = Vec::new();
    if let Some(v) = levels.this_broker.get(name) {
        out.push(named(v, ConfigSource::DynamicBroker));
    }
    if let Some(v) = levels.cluster_default.get(name) {
        out.push(named(v, ConfigSource::DynamicDefaultBroker));
    }
    match flag {
        Some(config) => out.extend(config.synonyms()),
        None => out.extend(
            dynamic(name)
                .and_then(|d| d.default)
                .map(|default| named(default, ConfigSource::Default)),
        ),
    }
    out
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
                name: self.name.to_string(),
                value: self.value.clone(),
                source: ConfigSource::StaticBroker,
            });
        }
        if let Some(default) = &self.default {
            out.push(Synonym {
                name: self.name.to_string(),
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
        matches!(
            name,
            "num.partitions" | "broker.id" | "advertised.listeners"
        )
    }

    fn check(pairs: &[(&str, &str)], per_broker: bool) -> Result<(), BrokerConfigError> {
        validate_dynamic(&map(pairs), per_broker, &read_only, &|_| None)
    }

    #[test]
    fn kafkas_dynamic_broker_configs_are_dynamic_the_rest_is_not() {
        for name in [
            "log.retention.ms",
            "log.segment.bytes",
            "log.roll.jitter.ms",
            "log.flush.interval.ms",
            "message.max.bytes",
            "log.message.timestamp.after.max.ms",
            "sasl.kerberos.min.time.before.relogin",
            "num.io.threads",
            "producer.id.expiration.ms",
            "listener.name.external.ssl.keystore.location",
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
            "listener.name.internal.max.connections",
        ] {
            assert!(is_dynamic(name), "{name}");
        }
        for name in [
            "num.partitions",
            "broker.id",
            "retention.ms",
            "log.retention.hours",
            "listener.name.external.log.retention.ms",
            "listener.name.",
        ] {
            assert!(!is_dynamic(name), "{name}");
        }
    }

    #[test]
    fn dynamic_changes_are_checked_in_kafkas_order_with_kafkas_words() {
        assert_eq!(
            check(
                &[
                    ("log.retention.ms", "3600000"),
                    ("log.segment.bytes", "1048576")
                ],
                false
            ),
            Ok(())
        );
        assert_eq!(
            check(&[("num.partitions", "3")], true).map_err(|e| e.to_string()),
            Err("Cannot update these configs dynamically: Set(num.partitions)".into())
        );
        assert!(matches!(
            check(&[("no.such.config", "2")], true),
            Err(BrokerConfigError::Unknown(_))
        ));
        assert_eq!(
            check(&[("log.retention.ms", "soon")], true).map_err(|e| e.to_string()),
            Err(
                "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"
                    .into()
            )
        );
        // Kafka 4.1 refuses segments under 1 MiB, as a topic config and as the broker's.
        assert!(check(&[("log.segment.bytes", "1048575")], true).is_err());
        assert!(check(&[("log.cleanup.policy", "shred")], true).is_err());
        assert_eq!(check(&[("log.cleanup.policy", "compact")], true), Ok(()));
        assert_eq!(check(&[("log.flush.interval.ms", "250")], true), Ok(()));
        // TLS key material only under a listener prefix, and only per broker.
        assert_eq!(
            check(&[("ssl.keystore.location", "/k")], true).map_err(|e| e.to_string()),
            Err("These security configs can be dynamically updated only per-listener using the listener prefix: Set(ssl.keystore.location)".into())
        );
        assert_eq!(
            check(
                &[("listener.name.external.ssl.keystore.location", "/k")],
                true
            ),
            Ok(())
        );
        assert_eq!(
            check(&[("listener.name.external.ssl.keystore.location", "/k")], false).map_err(|e| e.to_string()),
            Err("Cannot update these configs at default cluster level, broker id must be specified: Set(listener.name.external.ssl.keystore.location)".into())
        );
        // Per-broker listener and SASL settings, cluster-wide connection limits.
        assert!(matches!(
            check(&[("sasl.kerberos.min.time.before.relogin", "60000")], false),
            Err(BrokerConfigError::PerBrokerOnly(_))
        ));
        assert_eq!(
            check(&[("sasl.kerberos.min.time.before.relogin", "60000")], true),
            Ok(())
        );
        assert_eq!(
            check(
                &[
                    ("max.connections", "100"),
                    ("listener.name.a.max.connections", "10")
                ],
                false
            ),
            Ok(())
        );
        assert!(check(&[("max.connections", "-1")], false).is_err());
        assert!(check(&[("ssl.client.auth", "optional")], true).is_err());
        assert!(check(&[("sasl.login.refresh.buffer.seconds", "40000")], true).is_err());
        // Broker-level rules of their own.
        assert!(check(&[("log.retention.ms", "0")], true).is_err());
        assert_eq!(check(&[("log.retention.ms", "-5")], true), Ok(()));
        // Thread pools move by at most half down or double up (from the default here).
        assert_eq!(check(&[("num.io.threads", "16")], true), Ok(()));
        assert_eq!(
            check(&[("num.io.threads", "17")], true).map_err(|e| e.to_string()),
            Err("Dynamic thread count update validation failed for num.io.threads=17, value should not be greater than double the current value 8".into())
        );
        assert!(check(&[("background.threads", "4")], true).is_err());
        assert!(check(&[("log.cleaner.threads", "3")], true).is_err());
        // Cross-checks of KafkaConfig and DynamicLogConfig, on the values after the change.
        assert!(check(&[("log.cleaner.dedupe.buffer.size", "1048576")], true).is_err());
        assert!(check(&[("max.connections.per.ip", "0")], true).is_err());
        assert_eq!(
            check(
                &[
                    ("max.connections.per.ip", "0"),
                    ("max.connections.per.ip.overrides", "a:1")
                ],
                true
            ),
            Ok(())
        );
        let retention = |pairs: &[(&str, &str)]| {
            check(&[&[("log.retention.ms", "1000")], pairs].concat(), true)
        };
        assert!(retention(&[("log.local.retention.ms", "-1")]).is_err());
        assert!(retention(&[("log.local.retention.ms", "1001")]).is_err());
        assert_eq!(retention(&[("log.local.retention.ms", "1000")]), Ok(()));
        assert_eq!(
            check(
                &[("log.local.retention.ms", "-1"), ("log.retention.ms", "-1")],
                true
            ),
            Ok(())
        );
        let current = |name: &str| (name == "num.io.threads").then(|| "16".to_string());
        assert_eq!(
            validate_dynamic(
                &map(&[("num.io.threads", "32")]),
                true,
                &read_only,
                &current
            ),
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
    }

    #[test]
    fn dynamic_levels_go_from_this_broker_to_kafkas_default_or_the_flag() {
        let dynamic = topic_config::DynamicBrokerConfigs {
            this_broker: map(&[("max.connections", "10")]),
            cluster_default: map(&[("max.connections", "20"), ("num.io.threads", "4")]),
        };
        let levels = |name: &str, flag| -> Vec<(String, ConfigSource)> {
            dynamic_levels(name, &dynamic, flag)
                .into_iter()
                .map(|s| (s.value, s.source))
                .collect()
        };
        assert_eq!(
            levels("num.io.threads", None),
            vec![
                ("4".into(), ConfigSource::DynamicDefaultBroker),
                ("8".into(), ConfigSource::Default)
            ]
        );
        let flag = StaticBrokerConfig {
            name: "max.connections",
            value: "1000".into(),
            default: Some("1000".into()),
            set_by_operator: false,
            kind: ConfigType::Int,
            documentation: "",
        };
        assert_eq!(
            levels("max.connections", Some(&flag)),
            vec![
                ("10".into(), ConfigSource::DynamicBroker),
                ("20".into(), ConfigSource::DynamicDefaultBroker),
                ("1000".into(), ConfigSource::Default)
            ]
        );
        assert_eq!(levels("sasl.jaas.config", None), vec![]);
    }
}
