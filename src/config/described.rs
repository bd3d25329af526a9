//! The read-only broker configs DescribeConfigs lists for this broker, by Kafka name,
//! with the values this broker runs with.

use super::args::defaults;
use super::Config;
use crate::cluster::broker_config::StaticBrokerConfig;
use crate::security::listener::ListenerConfig;

impl Config {
    /// The read-only broker configs this broker describes (DescribeConfigs of a BROKER),
    /// by their Kafka names, with the values it runs with; `log.flush.interval.ms` is
    /// among them for its static value, though it may be changed at run time.
    /// `listen` and `advertised` are the bound addresses (an ephemeral port resolved).
    pub fn static_broker_configs(&self, listeners: &[ListenerConfig]) -> Vec<StaticBrokerConfig> {
        let bound = listeners
            .iter()
            .map(|l| format!("{}://{}", l.protocol, l.bind))
            .collect::<Vec<_>>()
            .join(",");
        let advertised = listeners
            .iter()
            .map(|l| {
                format!(
                    "{}://{}:{}",
                    l.protocol, l.advertised_host, l.advertised_port
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        use crate::cluster::topic_config::ConfigType::{Boolean, Int, Long, String as Str};
        let set = |field: &str| self.operator_set.contains(field);
        let groups = &self.groups.coordinator.limits;
        let entry = |name, field: &str, value: String, default: Option<String>, kind, doc| {
            StaticBrokerConfig {
                name,
                value,
                default,
                set_by_operator: set(field),
                kind,
                documentation: doc,
            }
        };
        vec![
            entry(
                "broker.id",
                "node_id",
                self.node_id.to_string(),
                Some(defaults::node_id().to_string()),
                Int,
                "This broker's id (same as node.id).",
            ),
            entry(
                "node.id",
                "node_id",
                self.node_id.to_string(),
                Some(defaults::node_id().to_string()),
                Int,
                "This broker's id.",
            ),
            entry(
                "listeners",
                if set("listeners") { "listeners" } else { "listen" },
                bound,
                Some(format!("PLAINTEXT://{}", defaults::listen())),
                Str,
                "Addresses the Kafka listeners are bound to (--listeners, or --listen).",
            ),
            entry(
                "advertised.listeners",
                if set("advertised_listeners") { "advertised_listeners" } else { "advertise" },
                advertised,
                None,
                Str,
                "Addresses clients are told to connect to (--advertised-listeners; the listeners when unset).",
            ),
            entry(
                "inter.broker.listener.name",
                "inter_broker_listener",
                self.server.inter_broker.to_string(),
                None,
                Str,
                "The listener other brokers connect to (--inter-broker-listener).",
            ),
            entry(
                "sasl.enabled.mechanisms",
                "sasl_mechanisms",
                self.server
                    .security
                    .sasl
                    .mechanisms
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(","),
                Some(defaults::sasl_mechanisms()),
                Str,
                "SASL mechanisms the SASL listeners offer (--sasl-mechanisms).",
            ),
            entry(
                "connections.max.reauth.ms",
                "connections_max_reauth_ms",
                self.server
                    .security
                    .sasl
                    .session_lifetime_ms
                    .unwrap_or(0)
                    .to_string(),
                Some(defaults::connections_max_reauth_ms().to_string()),
                Long,
                "How long a SASL authentication is good for; 0 forever (--connections-max-reauth-ms).",
            ),
            entry(
                "log.dirs",
                "data_dir",
                self.data_dir.display().to_string(),
                Some(defaults::data_dir().display().to_string()),
                Str,
                "Directory holding partition logs and metadata (--data-dir).",
            ),
            entry(
                "auto.create.topics.enable",
                "auto_create_topics_enable",
                self.topics.auto_create.to_string(),
                Some(defaults::auto_create_topics_enable().to_string()),
                Boolean,
                "Create topics on first use by Metadata or Produce.",
            ),
            entry(
                "num.partitions",
                "num_partitions",
                self.topics.num_partitions.to_string(),
                Some(defaults::num_partitions().to_string()),
                Int,
                "Partitions of a topic created without a count.",
            ),
            entry(
                "default.replication.factor",
                "default_replication_factor",
                self.topics.default_replication_factor.to_string(),
                Some(defaults::default_replication_factor().to_string()),
                Int,
                "Replication factor of a topic created without one.",
            ),
            entry(
                "socket.request.max.bytes",
                "max_request_bytes",
                self.server.max_request_bytes.to_string(),
                Some(defaults::max_request_bytes().to_string()),
                Int,
                "Largest request accepted; a bigger frame closes the connection.",
            ),
            entry(
                "max.connections",
                "max_connections",
                self.server.max_connections.to_string(),
                Some(defaults::max_connections().to_string()),
                Int,
                "Client connections allowed at once over all listeners (the dynamic max.connections wins).",
            ),
            entry(
                "log.retention.check.interval.ms",
                "log_retention_check_interval_ms",
                self.retention_check_interval.as_millis().to_string(),
                Some(defaults::log_retention_check_interval_ms().to_string()),
                Long,
                "How often retention runs.",
            ),
            entry(
                "offsets.topic.num.partitions",
                "offsets_topic_num_partitions",
                self.groups.offsets_topic_partitions.to_string(),
                Some(defaults::offsets_topic_num_partitions().to_string()),
                Int,
                "Partitions of __consumer_offsets, fixed when it is created.",
            ),
            entry(
                "offsets.topic.replication.factor",
                "offsets_topic_replication_factor",
                self.groups.offsets_topic_replication_factor.to_string(),
                Some(defaults::offsets_topic_replication_factor().to_string()),
                Int,
                "Replicas of each __consumer_offsets partition (at most the live brokers).",
            ),
            entry(
                "replica.lag.time.max.ms",
                "replica_lag_time_max_ms",
                self.replica_lag_time_max.as_millis().to_string(),
                Some(defaults::replica_lag_time_max_ms().to_string()),
                Long,
                "A follower that has not caught up for this long leaves the ISR.",
            ),
            entry(
                "offsets.retention.minutes",
                "offsets_retention_minutes",
                (self.groups.coordinator.offsets_retention_ms / 60_000).to_string(),
                Some(defaults::offsets_retention_minutes().to_string()),
                Int,
                "Committed offsets of an empty group expire after this long.",
            ),
            entry(
                "group.initial.rebalance.delay.ms",
                "group_initial_rebalance_delay_ms",
                groups.initial_rebalance_delay_ms.to_string(),
                Some(defaults::group_initial_rebalance_delay_ms().to_string()),
                Int,
                "Delay before a new group's first rebalance.",
            ),
            entry(
                "group.min.session.timeout.ms",
                "group_min_session_timeout_ms",
                groups.min_session_timeout_ms.to_string(),
                Some(defaults::group_min_session_timeout_ms().to_string()),
                Int,
                "Shortest session timeout a member may ask for.",
            ),
            entry(
                "group.max.session.timeout.ms",
                "group_max_session_timeout_ms",
                groups.max_session_timeout_ms.to_string(),
                Some(defaults::group_max_session_timeout_ms().to_string()),
                Int,
                "Longest session timeout a member may ask for.",
            ),
            entry(
                "group.max.size",
                "group_max_size",
                groups.max_size.to_string(),
                Some(defaults::group_max_size().to_string()),
                Int,
                "Most members in one group.",
            ),
        ]
    }
}
