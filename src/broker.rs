//! Wires the subsystems in dependency order, runs the background tasks, and shuts
//! everything down cleanly: stop accepting, answer in-flight requests, flush and seal
//! every log, write the clean-shutdown marker.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::context::Services;
use crate::client::ClientSecurity;
use crate::cluster::peers::Peers;
use crate::cluster::ProducerIdAllocator;
use crate::cluster::{
    BrokerEndpoint, BrokerInfo, EmbeddedStore, EtcdStore, MetadataError, MetadataEvent,
    MetadataStore,
};
use crate::config::{Config, ServerConfig};
use crate::group::coordinator::GroupCoordinator;
use crate::limits;
use crate::model::OFFSETS_TOPIC;
use crate::replication::{LeaderLease, ReplicaManager};
use crate::security::listener::SecurityProtocol;
use crate::security::tls::{ReloadingTls, TlsFiles};
use crate::server::{run_listener, ConnectionLimits, KafkaListener};
use crate::topics::{TopicError, TopicService};

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("data directory {0} is in use by another tern process")]
    DataDirLocked(std::path::PathBuf),
    #[error("opening the data directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("binding the Kafka listener {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::security::tls::TlsError),
    #[error("the inter-broker listener is not among the listeners")]
    NoInterBrokerListener,
    #[error("loading topics: {0}")]
    Topics(#[from] TopicError),
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    services: Arc<Services>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    background: TaskTracker,
    local_addr: SocketAddr,
    metrics_addr: SocketAddr,
    _lock: File,
}

/// The TLS files of one listener. As in Kafka (KIP-684), client certificates are
/// required on SSL listeners only: a SASL_SSL client authenticates with SASL.
fn listener_tls(files: &TlsFiles, protocol: SecurityProtocol) -> TlsFiles {
    let mut files = files.clone();
    if protocol != SecurityProtocol::Ssl {
        files.client_ca = None;
    }
    files
}

/// How this broker reaches its peers' inter-broker listener: TLS trusting the peer CA
/// (presenting its own certificate on an SSL listener, which requires one), and its
/// SASL login on a SASL listener.
fn peer_security(server: &ServerConfig) -> Result<ClientSecurity, BrokerError> {
    let security = &server.security;
    let tls = match (server.inter_broker.uses_tls(), &security.peer_ca) {
        (true, Some(ca)) => {
            let identity = security
                .tls
                .as_ref()
                .filter(|_| server.inter_broker == SecurityProtocol::Ssl)
                .map(|files| (files.cert.as_path(), files.key.as_path()));
            Some(crate::security::tls::client_config(ca, identity)?)
        }
        _ => None,
    };
    Ok(ClientSecurity {
        tls,
        sasl: security.inter_broker_login.clone(),
    })
}

/// The broker's group settings, with each group's own configs from the store over them.
fn group_configs(
    config: &Config,
    store: Arc<dyn MetadataStore>,
) -> crate::group::config::GroupConfigs {
    use crate::group::config::{GroupConfigs, GroupSettings, StoredGroupConfigs};
    let groups = &config.groups.coordinator;
    GroupConfigs::fixed(
        GroupSettings {
            consumer_session_timeout_ms: groups.consumer.session_timeout_ms,
            consumer_heartbeat_interval_ms: groups.consumer.heartbeat_interval_ms,
            share_session_timeout_ms: groups.share.session_timeout_ms,
            share_heartbeat_interval_ms: groups.share.heartbeat_interval_ms,
            share_record_lock_duration_ms: config.shares.partition.lock_duration_ms,
            share_auto_offset_reset: config.shares.auto_offset_reset,
            share_isolation_level: crate::model::Isolation::ReadUncommitted,
        },
        (
            groups.limits.min_session_timeout_ms,
            groups.limits.max_session_timeout_ms,
        ),
    )
    .with_source(Arc::new(StoredGroupConfigs(store)))
}

/// Takes an exclusive `flock` on `<data-dir>/.lock` so two brokers never share logs.
fn lock_data_dir(config: &Config) -> Result<File, BrokerError> {
    std::fs::create_dir_all(&config.data_dir)?;
    let file = File::create(config.data_dir.join(".lock"))?;
    let rc = try_flock(&file);
    if rc != 0 {
        return Err(BrokerError::DataDirLocked(config.data_dir.clone()));
    }
    Ok(file)
}

