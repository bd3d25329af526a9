//! Client quotas (KIP-13, KIP-55, KIP-124, KIP-257, KIP-546, KIP-612): how many bytes a
//! user or client id may produce and fetch per second, how much of the broker's request
//! time it may take, and how fast an address may open connections.
//!
//! - [`entity`]: the entities quotas are set on, Kafka's checks of them, and which
//!   configured entity a request counts against (pure).
//! - [`rate`]: Kafka's sampled rate and throttle time (pure, clock passed in).
//! - [`ClientQuotas`] (here): the table in force, one rate per bucket, the metrics.
//!
//! The quotas live in the metadata store (`MetadataStore::client_quotas`, written by
//! AlterClientQuotas); every broker reloads them on `ClientQuotasChanged`. A request
//! over its quota is answered at once with `throttle_time_ms` **and** its connection is
//! not read again for that long (`server::connection`): clients that ignore the
//! throttle time, as librdkafka does, are held to the quota all the same (KIP-219).

pub mod entity;
pub mod rate;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use entity::{Bucket, EntityName, QuotaEntity, QuotaKind, QuotaTable};
use rate::{SampledRate, TokenBucket, Window};

/// The message Kafka gives a topic refused by controller_mutation_rate (KIP-599),
/// with THROTTLING_QUOTA_EXCEEDED.
pub const THROTTLED_MUTATION: &str = "The throttling quota has been exceeded.";

/// Rates are forgotten once this many exist and a sweep finds them idle (an idle rate
/// is zero, so forgetting it changes nothing): client ids are the client's to choose.
const SWEEP_ABOVE: usize = 1_024;

/// The quotas in force on this broker and what each bucket has used.
#[derive(Debug)]
pub struct ClientQuotas {
    window: Window,
    table: RwLock<Arc<QuotaTable>>,
    /// Whether any quota is set: with none (the common case), requests skip the table.
    active: std::sync::atomic::AtomicBool,
    rates: Mutex<HashMap<(QuotaKind, Bucket), SampledRate>>,
    connection_rates: Mutex<HashMap<IpAddr, SampledRate>>,
    mutations: Mutex<HashMap<Bucket, TokenBucket>>,
}

impl Default for ClientQuotas {
    fn default() -> Self {
        Self::new(Window::default())
    }
}

impl ClientQuotas {
    pub fn new(window: Window) -> Self {
        Self {
            window,
            table: RwLock::new(Arc::new(QuotaTable::default())),
            active: std::sync::atomic::AtomicBool::new(false),
            rates: Mutex::new(HashMap::new()),
            connection_rates: Mutex::new(HashMap::new()),
            mutations: Mutex::new(HashMap::new()),
        }
    }

    /// Puts the store's quotas in force (rates recorded so far are kept, as Kafka
    /// keeps its sensors when a quota changes).
    pub fn reload(&self, stored: &BTreeMap<String, BTreeMap<String, String>>) {
        let table = QuotaTable::from_stored(stored);
        tracing::info!(
            entities = table.entities().count(),
            "client quotas reloaded"
        );
        self.active
            .store(!table.is_empty(), std::sync::atomic::Ordering::Relaxed);
        *self.table.write() = Arc::new(table);
    }

    /// The samples rates are measured over (`--quota-window-*`).
    pub fn window(&self) -> Window {
        self.window
    }

    /// The quotas in force.
    pub fn table(&self) -> Arc<QuotaTable> {
        Arc::clone(&self.table.read())
    }

    /// The table, when any quota is set; with none (the common case) a request pays one
    /// atomic load, not the lock and the `Arc` clone.
    fn table_in_force(&self) -> Option<Arc<QuotaTable>> {
        if !self.active.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        Some(self.table()).filter(|table| !table.is_empty())
    }

    /// Records `value` of `kind` (bytes, or percent-seconds of request time) for a
    /// request of `user` and `client_id` and returns how long it must be throttled, in
    /// ms (0 when no quota applies or it is within it).
    pub fn record(&self, kind: QuotaKind, user: &str, client_id: &str, value: f64) -> u64 {
        let Some(table) = self.table_in_force() else {
            return 0;
        };
        let Some((quota, bucket)) = table.resolve(kind, user, client_id) else {
            return 0;
        };
        let now = crate::model::monotonic_ms();
        let throttle = {
            let mut rates = self.rates.lock();
            if rates.len() > SWEEP_ABOVE {
                rates.retain(|_, rate| !rate.is_idle(now));
            }
            let rate = rates
                .entry((kind, bucket.clone()))
                .or_insert_with(|| SampledRate::new(self.window));
            rate.record(value, now);
            rate.throttle_ms(quota, now)
        };
        let labels = [
            ("quota", kind.key().to_string()),
            ("user", bucket.user),
            ("client_id", bucket.client_id),
        ];
        let counted = match kind {
            QuotaKind::RequestPercentage => value * 10_000.0, // percent-seconds to µs
            _ => value,
        };
        metrics::counter!(crate::metrics::QUOTA_RECORDED_TOTAL, &labels).increment(counted as u64);
        if throttle > 0 {
            metrics::counter!(crate::metrics::QUOTA_THROTTLED_TOTAL, &labels).increment(1);
            metrics::histogram!(crate::metrics::QUOTA_THROTTLE_SECONDS, &labels)
                .record(throttle as f64 / 1_000.0);
        }
        throttle
    }

