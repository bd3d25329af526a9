//! Topic configs: their names, types, defaults and validation, and how a topic's
//! effective settings resolve: topic override, then the broker-level value in Kafka's
//! order (dynamic per-broker, dynamic cluster-wide default, static, built-in). Also the
//! rules of the internal offsets topic, whose retention-free, compacted settings no
//! change may undo.
//!
//! The table is Kafka 4.1's `LogConfig` (every topic config a Kafka tool may set, with
//! Kafka's types, defaults, validators and broker synonyms from
//! `ServerTopicConfigSynonyms`) plus tern's own archive configs. Each entry says whether
//! tern honours it; one it cannot honour is still accepted, stored and described (a tool
//! treats a refusal as an error), and says what tern does instead: README's config
//! table repeats that line, and a test keeps the two together.

use std::collections::BTreeMap;

pub use super::config_value::ConfigType;
use super::config_value::{self, Validator};
use crate::log::{CleanupPolicy, LogConfig};
use crate::model::is_internal;

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

/// What tern does with a config it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// It acts as in Kafka.
    Honoured,
    /// Kept and described, with no effect; the text says what tern does instead.
    Stored(&'static str),
    /// Honoured, but a testing knob: described only where it is set (Kafka's
    /// `defineInternal`).
    Internal,
}

/// One topic config and the broker config that supplies its default.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    /// The broker config whose value is this config's default (`log.retention.ms`),
    /// if it has one.
    pub broker_key: Option<&'static str>,
    pub kind: ConfigType,
    /// Kafka's default, when no level sets a value; `None` where Kafka has none.
    pub default: Option<&'static str>,
    pub validator: Validator,
    pub support: Support,
    pub documentation: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";

const fn def(
    name: &'static str,
    broker_key: Option<&'static str>,
    kind: ConfigType,
    default: Option<&'static str>,
    validator: Validator,
    support: Support,
    documentation: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        broker_key,
        kind,
        default,
        validator,
        support,
        documentation,
    }
}

use ConfigType::{Boolean, Double, Int, List, Long, String as Str};
use Support::{Honoured, Internal, Stored};
use Validator::{Any, AtLeast, Between, Custom, ListOf, OneOf};

const NO_TIERED_STORAGE: &str =
    "tern has no tiered storage: every segment stays local until retention deletes it (or the archive takes it)";
const NO_REPLICATION_THROTTLE: &str =
    "tern does not throttle replication: followers fetch at full speed";

