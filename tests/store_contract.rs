//! The metadata stores' one contract: every check below runs against the embedded
//! store (a temp dir) and against the etcd store on a real etcd (its binary started on
//! free loopback ports with a temp data dir, with the watch, session and controller
//! tasks a broker runs). Each check names what a store must do; the harness says only
//! where the two legitimately differ (`Harness::isr_writable`).
//!
//! The etcd binary is `$TERN_ETCD_BIN`, else `etcd` on the PATH (`make deps` installs
//! it). Without one the etcd half prints that it is skipped, unless
//! `TERN_ETCD_REQUIRED` is set (as `make unit` does): then it fails.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tern::cluster::etcd::EtcdConfig;
use tern::cluster::{
    BrokerInfo, EmbeddedStore, EtcdStore, IsrChange, MetadataError, MetadataEvent, MetadataStore,
    NewTopic, TopicSpec,
};
use tern::security::acl::{AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType};
use tern::security::credentials::{ScramMechanism, StoredScramCredential};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

/// How long a change may take to show (an event, the controller's placement).
const SETTLE: Duration = Duration::from_secs(15);
const NODE_ID: i32 = 1;
const CLUSTER_ID: &str = "contract";

fn node() -> BrokerInfo {
    BrokerInfo {
        node_id: NODE_ID,
        host: "127.0.0.1".into(),
        port: 19092,
        rack: None,
        weight: 1,
        peer_address: None,
        shutting_down: false,
        endpoints: Vec::new(),
    }
}

/// One store under test, and what keeps it running.
struct Harness {
    store: Arc<dyn MetadataStore>,
    /// Whether a leader's ISR change can be written: one node is the whole ISR of
    /// everything, so the embedded store refuses every change (stale or not).
    isr_writable: bool,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
    etcd: Option<TestEtcd>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn embedded() -> Harness {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = EmbeddedStore::open(dir.path(), Some(CLUSTER_ID), node()).expect("store opens");
    Harness {
        store: Arc::new(store),
        isr_writable: false,
        shutdown: CancellationToken::new(),
        _dir: dir,
        etcd: None,
    }
}

/// The etcd store on a fresh etcd, with a broker's background tasks; `None` (after
/// saying so) when there is no etcd binary and none is required.
async fn etcd() -> Option<Harness> {
    etcd_with_watch(CancellationToken::new()).await
}

/// [`etcd`], its watch (and so its cache) also stopped by `stop_watch`.
async fn etcd_with_watch(stop_watch: CancellationToken) -> Option<Harness> {
    let etcd = TestEtcd::start()?;
    let config = EtcdConfig {
        endpoints: vec![etcd.endpoint()],
        lease_ttl: Duration::from_secs(5),
    };
    let store = Arc::new(
        EtcdStore::connect(&config, CLUSTER_ID, node())
            .await
            .expect("the store connects to etcd"),
    );
    let shutdown = CancellationToken::new();
    let (watching, session) = (Arc::clone(&store), Arc::clone(&store));
    let session_shutdown = shutdown.clone();
    let (all, watch_shutdown) = (shutdown.clone(), CancellationToken::new());
    let stopped = watch_shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = all.cancelled() => {}
            _ = stop_watch.cancelled() => {}
        }
        stopped.cancel();
    });
    tokio::spawn(async move { watching.run_watch(watch_shutdown).await });
    tokio::spawn(async move { session.run_session(session_shutdown).await });
    tokio::spawn(tern::cluster::controller::run(
        Arc::clone(&store),
        shutdown.clone(),
    ));
    Some(Harness {
        store,
        isr_writable: true,
        shutdown,
        _dir: tempfile::tempdir().expect("a temp dir"),
        etcd: Some(etcd),
    })
}

/// A real etcd process on two free loopback ports, its data in a temp dir; killed
/// (this process's own child, by handle) on drop.
struct TestEtcd {
    child: Child,
    client_port: u16,
    dir: tempfile::TempDir,
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `$TERN_ETCD_BIN`, else `etcd` on the PATH.
fn etcd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TERN_ETCD_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "TERN_ETCD_BIN={} is not a file",
            path.display()
        );
        return Some(path);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

