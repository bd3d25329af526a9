//! The cluster's metadata store on etcd, and this broker's membership in it.
//!
//! Keys, all under `/tern/<cluster-id>/`:
//!
//! | key                   | value                      | written by                    |
//! |-----------------------|----------------------------|-------------------------------|
//! | `brokers/<id>`        | `BrokerInfo` JSON          | that broker, on its lease     |
//! | `controller`          | `{"node_id": id}`          | the elected controller, on its lease |
//! | `topics/<name>`       | `TopicSpec` JSON           | any broker (admin requests), compare-and-swap |
//! | `assignments/<name>`  | `TopicAssignment` JSON     | the controller only, fenced   |
//! | `controller-incarnations` | `{"<id>": create revision}` the controller placed with | the controller only, fenced; read by the next one |
//! | `counters/topic_id`, `counters/producer_id` | next id | any broker, compare-and-swap |
//! | `configs/brokers/<id>`, `configs/brokers/<default>` | dynamic broker configs, JSON map | any broker (AlterConfigs on a BROKER resource) |
//! | `users/<mechanism>/<user, percent-encoded>` | a SCRAM credential (salt, stored and server keys, iterations), JSON | any broker (AlterUserScramCredentials) |
//! | `acls/<binding key>`  | `AclBinding` JSON (the key encodes every field, `AclBinding::storage_key`) | any broker (CreateAcls, DeleteAcls): one key per binding, so concurrent writers need no compare-and-swap |
//!
//! Every broker keeps the whole prefix in a local cache: one range read, then a watch
//! from the next revision, so that reads on the request path never touch etcd and
//! changes arrive as notifications. A lost watch (etcd restarted, history compacted)
//! re-reads everything and announces `Resynced`. A write returns once the cache has
//! seen it (read-your-writes on this broker).
//!
//! The session: a lease of `--etcd-lease-ttl-secs`, kept alive every third of it, with
//! `brokers/<id>` attached. Per etcd's advice, the broker stops acting as a leader by
//! its own clock — when the last acknowledged keep-alive is older than the TTL minus
//! a margin — before etcd expires the lease and others take over.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::store::{
    BrokerInfo, MetadataError, MetadataEvent, MetadataStore, NewTopic, PartitionAssignment,
    TopicAssignment, TopicSpec, UserCredentials,
};
use crate::metrics as m;
use crate::model::monotonic_ms;
use crate::security::acl::AclBinding;
use crate::security::credentials::{ScramMechanism, StoredScramCredential};

/// How to reach etcd and how long this broker's session lasts.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub lease_ttl: Duration,
}

use crate::limits::{
    ETCD_CAS_ATTEMPTS as CAS_ATTEMPTS, ETCD_CONNECT_TIMEOUT, ETCD_KEEP_ALIVE,
    ETCD_LEASE_MIN_MARGIN, ETCD_READ_YOUR_WRITES_WAIT as READ_YOUR_WRITES_WAIT,
    ETCD_REGISTER_GRACE, ETCD_REQUEST_TIMEOUT, ETCD_RETRY_PAUSE, ETCD_STARTUP_RETRY,
};
/// First producer id handed out by a new cluster.
const FIRST_PRODUCER_ID: i64 = 1000;

/// Whether etcd answered that a lease no longer exists (it expired).
fn lease_gone(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        etcd_client::Error::GRpcStatus(status) => status.message().contains("not found"),
        _ => false,
    }
}

fn etcd_error(error: etcd_client::Error) -> MetadataError {
    MetadataError::Etcd(error.to_string())
}

fn corrupt(key: &str, error: serde_json::Error) -> MetadataError {
    MetadataError::Corrupt(format!("{key}: {error}"))
}

/// The key layout (see the module docs).
#[derive(Debug, Clone)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn broker(&self, id: i32) -> String {
        format!("{}brokers/{id}", self.prefix)
    }
    fn controller(&self) -> String {
        format!("{}controller", self.prefix)
    }
    fn controller_incarnations(&self) -> String {
        format!("{}controller-incarnations", self.prefix)
    }
    fn topic(&self, name: &str) -> String {
        format!("{}topics/{name}", self.prefix)
    }
    fn assignment(&self, name: &str) -> String {
        format!("{}assignments/{name}", self.prefix)
    }
    fn topic_ids(&self) -> String {
        format!("{}counters/topic_id", self.prefix)
    }
    fn producer_ids(&self) -> String {
        format!("{}counters/producer_id", self.prefix)
    }
    /// `users/<mechanism>/<user, percent-encoded>`.
    fn user(&self, mechanism: ScramMechanism, user: &str) -> String {
        format!(
            "{}users/{}/{}",
            self.prefix,
            mechanism.name(),
            encode_key_part(user)
        )
    }
    /// `configs/brokers/<id>`, or `configs/brokers/<default>` for the cluster default.
    fn acl(&self, binding: &AclBinding) -> String {
        format!("{}acls/{}", self.prefix, binding.storage_key())
    }
    fn broker_configs(&self, broker: Option<i32>) -> String {
        match broker {
            Some(id) => format!("{}configs/brokers/{id}", self.prefix),
            None => format!("{}configs/brokers/<default>", self.prefix),
        }
    }
}