/// Every topic config: Kafka 4.1's, then tern's own.
#[rustfmt::skip]
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    def("cleanup.policy", Some("log.cleanup.policy"), List, Some("delete"),
        ListOf { items: &["compact", "delete"], empty_ok: true }, Honoured,
        "What happens to old segments: 'delete' removes them by retention.ms and retention.bytes, 'compact' keeps the latest record of every key (the log cleaner), 'compact,delete' does both, an empty list neither."),
    def("compression.gzip.level", Some("compression.gzip.level"), Int, Some("-1"),
        Custom(gzip_level), Honoured,
        "The gzip level a topic with compression.type=gzip recompresses at: 1 (fastest) to 9 (smallest), or -1 for the default (6)."),
    def("compression.lz4.level", Some("compression.lz4.level"), Int, Some("9"),
        Between(1.0, 17.0), Stored("tern's lz4 encoder has one level (lz4_flex's fast mode)"),
        "The compression level to use if compression.type is set to lz4."),
    def("compression.type", Some("compression.type"), Str, Some("producer"),
        OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]), Honoured,
        "The topic's codec: 'producer' stores batches as the producer compressed them (no decompression on produce); 'uncompressed', 'gzip', 'snappy', 'lz4' or 'zstd' recompresses batches in another codec on the way in."),
    def("compression.zstd.level", Some("compression.zstd.level"), Int, Some("3"),
        Between(-131072.0, 22.0), Stored("tern's zstd encoder has one level (ruzstd's fastest, about zstd level 1)"),
        "The compression level to use if compression.type is set to zstd."),
    def("delete.retention.ms", Some("log.cleaner.delete.retention.ms"), Long, Some("86400000"),
        AtLeast(0.0), Honoured,
        "How long a tombstone (a null value) in a compacted topic stays readable after the log cleaner first passed it, so that a consumer that read the key's earlier value sees the deletion."),
    def("file.delete.delay.ms", Some("log.segment.delete.delay.ms"), Long, Some("60000"),
        AtLeast(0.0), Stored("tern unlinks a deleted segment at once: a reader still holding it keeps its memory map, so no delay is needed"),
        "The time to wait before deleting a file from the filesystem."),
    def("flush.messages", Some("log.flush.interval.messages"), Long, Some(LONG_MAX),
        AtLeast(1.0), Honoured,
        "Unflushed messages that make a write wait for an fsync before it is acknowledged (a follower fsyncs before fetching on): 1 puts every acknowledged write on disk on every in-sync replica; the default leaves flushing to flush.ms."),
    def("flush.ms", Some("log.flush.interval.ms"), Long, Some(LONG_MAX),
        AtLeast(0.0), Honoured,
        "Longest time written data stays unflushed: the flusher fsyncs a log once its data has waited this long since the last flush (tern's broker default is 1000)."),
    def("follower.replication.throttled.replicas", None, List, Some(""),
        Custom(throttled_replicas), Stored(NO_REPLICATION_THROTTLE),
        "Replicas whose log replication is throttled on the follower side ('partition:broker,...' or '*')."),
    def("index.interval.bytes", Some("log.index.interval.bytes"), Int, Some("4096"),
        AtLeast(0.0), Honoured,
        "Bytes of log between two entries of the sparse offset index."),
    def("internal.segment.bytes", None, Int, None,
        AtLeast(1024.0), Internal,
        "segment.bytes for tests, below its 1 MiB minimum (Kafka's internal config); tern refuses less than 1 KiB."),
    def("leader.replication.throttled.replicas", None, List, Some(""),
        Custom(throttled_replicas), Stored(NO_REPLICATION_THROTTLE),
        "Replicas whose log replication is throttled on the leader side ('partition:broker,...' or '*')."),
    def("local.retention.bytes", Some("log.local.retention.bytes"), Long, Some("-2"),
        AtLeast(-2.0), Stored(NO_TIERED_STORAGE),
        "Largest size of the local log of a tiered partition; -2 for retention.bytes."),
    def("local.retention.ms", Some("log.local.retention.ms"), Long, Some("-2"),
        AtLeast(-2.0), Stored(NO_TIERED_STORAGE),
        "How long a tiered partition keeps a segment locally; -2 for retention.ms."),
    def("max.compaction.lag.ms", Some("log.cleaner.max.compaction.lag.ms"), Long, Some(LONG_MAX),
        AtLeast(1.0), Honoured,
        "Longest a record of a compacted topic stays uncleaned: dirty data this old is cleaned whatever the dirty ratio, and the active segment is rolled at this age."),
    def("max.message.bytes", Some("message.max.bytes"), Int, Some("1048588"),
        AtLeast(0.0), Honoured,
        "Largest record batch the topic accepts."),
    def("message.timestamp.after.max.ms", Some("log.message.timestamp.after.max.ms"), Long, Some("3600000"),
        AtLeast(0.0), Honoured,
        "How far ahead of the broker's clock a CreateTime batch may be stamped; a later one is refused (INVALID_TIMESTAMP)."),
    def("message.timestamp.before.max.ms", Some("log.message.timestamp.before.max.ms"), Long, Some(LONG_MAX),
        AtLeast(0.0), Honoured,
        "How far behind the broker's clock a CreateTime batch may be stamped; an older one is refused (INVALID_TIMESTAMP)."),
    def("message.timestamp.type", Some("log.message.timestamp.type"), Str, Some("CreateTime"),
        OneOf(&["CreateTime", "LogAppendTime"]), Honoured,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker clock."),
    def("min.cleanable.dirty.ratio", Some("log.cleaner.min.cleanable.ratio"), Double, Some("0.5"),
        Between(0.0, 1.0), Honoured,
        "Share of a compacted log's cleanable bytes that must be dirty (written since the last cleaning) before the cleaner cleans it."),
    def("min.compaction.lag.ms", Some("log.cleaner.min.compaction.lag.ms"), Long, Some("0"),
        AtLeast(0.0), Honoured,
        "Shortest a record of a compacted topic stays uncleaned: a segment is cleaned only once its newest record is this old."),
    def("min.insync.replicas", Some("min.insync.replicas"), Int, Some("1"),
        AtLeast(1.0), Honoured,
        "Replicas that must hold a write for acks=all to succeed."),
    def("preallocate", Some("log.preallocate"), Boolean, Some("false"),
        Any, Stored("tern always reserves a segment's disk blocks ahead of its writes, in 4 MiB steps, rather than all at once"),
        "True if the whole segment file should be allocated when it is created."),
    def("remote.log.copy.disable", None, Boolean, Some("false"),
        Any, Stored(NO_TIERED_STORAGE),
        "Make a tiered topic's remote data read-only."),
    def("remote.log.delete.on.disable", None, Boolean, Some("false"),
        Any, Stored(NO_TIERED_STORAGE),
        "Delete a topic's tiered data when tiered storage is disabled for it."),
    def("remote.storage.enable", None, Boolean, Some("false"),
        Any, Stored("tern has no tiered storage: true is refused, as Kafka refuses it while remote.log.storage.system.enable is false"),
        "Enable tiered storage for the topic."),
    def("retention.bytes", Some("log.retention.bytes"), Long, Some("-1"),
        Any, Honoured,
        "Size a partition may grow to before its oldest segments are deleted; a negative value for no limit."),
    def("retention.ms", Some("log.retention.ms"), Long, Some("604800000"),
        AtLeast(-1.0), Honoured,
        "Age after which a segment is deleted; -1 keeps data forever."),
    def("segment.bytes", Some("log.segment.bytes"), Int, Some("1073741824"),
        AtLeast(1048576.0), Honoured,
        "Size at which the active segment is rolled."),
    def("segment.index.bytes", Some("log.index.size.max.bytes"), Int, Some("10485760"),
        AtLeast(4.0), Honoured,
        "Largest size of a segment's offset and time index files."),
    def("segment.jitter.ms", Some("log.roll.jitter.ms"), Long, Some("0"),
        AtLeast(0.0), Honoured,
        "Most a segment's roll may come before segment.ms (a per-segment share of it), so that logs created together do not all roll at once."),
    def("segment.ms", Some("log.roll.ms"), Long, Some("604800000"),
        AtLeast(1.0), Honoured,
        "Age at which the active segment is rolled."),
    def("unclean.leader.election.enable", Some("unclean.leader.election.enable"), Boolean, Some("false"),
        Any, Honoured,
        "Elect a replica outside the ISR when no in-sync replica is alive: the partition comes back at once, but acknowledged writes may be lost."),
    // tern's own.
    def("archive.enable", Some("archive.enable"), Boolean, Some("false"),
        Any, Honoured,
        "Write every segment retention would delete to the Parquet archive (--archive-dir or --archive-url) first; retention waits until the archive has it."),
    def("archive.on.failure", Some("archive.on.failure"), Str, Some("wait"),
        OneOf(&["wait", "delete"]), Honoured,
        "What retention does while the archive fails: 'wait' keeps the segments until an export succeeds; 'delete' deletes them unarchived (counted in tern_archive_skipped_segments_total)."),
];