    /// Runs `mutate` (creating, growing or deleting a topic) under the client's
    /// controller_mutation_rate (KIP-599) and records the partitions it returns.
    /// Refused with `None` when `strict` (CreateTopics v6+, CreatePartitions v3+,
    /// DeleteTopics v5+) and the client's bucket is already below zero; older versions
    /// are never refused, only throttled.
    pub async fn mutate<T, F>(
        &self,
        user: &str,
        client_id: &str,
        strict: bool,
        mutate: impl FnOnce() -> F,
    ) -> Option<T>
    where
        F: std::future::Future<Output = (T, u32)>,
    {
        let Some((quota, bucket)) = self
            .table_in_force()
            .and_then(|table| table.resolve(QuotaKind::ControllerMutationRate, user, client_id))
        else {
            return Some(mutate().await.0);
        };
        let now = crate::model::monotonic_ms();
        let exceeded = {
            let mut buckets = self.mutations.lock();
            if buckets.len() > SWEEP_ABOVE {
                buckets.retain(|_, tokens| !tokens.is_full(now));
            }
            let tokens = buckets
                .entry(bucket.clone())
                .or_insert_with(|| TokenBucket::new(self.window, quota, now));
            tokens.exceeded(quota, now)
        };
        if strict && exceeded {
            return None;
        }
        let (outcome, permits) = mutate().await;
        if permits > 0 {
            let now = crate::model::monotonic_ms();
            if let Some(tokens) = self.mutations.lock().get_mut(&bucket) {
                tokens.record(f64::from(permits), quota, now);
            }
            let labels = [
                ("quota", QuotaKind::ControllerMutationRate.key().to_string()),
                ("user", bucket.user),
                ("client_id", bucket.client_id),
            ];
            metrics::counter!(crate::metrics::QUOTA_RECORDED_TOTAL, &labels)
                .increment(u64::from(permits));
        }
        Some(outcome)
    }

    /// How long the client's controller mutations are throttled for now, in ms.
    pub fn mutation_throttle_ms(&self, user: &str, client_id: &str) -> u64 {
        let Some((quota, bucket)) = self
            .table_in_force()
            .and_then(|table| table.resolve(QuotaKind::ControllerMutationRate, user, client_id))
        else {
            return 0;
        };
        let now = crate::model::monotonic_ms();
        self.mutations
            .lock()
            .get_mut(&bucket)
            .map_or(0, |tokens| tokens.throttle_ms(quota, now))
    }

    /// The most that one request of this client may carry without a certain throttle
    /// (the fetch size cap of a quota'd consumer); `None` without a quota.
    pub fn max_in_window(&self, kind: QuotaKind, user: &str, client_id: &str) -> Option<f64> {
        let table = self.table_in_force()?;
        let (quota, _) = table.resolve(kind, user, client_id)?;
        Some(self.window.max_in_window(quota))
    }

    /// Records a new connection from `ip` against its `connection_creation_rate`
    /// (KIP-612) and returns how long to hold it before closing it, if it is over.
    pub fn record_connection(&self, ip: IpAddr) -> Option<u64> {
        let table = self.table_in_force()?;
        let quota = table.connection_rate(ip)?;
        let now = crate::model::monotonic_ms();
        let mut rates = self.connection_rates.lock();
        if rates.len() > SWEEP_ABOVE {
            rates.retain(|_, rate| !rate.is_idle(now));
        }
        let rate = rates
            .entry(ip)
            .or_insert_with(|| SampledRate::new(self.window));
        // Kafka checks the rate the connection would bring before admitting it, and a
        // refused one does not count.
        rate.record(1.0, now);
        let throttle = rate.throttle_ms(quota, now);
        if throttle == 0 {
            return None;
        }
        rate.record(-1.0, now);
        Some(throttle)
    }
}

/// How long a connection stays unread: a request over its quota mutes its connection
/// for its throttle time (Kafka mutes the channel the same way), so that a client
/// that ignores the throttle time cannot go faster than its quota.
#[derive(Debug, Default)]
pub struct ConnectionMute {
    /// `model::monotonic_ms` until which no further request is executed.
    until_ms: std::sync::atomic::AtomicU64,
}

impl ConnectionMute {
    /// Mutes the connection for `ms` from now (never shortening a longer mute).
    pub fn extend(&self, ms: u64) {
        if ms > 0 {
            let until = crate::model::monotonic_ms() + ms;
            self.until_ms
                .fetch_max(until, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// How much longer the connection is muted, if it is.
    pub fn remaining(&self) -> Option<std::time::Duration> {
        let until = self.until_ms.load(std::sync::atomic::Ordering::Relaxed);
        if until == 0 {
            return None; // never throttled: no clock read on every loop turn
        }
        let now = crate::model::monotonic_ms();
        (until > now).then(|| std::time::Duration::from_millis(until - now))
    }
}