/// What a key under the prefix is.
enum Entry<'a> {
    Broker(i32),
    Controller,
    Topic(&'a str),
    Assignment(&'a str),
    /// Dynamic broker configs: `None` for `<default>`.
    BrokerConfigs(Option<i32>),
    /// A SCRAM credential: mechanism name and user.
    User(&'a str, String),
    /// An ACL binding, by its storage key.
    Acl(&'a str),
    Other,
}

/// A user name as one etcd key segment: everything but ASCII letters, digits and
/// `-._~` percent-encoded, so that a `/` in a name cannot change the key's shape.
fn encode_key_part(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode_key_part(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn classify<'a>(prefix: &str, key: &'a str) -> Entry<'a> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return Entry::Other;
    };
    if rest == "controller" {
        Entry::Controller
    } else if let Some(id) = rest.strip_prefix("brokers/") {
        id.parse().map_or(Entry::Other, Entry::Broker)
    } else if let Some(name) = rest.strip_prefix("topics/") {
        Entry::Topic(name)
    } else if let Some(name) = rest.strip_prefix("assignments/") {
        Entry::Assignment(name)
    } else if let Some(user) = rest.strip_prefix("users/") {
        user.split_once('/')
            .and_then(|(mechanism, name)| Some(Entry::User(mechanism, decode_key_part(name)?)))
            .unwrap_or(Entry::Other)
    } else if let Some(binding) = rest.strip_prefix("acls/") {
        Entry::Acl(binding)
    } else if let Some(level) = rest.strip_prefix("configs/brokers/") {
        if level == "<default>" {
            Entry::BrokerConfigs(None)
        } else {
            level
                .parse()
                .map_or(Entry::Other, |id| Entry::BrokerConfigs(Some(id)))
        }
    } else {
        Entry::Other
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ControllerRecord {
    node_id: i32,
}

/// The elected controller: its id and the create revision of its key, which is its
/// term: writes guarded by "the controller key still has this create revision" fail
/// once it has been deposed.
/// How a controller's write of a placement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Written,
    /// Someone (a leader's ISR change) wrote it since: re-read and decide again.
    Stale,
    /// This broker is no longer the controller.
    Fenced,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerTerm {
    pub node_id: i32,
    pub revision: i64,
}

/// The local copy of everything under the prefix.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub topics: BTreeMap<String, TopicSpec>,
    pub assignments: BTreeMap<String, TopicAssignment>,
    /// The etcd mod revision of each `assignments/<name>` key: what a compare-and-swap
    /// of the controller's next write of it must match.
    pub assignment_revisions: BTreeMap<String, i64>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Each live broker's incarnation: the create revision of its registration, new on
    /// every (re)start or re-registration after a lapsed lease (Kafka's broker epoch).
    pub incarnations: BTreeMap<i32, i64>,
    pub controller: Option<ControllerTerm>,
    /// Dynamic broker configs by level (`None`: the cluster-wide default).
    pub broker_configs: BTreeMap<Option<i32>, BTreeMap<String, String>>,
    pub users: UserCredentials,
    /// ACL bindings by their storage key.
    pub acls: BTreeMap<String, AclBinding>,
}

impl Snapshot {
    /// Applies one put (`value` is `Some`) or delete; returns the event it makes.
    fn apply(&mut self, prefix: &str, kv: &KeyValue, put: bool) -> Option<MetadataEvent> {
        let key = kv.key_str().ok()?;
        let value = kv.value();
        match classify(prefix, key) {
            Entry::Broker(id) => {
                if put {
                    let broker = parse::<BrokerInfo>(key, value)?;
                    self.brokers.insert(id, broker);
                    self.incarnations.insert(id, kv.create_revision());
                } else {
                    self.brokers.remove(&id);
                    self.incarnations.remove(&id);
                }
                Some(MetadataEvent::BrokersChanged)
            }
            Entry::Controller => {
                self.controller = if put {
                    parse::<ControllerRecord>(key, value).map(|r| ControllerTerm {
                        node_id: r.node_id,
                        revision: kv.create_revision(),
                    })
                } else {
                    None
                };
                Some(MetadataEvent::ControllerChanged)
            }
            Entry::Topic(name) => {
                if put {
                    let spec = parse::<TopicSpec>(key, value)?;
                    let existed = self.topics.insert(name.to_string(), spec.clone());
                    Some(match existed {
                        Some(_) => MetadataEvent::TopicChanged(spec),
                        None => MetadataEvent::TopicCreated(spec),
                    })
                } else {
                    self.topics.remove(name).map(MetadataEvent::TopicDeleted)
                }
            }
            Entry::Assignment(name) => {
                if put {
                    let assignment = parse::<TopicAssignment>(key, value)?;
                    self.assignments.insert(name.to_string(), assignment);
                    self.assignment_revisions
                        .insert(name.to_string(), kv.mod_revision());
                } else {
                    self.assignments.remove(name);
                    self.assignment_revisions.remove(name);
                }
                Some(MetadataEvent::AssignmentChanged(name.to_string()))
            }
            Entry::BrokerConfigs(level) => {
                if put {
                    let configs = parse::<BTreeMap<String, String>>(key, value)?;
                    self.broker_configs.insert(level, configs);
                } else {
                    self.broker_configs.remove(&level);
                }
                Some(MetadataEvent::BrokerConfigsChanged(level))
            }
            Entry::User(mechanism, user) => {
                let credential = match put {
                    true => Some(parse::<StoredScramCredential>(key, value)?),
                    false => None,
                };
                super::store::set_user_credential(&mut self.users, &user, mechanism, credential);
                None
            }
            Entry::Acl(binding_key) => {
                if put {
                    let binding = parse::<AclBinding>(key, value)?;
                    self.acls.insert(binding_key.to_string(), binding);
                } else {
                    self.acls.remove(binding_key);
                }
                Some(MetadataEvent::AclsChanged)
            }
            Entry::Other => None,
        }
    }
}

/// Parses a value, logging (not failing on) one that another version wrote badly:
/// one bad key must not stop the broker from following the rest.
fn parse<T: serde::de::DeserializeOwned>(key: &str, value: &[u8]) -> Option<T> {
    match serde_json::from_slice(value) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            tracing::warn!(key, %error, "ignoring unreadable metadata value");
            None
        }
    }
}

/// The etcd-backed metadata store; see the module docs.
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    cluster_id: String,
    node: BrokerInfo,
    lease_ttl: Duration,
    cache: RwLock<Snapshot>,
    /// The etcd revision the cache reflects.
    applied: watch::Sender<i64>,
    /// Cancelled when the watch stops for good (shutdown): nothing will apply a newer
    /// revision, so read-your-writes waits end at once instead of timing out.
    watch_ended: CancellationToken,
    events: broadcast::Sender<MetadataEvent>,
    /// This broker's lease; 0 while it has none.
    lease: AtomicI64,
    /// The create revision of this process's registration; 0 before it registered.
    incarnation: AtomicI64,
    /// Until when (monotonic ms) the lease is certainly alive, by this broker's clock.
    alive_until_ms: AtomicU64,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.keys.prefix)
            .field("node", &self.node)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects, loads the cache and registers this broker, waiting (up to a lease
    /// TTL and a bit) for a previous incarnation's registration to expire.
    pub async fn connect(
        config: &EtcdConfig,
        cluster_id: &str,
        node: BrokerInfo,
    ) -> Result<Self, MetadataError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(ETCD_CONNECT_TIMEOUT)
            .with_timeout(ETCD_REQUEST_TIMEOUT)
            .with_keep_alive(ETCD_KEEP_ALIVE.0, ETCD_KEEP_ALIVE.1);
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(etcd_error)?;
        let (applied, _) = watch::channel(0);
        let (events, _) = broadcast::channel(4096);
        let store = Self {
            client,
            keys: Keys {
                prefix: format!("/tern/{cluster_id}/"),
            },
            cluster_id: cluster_id.to_string(),
            node,
            lease_ttl: config.lease_ttl,
            cache: RwLock::new(Snapshot::default()),
            applied,
            watch_ended: CancellationToken::new(),
            events,
            lease: AtomicI64::new(0),
            incarnation: AtomicI64::new(0),
            alive_until_ms: AtomicU64::new(0),
        };
        let started = tokio::time::Instant::now();
        loop {
            match store.join(config.lease_ttl).await {
                Ok(()) => return Ok(store),
                Err(error @ MetadataError::NodeIdTaken(_)) => return Err(error),
                Err(error) if started.elapsed() < ETCD_STARTUP_RETRY => {
                    tracing::warn!(%error, "cannot join the cluster yet; retrying");
                    tokio::time::sleep(ETCD_RETRY_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Loads the cache and registers, giving a previous run's registration of this
    /// broker id a lease TTL (and a grace) to expire.
    async fn join(&self, lease_ttl: Duration) -> Result<(), MetadataError> {
        self.resync().await?;
        let deadline = tokio::time::Instant::now() + lease_ttl + ETCD_REGISTER_GRACE;
        self.register(Some(deadline)).await
    }

    pub fn node_id(&self) -> i32 {
        self.node.node_id
    }

    /// A copy of the whole cache.
    pub fn snapshot(&self) -> Snapshot {
        self.cache.read().clone()
    }

    pub fn controller(&self) -> Option<ControllerTerm> {
        self.cache.read().controller
    }

    fn ttl_ms(&self) -> u64 {
        self.lease_ttl.as_millis() as u64
    }

    /// Time before the TTL at which this broker considers itself out.
    fn margin_ms(&self) -> u64 {
        (self.ttl_ms() / 6).max(ETCD_LEASE_MIN_MARGIN.as_millis() as u64)
    }

    fn publish(&self, event: MetadataEvent) {
        let _ = self.events.send(event);
    }

    /// Re-reads everything under the prefix and replaces the cache; returns the revision.
    async fn resync(&self) -> Result<i64, MetadataError> {
        let response = self
            .client
            .clone()
            .get(
                self.keys.prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(etcd_error)?;
        let revision = response.header().map_or(0, |h| h.revision());
        let mut fresh = Snapshot::default();
        for kv in response.kvs() {
            fresh.apply(&self.keys.prefix, kv, true);
        }
        *self.cache.write() = fresh;
        self.applied.send_replace(revision);
        self.publish(MetadataEvent::Resynced);
        Ok(revision)
    }

    /// Waits (bounded) until the cache reflects `revision`.
    async fn wait_applied(&self, revision: i64) {
        let mut applied = self.applied.subscribe();
        let caught_up = tokio::select! {
            _ = self.watch_ended.cancelled() => return,
            caught_up = tokio::time::timeout(READ_YOUR_WRITES_WAIT, applied.wait_for(|r| *r >= revision)) => caught_up,
        };
        if caught_up.is_err() {
            tracing::warn!(
                revision,
                "metadata cache is behind etcd; the watch may be down"
            );
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetadataError> {
        self.client.clone().txn(txn).await.map_err(etcd_error)
    }

    /// Runs `txn`; when it succeeded, returns only once this broker's cache has it
    /// (read-your-writes).
    async fn txn_seen(&self, txn: Txn) -> Result<TxnResponse, MetadataError> {
        let response = self.txn(txn).await?;
        if response.succeeded() {
            self.wait_applied(response.header().map_or(0, |h| h.revision()))
                .await;
        }
        Ok(response)
    }

    /// Runs independent operations in transactions of at most `TXN_OPS_MAX` (etcd refuses
    /// larger ones, `--max-txn-ops` defaults to 128), each seen by the cache before the next.
    async fn write_in_chunks(&self, operations: Vec<TxnOp>) -> Result<(), MetadataError> {
        const TXN_OPS_MAX: usize = 100;
        let mut operations = operations.into_iter().peekable();
        while operations.peek().is_some() {
            let chunk: Vec<TxnOp> = operations.by_ref().take(TXN_OPS_MAX).collect();
            self.txn_seen(Txn::new().and_then(chunk)).await?;
        }
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetadataError> {
        let mut response = self
            .client
            .clone()
            .get(key, None)
            .await
            .map_err(etcd_error)?;
        Ok(response.take_kvs().into_iter().next())
    }

    /// Follows the prefix until shutdown: watch from the cache's revision, apply and
    /// announce each change; on any failure re-read everything and watch again.
    pub async fn run_watch(&self, shutdown: CancellationToken) {
        let _ended = self.watch_ended.clone().drop_guard();
        loop {
            let from = *self.applied.borrow() + 1;
            let outcome = self.watch_from(from, &shutdown).await;
            if shutdown.is_cancelled() {
                return;
            }
            if let Err(error) = outcome {
                tracing::warn!(%error, "etcd watch lost; re-reading the metadata");
            }
            metrics::counter!(m::ETCD_WATCH_RESYNCS_TOTAL).increment(1);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(ETCD_RETRY_PAUSE) => {}
                }
                match self.resync().await {
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "re-reading the metadata from etcd failed")
                    }
                }
            }
        }
    }

    async fn watch_from(
        &self,
        from: i64,
        shutdown: &CancellationToken,
    ) -> Result<(), MetadataError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        let mut stream = self
            .client
            .clone()
            .watch(self.keys.prefix.clone(), Some(options))
            .await
            .map_err(etcd_error)?;
        loop {
            let message = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                message = stream.message() => message.map_err(etcd_error)?,
            };
            let Some(response) = message else {
                return Err(MetadataError::Etcd("watch stream ended".into()));
            };
            if response.canceled() || response.compact_revision() > 0 {
                return Err(MetadataError::Etcd(format!(
                    "watch canceled: {}",
                    response.cancel_reason()
                )));
            }
            let mut events = Vec::new();
            let mut revision = None;
            {
                let mut cache = self.cache.write();
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let put = event.event_type() == EventType::Put;
                    events.extend(cache.apply(&self.keys.prefix, kv, put));
                    revision = Some(kv.mod_revision());
                }
            }
            if let Some(revision) = revision {
                self.applied.send_if_modified(|r| {
                    let newer = revision > *r;
                    if newer {
                        *r = revision;
                    }
                    newer
                });
            }
            for event in events {
                self.publish(event);
            }
        }
    }

    /// Registers `brokers/<id>` under a fresh lease. With a `deadline`, gives up when
    /// another holder of this id (a previous incarnation) has not gone by then.
    async fn register(&self, deadline: Option<tokio::time::Instant>) -> Result<(), MetadataError> {
        let key = self.keys.broker(self.node.node_id);
        let value = serde_json::to_vec(&self.node).map_err(|e| corrupt(&key, e))?;
        let ttl_secs = self.lease_ttl.as_secs().max(1) as i64;
        let mut client = self.client.clone();
        let mut warned = false;
        loop {
            let granted_at = monotonic_ms();
            let lease = client
                .lease_grant(ttl_secs, None)
                .await
                .map_err(etcd_error)?
                .id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let response = match self.client.clone().txn(txn).await {
                Ok(response) => response,
                // The fresh lease expired before the put (a stalled process, a slow
                // etcd): grant another and try again rather than fail the start.
                Err(error) if lease_gone(&error) => {
                    tracing::warn!(node_id = self.node.node_id, %error, "lease expired before registering; retrying");
                    tokio::time::sleep(ETCD_RETRY_PAUSE).await;
                    continue;
                }
                Err(error) => return Err(etcd_error(error)),
            };
            if response.succeeded() {
                // No waiting for the watch here: at start-up it is not running yet,
                // and the lease is already ticking.
                self.lease.store(lease, Ordering::Release);
                // The put created the key: its create revision is the txn's revision.
                if let Some(header) = response.header() {
                    self.incarnation.store(header.revision(), Ordering::Release);
                }
                self.alive_until_ms.store(
                    granted_at + self.ttl_ms() - self.margin_ms(),
                    Ordering::Release,
                );
                tracing::info!(
                    node_id = self.node.node_id,
                    lease,
                    "registered in the cluster"
                );
                return Ok(());
            }
            let _ = client.lease_revoke(lease).await;
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(MetadataError::NodeIdTaken(self.node.node_id));
            }
            if !warned {
                tracing::warn!(
                    node_id = self.node.node_id,
                    "broker id still registered (a previous run?); waiting for its lease to expire"
                );
                warned = true;
            }
            tokio::time::sleep(ETCD_RETRY_PAUSE).await;
        }
    }

    /// Keeps the session alive until shutdown, re-registering under a new lease when
    /// the old one expired (the broker then rejoins the ring).
    pub async fn run_session(&self, shutdown: CancellationToken) {
        loop {
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => return,
                outcome = self.keep_alive() => outcome,
            };
            if let Err(error) = outcome {
                tracing::warn!(%error, "etcd session trouble");
            }
            metrics::gauge!(m::ETCD_SESSION_UP).set(if self.may_lead() { 1.0 } else { 0.0 });
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(ETCD_RETRY_PAUSE) => {}
            }
        }
    }

    async fn keep_alive(&self) -> Result<(), MetadataError> {
        if self.lease.load(Ordering::Acquire) == 0 {
            self.register(None).await?;
        }
        let lease = self.lease.load(Ordering::Acquire);
        match self.renew(lease).await {
            // etcd says the lease is gone either with a TTL of 0 or with an error.
            Err(error) if lease_gone(&error) => {
                self.lease.store(0, Ordering::Release);
                self.alive_until_ms.store(0, Ordering::Release);
                metrics::counter!(m::ETCD_SESSION_EXPIRATIONS_TOTAL).increment(1);
                metrics::gauge!(m::ETCD_SESSION_UP).set(0.0);
                Err(MetadataError::Etcd(format!(
                    "lease {lease} expired: this broker left the cluster and rejoins"
                )))
            }
            Err(error) => Err(etcd_error(error)),
            Ok(()) => Ok(()),
        }
    }

    /// Renews `lease` every third of its TTL until something fails.
    async fn renew(&self, lease: i64) -> Result<(), etcd_client::Error> {
        let period = self.lease_ttl / 3;
        let (mut keeper, mut responses) = self.client.clone().lease_keep_alive(lease).await?;
        loop {
            let sent_at = monotonic_ms();
            keeper.keep_alive().await?;
            let response = tokio::time::timeout(period, responses.message())
                .await
                .map_err(|_| etcd_client::Error::LeaseKeepAliveError("unanswered".into()))?
                .and_then(|r| {
                    r.ok_or_else(|| etcd_client::Error::LeaseKeepAliveError("stream ended".into()))
                })?;
            if response.ttl() <= 0 {
                return Err(etcd_client::Error::LeaseKeepAliveError(
                    "lease not found".into(),
                ));
            }
            self.alive_until_ms.store(
                sent_at + self.ttl_ms() - self.margin_ms(),
                Ordering::Release,
            );
            metrics::gauge!(m::ETCD_SESSION_UP).set(1.0);
            tokio::time::sleep(period.saturating_sub(Duration::from_millis(
                monotonic_ms().saturating_sub(sent_at),
            )))
            .await;
        }
    }

    /// Tries to become the controller; returns the term when it did.
    pub async fn campaign(&self) -> Result<Option<ControllerTerm>, MetadataError> {
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 || !self.may_lead() {
            return Ok(None);
        }
        let key = self.keys.controller();
        let record = ControllerRecord {
            node_id: self.node.node_id,
        };
        let value = serde_json::to_vec(&record).map_err(|e| corrupt(&key, e))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Ok(None);
        }
        let revision = response.header().map_or(0, |h| h.revision());
        self.wait_applied(revision).await;
        Ok(Some(ControllerTerm {
            node_id: self.node.node_id,
            revision,
        }))
    }

    /// Gives up the controller role (on a clean shutdown), if still held in `term`.
    pub async fn resign(&self, term: ControllerTerm) {
        let key = self.keys.controller();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                term.revision,
            )])
            .and_then([TxnOp::delete(key, None)]);
        if let Err(error) = self.txn(txn).await {
            tracing::warn!(%error, "could not resign as controller; the lease will expire");
        }
    }

    /// Writes a topic's placement, only while `term` still holds (the fencing) and
    /// nobody changed it since revision `expected` (0: absent) — a leader's ISR change
    /// in between must not be overwritten.
    pub async fn put_assignment(
        &self,
        term: ControllerTerm,
        topic: &str,
        assignment: Option<&TopicAssignment>,
        expected: i64,
    ) -> Result<Placed, MetadataError> {
        let key = self.keys.assignment(topic);
        let operation = match assignment {
            Some(assignment) => {
                let value = serde_json::to_vec(assignment).map_err(|e| corrupt(&key, e))?;
                TxnOp::put(key.clone(), value, None)
            }
            None => TxnOp::delete(key.clone(), None),
        };
        let controller =
            Compare::create_revision(self.keys.controller(), CompareOp::Equal, term.revision);
        let txn = Txn::new()
            .when([
                controller.clone(),
                Compare::mod_revision(key, CompareOp::Equal, expected),
            ])
            .and_then([operation]);
        if self.txn_seen(txn).await?.succeeded() {
            return Ok(Placed::Written);
        }
        let still_controller = Txn::new().when([controller]);
        Ok(if self.txn(still_controller).await?.succeeded() {
            Placed::Stale
        } else {
            Placed::Fenced
        })
    }

    /// The broker incarnations the last controller placed partitions with (empty when
    /// none was saved), so that a new controller notices restarts that happened while
    /// there was none.
    pub async fn controller_incarnations(&self) -> Result<BTreeMap<i32, i64>, MetadataError> {
        let key = self.keys.controller_incarnations();
        match self.get(&key).await? {
            Some(kv) => serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e)),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Saves the incarnations this controller has placed with (fenced by its term).
    pub async fn save_controller_incarnations(
        &self,
        term: ControllerTerm,
        incarnations: &BTreeMap<i32, i64>,
    ) -> Result<Placed, MetadataError> {
        let key = self.keys.controller_incarnations();
        let value = serde_json::to_vec(incarnations).map_err(|e| corrupt(&key, e))?;
        let controller =
            Compare::create_revision(self.keys.controller(), CompareOp::Equal, term.revision);
        let txn = Txn::new()
            .when([controller])
            .and_then([TxnOp::put(key, value, None)]);
        Ok(if self.txn(txn).await?.succeeded() {
            Placed::Written
        } else {
            Placed::Fenced
        })
    }

    /// Reads a topic's placement with the revision a compare-and-swap must match.
    async fn read_assignment(
        &self,
        topic: &str,
    ) -> Result<Option<(TopicAssignment, i64)>, MetadataError> {
        let key = self.keys.assignment(topic);
        let Some(kv) = self.get(&key).await? else {
            return Ok(None);
        };
        let assignment = serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e))?;
        Ok(Some((assignment, kv.mod_revision())))
    }

    /// Reads a counter: its next value (or `initial`) and the comparison that holds
    /// while nobody else has moved it.
    async fn read_counter(&self, key: &str, initial: i64) -> Result<(i64, Compare), MetadataError> {
        match self.get(key).await? {
            None => Ok((initial, Compare::create_revision(key, CompareOp::Equal, 0))),
            Some(kv) => {
                let value = kv
                    .value_str()
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| MetadataError::Corrupt(format!("{key} is not a number")))?;
                Ok((
                    value,
                    Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
                ))
            }
        }
    }

    /// Reads a topic with the revision a compare-and-swap on it must match.
    async fn read_topic(&self, name: &str) -> Result<(TopicSpec, i64), MetadataError> {
        let key = self.keys.topic(name);
        let kv = self
            .get(&key)
            .await?
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let spec = serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e))?;
        Ok((spec, kv.mod_revision()))
    }

    /// Writes `value` to `key` only if nobody changed the key since `revision` (the
    /// compare-and-swap of every read-modify-write here); true when written and seen.
    async fn put_if_unchanged<T: serde::Serialize>(
        &self,
        key: &str,
        revision: i64,
        value: &T,
    ) -> Result<bool, MetadataError> {
        let value = serde_json::to_vec(value).map_err(|e| corrupt(key, e))?;
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, revision)])
            .and_then([TxnOp::put(key, value, None)]);
        Ok(self.txn_seen(txn).await?.succeeded())
    }

    /// Changes a topic with `change`, retrying when someone else changed it meanwhile.
    async fn update_topic(
        &self,
        name: &str,
        change: impl Fn(&mut TopicSpec) -> Result<(), MetadataError>,
    ) -> Result<TopicSpec, MetadataError> {
        let key = self.keys.topic(name);
        for _ in 0..CAS_ATTEMPTS {
            let (mut spec, revision) = self.read_topic(name).await?;
            change(&mut spec)?;
            if self.put_if_unchanged(&key, revision, &spec).await? {
                return Ok(spec);
            }
        }
        Err(MetadataError::Contended(name.to_string()))
    }
}

