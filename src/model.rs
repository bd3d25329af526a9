//! Shared vocabulary used across modules: partitions, the newtypes that must not be
//! mixed up (offsets, leader epochs, broker and producer ids), internal topics, clocks,
//! and the retry of transient errors.

use std::fmt;
use std::ops::{Add, Sub};

use serde::{Deserialize, Serialize};

/// An offset in a partition's log (Kafka's `long offset`). Arithmetic with plain
/// integers is a count of records; two offsets subtract to a count.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Offset(pub i64);

impl Offset {
    pub const ZERO: Offset = Offset(0);
    /// Kafka's `UNDEFINED_EPOCH_OFFSET` (and "no offset" on the wire).
    pub const UNDEFINED: Offset = Offset(-1);

    /// The offset after this one.
    pub fn next(self) -> Offset {
        Offset(self.0.saturating_add(1))
    }
    pub fn value(self) -> i64 {
        self.0
    }
}

impl Add<i64> for Offset {
    type Output = Offset;
    fn add(self, records: i64) -> Offset {
        Offset(self.0.saturating_add(records))
    }
}

impl Sub<Offset> for Offset {
    type Output = i64;
    fn sub(self, other: Offset) -> i64 {
        self.0.saturating_sub(other.0)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition's leader epoch: bumped by the controller at every leader change, stamped on
/// every batch a leader appends, checked on every replica fetch (KIP-101, KIP-320).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// Kafka's `UNDEFINED_EPOCH`: no epoch (an empty epoch cache, an answer it cannot give).
    pub const UNDEFINED: LeaderEpoch = LeaderEpoch(-1);

    pub fn value(self) -> i32 {
        self.0
    }
    pub fn is_defined(self) -> bool {
        self.0 >= 0
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A broker's id (`node.id`); `-1` (NONE) where Kafka says "no broker" (no leader).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct BrokerId(pub i32);

impl BrokerId {
    pub const NONE: BrokerId = BrokerId(-1);

    pub fn value(self) -> i32 {
        self.0
    }
    pub fn is_some(self) -> bool {
        self.0 >= 0
    }
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An idempotent or transactional producer's id; `-1` for none.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ProducerId(pub i64);

impl ProducerId {
    pub const NONE: ProducerId = ProducerId(-1);
}

/// A producer id's epoch, bumped to fence an older session of the same producer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ProducerEpoch(pub i16);

/// A replica's three offsets, read together.
///
/// Invariant: `log_start <= high_watermark <= log_end` (asserted at construction in
/// debug builds; a release build serving a read keeps going with the end raised to the
/// start rather than stopping the broker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    log_start: Offset,
    high_watermark: Offset,
    log_end: Offset,
    last_stable: Offset,
}

/// Which records a consumer reads (Fetch's and ListOffsets' `isolation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Everything below the high watermark, aborted transactions' records included.
    ReadUncommitted,
    /// Only below the last stable offset, with the aborted transactions named.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's wire value: 1 is READ_COMMITTED, anything else READ_UNCOMMITTED.
    pub fn from_wire(level: i8) -> Self {
        if level == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

impl PartitionOffsets {
    /// The high watermark is clamped into `[log_start, log_end]`: a follower may know a
    /// leader's high watermark past its own log end, and a reset may leave a stale one
    /// below the log start; what a reader may use is inside the log.
    pub fn new(log_start: Offset, high_watermark: Offset, log_end: Offset) -> Self {
        debug_assert!(
            log_start <= log_end,
            "log start {log_start} is past the log end {log_end}"
        );
        let log_end = log_end.max(log_start);
        let high_watermark = high_watermark.clamp(log_start, log_end);
        Self {
            log_start,
            high_watermark,
            log_end,
            last_stable: high_watermark,
        }
    }

    /// With the last stable offset (read_committed's bound), clamped into
    /// `[log_start, high_watermark]`.
    pub fn with_last_stable(mut self, last_stable: Offset) -> Self {
        self.last_stable = last_stable.clamp(self.log_start, self.high_watermark);
        self
    }

    /// The end of what a consumer of `isolation` may read.
    pub fn readable_end(&self, isolation: Isolation) -> Offset {
        match isolation {
            Isolation::ReadUncommitted => self.high_watermark,
            Isolation::ReadCommitted => self.last_stable,
        }
    }

    pub fn last_stable(&self) -> Offset {
        self.last_stable
    }
    pub fn log_start(&self) -> Offset {
        self.log_start
    }
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }
    pub fn log_end(&self) -> Offset {
        self.log_end
    }
}

/// A partition of a topic, by name and index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition's directory name, `<topic>-<partition>`, as Kafka lays it out.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The internal topic holding committed offsets and group metadata (Kafka's name).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Topics the broker keeps for itself: hidden from clients that don't name them, flagged
/// `is_internal` in Metadata, and never produced to, deleted, resized or trimmed
/// (DeleteRecords) by clients. The one rule; `topics::TopicService` enforces it.
pub fn is_internal(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC
}

/// The internal topic of the transaction coordinators' state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The partition of an internal topic that owns `key` (a group id, a transactional
/// id): Kafka's `abs(hashCode) % partitions`, with Java's `String.hashCode` over UTF-16
/// code units, so a key lands on the same partition number as in Apache Kafka.
pub fn coordinator_partition(key: &str, partitions: i32) -> i32 {
    let mut hash: i32 = 0;
    for unit in key.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// Milliseconds since the Unix epoch, as Kafka timestamps are.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Milliseconds since this process first asked: a clock that never jumps, for
/// timers and deadlines (group sessions, the etcd lease).
pub fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// `call`, made again while it fails with an error `transient` accepts, until the
/// next pause would pass `deadline`: pauses from `backoff.0`, doubling up to
/// `backoff.1` — how a Kafka client waits out its retriable errors (a leader or
/// coordinator that just moved). The last answer is returned, whatever it is.
pub async fn retrying<T, E, F, Fut>(
    deadline: tokio::time::Instant,
    backoff: (std::time::Duration, std::time::Duration),
    transient: impl Fn(&E) -> bool,
    call: F,
) -> Result<T, E>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let (mut pause, longest) = backoff;
    loop {
        match call().await {
            Err(error) if transient(&error) && tokio::time::Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(longest);
            }
            result => return result,
        }
    }
}

/// Checks a topic name the way Kafka does: 1–249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be '{name}'"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters, the limit is 249",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name contains '{bad}'; only [a-zA-Z0-9._-] are allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_offsets_keep_the_high_watermark_inside_the_log() {
        let o = PartitionOffsets::new(Offset(5), Offset(20), Offset(10));
        assert_eq!(o.high_watermark(), Offset(10));
        let o = PartitionOffsets::new(Offset(5), Offset(0), Offset(10));
        assert_eq!(o.high_watermark(), Offset(5));
        assert_eq!((o.log_start(), o.log_end()), (Offset(5), Offset(10)));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "past the log end")]
    fn partition_offsets_refuse_a_log_start_past_the_end() {
        let _ = PartitionOffsets::new(Offset(11), Offset(11), Offset(10));
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "a/b", "white space", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_the_deadline_and_others_never() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::time::Duration;
        let backoff = (Duration::from_millis(1), Duration::from_millis(4));
        let calls = AtomicU32::new(0);
        let flaky = || async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            if n < 2 {
                Err("moving")
            } else {
                Ok(n)
            }
        };
        let soon = tokio::time::Instant::now() + Duration::from_secs(5);
        assert_eq!(
            retrying(soon, backoff, |e| *e == "moving", flaky).await,
            Ok(2)
        );

        calls.store(0, Ordering::SeqCst);
        let not_transient = retrying(soon, backoff, |_: &&str| false, flaky).await;
        assert_eq!(
            (not_transient, calls.load(Ordering::SeqCst)),
            (Err("moving"), 1)
        );

        calls.store(0, Ordering::SeqCst);
        let past = tokio::time::Instant::now();
        let given_up = retrying(past, backoff, |_: &&str| true, flaky).await;
        assert_eq!((given_up, calls.load(Ordering::SeqCst)), (Err("moving"), 1));
    }
}
