//! The log cleaner's schedule, as Kafka's `LogCleanerManager` keeps it: every
//! replica here (leader or follower: each compacts its own log) whose compacted log
//! is due — its dirty ratio above `min.cleanable.dirty.ratio`, dirty data older than
//! `max.compaction.lag.ms`, or a tombstone's delete horizon passed — is a candidate;
//! the dirtiest goes first. `log.cleaner.threads` passes run at once, never two on
//! one partition, each on the blocking pool; with nothing due a thread sleeps
//! `log.cleaner.backoff.ms`. What a pass does is `log::compaction`'s. The backoff, the
//! I/O rate and the dedupe buffer follow the dynamic broker configs from one pass to
//! the next; the thread count stays as started.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::{Partition, ReplicaManager};
use crate::cluster::topic_config::DynamicBrokerConfigs;
use crate::log::compaction::PassOutcome;
use crate::model::{now_ms, TopicPartition};
use std::time::Duration;

/// Runs the cleaner threads until `shutdown`.
pub async fn run(
    replicas: Arc<ReplicaManager>,
    config: CleanerConfig,
    shutdown: CancellationToken,
) {
    if !config.enable {
        return;
    }
    let busy = Arc::new(Mutex::new(HashSet::new()));
    let threads: Vec<_> = (0..config.threads)
        .map(|_| {
            tokio::spawn(cleaner_thread(
                Arc::clone(&replicas),
                config.clone(),
                Arc::clone(&busy),
                shutdown.clone(),
            ))
        })
        .collect();
    for thread in threads {
        let _ = thread.await;
    }
}

async fn cleaner_thread(
    replicas: Arc<ReplicaManager>,
    config: CleanerConfig,
    busy: Arc<Mutex<HashSet<TopicPartition>>>,
    shutdown: CancellationToken,
) {
    loop {
        let config = config.under(replicas.defaults().dynamic());
        let claimed = claim_dirtiest(&replicas, &busy);
        let Some(partition) = claimed else {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(config.backoff) => continue,
            }
        };
        let pass_config = config.clone();
        let cleaning = Arc::clone(&partition);
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            cleaning.clean(
                pass_config.dedupe_buffer_bytes,
                pass_config.io_max_bytes_per_second,
                now_ms(),
            )
        })
        .await;
        busy.lock().remove(partition.id());
        match result {
            Ok(Ok(Some(outcome))) => report(&partition, &outcome, started),
            Ok(Ok(None)) => {}
            Ok(Err(error)) => {
                metrics::counter!(crate::metrics::LOG_CLEANER_ERRORS_TOTAL).increment(1);
                tracing::warn!(partition = %partition.id(), %error, "log cleaning failed; the log is left as it was");
                // A failing log is not retried at once.
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(config.backoff) => {}
                }
            }
            Err(error) => {
                metrics::counter!(crate::metrics::LOG_CLEANER_ERRORS_TOTAL).increment(1);
                tracing::error!(partition = %partition.id(), %error, "log cleaning panicked");
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
    }
}

