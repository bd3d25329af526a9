//! Kafka 4.1's dynamic broker configs beyond the topic defaults (those are the
//! `broker_key`s of [`super::topic_config::TOPIC_CONFIGS`]): the thread pools, the
//! listener, TLS and SASL settings, connection limits, the log cleaner's, the remote log
//! manager's, producer-state and replication-quota configs (`DynamicBrokerConfig.
//! AllDynamicConfigs` and `QuotaConfig.brokerQuotaConfigs`), with Kafka's types,
//! defaults and validators, and what tern does with each.
//!
//! A Kafka tool may set any of them; tern accepts, stores and describes every one, and
//! applies those it has a mechanism for. The rest say what tern does instead (README's
//! config table repeats it).

use super::config_value::{ConfigType, Validator};
use super::topic_config::Support;

/// At which levels a dynamic broker config may be set (Kafka's `PerBrokerConfigs` and
/// `DynamicSecurityConfigs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide default (`""`) or one broker.
    Cluster,
    /// One broker only: "Cannot update these configs at default cluster level".
    PerBroker,
    /// One broker, and only under a listener prefix (`listener.name.<l>.ssl.keystore.location`).
    Listener,
}

#[derive(Debug)]
pub struct DynamicBrokerConfig {
    pub name: &'static str,
    pub kind: ConfigType,
    pub default: Option<&'static str>,
    pub validator: Validator,
    pub scope: Scope,
    pub support: Support,
}

const fn dynamic(
    name: &'static str,
    kind: ConfigType,
    default: Option<&'static str>,
    validator: Validator,
    scope: Scope,
    support: Support,
) -> DynamicBrokerConfig {
    DynamicBrokerConfig {
        name,
        kind,
        default,
        validator,
        scope,
        support,
    }
}

use ConfigType::{Boolean, Class, Double, Int, List, Long, Password, Short, String as Str};
use Scope::{Cluster, Listener, PerBroker};
use Support::{Honoured, Stored};
use Validator::{Any, AtLeast, Custom, OneOf};

const THREADS: Support = Stored(
    "tern runs on one async runtime sized at start; it has no thread pool of this kind to resize",
);
const LISTENERS: Support = Stored(
    "tern's listeners, TLS and SASL settings come from its flags (--listeners, --tls-*, --sasl-*) at start",
);
const KERBEROS: Support = Stored("tern has no GSSAPI (Kerberos) mechanism");
const CLEANER: Support =
    Stored("tern's log cleaner takes its thread count and buffers from --log-cleaner-* at start");
const REMOTE: Support = Stored(
    "tern has no tiered storage: every segment stays local until retention deletes it (or the archive takes it)",
);
const THROTTLE: Support =
    Stored("tern does not throttle replication: followers fetch at full speed");
const LONG_MAX: Option<&str> = Some("9223372036854775807");