impl TestEtcd {
    fn start() -> Option<Self> {
        let Some(binary) = etcd_binary() else {
            assert!(
                std::env::var_os("TERN_ETCD_REQUIRED").is_none(),
                "TERN_ETCD_REQUIRED is set but there is no etcd binary (TERN_ETCD_BIN or etcd on the PATH; `make deps` installs it)"
            );
            // Past the test harness's capture (it takes only `eprintln!`), so that a
            // skip shows in a passing run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the etcd half of the store contract: no etcd binary (set TERN_ETCD_BIN or put etcd on the PATH; `make deps` installs it)"
            );
            return None;
        };
        // A port found free may be taken before etcd binds it: try again on others.
        for _ in 0..3 {
            if let Some(etcd) = Self::try_start(&binary) {
                return Some(etcd);
            }
        }
        panic!("etcd ({}) did not start", binary.display());
    }

    fn try_start(binary: &PathBuf) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (client_port, peer_port) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("a log file");
        let child = Command::new(binary)
            .args(["--name", "tern-test", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("tern-test={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        let mut etcd = Self {
            child,
            client_port,
            dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                eprintln!("etcd exited at start ({status}):\n{}", etcd.log());
                return None;
            }
            if TcpStream::connect(("127.0.0.1", client_port)).is_ok() {
                return Some(etcd);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("etcd did not listen in time:\n{}", etcd.log());
        None
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.to_string(),
        partitions,
        replication_factor: 1,
        configs: BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]),
        assignments: BTreeMap::new(),
    }
}

/// Waits for an event `wanted` accepts, passing over others (a placement, a resync).
async fn expect_event(
    events: &mut broadcast::Receiver<MetadataEvent>,
    what: &str,
    wanted: impl Fn(&MetadataEvent) -> bool,
) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(event)) if wanted(&event) => return,
            Ok(Ok(_) | Err(RecvError::Lagged(_))) => continue,
            Ok(Err(RecvError::Closed)) => panic!("events closed before {what}"),
            Err(_) => panic!("no {what} event within {SETTLE:?}"),
        }
    }
}