/// Kafka's gzip level check: 1 to 9, or -1 for the codec's default.
fn gzip_level(value: &str) -> Result<(), String> {
    match value.parse::<i32>() {
        Ok(-1 | 1..=9) => Ok(()),
        _ => Err("Value must be between 1 and 9 or equal to -1".into()),
    }
}

/// Kafka's `ThrottledReplicaListValidator`: empty, `*`, or `partition:broker` pairs.
fn throttled_replicas(value: &str) -> Result<(), String> {
    let items: Vec<&str> = config_value::list_items(value).collect();
    let pair = |item: &str| {
        item.split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
        })
    };
    if items == ["*"] || items.iter().all(|item| pair(item)) {
        Ok(())
    } else {
        Err("must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...".into())
    }
}

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
    TOPIC_CONFIGS.iter().find(|d| d.broker_key == Some(key))
}

impl ConfigDef {
    /// Checks one value; the reason is Kafka's.
    pub fn check(&self, value: &str) -> Result<(), String> {
        config_value::check(self.kind, self.validator, value)
    }

    /// Whether DescribeConfigs lists it for a topic that does not set it.
    pub fn described_by_default(&self) -> bool {
        self.support != Support::Internal
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("Unknown topic config name: {0}")]
    Unknown(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
    /// A combination Kafka's `LogConfig.validate` refuses; the text is Kafka's.
    #[error("{0}")]
    Conflict(String),
    #[error("{topic} must keep {name}={required} (asked: {}): the log cleaner compacts it, and retention or another cleanup policy would age committed offsets out", requested.as_deref().unwrap_or("no value"))]
    Protected {
        topic: String,
        name: String,
        required: String,
        requested: Option<String>,
    },
}

/// Checks every `(name, value)` against the definitions, then the combinations Kafka's
/// `LogConfig.validate` refuses: `min.compaction.lag.ms` above
/// `max.compaction.lag.ms`, and `remote.storage.enable=true` (tiered storage is off, as
/// in a Kafka broker without `remote.log.storage.system.enable`).
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, value) in configs {
        let def = definition(name).ok_or_else(|| ConfigError::Unknown(name.clone()))?;
        def.check(value).map_err(|reason| ConfigError::Invalid {
            name: name.clone(),
            value: value.clone(),
            reason,
        })?;
    }
    let lag = |name: &str| {
        configs
            .get(name)
            .map(String::as_str)
            .or_else(|| definition(name).and_then(|d| d.default))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if let (Some(min), Some(max)) = (lag("min.compaction.lag.ms"), lag("max.compaction.lag.ms")) {
        if min > max {
            return Err(ConfigError::Conflict(format!(
                "conflict topic config setting min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})"
            )));
        }
    }
    let remote = configs.get("remote.storage.enable");
    if remote.is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Err(ConfigError::Conflict(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.".into(),
        ));
    }
    Ok(())
}