/// The due partition with the highest dirty ratio not being cleaned by another
/// thread, marked busy.
fn claim_dirtiest(
    replicas: &ReplicaManager,
    busy: &Mutex<HashSet<TopicPartition>>,
) -> Option<Arc<Partition>> {
    let now = now_ms();
    let mut busy = busy.lock();
    let (partition, _) = replicas
        .all_partitions()
        .into_iter()
        .filter(|p| !busy.contains(p.id()))
        .filter_map(|p| {
            let dirtiness = p.dirtiness(now)?;
            dirtiness.due.then(|| (p, dirtiness.ratio()))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    busy.insert(partition.id().clone());
    Some(partition)
}

/// The pass's metrics and its log line (Kafka's cleaner prints one per pass too).
fn report(partition: &Partition, outcome: &PassOutcome, started: Instant) {
    use crate::metrics as m;
    let elapsed = started.elapsed();
    metrics::counter!(m::LOG_CLEANER_PASSES_TOTAL).increment(1);
    metrics::counter!(m::LOG_CLEANER_READ_BYTES_TOTAL).increment(outcome.bytes_read);
    metrics::counter!(m::LOG_CLEANER_CLEANED_BYTES_TOTAL).increment(outcome.bytes_cleaned);
    metrics::counter!(m::LOG_CLEANER_WRITTEN_BYTES_TOTAL).increment(outcome.bytes_written);
    metrics::counter!(m::LOG_CLEANER_REMOVED_RECORDS_TOTAL).increment(outcome.records_dropped);
    metrics::histogram!(m::LOG_CLEANER_PASS_SECONDS).record(elapsed.as_secs_f64());
    metrics::gauge!(m::LOG_CLEANER_LAST_PASS_TIMESTAMP_SECONDS).set(now_ms() as f64 / 1000.0);
    let mb_per_s = outcome.bytes_cleaned as f64 / 1e6 / elapsed.as_secs_f64().max(1e-6);
    tracing::info!(
        partition = %partition.id(),
        cleaned_up_to = outcome.end,
        keys = outcome.keys_mapped,
        cleaned_bytes = outcome.bytes_cleaned,
        read_bytes = outcome.bytes_read,
        written_bytes = outcome.bytes_written,
        removed_records = outcome.records_dropped,
        segments_replaced = outcome.replaced.len(),
        elapsed_ms = elapsed.as_millis() as u64,
        cleaned_mb_per_s = format!("{mb_per_s:.1}"),
        "log cleaner pass"
    );
}

/// The log cleaner's settings: Kafka's `log.cleaner.*` broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    pub enable: bool,
    pub threads: usize,
    /// Per thread: the shared buffer divided among them, as Kafka divides it.
    pub dedupe_buffer_bytes: u64,
    /// Per thread, likewise; `None` for no limit.
    pub io_max_bytes_per_second: Option<f64>,
    pub backoff: Duration,
}

impl CleanerConfig {
    /// These settings under the dynamic broker configs in force (this broker's, else the
    /// cluster default): `log.cleaner.backoff.ms`, `log.cleaner.io.max.bytes.per.second`
    /// and `log.cleaner.dedupe.buffer.size`, shared among the threads as at start.
    pub fn under(&self, dynamic: &DynamicBrokerConfigs) -> CleanerConfig {
        let number = |name: &str| {
            dynamic
                .get(name)
                .and_then(|(v, _)| v.trim().parse::<f64>().ok())
                .filter(|n| n.is_finite() && *n >= 0.0)
        };
        let threads = self.threads.max(1) as f64;
        let mut config = self.clone();
        if let Some(ms) = number("log.cleaner.backoff.ms") {
            config.backoff = Duration::from_millis((ms as u64).max(10));
        }
        if let Some(rate) = number("log.cleaner.io.max.bytes.per.second") {
            // Kafka's default, Double.MAX_VALUE, means no limit.
            config.io_max_bytes_per_second = (rate > 0.0 && rate < 1e300).then(|| rate / threads);
        }
        if let Some(bytes) = number("log.cleaner.dedupe.buffer.size") {
            config.dedupe_buffer_bytes = (bytes / threads) as u64;
        }
        config
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn dynamic_cleaner_configs_win_over_the_flags_and_are_shared_among_threads() {
        let flags = CleanerConfig {
            enable: true,
            threads: 2,
            dedupe_buffer_bytes: 64 << 20,
            io_max_bytes_per_second: None,
            backoff: Duration::from_secs(15),
        };
        assert_eq!(flags.under(&DynamicBrokerConfigs::default()), flags);
        let mut dynamic = DynamicBrokerConfigs::default();
        dynamic.cluster_default.extend([
            ("log.cleaner.backoff.ms".to_string(), "500".to_string()),
            (
                "log.cleaner.io.max.bytes.per.second".to_string(),
                "2000000".to_string(),
            ),
        ]);
        dynamic
            .this_broker
            .insert("log.cleaner.dedupe.buffer.size".into(), "268435456".into());
        let live = flags.under(&dynamic);
        assert_eq!(live.backoff, Duration::from_millis(500));
        assert_eq!(live.io_max_bytes_per_second, Some(1_000_000.0));
        assert_eq!(live.dedupe_buffer_bytes, 128 << 20);
        assert_eq!(live.threads, 2);
    }
}