/// Polls `probe` until it returns `Some`, for at most `SETTLE`.
async fn eventually<T>(what: &str, probe: impl Fn() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The topic's placement once every partition has a leader.
async fn placed(store: &dyn MetadataStore, spec: &TopicSpec) -> tern::cluster::TopicAssignment {
    eventually(&format!("placement of {}", spec.name), || {
        store.assignment(spec).filter(|a| {
            a.partitions.len() == spec.partitions as usize
                && a.partitions.iter().all(|p| p.leader >= 0)
        })
    })
    .await
}

async fn create_topic_then_refuse_a_duplicate(h: &Harness) {
    let store = &*h.store;
    let mut events = store.subscribe();
    let spec = store
        .create_topic(new_topic("orders", 3))
        .await
        .expect("created");
    assert_eq!(
        (spec.name.as_str(), spec.partitions, spec.replication_factor),
        ("orders", 3, 1)
    );
    assert_eq!(spec.configs["cleanup.policy"], "compact");
    expect_event(&mut events, "TopicCreated", |e| {
        *e == MetadataEvent::TopicCreated(spec.clone())
    })
    .await;
    let again = store.create_topic(new_topic("orders", 5)).await;
    assert!(
        matches!(again, Err(MetadataError::TopicExists(ref name)) if name == "orders"),
        "{again:?}"
    );
    assert_eq!(
        store.topic("orders").await.as_ref(),
        Some(&spec),
        "the first stays"
    );
}

async fn topics_are_listed_and_found_by_name_and_id(h: &Harness) {
    let store = &*h.store;
    let b = store.create_topic(new_topic("b", 1)).await.expect("b");
    let a = store.create_topic(new_topic("a", 2)).await.expect("a");
    assert_eq!(store.topics().await, vec![a.clone(), b.clone()], "by name");
    assert_eq!(store.topic("a").await.as_ref(), Some(&a));
    assert_eq!(store.topic_by_id(b.topic_id).await.as_ref(), Some(&b));
    assert_eq!(store.topic("missing").await, None);
    assert_eq!(store.topic_by_id(uuid::Uuid::new_v4()).await, None);
    assert_ne!(a.topic_id, b.topic_id);
    assert_ne!(a.numeric_id, b.numeric_id);
    assert_eq!(store.cluster_id(), CLUSTER_ID);
}

async fn a_deleted_topic_is_gone_with_its_placement(h: &Harness) {
    let store = &*h.store;
    let spec = store
        .create_topic(new_topic("gone", 2))
        .await
        .expect("created");
    placed(store, &spec).await;
    let mut events = store.subscribe();
    assert_eq!(store.delete_topic("gone").await.expect("deleted"), spec);
    expect_event(&mut events, "TopicDeleted", |e| {
        *e == MetadataEvent::TopicDeleted(spec.clone())
    })
    .await;
    assert_eq!(store.topic("gone").await, None);
    assert_eq!(store.topic_by_id(spec.topic_id).await, None);
    assert!(store.topics().await.is_empty());
    assert_eq!(store.assignment(&spec), None);
    let again = store.delete_topic("gone").await;
    assert!(
        matches!(again, Err(MetadataError::UnknownTopic(_))),
        "{again:?}"
    );
    // A topic re-created under the name is a new incarnation.
    let reborn = store
        .create_topic(new_topic("gone", 1))
        .await
        .expect("again");
    assert_ne!(reborn.topic_id, spec.topic_id);
    assert_eq!(store.assignment(&spec), None, "not the old incarnation's");
}

async fn every_partition_is_placed_with_a_leader_epoch(h: &Harness) {
    let store = &*h.store;
    let spec = store
        .create_topic(new_topic("placed", 3))
        .await
        .expect("created");
    let assignment = placed(store, &spec).await;
    assert_eq!(assignment.topic_id, spec.topic_id);
    for (index, p) in assignment.partitions.iter().enumerate() {
        assert_eq!(p.leader, NODE_ID, "partition {index}");
        assert_eq!(p.replicas, vec![NODE_ID]);
        assert_eq!(p.in_sync(), vec![NODE_ID]);
        assert!(p.leader_epoch >= 0);
        assert_eq!(store.leader_of(&spec, index as i32), Some(NODE_ID));
    }
    assert_eq!(store.leader_of(&spec, 3), None, "no such partition");
    // A partition with a leader needs no unclean election.
    assert!(!store
        .request_unclean_election("placed", spec.topic_id, 0)
        .await
        .expect("asked"));
    // Growing the topic places the new partitions and keeps the old ones' leaders
    // and leader epochs (no leader moved).
    let mut events = store.subscribe();
    let grown = store
        .set_partition_count(
            "placed",
            5,
            &BTreeMap::from([(4, vec![NODE_ID]), (-1, vec![NODE_ID]), (5, vec![NODE_ID])]),
        )
        .await
        .expect("grown");
    assert_eq!(grown.partitions, 5);
    assert_eq!(grown.pinned(4), Some(&[NODE_ID][..]));
    assert_eq!(grown.pinned(3), None);
    assert_eq!(
        (grown.pinned(-1), grown.pinned(5)),
        (None, None),
        "pins name only partitions the topic has"
    );
    expect_event(&mut events, "TopicChanged", |e| {
        *e == MetadataEvent::TopicChanged(grown.clone())
    })
    .await;
    let after = placed(store, &grown).await;
    for (before, now) in assignment.partitions.iter().zip(&after.partitions) {
        assert_eq!(
            (now.leader, now.leader_epoch),
            (before.leader, before.leader_epoch)
        );
    }
    let shrink = store
        .set_partition_count("placed", 2, &BTreeMap::new())
        .await;
    assert!(
        matches!(shrink, Err(MetadataError::InvalidPartitionCount { .. })),
        "{shrink:?}"
    );
    let unknown = store
        .set_partition_count("missing", 9, &BTreeMap::new())
        .await;
    assert!(
        matches!(unknown, Err(MetadataError::UnknownTopic(_))),
        "{unknown:?}"
    );
}

async fn replica_pins_are_set_and_cleared_on_one_incarnation(h: &Harness) {
    let store = &*h.store;
    let spec = store
        .create_topic(new_topic("pinned", 2))
        .await
        .expect("created");
    let mut events = store.subscribe();
    let pin = BTreeMap::from([(0, Some(vec![NODE_ID])), (9, Some(vec![NODE_ID]))]);
    let pinned = store
        .set_replica_assignments("pinned", spec.topic_id, &pin)
        .await
        .expect("pinned");
    assert_eq!(pinned.pinned(0), Some(&[NODE_ID][..]));
    assert_eq!(pinned.pinned(9), None, "no such partition");
    expect_event(&mut events, "TopicChanged", |e| {
        *e == MetadataEvent::TopicChanged(pinned.clone())
    })
    .await;
    let unpinned = store
        .set_replica_assignments("pinned", spec.topic_id, &BTreeMap::from([(0, None)]))
        .await
        .expect("unpinned");
    assert!(unpinned.replica_assignments.is_empty());
    assert_eq!(store.topic("pinned").await, Some(unpinned));
    let other = store
        .set_replica_assignments("pinned", uuid::Uuid::new_v4(), &pin)
        .await;
    assert!(
        matches!(other, Err(MetadataError::UnknownTopic(_))),
        "another incarnation's id: {other:?}"
    );
}

async fn a_stale_isr_change_is_refused(h: &Harness) {
    let store = &*h.store;
    let spec = store
        .create_topic(new_topic("isr", 2))
        .await
        .expect("created");
    let p = placed(store, &spec).await.partitions[0].clone();
    let change = |leader_epoch, partition_epoch| IsrChange {
        index: 0,
        leader_epoch,
        partition_epoch,
        isr: vec![NODE_ID],
        incarnations: Default::default(),
    };
    let current = change(p.leader_epoch, p.partition_epoch);
    let outcome = store
        .alter_partitions("isr", spec.topic_id, std::slice::from_ref(&current))
        .await
        .expect("answered");
    if h.isr_writable {
        let written = outcome[0].clone().expect("a current change is written");
        assert_eq!(written.partition_epoch, p.partition_epoch + 1);
        assert_eq!(written.isr, vec![NODE_ID]);
        let seen = store.assignment(&spec).expect("placed").partitions[0].clone();
        assert_eq!(seen, written, "read-your-writes");
    } else {
        assert_eq!(outcome, vec![None]);
    }
    // The same change again is now based on an old partition epoch; the others are
    // based on a leader epoch that is not the partition's.
    for stale in [
        current,
        change(p.leader_epoch + 1, p.partition_epoch),
        change(p.leader_epoch - 1, p.partition_epoch),
    ] {
        let outcome = store
            .alter_partitions("isr", spec.topic_id, std::slice::from_ref(&stale))
            .await
            .expect("answered");
        assert_eq!(outcome, vec![None], "{stale:?} is refused");
    }
    // Another incarnation's id, or a partition that does not exist: refused too.
    let other = store
        .alter_partitions("isr", uuid::Uuid::new_v4(), &[change(p.leader_epoch, 0)])
        .await
        .expect("answered");
    assert_eq!(other, vec![None]);
    let missing = IsrChange {
        index: 7,
        ..change(p.leader_epoch, p.partition_epoch)
    };
    let outcome = store
        .alter_partitions("isr", spec.topic_id, &[missing])
        .await
        .expect("answered");
    assert_eq!(outcome, vec![None]);
}

async fn producer_ids_never_repeat(h: &Harness) {
    let store = &h.store;
    let mut ranges = Vec::new();
    for count in [10, 1, 0, 5] {
        let first = store.allocate_producer_ids(count).await.expect("allocated");
        ranges.push((first, count.max(1)));
    }
    // Concurrent callers get disjoint blocks too.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let store = Arc::clone(store);
            tokio::spawn(async move { store.allocate_producer_ids(100).await })
        })
        .collect();
    for task in tasks {
        let first = task.await.expect("joined").expect("allocated");
        ranges.push((first, 100));
    }
    assert!(ranges.iter().all(|&(first, _)| first >= 0));
    ranges.sort();
    for pair in ranges.windows(2) {
        let ((a, count), (b, _)) = (pair[0], pair[1]);
        assert!(a + count <= b, "blocks overlap: {ranges:?}");
    }
}