/// A dynamic broker config that reaches every log (`DynamicProducerStateManagerConfig`).
const PRODUCER_ID_EXPIRATION_MS: &str = "producer.id.expiration.ms";

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
    pub name: String,
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
        let named = def.broker_key.unwrap_or(def.name);
        let mut push = |value: Option<&str>, source| {
            if let Some(value) = value {
                out.push(Synonym {
                    name: named.to_string(),
                    value: value.to_string(),
                    source,
                });
            }
        };
        if let Some(key) = def.broker_key {
            push(
                self.dynamic.this_broker.get(key).map(String::as_str),
                ConfigSource::DynamicBroker,
            );
            push(
                self.dynamic.cluster_default.get(key).map(String::as_str),
                ConfigSource::DynamicDefaultBroker,
            );
        }
        push(
            self.operator.get(def.name).map(String::as_str),
            ConfigSource::StaticBroker,
        );
        let builtin = self.builtin.get(def.name).map(String::as_str);
        push(builtin.or(def.default), ConfigSource::Default);
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
            // Kafka's testing knob wins over segment.bytes, whose minimum is 1 MiB.
            segment_bytes: overrides
                .get("internal.segment.bytes")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| {
                    self.parse_or(overrides, "segment.bytes", builtin.segment_bytes)
                }),
            segment_ms: self.parse_or(overrides, "segment.ms", builtin.segment_ms),
            // Room for one entry of each index (8 and 12 bytes) whatever Kafka's minimum of 4.
            index_bytes: self
                .parse_or(overrides, "segment.index.bytes", builtin.index_bytes)
                .max(24),
            index_interval_bytes: self.parse_or(
                overrides,
                "index.interval.bytes",
                builtin.index_interval_bytes,
            ),
            retention_ms: self.parse_or(overrides, "retention.ms", builtin.retention_ms),
            retention_bytes: self.parse_or(overrides, "retention.bytes", builtin.retention_bytes),
            producer_id_expiration_ms: self
                .dynamic
                .get(PRODUCER_ID_EXPIRATION_MS)
                .and_then(|(v, _)| v.trim().parse().ok())
                .unwrap_or(builtin.producer_id_expiration_ms),
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
            flush_ms: self.parse_or(overrides, "flush.ms", builtin.flush_ms),
            segment_jitter_ms: self.parse_or(
                overrides,
                "segment.jitter.ms",
                builtin.segment_jitter_ms,
            ),
            timestamp_before_max_ms: self.parse_or(
                overrides,
                "message.timestamp.before.max.ms",
                builtin.timestamp_before_max_ms,
            ),
            timestamp_after_max_ms: self.parse_or(
                overrides,
                "message.timestamp.after.max.ms",
                builtin.timestamp_after_max_ms,
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
        let levels: Vec<(String, String, ConfigSource)> = d
            .broker_synonyms("segment.bytes")
            .into_iter()
            .map(|s| (s.name, s.value, s.source))
            .collect();
        assert_eq!(
            levels,
            vec![
                (
                    "log.segment.bytes".to_string(),
                    "2048".into(),
                    ConfigSource::DynamicBroker
                ),
                (
                    "log.segment.bytes".to_string(),
                    "8192".into(),
                    ConfigSource::DynamicDefaultBroker
                ),
                (
                    "log.segment.bytes".to_string(),
                    "4096".into(),
                    ConfigSource::StaticBroker
                ),
                (
                    "log.segment.bytes".to_string(),
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
        assert_eq!(
            validate(&c),
            Err(ConfigError::Conflict(
                "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)".into()
            )),
            "a minimum lag above the maximum is a conflict, as in Kafka"
        );
        c.clear();
        c.insert("min.compaction.lag.ms".to_string(), "10".to_string());
        assert_eq!(
            validate(&c),
            Ok(()),
            "against max.compaction.lag.ms's default"
        );
        c.clear();
        c.insert("remote.storage.enable".to_string(), "true".to_string());
        assert!(matches!(validate(&c), Err(ConfigError::Conflict(_))));
        c.insert("remote.storage.enable".to_string(), "false".to_string());
        assert_eq!(validate(&c), Ok(()));
        c.clear();
        c.insert("segment.bytes".to_string(), "1048575".to_string());
        assert_eq!(
            validate(&c).map_err(|e| e.to_string()),
            Err("Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576".into())
        );
        c.clear();
        for (name, good, bad) in [
            ("leader.replication.throttled.replicas", "0:1,1:2", "0:1:2"),
            ("follower.replication.throttled.replicas", "*", "*,0:1"),
            ("compression.gzip.level", "-1", "0"),
            ("compression.zstd.level", "-131072", "23"),
            ("retention.bytes", "-5", "1.5"),
            ("preallocate", "TRUE", "1"),
        ] {
            c.insert(name.to_string(), good.to_string());
            assert_eq!(validate(&c), Ok(()), "{name}={good}");
            c.insert(name.to_string(), bad.to_string());
            assert!(validate(&c).is_err(), "{name}={bad}");
            c.clear();
        }
        c.clear();
        c.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        assert_eq!(validate(&c), Ok(()));
    }
}