/// Every dynamic broker config of Kafka 4.1 that is not a topic default.
#[rustfmt::skip]
pub static DYNAMIC_BROKER_CONFIGS: &[DynamicBrokerConfig] = &[
    dynamic("background.threads", Int, Some("10"), AtLeast(1.0), Cluster, THREADS),
    dynamic("follower.replication.throttled.rate", Long, LONG_MAX, AtLeast(0.0), Cluster, THROTTLE),
    dynamic("leader.replication.throttled.rate", Long, LONG_MAX, AtLeast(0.0), Cluster, THROTTLE),
    dynamic("listener.security.protocol.map", Str, Some("SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"), Custom(protocol_map), PerBroker, LISTENERS),
    dynamic("listeners", Str, Some("PLAINTEXT://:9092"), Custom(listeners), PerBroker, LISTENERS),
    dynamic("log.cleaner.backoff.ms", Long, Some("15000"), AtLeast(0.0), Cluster, Honoured),
    dynamic("log.cleaner.dedupe.buffer.size", Long, Some("134217728"), Any, Cluster, Honoured),
    dynamic("log.cleaner.io.buffer.load.factor", Double, Some("0.9"), Any, Cluster, CLEANER),
    dynamic("log.cleaner.io.buffer.size", Int, Some("524288"), AtLeast(0.0), Cluster, CLEANER),
    dynamic("log.cleaner.io.max.bytes.per.second", Double, Some("1.7976931348623157E308"), Any, Cluster, Honoured),
    dynamic("log.cleaner.threads", Int, Some("1"), AtLeast(0.0), Cluster, CLEANER),
    dynamic("max.connection.creation.rate", Int, Some("2147483647"), AtLeast(0.0), Cluster, Stored("tern does not limit the rate of new connections")),
    dynamic("max.connections", Int, Some("2147483647"), AtLeast(0.0), Cluster, Honoured),
    dynamic("max.connections.per.ip", Int, Some("2147483647"), AtLeast(0.0), Cluster, Honoured),
    dynamic("max.connections.per.ip.overrides", Str, Some(""), Custom(per_ip_overrides), Cluster, Stored("tern has one limit for every client address (max.connections.per.ip)")),
    dynamic("metric.reporters", List, Some("org.apache.kafka.common.metrics.JmxReporter"), Custom(|v| known_classes(v, &[JMX_REPORTER])), Cluster, Stored("tern exports Prometheus metrics on /metrics; it loads no metric reporter classes")),
    dynamic("num.io.threads", Int, Some("8"), AtLeast(1.0), Cluster, THREADS),
    dynamic("num.network.threads", Int, Some("3"), AtLeast(1.0), Cluster, THREADS),
    dynamic("num.recovery.threads.per.data.dir", Int, Some("2"), AtLeast(1.0), Cluster, THREADS),
    dynamic("num.replica.fetchers", Int, Some("1"), Any, Cluster, Stored("tern runs one fetcher per leader broker")),
    dynamic("principal.builder.class", Class, Some(PRINCIPAL_BUILDER), Custom(|v| known_classes(v, &[PRINCIPAL_BUILDER])), PerBroker, Stored("tern builds principals itself (User:NAME, or the mapped certificate subject); it loads no Java class")),
    dynamic("producer.id.expiration.ms", Int, Some("86400000"), AtLeast(1.0), Cluster, Honoured),
    dynamic("remote.fetch.max.wait.ms", Int, Some("500"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.list.offsets.request.timeout.ms", Long, Some("30000"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.index.file.cache.total.size.bytes", Long, Some("1073741824"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.manager.copier.thread.pool.size", Int, Some("10"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.manager.copy.max.bytes.per.second", Long, LONG_MAX, AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.manager.expiration.thread.pool.size", Int, Some("10"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.manager.fetch.max.bytes.per.second", Long, LONG_MAX, AtLeast(1.0), Cluster, REMOTE),
    dynamic("remote.log.reader.threads", Int, Some("10"), AtLeast(1.0), Cluster, REMOTE),
    dynamic("replica.alter.log.dirs.io.max.bytes.per.second", Long, LONG_MAX, AtLeast(0.0), Cluster, Stored("tern has one log directory per broker: replicas never move between directories")),
    dynamic("sasl.enabled.mechanisms", List, Some("GSSAPI"), Any, PerBroker, LISTENERS),
    dynamic("sasl.jaas.config", Password, None, Any, PerBroker, LISTENERS),
    dynamic("sasl.kerberos.kinit.cmd", Str, Some("/usr/bin/kinit"), Any, PerBroker, KERBEROS),
    dynamic("sasl.kerberos.min.time.before.relogin", Long, Some("60000"), Any, PerBroker, KERBEROS),
    dynamic("sasl.kerberos.principal.to.local.rules", List, Some("DEFAULT"), Any, PerBroker, KERBEROS),
    dynamic("sasl.kerberos.service.name", Str, None, Any, PerBroker, KERBEROS),
    dynamic("sasl.kerberos.ticket.renew.jitter", Double, Some("0.05"), Any, PerBroker, KERBEROS),
    dynamic("sasl.kerberos.ticket.renew.window.factor", Double, Some("0.8"), Any, PerBroker, KERBEROS),
    dynamic("sasl.login.refresh.buffer.seconds", Short, Some("300"), Any, PerBroker, LISTENERS),
    dynamic("sasl.login.refresh.min.period.seconds", Short, Some("60"), Any, PerBroker, LISTENERS),
    dynamic("sasl.login.refresh.window.factor", Double, Some("0.8"), Any, PerBroker, LISTENERS),
    dynamic("sasl.login.refresh.window.jitter", Double, Some("0.05"), Any, PerBroker, LISTENERS),
    dynamic("sasl.mechanism.inter.broker.protocol", Str, Some("GSSAPI"), Any, PerBroker, LISTENERS),
    dynamic("ssl.cipher.suites", List, Some(""), Any, PerBroker, LISTENERS),
    dynamic("ssl.client.auth", Str, Some("none"), OneOf(&["required", "requested", "none"]), PerBroker, LISTENERS),
    dynamic("ssl.enabled.protocols", List, Some("TLSv1.2,TLSv1.3"), Any, PerBroker, LISTENERS),
    dynamic("ssl.endpoint.identification.algorithm", Str, Some("https"), Any, PerBroker, LISTENERS),
    dynamic("ssl.engine.factory.class", Class, None, Custom(|v| known_classes(v, &[SSL_ENGINE_FACTORY])), PerBroker, LISTENERS),
    dynamic("ssl.key.password", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.keymanager.algorithm", Str, Some("SunX509"), Any, PerBroker, LISTENERS),
    dynamic("ssl.keystore.certificate.chain", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.keystore.key", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.keystore.location", Str, None, Any, Listener, LISTENERS),
    dynamic("ssl.keystore.password", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.keystore.type", Str, Some("JKS"), Any, Listener, LISTENERS),
    dynamic("ssl.protocol", Str, Some("TLSv1.3"), Any, PerBroker, LISTENERS),
    dynamic("ssl.provider", Str, None, Any, PerBroker, LISTENERS),
    dynamic("ssl.secure.random.implementation", Str, None, Any, PerBroker, LISTENERS),
    dynamic("ssl.trustmanager.algorithm", Str, Some("PKIX"), Any, PerBroker, LISTENERS),
    dynamic("ssl.truststore.certificates", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.truststore.location", Str, None, Any, Listener, LISTENERS),
    dynamic("ssl.truststore.password", Password, None, Any, Listener, LISTENERS),
    dynamic("ssl.truststore.type", Str, Some("JKS"), Any, Listener, LISTENERS),
    dynamic("transaction.partition.verification.enable", Boolean, Some("true"), Any, Cluster, Stored("tern always checks that a transactional write's partition was added to its transaction (KIP-890); the check cannot be turned off")),
];

const JMX_REPORTER: &str = "org.apache.kafka.common.metrics.JmxReporter";
const PRINCIPAL_BUILDER: &str =
    "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder";
const SSL_ENGINE_FACTORY: &str = "org.apache.kafka.common.security.ssl.DefaultSslEngineFactory";
const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// A class config: tern has no class path, so only Kafka's own classes it stands in for
/// are "found" (Kafka refuses a class it cannot load).
fn known_classes(value: &str, known: &[&str]) -> Result<(), String> {
    match super::config_value::list_items(value).find(|c| !known.contains(c)) {
        Some(class) => Err(format!("Class {class} cannot be found")),
        None => Ok(()),
    }
}

/// `NAME:PROTOCOL,...` with Kafka's security protocols.
fn protocol_map(value: &str) -> Result<(), String> {
    for item in super::config_value::list_items(value) {
        match item.split_once(':') {
            Some((name, protocol)) if !name.trim().is_empty() => {
                if !SECURITY_PROTOCOLS.contains(&protocol.trim()) {
                    return Err(format!("No enum constant org.apache.kafka.common.security.auth.SecurityProtocol.{}", protocol.trim()));
                }
            }
            _ => return Err(format!("Map entry '{item}' is not of the form 'key:value'")),
        }
    }
    Ok(())
}

/// `NAME://host:port,...`, each name a security protocol (the default
/// `listener.security.protocol.map` maps each to itself).
fn listeners(value: &str) -> Result<(), String> {
    for item in super::config_value::list_items(value) {
        let parsed = item.split_once("://").and_then(|(name, address)| {
            let (_, port) = address.rsplit_once(':')?;
            port.parse::<u16>().ok()?;
            Some(name)
        });
        match parsed {
            Some(name) if SECURITY_PROTOCOLS.contains(&name) => {}
            Some(name) => return Err(format!("No security protocol defined for listener {name}")),
            None => return Err(format!("Unable to parse {item} to a broker endpoint")),
        }
    }
    Ok(())
}

/// `host:count,...` with an integer count for each host.
fn per_ip_overrides(value: &str) -> Result<(), String> {
    for item in super::config_value::list_items(value) {
        match item.rsplit_once(':') {
            Some((host, count)) if !host.is_empty() && count.trim().parse::<i32>().is_ok() => {}
            _ => return Err(format!("Map entry '{item}' is not of the form 'key:value'")),
        }
    }
    Ok(())
}

impl DynamicBrokerConfig {
    /// What DescribeConfigs says of it: what it does in tern, or why it does nothing.
    pub fn documentation(&self) -> &'static str {
        match self.support {
            Support::Stored(instead) => instead,
            _ => match self.name {
                "producer.id.expiration.ms" => {
                    "How long an idempotent producer's state is kept after its last write."
                }
                "max.connections" => "Connections this broker keeps open at once over all its listeners (--max-connections until set); a lower value takes slots back as connections close.",
                "max.connections.per.ip" => "Connections one client address may keep open (--max-connections-per-ip until set); one more is closed at once.",
                "log.cleaner.backoff.ms" => "How long a cleaner thread with nothing to clean sleeps (--log-cleaner-backoff-ms until set); from its next pass on.",
                "log.cleaner.dedupe.buffer.size" => "Memory for the key map of a cleaning pass, shared among the cleaner threads (--log-cleaner-dedupe-buffer-size until set); from the next pass on.",
                "log.cleaner.io.max.bytes.per.second" => "The cleaner's I/O rate, shared among its threads (--log-cleaner-io-max-bytes-per-second until set); from the next pass on.",
                _ => "",
            },
        }
    }
}

pub fn lookup(name: &str) -> Option<&'static DynamicBrokerConfig> {
    DYNAMIC_BROKER_CONFIGS.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topic_config::TOPIC_CONFIGS;

    /// README's config tables, row by row.
    fn readme_row(name: &str) -> Option<&'static str> {
        let quoted = format!("`{name}`");
        include_str!("../../README.md")
            .lines()
            .filter(|line| line.starts_with('|'))
            .find(|line| line.contains(&quoted))
    }

    #[test]
    fn readme_names_every_config_and_what_tern_does_instead_of_what_it_cannot() {
        let stored = |support: Support| match support {
            Support::Stored(instead) => Some(instead),
            _ => None,
        };
        let topics = TOPIC_CONFIGS.iter().map(|d| (d.name, stored(d.support)));
        let brokers = DYNAMIC_BROKER_CONFIGS
            .iter()
            .map(|c| (c.name, stored(c.support)));
        for (name, instead) in topics.chain(brokers) {
            let row =
                readme_row(name).unwrap_or_else(|| panic!("README's config table lacks {name}"));
            if let Some(instead) = instead {
                assert!(
                    row.contains(instead),
                    "README's row of {name} does not say: {instead}"
                );
            }
        }
    }

    #[test]
    fn every_default_passes_its_own_check() {
        for c in DYNAMIC_BROKER_CONFIGS {
            if let Some(default) = c.default.filter(|_| c.kind != ConfigType::Class) {
                assert_eq!(
                    super::super::config_value::check(c.kind, c.validator, default),
                    Ok(()),
                    "{}",
                    c.name
                );
            }
        }
        for d in TOPIC_CONFIGS {
            if let Some(default) = d.default {
                assert_eq!(d.check(default), Ok(()), "{}", d.name);
            }
        }
    }
}