async fn dynamic_configs_are_set_read_and_deleted(h: &Harness) {
    let store = &*h.store;
    let mut events = store.subscribe();
    let default = BTreeMap::from([("log.retention.ms".to_string(), "60000".to_string())]);
    store
        .set_broker_configs(None, default.clone())
        .await
        .expect("set");
    expect_event(&mut events, "BrokerConfigsChanged(None)", |e| {
        *e == MetadataEvent::BrokerConfigsChanged(None)
    })
    .await;
    assert_eq!(store.broker_configs(None), default);
    let mine = BTreeMap::from([("log.segment.bytes".to_string(), "1048576".to_string())]);
    store
        .set_broker_configs(Some(NODE_ID), mine.clone())
        .await
        .expect("set");
    expect_event(&mut events, "BrokerConfigsChanged(Some)", |e| {
        *e == MetadataEvent::BrokerConfigsChanged(Some(NODE_ID))
    })
    .await;
    assert_eq!(store.broker_configs(Some(NODE_ID)), mine);
    assert_eq!(store.broker_configs(None), default, "levels are separate");
    assert!(store.broker_configs(Some(NODE_ID + 1)).is_empty());
    store
        .set_broker_configs(None, BTreeMap::new())
        .await
        .expect("deleted");
    expect_event(&mut events, "BrokerConfigsChanged(None)", |e| {
        *e == MetadataEvent::BrokerConfigsChanged(None)
    })
    .await;
    assert!(store.broker_configs(None).is_empty());
    assert_eq!(store.broker_configs(Some(NODE_ID)), mine);
    // A topic's own configs: replaced whole, announced as a change of the topic.
    store
        .create_topic(new_topic("configured", 1))
        .await
        .expect("created");
    let configs = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
    let changed = store
        .set_topic_configs("configured", configs.clone())
        .await
        .expect("set");
    assert_eq!(changed.configs, configs);
    expect_event(&mut events, "TopicChanged", |e| {
        *e == MetadataEvent::TopicChanged(changed.clone())
    })
    .await;
    assert_eq!(
        store.topic("configured").await.map(|t| t.configs),
        Some(configs)
    );
    let unknown = store.set_topic_configs("missing", BTreeMap::new()).await;
    assert!(
        matches!(unknown, Err(MetadataError::UnknownTopic(_))),
        "{unknown:?}"
    );
}