/// The revision of the key the else branch of a "create if absent" transaction
/// found, if it found one.
fn found_existing(response: &TxnResponse) -> Option<i64> {
    response.op_responses().iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.mod_revision()),
        _ => None,
    })
}

#[async_trait::async_trait]
impl MetadataStore for EtcdStore {
    fn cluster_id(&self) -> String {
        self.cluster_id.clone()
    }

    async fn topics(&self) -> Vec<TopicSpec> {
        self.cache.read().topics.values().cloned().collect()
    }

    async fn topic(&self, name: &str) -> Option<TopicSpec> {
        self.cache.read().topics.get(name).cloned()
    }

    async fn topic_by_id(&self, topic_id: Uuid) -> Option<TopicSpec> {
        self.cache
            .read()
            .topics
            .values()
            .find(|t| t.topic_id == topic_id)
            .cloned()
    }

    async fn create_topic(&self, topic: NewTopic) -> Result<TopicSpec, MetadataError> {
        let key = self.keys.topic(&topic.name);
        let counter = self.keys.topic_ids();
        for _ in 0..CAS_ATTEMPTS {
            let (numeric_id, unchanged) = self.read_counter(&counter, 1).await?;
            let spec = TopicSpec {
                name: topic.name.clone(),
                topic_id: Uuid::new_v4(),
                numeric_id,
                partitions: topic.partitions,
                replication_factor: topic.replication_factor,
                configs: topic.configs.clone(),
                replica_assignments: topic.assignments.clone(),
            };
            let value = serde_json::to_vec(&spec).map_err(|e| corrupt(&key, e))?;
            let txn = Txn::new()
                .when([
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    unchanged,
                ])
                .and_then([
                    TxnOp::put(key.clone(), value, None),
                    TxnOp::put(counter.clone(), (numeric_id + 1).to_string(), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.txn_seen(txn).await?;
            if response.succeeded() {
                return Ok(spec);
            }
            if let Some(revision) = found_existing(&response) {
                // Someone else created it: make it visible here before saying so.
                self.wait_applied(revision).await;
                return Err(MetadataError::TopicExists(topic.name));
            }
        }
        Err(MetadataError::Contended(topic.name))
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicSpec, MetadataError> {
        let key = self.keys.topic(name);
        for _ in 0..CAS_ATTEMPTS {
            let (spec, revision) = self.read_topic(name).await?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([
                    TxnOp::delete(key.clone(), None),
                    TxnOp::delete(self.keys.assignment(name), None),
                ]);
            if self.txn_seen(txn).await?.succeeded() {
                return Ok(spec);
            }
        }
        Err(MetadataError::Contended(name.to_string()))
    }

    async fn set_partition_count(
        &self,
        name: &str,
        count: i32,
        assignments: &BTreeMap<i32, Vec<i32>>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            if count <= spec.partitions {
                return Err(MetadataError::InvalidPartitionCount {
                    topic: spec.name.clone(),
                    current: spec.partitions,
                    requested: count,
                });
            }
            spec.partitions = count;
            spec.replica_assignments.extend(
                assignments
                    .iter()
                    .filter(|(index, _)| **index < count)
                    .map(|(index, replicas)| (*index, replicas.clone())),
            );
            Ok(())
        })
        .await
    }

    async fn set_replica_assignments(
        &self,
        name: &str,
        topic_id: Uuid,
        changes: &BTreeMap<i32, Option<Vec<i32>>>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            if spec.topic_id != topic_id {
                return Err(MetadataError::UnknownTopic(name.to_string()));
            }
            super::reassignment::apply_pins(spec, changes);
            Ok(())
        })
        .await
    }