#[allow(unsafe_code)]
fn try_flock(file: &File) -> i32 {
    // SAFETY: `flock` takes a descriptor we own and touches no memory.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }
}

/// Raises the soft open-file limit to the hard one: every partition keeps its segment
/// and index files open, and a soft limit of 1024 runs out at a few hundred partitions.
#[allow(unsafe_code)]
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed to them.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
            && limit.rlim_cur < limit.rlim_max
            && {
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
            }
    };
    if raised {
        tracing::debug!(open_files = limit.rlim_cur, "raised the open-file limit");
    }
}

impl Broker {
    pub async fn start(config: Config) -> Result<Self, BrokerError> {
        let lock = lock_data_dir(&config)?;
        raise_open_file_limit();
        crate::metrics::install();
        let mut server = config.server.clone();
        let mut tls_sources = Vec::new();
        let mut listeners = Vec::with_capacity(server.listeners.len());
        for declared in &mut server.listeners {
            let socket =
                TcpListener::bind(declared.bind)
                    .await
                    .map_err(|source| BrokerError::Bind {
                        address: declared.bind,
                        source,
                    })?;
            let bound = socket.local_addr()?;
            declared.bind = bound;
            if declared.advertised_port == 0 {
                declared.advertised_port = i32::from(bound.port());
            }
            let tls = match &server.security.tls {
                Some(files) if declared.protocol.uses_tls() => {
                    let source = ReloadingTls::load(listener_tls(files, declared.protocol), &[])?;
                    tls_sources.push(Arc::clone(&source));
                    Some(source)
                }
                _ => None,
            };
            listeners.push(KafkaListener {
                socket,
                protocol: declared.protocol,
                tls,
            });
        }
        let primary = server
            .listeners
            .iter()
            .find(|l| l.protocol == server.inter_broker)
            .cloned()
            .ok_or(BrokerError::NoInterBrokerListener)?;
        let local_addr = primary.bind;
        server.listen = local_addr;
        let (metrics_address, metrics_explicit) = config.metrics;
        let metrics_listener =
            crate::metrics::bind_side_listener(metrics_address, metrics_explicit, "metrics")
                .await
                .map_err(|source| BrokerError::Bind {
                    address: metrics_address,
                    source,
                })?;
        let metrics_addr = metrics_listener.local_addr()?;
        let http_listener = match config.http {
            Some((address, explicit)) => Some(
                crate::metrics::bind_side_listener(address, explicit, "HTTP API")
                    .await
                    .map_err(|source| BrokerError::Bind { address, source })?,
            ),
            None => None,
        };
        let http_addr = match &http_listener {
            Some(listener) => listener.local_addr()?.to_string(),
            None => "off".to_string(),
        };
        if server.advertised_port == 0 {
            server.advertised_port = primary.advertised_port;
        }
        let endpoints = server
            .listeners
            .iter()
            .map(|l| BrokerEndpoint {
                listener: l.protocol.name().to_string(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .collect();
        let node = BrokerInfo {
            endpoints,
            node_id: config.node_id,
            host: server.advertised_host.clone(),
            port: server.advertised_port,
            rack: server.rack.clone(),
            weight: config.ring_weight,
            peer_address: server.peer_address.clone(),
            shutting_down: false,
        };
        let shutdown = CancellationToken::new();
        let background = TaskTracker::new();
        let store = open_store(&config, node.clone(), &background, &shutdown).await?;
        // Subscribed before anything is loaded, so no change slips between the two.
        let events = store.subscribe();
        let defaults = Arc::new(config.topics.defaults.clone());
        let (replicas, isr_changes) =
            ReplicaManager::new(&config.data_dir, config.node_id, defaults, {
                let store = Arc::clone(&store);
                LeaderLease::new(move || store.may_lead())
            })?;
        let replicas = Arc::new(replicas);
        let topics = TopicService::new(
            Arc::clone(&store),
            Arc::clone(&replicas),
            config.topics.clone(),
            config.node_id,
        );
        // Dynamic broker configs first, so that every log opens with them in force.
        topics.apply_broker_configs();
        let loaded = topics.load_all().await?;
        let offsets_topic = topics
            .ensure_internal(
                OFFSETS_TOPIC,
                config.groups.offsets_topic_partitions,
                config.groups.offsets_topic_replication_factor,
            )
            .await?;
        let peer_security = peer_security(&server)?;
        let group_configs = group_configs(&config, Arc::clone(&store));
        let groups = Arc::new(
            GroupCoordinator::new(offsets_topic.spec.partitions, config.groups.coordinator)
                .with_session(Arc::clone(&store))
                .with_group_configs(group_configs.clone()),
        );
        groups.follow_leadership(&offsets_topic);
        let producer_ids = Arc::new(ProducerIdAllocator::new(Arc::clone(&store)));
        let markers = Arc::new(crate::txn::MarkerWriter::new(
            config.node_id,
            Arc::clone(&replicas),
            Arc::clone(&store),
            Peers::new(Arc::clone(&store), peer_security.clone()),
        ));
        {
            let groups = Arc::clone(&groups);
            markers.on_offsets_marker(Box::new(move |index, producer_id, commit| {
                groups.complete_transaction(index, producer_id, commit)
            }));
        }
        let txn = Arc::new(crate::txn::TxnCoordinator::new(
            config.txn,
            markers,
            Arc::clone(&producer_ids),
            Arc::clone(&store),
        ));
        if let Some(topic) = replicas.topic(crate::model::TRANSACTION_STATE_TOPIC) {
            txn.follow_leadership(&topic);
        }
        let static_configs = config.static_broker_configs(&server.listeners);
        let access =
            crate::security::access::AccessControl::new(config.authorizer.clone(), store.acls());
        let archive = Arc::new(crate::archive::Archive::open(config.archive.clone())?);
        let quotas = Arc::new(crate::quota::ClientQuotas::new(config.quota_window));
        quotas.reload(&store.client_quotas());
        let services = Arc::new(Services {
            quotas,
            archive: Arc::clone(&archive),
            access,
            static_configs,
            node,
            producer_ids,
            txn: Arc::clone(&txn),
            groups: Arc::clone(&groups),
            shares: crate::group::share::leader::SharePartitions::new(config.shares)
                .with_group_configs(group_configs),
            peers: Peers::new(Arc::clone(&store), peer_security.clone()),
            store,
            replicas: Arc::clone(&replicas),
            topics,
            request_memory: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(server.queued_max_request_bytes).unwrap_or(usize::MAX >> 4),
            )),
            server,
        });
        background.spawn(run_reconciler(
            Arc::clone(&services),
            events,
            shutdown.clone(),
        ));
        let tasks = TaskTracker::new();
        let limits = ConnectionLimits::new(
            services.server.max_connections,
            services.server.max_connections_per_ip,
        );
        background.spawn(run_connection_limits(
            Arc::clone(&services),
            Arc::clone(&limits),
            shutdown.clone(),
        ));
        for listener in listeners {
            tasks.spawn(run_listener(
                listener,
                Arc::clone(&limits),
                Arc::clone(&services),
                shutdown.clone(),
                tasks.clone(),
            ));
        }
        for source in tls_sources {
            background.spawn(source.watch(shutdown.clone()));
        }
        background.spawn(run_flusher(Arc::clone(&replicas), shutdown.clone()));
        background.spawn(crate::replication::alter::run(
            Arc::clone(&services.store),
            isr_changes,
            shutdown.clone(),
        ));
        let lag_max = config.replica_lag_time_max;
        background.spawn(crate::replication::alter::maintain(
            Arc::clone(&replicas),
            lag_max.as_millis() as i64,
            (lag_max / 4).max(std::time::Duration::from_millis(50)),
            shutdown.clone(),
        ));
        background.spawn(
            crate::replication::fetcher::ReplicaFetchers::new(
                config.node_id,
                Arc::clone(&replicas),
                Arc::clone(&services.store),
                peer_security,
            )
            .run(shutdown.clone()),
        );
        background.spawn(run_group_timers(Arc::clone(&groups), shutdown.clone()));
        background.spawn(run_txn_timers(Arc::clone(&txn), shutdown.clone()));
        let mut listener_names: Vec<&'static str> = services
            .server
            .listeners
            .iter()
            .map(|l| l.protocol.name())
            .collect();
        listener_names.push(crate::http::HTTP_LISTENER);
        crate::metrics::export_broker_series(&crate::metrics::KnownLabels {
            apis: crate::api::table::SUPPORTED
                .iter()
                .map(|r| r.name)
                .collect(),
            listeners: listener_names,
            mechanisms: services
                .server
                .security
                .sasl
                .mechanisms
                .iter()
                .map(|m| m.name())
                .collect(),
        });
        let readiness = Arc::new(crate::metrics::Readiness::default());
        background.spawn(crate::metrics::serve(
            metrics_listener,
            Arc::clone(&readiness),
            shutdown.clone(),
        ));
        if let Some(socket) = http_listener {
            let http = config.http_security;
            let tls = match (&services.server.security.tls, http.tls) {
                (Some(files), true) => {
                    let files = TlsFiles {
                        client_certificate_optional: true,
                        ..files.clone()
                    };
                    let source = ReloadingTls::load(files, &[b"http/1.1"])?;
                    background.spawn(Arc::clone(&source).watch(shutdown.clone()));
                    Some(source)
                }
                _ => None,
            };
            let listener = crate::http::listener::HttpListener::start(
                socket,
                tls,
                services.server.security.principal_mapper.clone(),
                shutdown.clone(),
            )?;
            let api = crate::http::HttpApi::new(
                Arc::clone(&services),
                http.require_auth,
                shutdown.clone(),
            );
            background.spawn(crate::http::serve(listener, api, shutdown.clone()));
        }
        background.spawn(run_sampler(
            Arc::clone(&services),
            config.data_dir.clone(),
            shutdown.clone(),
        ));
        background.spawn(run_retention(
            Arc::clone(&replicas),
            config.retention_check_interval,
            config.archive.min_free_bytes,
            shutdown.clone(),
        ));
        background.spawn(crate::archive::export::run(
            archive,
            Arc::clone(&replicas),
            shutdown.clone(),
        ));
        background.spawn(crate::replication::log_cleaner::run(
            Arc::clone(&replicas),
            config.cleaner.clone(),
            shutdown.clone(),
        ));
        tracing::info!(
            %local_addr,
            node_id = config.node_id,
            cluster_id = %services.store.cluster_id(),
            topics = loaded,
            %metrics_addr,
            %http_addr,
            "tern is serving Kafka"
        );
        readiness.set_ready();
        Ok(Self {
            services,
            shutdown,
            tasks,
            background,
            local_addr,
            metrics_addr,
            _lock: lock,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where `/metrics`, `/health` and `/ready` are served.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// Stops accepting, lets in-flight requests finish (bounded), then closes the logs.
    pub async fn shutdown(self) -> std::io::Result<()> {
        tracing::info!("shutting down");
        self.move_leadership_away().await;
        self.shutdown.cancel();
        self.tasks.close();
        if tokio::time::timeout(limits::SHUTDOWN_WAIT, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(wait = ?limits::SHUTDOWN_WAIT, "connections still busy; closing logs anyway");
        }
        self.background.close();
        self.background.wait().await;
        self.services.store.leave().await;
        let replicas = Arc::clone(&self.services.replicas);
        tokio::task::spawn_blocking(move || replicas.shutdown())
            .await
            .map_err(std::io::Error::other)??;
        tracing::info!("shut down cleanly");
        Ok(())
    }
}

impl Broker {
    /// Controlled shutdown: asks the controller to move every leadership that can move
    /// (a partition with another in-sync replica) and waits, bounded, until it has, so
    /// that producers see a leader change instead of a dead leader.
    async fn move_leadership_away(&self) {
        let services = &self.services;
        if services.store.brokers().len() < 2 {
            return;
        }
        if !services.store.begin_shutdown().await {
            return;
        }
        let deadline = tokio::time::Instant::now() + limits::CONTROLLED_SHUTDOWN_WAIT;
        loop {
            let movable = services
                .replicas
                .led_partitions()
                .iter()
                .filter(|p| p.isr_size() > 1)
                .count();
            if movable == 0 {
                tracing::info!("controlled shutdown: no movable leadership left here");
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    movable,
                    "controlled shutdown: leaderships still here; leaving anyway"
                );
                return;
            }
            tokio::time::sleep(limits::PLACEMENT_POLL).await;
        }
    }
}

/// The metadata store: etcd in cluster mode (with its watch, session and controller
/// tasks), else the embedded file.
async fn open_store(
    config: &Config,
    node: BrokerInfo,
    background: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<Arc<dyn MetadataStore>, BrokerError> {
    let Some(etcd) = &config.etcd else {
        return Ok(Arc::new(EmbeddedStore::open(
            &config.data_dir,
            config.cluster_id.as_deref(),
            node,
        )?));
    };
    let cluster_id = config.cluster_id.as_deref().unwrap_or("tern");
    let store = Arc::new(EtcdStore::connect(etcd, cluster_id, node).await?);
    metrics::gauge!(crate::metrics::ETCD_SESSION_UP).set(1.0);
    let (watching, session) = (Arc::clone(&store), Arc::clone(&store));
    let (watch_shutdown, session_shutdown) = (shutdown.clone(), shutdown.clone());
    background.spawn(async move { watching.run_watch(watch_shutdown).await });
    background.spawn(async move { session.run_session(session_shutdown).await });
    background.spawn(crate::cluster::controller::run(
        Arc::clone(&store),
        shutdown.clone(),
    ));
    tracing::info!(cluster_id, endpoints = ?etcd.endpoints, "joined the cluster through etcd");
    Ok(store)
}

/// Keeps local partitions (and the groups this broker coordinates) in step with the
/// metadata store: every topic or placement change is reconciled as it is announced.
async fn run_reconciler(
    services: Arc<Services>,
    mut events: tokio::sync::broadcast::Receiver<MetadataEvent>,
    shutdown: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        let names: Vec<String> = match event {
            Ok(
                MetadataEvent::TopicCreated(spec)
                | MetadataEvent::TopicChanged(spec)
                | MetadataEvent::TopicDeleted(spec),
            ) => vec![spec.name],
            Ok(MetadataEvent::AssignmentChanged(name)) => vec![name],
            Ok(MetadataEvent::BrokersChanged | MetadataEvent::ControllerChanged) => Vec::new(),
            Ok(MetadataEvent::BrokerConfigsChanged(_)) => {
                services.topics.apply_broker_configs();
                Vec::new()
            }
            Ok(MetadataEvent::AclsChanged) => {
                services.access.rebuild(services.store.acls());
                Vec::new()
            }
            Ok(MetadataEvent::ClientQuotasChanged) => {
                services.quotas.reload(&services.store.client_quotas());
                Vec::new()
            }
            Ok(MetadataEvent::Resynced) | Err(RecvError::Lagged(_)) => {
                services.access.rebuild(services.store.acls());
                services.quotas.reload(&services.store.client_quotas());
                services.topics.apply_broker_configs();
                let mut names = services.replicas.topic_names();
                names.extend(services.store.topics().await.into_iter().map(|t| t.name));
                names.sort();
                names.dedup();
                names
            }
            Err(RecvError::Closed) => return,
        };
        for name in names {
            match services.topics.reconcile(&name).await {
                Ok(Some(topic)) if name == OFFSETS_TOPIC => {
                    services.groups.follow_leadership(&topic)
                }
                Ok(Some(topic)) if name == crate::model::TRANSACTION_STATE_TOPIC => {
                    services.txn.follow_leadership(&topic)
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(topic = %name, %error, "could not apply metadata change")
                }
            }
        }
    }
}

/// Flushes each log once its unflushed data has waited its topic's `flush.ms` (the
/// broker's `log.flush.interval.ms` unless the topic sets one), so that data is never
/// unflushed for longer and the recovery checkpoint (what a crash must rescan) stays
/// recent. Wakes when the next log is due, and at least every second: a write or a
/// config change may make one due sooner.
async fn run_flusher(replicas: Arc<ReplicaManager>, shutdown: CancellationToken) {
    loop {
        let next = replicas
            .flush_due()
            .await
            .unwrap_or(limits::FLUSH_INTERVAL_RECHECK);
        let wait = next.clamp(limits::FLUSH_MIN_WAIT, limits::FLUSH_INTERVAL_RECHECK);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Keeps the shared connection limits at the dynamic `max.connections` and
/// `max.connections.per.ip` (this broker's, else the cluster default, else the flags),
/// from start-up on and at every change of the dynamic broker configs.
async fn run_connection_limits(
    services: Arc<Services>,
    limits: Arc<ConnectionLimits>,
    shutdown: CancellationToken,
) {
    let mut events = services.store.subscribe();
    loop {
        let mine = services.store.broker_configs(Some(services.node.node_id));
        let cluster = services.store.broker_configs(None);
        let value = |name: &str, fallback: usize| {
            mine.get(name)
                .or_else(|| cluster.get(name))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(fallback)
        };
        let max = value("max.connections", services.server.max_connections);
        let per_ip = value(
            "max.connections.per.ip",
            services.server.max_connections_per_ip,
        );
        if limits.current() != (max.max(1), per_ip) {
            limits.set(max, per_ip);
            tracing::info!(max, per_ip, "connection limits changed");
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                event = events.recv() => match event {
                    Ok(MetadataEvent::BrokerConfigsChanged(_) | MetadataEvent::Resynced)
                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    Ok(_) => {}
                },
            }
        }
    }
}

/// Drives group timers: rebalance and session timeouts, offset expiry.
async fn run_group_timers(groups: Arc<GroupCoordinator>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(limits::GROUP_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => groups.tick().await,
        }
    }
}

/// Drives transaction timers: timed-out transactions, expired transactional ids.
async fn run_txn_timers(txn: Arc<crate::txn::TxnCoordinator>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(txn.config().abort_check_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => txn.tick().await,
        }
    }
}

/// Publishes gauges that are cheaper to sample than to track: per-partition log
/// state, consumer lag, group sizes, disk usage.
async fn run_sampler(
    services: Arc<Services>,
    data_dir: std::path::PathBuf,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(limits::SAMPLE_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => sample(&services, &data_dir),
        }
    }
}

fn sample(services: &Services, data_dir: &std::path::Path) {
    use crate::metrics as m;
    let partitions = services.replicas.led_partitions();
    let mut high_watermarks = std::collections::HashMap::new();
    let mut max_dirty_ratio = 0.0f64;
    for partition in &partitions {
        let id = partition.id();
        let labels = [
            ("topic", id.topic.clone()),
            ("partition", id.partition.to_string()),
        ];
        let (size, segments) = partition.size_and_segments();
        let offsets = partition.offsets();
        let high_watermark = offsets.high_watermark().0;
        let log_end = offsets.log_end().0;
        metrics::gauge!(m::LOG_SIZE_BYTES, &labels).set(size as f64);
        metrics::gauge!(m::LOG_SEGMENTS, &labels).set(segments as f64);
        metrics::gauge!(m::LOG_END_OFFSET, &labels).set(log_end as f64);
        let unstable = high_watermark - offsets.last_stable().0;
        metrics::gauge!(m::LOG_UNSTABLE_OFFSETS, &labels).set(unstable as f64);
        if let Some(dirtiness) = partition.dirtiness(crate::model::now_ms()) {
            metrics::gauge!(m::LOG_CLEANER_DIRTY_BYTES, &labels).set(dirtiness.dirty_bytes as f64);
            max_dirty_ratio = max_dirty_ratio.max(dirtiness.ratio());
        }
        high_watermarks.insert((id.topic.clone(), id.partition), high_watermark);
    }
    metrics::gauge!(m::LOG_CLEANER_MAX_DIRTY_RATIO).set(max_dirty_ratio);
    metrics::gauge!(m::LEADER_PARTITIONS).set(partitions.len() as f64);
    let (under_replicated, offline) = replica_health(services);
    metrics::gauge!(m::UNDER_REPLICATED_PARTITIONS).set(under_replicated as f64);
    metrics::gauge!(m::OFFLINE_PARTITIONS).set(offline as f64);
    let brokers = services.store.brokers().len();
    metrics::gauge!(m::CLUSTER_BROKERS).set(brokers as f64);
    let under_min_isr = partitions
        .iter()
        .filter(|p| p.isr_size() < p.min_insync_replicas())
        .count();
    metrics::gauge!(m::UNDER_MIN_ISR_PARTITIONS).set(under_min_isr as f64);
    let controller = services.store.controller_id() == Some(services.node.node_id);
    metrics::gauge!(m::CONTROLLER_ACTIVE).set(if controller { 1.0 } else { 0.0 });
    for lag in services.groups.lag_snapshot() {
        let group = lag.group;
        let labels = [("group", group.clone()), ("type", lag.kind.to_string())];
        metrics::gauge!(m::GROUP_MEMBERS, &labels).set(lag.members as f64);
        for (topic, partition, committed) in lag.committed {
            if let Some(high_watermark) = high_watermarks.get(&(topic.clone(), partition)) {
                let lag = (high_watermark - committed).max(0);
                let labels = [
                    ("group", group.clone()),
                    ("topic", topic),
                    ("partition", partition.to_string()),
                ];
                metrics::gauge!(m::CONSUMER_GROUP_LAG, &labels).set(lag as f64);
            }
        }
        for (topic_id, partition, start) in lag.share_starts {
            let Some(topic) = services.replicas.topic_by_id(topic_id) else {
                continue;
            };
            let name = topic.spec.name.clone();
            if let Some(high_watermark) = high_watermarks.get(&(name.clone(), partition)) {
                let labels = [
                    ("group", group.clone()),
                    ("topic", name),
                    ("partition", partition.to_string()),
                ];
                let lag = (high_watermark - start).max(0);
                metrics::gauge!(m::SHARE_GROUP_LAG, &labels).set(lag as f64);
            }
        }
    }
    // Share-partitions of partitions led elsewhere now: their state is the new
    // leader's to load.
    services.shares.retain(|key| {
        services
            .replicas
            .topic_by_id(key.topic_id)
            .is_some_and(|t| t.partition(key.partition).is_ok())
    });
    if let Some((used, free)) = m::filesystem_usage(data_dir) {
        metrics::gauge!(m::DATA_DIR_USED_BYTES).set(used as f64);
        metrics::gauge!(m::DATA_DIR_FREE_BYTES).set(free as f64);
    }
}

/// Partitions led here with replicas outside the ISR, and — counted by the controller
/// only, as in Kafka —
/// partitions of the cluster without a live leader.
fn replica_health(services: &Services) -> (usize, usize) {
    let store = &services.store;
    let me = services.node.node_id;
    let live: Vec<i32> = store.brokers().iter().map(|b| b.node_id).collect();
    let is_controller = store.controller_id() == Some(me);
    let (mut under_replicated, mut offline) = (0, 0);
    for topic in services.replicas.topics() {
        let assignment = store.assignment(&topic.spec);
        for index in 0..topic.spec.partitions {
            let placed = assignment.as_ref().and_then(|a| a.partition(index));
            match placed {
                // Kafka's UnderReplicatedPartitions: led here, ISR smaller than the replicas.
                Some(p)
                    if live.contains(&p.leader)
                        && p.leader == me
                        && p.in_sync().len() < p.replicas.len() =>
                {
                    under_replicated += 1;
                }
                Some(p) if live.contains(&p.leader) => {}
                _ if is_controller => offline += 1,
                _ => {}
            }
        }
    }
    (under_replicated, offline)
}

/// Retention every `interval`. Below `min_free_bytes` free on the data directory's
/// filesystem, an archived topic's expired segments go even if the archive lacks
/// them: a full disk would stop every write of every topic.
async fn run_retention(
    replicas: Arc<ReplicaManager>,
    interval: Duration,
    min_free_bytes: u64,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                let replicas = Arc::clone(&replicas);
                let _ = tokio::task::spawn_blocking(move || {
                    let disk_low = crate::metrics::filesystem_usage(replicas.data_dir())
                        .is_some_and(|(_, free)| free < min_free_bytes);
                    replicas.apply_retention(disk_low)
                })
                .await;
            }
        }
    }
}