async fn group_configs_are_kept_per_group_and_deleted(h: &Harness) {
    let store = &*h.store;
    let orders = BTreeMap::from([
        (
            "consumer.heartbeat.interval.ms".to_string(),
            "2000".to_string(),
        ),
        (
            "share.auto.offset.reset".to_string(),
            "earliest".to_string(),
        ),
    ]);
    // A group id is any string: one with a slash and a percent sign keeps its own key.
    let odd = BTreeMap::from([(
        "share.record.lock.duration.ms".to_string(),
        "15000".to_string(),
    )]);
    store
        .set_group_configs("orders", orders.clone())
        .await
        .expect("set");
    store
        .set_group_configs("a/b%2F", odd.clone())
        .await
        .expect("set");
    assert_eq!(store.group_configs("orders"), orders);
    assert_eq!(store.group_configs("a/b%2F"), odd);
    assert!(store.group_configs("a").is_empty());
    assert!(store.group_configs("a/b/").is_empty());
    store
        .set_group_configs("orders", BTreeMap::new())
        .await
        .expect("deleted");
    assert!(store.group_configs("orders").is_empty());
    assert_eq!(store.group_configs("a/b%2F"), odd, "groups are separate");
}

fn binding(resource: &str, principal: &str) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: resource.to_string(),
        pattern_type: PatternType::Literal,
        principal: principal.to_string(),
        host: "*".to_string(),
        operation: AclOperation::Read,
        permission: AclPermissionType::Allow,
    }
}