    async fn request_unclean_election(
        &self,
        topic: &str,
        topic_id: Uuid,
        index: i32,
    ) -> Result<bool, MetadataError> {
        let key = self.keys.assignment(topic);
        for _ in 0..CAS_ATTEMPTS {
            let Some((mut assignment, revision)) = self.read_assignment(topic).await? else {
                return Ok(false);
            };
            if assignment.topic_id != topic_id {
                return Ok(false);
            }
            let Some(partition) = usize::try_from(index)
                .ok()
                .and_then(|i| assignment.partitions.get_mut(i))
            else {
                return Ok(false);
            };
            if partition.leader >= 0 {
                return Ok(false);
            }
            partition.unclean_requested = true;
            if self.put_if_unchanged(&key, revision, &assignment).await? {
                return Ok(true);
            }
        }
        Err(MetadataError::Contended(topic.to_string()))
    }

    async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            spec.configs = configs.clone();
            Ok(())
        })
        .await
    }

    fn broker_configs(&self, broker: Option<i32>) -> BTreeMap<String, String> {
        self.cache
            .read()
            .broker_configs
            .get(&broker)
            .cloned()
            .unwrap_or_default()
    }

    async fn set_broker_configs(
        &self,
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        // The whole level is replaced, as both AlterConfigs APIs compute it: last writer
        // wins, like Kafka's own config writes.
        let key = self.keys.broker_configs(broker);
        let operation = if configs.is_empty() {
            TxnOp::delete(key, None)
        } else {
            let value = serde_json::to_vec(&configs).map_err(|e| corrupt(&key, e))?;
            TxnOp::put(key, value, None)
        };
        self.txn_seen(Txn::new().and_then([operation])).await?;
        Ok(())
    }

    fn scram_credentials(&self) -> UserCredentials {
        self.cache.read().users.clone()
    }

    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<StoredScramCredential> {
        self.cache
            .read()
            .users
            .get(user)?
            .get(mechanism.name())
            .cloned()
    }

    async fn set_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: Option<StoredScramCredential>,
    ) -> Result<(), MetadataError> {
        let key = self.keys.user(mechanism, user);
        let operation = match credential {
            Some(credential) => {
                let value = serde_json::to_vec(&credential).map_err(|e| corrupt(&key, e))?;
                TxnOp::put(key, value, None)
            }
            None => TxnOp::delete(key, None),
        };
        self.txn_seen(Txn::new().and_then([operation])).await?;
        Ok(())
    }

    fn acls(&self) -> Vec<AclBinding> {
        self.cache.read().acls.values().cloned().collect()
    }

    async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        let mut operations = Vec::with_capacity(bindings.len());
        for binding in bindings {
            let key = self.keys.acl(binding);
            let value = serde_json::to_vec(binding).map_err(|e| corrupt(&key, e))?;
            operations.push(TxnOp::put(key, value, None));
        }
        self.write_in_chunks(operations).await
    }

    async fn delete_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        let operations = bindings
            .iter()
            .map(|binding| TxnOp::delete(self.keys.acl(binding), None))
            .collect();
        self.write_in_chunks(operations).await
    }

    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError> {
        let key = self.keys.producer_ids();
        for _ in 0..CAS_ATTEMPTS {
            let (first, unchanged) = self.read_counter(&key, FIRST_PRODUCER_ID).await?;
            let txn = Txn::new().when([unchanged]).and_then([TxnOp::put(
                key.clone(),
                (first + count.max(1)).to_string(),
                None,
            )]);
            if self.txn(txn).await?.succeeded() {
                return Ok(first);
            }
        }
        Err(MetadataError::Contended(key))
    }

    fn subscribe(&self) -> broadcast::Receiver<MetadataEvent> {
        self.events.subscribe()
    }

    fn brokers(&self) -> Vec<BrokerInfo> {
        self.cache.read().brokers.values().cloned().collect()
    }

    fn controller_id(&self) -> Option<i32> {
        self.cache.read().controller.map(|c| c.node_id)
    }

    fn assignment(&self, spec: &TopicSpec) -> Option<TopicAssignment> {
        let cache = self.cache.read();
        let assignment = cache.assignments.get(&spec.name)?;
        (assignment.topic_id == spec.topic_id).then(|| assignment.clone())
    }

    async fn alter_partitions(
        &self,
        topic: &str,
        topic_id: Uuid,
        changes: &[super::store::IsrChange],
    ) -> Result<Vec<Option<PartitionAssignment>>, MetadataError> {
        let key = self.keys.assignment(topic);
        let refused = || vec![None; changes.len()];
        for _ in 0..CAS_ATTEMPTS {
            // A broker whose session lapsed is about to be replaced: it changes nothing.
            if !self.may_lead() {
                return Ok(refused());
            }
            let Some((mut assignment, revision)) = self.read_assignment(topic).await? else {
                return Ok(refused());
            };
            if assignment.topic_id != topic_id {
                return Ok(refused());
            }
            let live = self
                .cache
                .read()
                .brokers
                .keys()
                .copied()
                .collect::<Vec<_>>();
            let mut outcomes = Vec::with_capacity(changes.len());
            for change in changes {
                let slot = usize::try_from(change.index)
                    .ok()
                    .and_then(|i| assignment.partitions.get_mut(i));
                let next = slot.and_then(|current| {
                    let next = super::store::apply_isr_change(
                        current,
                        self.node.node_id,
                        change.leader_epoch,
                        change.partition_epoch,
                        &change.isr,
                        &change.incarnations,
                        |broker| live.contains(&broker),
                    )?;
                    *current = next.clone();
                    Some(next)
                });
                outcomes.push(next);
            }
            if outcomes.iter().all(Option::is_none) {
                return Ok(outcomes);
            }
            if self.put_if_unchanged(&key, revision, &assignment).await? {
                return Ok(outcomes);
            }
        }
        Err(MetadataError::Contended(topic.to_string()))
    }

    fn may_lead(&self) -> bool {
        monotonic_ms() < self.alive_until_ms.load(Ordering::Acquire)
    }

    fn incarnation(&self) -> Option<i64> {
        Some(self.incarnation.load(Ordering::Acquire))
    }

    async fn begin_shutdown(&self) {
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 {
            return;
        }
        let key = self.keys.broker(self.node.node_id);
        let mut node = self.node.clone();
        node.shutting_down = true;
        let Ok(value) = serde_json::to_vec(&node) else {
            return;
        };
        // Only over this broker's own registration (same lease), never a successor's.
        let txn = Txn::new()
            .when([Compare::lease(key.clone(), CompareOp::Equal, lease)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        match self.txn_seen(txn).await {
            Ok(response) if response.succeeded() => {
                tracing::info!("controlled shutdown: leaderships moving away")
            }
            Ok(_) => tracing::warn!("controlled shutdown: registration changed; leaving directly"),
            Err(error) => tracing::warn!(%error, "controlled shutdown could not be announced"),
        }
    }

    async fn leave(&self) {
        let lease = self.lease.swap(0, Ordering::AcqRel);
        self.alive_until_ms.store(0, Ordering::Release);
        if lease != 0 {
            match self.client.clone().lease_revoke(lease).await {
                Ok(_) => tracing::info!("left the cluster"),
                Err(error) => {
                    tracing::warn!(%error, "could not revoke the lease; it will expire")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_classified_by_their_place_under_the_prefix() {
        let prefix = "/tern/c/";
        assert!(matches!(
            classify(prefix, "/tern/c/brokers/7"),
            Entry::Broker(7)
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/controller"),
            Entry::Controller
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/topics/a.b"),
            Entry::Topic("a.b")
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/assignments/x"),
            Entry::Assignment("x")
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/brokers/x"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/other/controller"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/counters/topic_id"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/<default>"),
            Entry::BrokerConfigs(None)
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/2"),
            Entry::BrokerConfigs(Some(2))
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/x"),
            Entry::Other
        ));
    }
}