async fn acls_are_a_set_created_listed_and_deleted(h: &Harness) {
    let store = &*h.store;
    let mut events = store.subscribe();
    let (a, b) = (binding("a", "User:alice"), binding("b/c", "User:bob"));
    store
        .create_acls(&[b.clone(), a.clone(), b.clone()])
        .await
        .expect("created");
    expect_event(&mut events, "AclsChanged", |e| {
        *e == MetadataEvent::AclsChanged
    })
    .await;
    assert_eq!(store.acls(), vec![a.clone(), b.clone()], "a set, in order");
    store
        .create_acls(std::slice::from_ref(&a))
        .await
        .expect("again");
    assert_eq!(store.acls(), vec![a.clone(), b.clone()], "not repeated");
    store
        .delete_acls(&[a.clone(), binding("zz", "User:nobody"), a.clone()])
        .await
        .expect("deleted");
    expect_event(&mut events, "AclsChanged", |e| {
        *e == MetadataEvent::AclsChanged
    })
    .await;
    assert_eq!(store.acls(), vec![b.clone()]);
    store.delete_acls(&[b]).await.expect("deleted");
    assert!(store.acls().is_empty());
}

fn credential(mechanism: ScramMechanism, salt: &str) -> StoredScramCredential {
    StoredScramCredential {
        mechanism,
        salt: salt.to_string(),
        stored_key: "c3RvcmVk".to_string(),
        server_key: "c2VydmVy".to_string(),
        iterations: 4096,
    }
}

async fn scram_credentials_are_set_and_deleted(h: &Harness) {
    use ScramMechanism::{ScramSha256, ScramSha512};
    let store = &*h.store;
    // A name with a `/` and a space must stay one user.
    let user = "alice/ops team";
    let sha256 = credential(ScramSha256, "c2FsdDE=");
    let sha512 = credential(ScramSha512, "c2FsdDI=");
    store
        .set_scram_credential(user, ScramSha256, Some(sha256.clone()))
        .await
        .expect("set");
    assert_eq!(
        store.scram_credential(user, ScramSha256).as_ref(),
        Some(&sha256)
    );
    assert_eq!(store.scram_credential(user, ScramSha512), None);
    assert_eq!(store.scram_credential("alice", ScramSha256), None);
    store
        .set_scram_credential(user, ScramSha512, Some(sha512.clone()))
        .await
        .expect("set");
    let all = store.scram_credentials();
    assert_eq!(all.keys().collect::<Vec<_>>(), vec![user]);
    assert_eq!(all[user].len(), 2);
    let replaced = credential(ScramSha256, "c2FsdDM=");
    store
        .set_scram_credential(user, ScramSha256, Some(replaced.clone()))
        .await
        .expect("replaced");
    assert_eq!(store.scram_credential(user, ScramSha256), Some(replaced));
    store
        .set_scram_credential(user, ScramSha256, None)
        .await
        .expect("deleted");
    assert_eq!(store.scram_credential(user, ScramSha256), None);
    assert_eq!(store.scram_credential(user, ScramSha512), Some(sha512));
    store
        .set_scram_credential(user, ScramSha512, None)
        .await
        .expect("deleted");
    assert!(
        store.scram_credentials().is_empty(),
        "a user with none is gone"
    );
}

async fn this_broker_is_registered_and_a_controller_is_elected(h: &Harness) {
    let store = &*h.store;
    assert_eq!(store.brokers(), vec![node()]);
    eventually("a controller", || store.controller_id()).await;
    assert_eq!(store.controller_id(), Some(NODE_ID), "the only broker");
    assert!(store.may_lead());
}

/// etcd only (the embedded store has one broker). An ISR expansion admits a broker in
/// the run its leader saw catch up, judged on the registrations in etcd: with the
/// watch stopped, the cache still holds broker 2's previous run after it restarts,
/// and an admission with that run's incarnation must still be refused.
#[tokio::test]
async fn an_isr_admission_is_judged_on_the_registration_in_etcd_not_the_cache() {
    let stop_watch = CancellationToken::new();
    let Some(h) = etcd_with_watch(stop_watch.clone()).await else {
        return;
    };
    let store = &*h.store;
    let endpoint = h.etcd.as_ref().expect("an etcd").endpoint();
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .expect("a client connects");
    let key = format!("/tern/{CLUSTER_ID}/brokers/2");
    let broker_2 = serde_json::to_vec(&BrokerInfo {
        node_id: 2,
        port: 19093,
        ..node()
    })
    .expect("serializes");
    let first_run = client
        .put(key.as_str(), broker_2.clone(), None)
        .await
        .expect("registered")
        .header()
        .expect("a header")
        .revision();
    eventually("broker 2 in the cache", || {
        store.brokers().iter().any(|b| b.node_id == 2).then_some(())
    })
    .await;
    let spec = store
        .create_topic(NewTopic {
            name: "admit".into(),
            partitions: 1,
            replication_factor: 2,
            configs: BTreeMap::new(),
            assignments: BTreeMap::from([(0, vec![NODE_ID, 2])]),
        })
        .await
        .expect("created");
    let p = placed(store, &spec).await.partitions[0].clone();
    assert_eq!((p.leader, p.replicas.clone()), (NODE_ID, vec![NODE_ID, 2]));
    let change = |partition_epoch, isr: Vec<i32>, incarnation: Option<i64>| IsrChange {
        index: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch,
        isr,
        incarnations: incarnation.map(|i| (2, i)).into_iter().collect(),
    };
    let alter = |change: IsrChange| async move {
        store
            .alter_partitions("admit", spec.topic_id, &[change])
            .await
            .expect("answered")
            .remove(0)
    };
    let alone = alter(change(p.partition_epoch, vec![NODE_ID], None))
        .await
        .expect("the shrink is written");
    stop_watch.cancel();
    // Broker 2 restarts (its registration is created anew) while the cache still
    // holds its first run.
    client.delete(key.as_str(), None).await.expect("deleted");
    let second_run = client
        .put(key.as_str(), broker_2, None)
        .await
        .expect("registered again")
        .header()
        .expect("a header")
        .revision();
    assert!(second_run > first_run);
    let previous = change(alone.partition_epoch, vec![NODE_ID, 2], Some(first_run));
    assert_eq!(
        alter(previous).await,
        None,
        "a fetch of broker 2's previous run admits nothing"
    );
    let current = change(alone.partition_epoch, vec![NODE_ID, 2], Some(second_run));
    let admitted = alter(current).await.expect("the current run is admitted");
    assert_eq!(admitted.isr, vec![NODE_ID, 2]);
    assert_eq!(admitted.isr_incarnations.get(&2), Some(&second_run));
}

/// Runs each check on each store, as `embedded::<check>` and `etcd::<check>`.
macro_rules! contract {
    ($($check:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $check() {
                    super::$check(&super::embedded()).await
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test]
                async fn $check() {
                    if let Some(harness) = super::etcd().await {
                        super::$check(&harness).await
                    }
                }
            )*
        }
    };
}

contract!(
    create_topic_then_refuse_a_duplicate,
    topics_are_listed_and_found_by_name_and_id,
    a_deleted_topic_is_gone_with_its_placement,
    every_partition_is_placed_with_a_leader_epoch,
    replica_pins_are_set_and_cleared_on_one_incarnation,
    a_stale_isr_change_is_refused,
    producer_ids_never_repeat,
    dynamic_configs_are_set_read_and_deleted,
    group_configs_are_kept_per_group_and_deleted,
    acls_are_a_set_created_listed_and_deleted,
    scram_credentials_are_set_and_deleted,
    this_broker_is_registered_and_a_controller_is_elected,
);
