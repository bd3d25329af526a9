//! What every handler receives: the request's identity (principal, client, version)
//! and handles to the broker's subsystems.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::broker_config::StaticBrokerConfig;
use crate::cluster::peers::Peers;
use crate::cluster::ProducerIdAllocator;
use crate::cluster::{BrokerInfo, MetadataStore};
use crate::group::coordinator::GroupCoordinator;
use crate::replication::ReplicaManager;
use crate::security::access::AccessControl;
use crate::security::acl::{AclOperation, Authorizer, ResourceType, CLUSTER_NAME};
use crate::security::listener::{ListenerConfig, SecurityProtocol};
use crate::security::session::SaslSession;
use crate::security::SecurityConfig;
use crate::topics::TopicService;

/// Who sent a request: `User:ANONYMOUS` on PLAINTEXT (and TLS without a client
/// certificate), else the SASL user or the mapped certificate subject; ACLs check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Anonymous,
    User(String),
}

/// What one connection proved about itself, and the quota mute it may be under,
/// shared by its requests.
#[derive(Debug)]
pub struct ConnectionSecurity {
    pub listener: SecurityProtocol,
    /// The principal name mapped from a verified client certificate.
    pub tls_user: Option<String>,
    /// The SASL exchange and its outcome, on SASL listeners.
    pub sasl: Option<parking_lot::Mutex<SaslSession>>,
    /// Set by a request over its client quota; the connection executes nothing more
    /// until it passes.
    pub mute: crate::quota::ConnectionMute,
}

impl ConnectionSecurity {
    pub fn new(
        listener: SecurityProtocol,
        tls_user: Option<String>,
        sasl: Option<parking_lot::Mutex<SaslSession>>,
    ) -> Self {
        Self {
            listener,
            tls_user,
            sasl,
            mute: crate::quota::ConnectionMute::default(),
        }
    }

    pub fn plaintext() -> Self {
        Self::new(SecurityProtocol::Plaintext, None, None)
    }

    /// The principal requests on this connection run as now.
    pub fn principal(&self) -> Principal {
        if let Some(sasl) = &self.sasl {
            return match sasl.lock().authenticated() {
                Some(auth) => Principal::User(auth.user.clone()),
                None => Principal::Anonymous,
            };
        }
        match &self.tls_user {
            Some(user) => Principal::User(user.clone()),
            None => Principal::Anonymous,
        }
    }
}

impl Principal {
    /// Kafka's `Type:name` form, as ACLs name principals: a connection without
    /// authentication is `User:ANONYMOUS`, as in Kafka.
    pub fn kafka_name(&self) -> String {
        match self {
            Principal::Anonymous => "User:ANONYMOUS".to_string(),
            Principal::User(name) => format!("User:{name}"),
        }
    }
}

/// The Kafka listeners and their limits: the slice of the broker's configuration that
/// the request path (connections, SASL, long polls) reads; `config` builds it. `listen` and `advertised_*` are the
/// inter-broker listener's (the address peers and the CLI's defaults use).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Every listener, the inter-broker one among them.
    pub listeners: Vec<ListenerConfig>,
    /// The protocol (= name) of the listener peers connect to.
    pub inter_broker: SecurityProtocol,
    pub security: SecurityConfig,
    /// Where other brokers reach this one (`--peer-advertise`), when not the advertised
    /// address.
    pub peer_address: Option<String>,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
    pub max_request_bytes: u32,
    pub max_in_flight_requests: usize,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Request bytes held (read, not yet answered) across all connections.
    pub queued_max_request_bytes: u64,
    /// Bytes a SASL client may send before authenticating.
    pub sasl_max_receive_bytes: u32,
    pub fetch_max_wait: Duration,
    /// Requests slower than this are logged (`None`: never).
    pub slow_request: Option<Duration>,
}

/// The broker's subsystems, shared by all connections.
#[derive(Debug)]
pub struct Services {
    pub node: BrokerInfo,
    pub store: Arc<dyn MetadataStore>,
    pub replicas: Arc<ReplicaManager>,
    pub topics: TopicService,
    pub producer_ids: Arc<ProducerIdAllocator>,
    /// The transaction coordinator (the `__transaction_state` partitions led here).
    pub txn: Arc<crate::txn::TxnCoordinator>,
    pub groups: Arc<GroupCoordinator>,
    /// The share-partitions led here and the share sessions of members fetching here.
    pub shares: crate::group::share::leader::SharePartitions,
    /// Connections to the other brokers, for what only their partitions or groups answer.
    pub peers: Peers,
    pub server: ServerConfig,
    /// Bytes of requests read and not yet answered, across all connections
    /// (`queued_max_request_bytes`): readers wait for room before reading a body.
    pub request_memory: Arc<tokio::sync::Semaphore>,
    /// The read-only broker configs DescribeConfigs lists for this broker (and
    /// `log.flush.interval.ms`'s static value), by Kafka name.
    pub static_configs: Vec<StaticBrokerConfig>,
    /// The authorizer (`--authorizer`), rebuilt from the store on `AclsChanged`.
    pub access: AccessControl,
    /// The Parquet archive (`--archive-dir` / `--archive-url`), for topics with
    /// `archive.enable`.
    pub archive: Arc<crate::archive::Archive>,
    /// The client quotas in force and what each client has used of them.
    pub quotas: Arc<crate::quota::ClientQuotas>,
}

/// One request's context.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub services: Arc<Services>,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub principal: Principal,
    pub connection: Arc<ConnectionSecurity>,
    pub peer: SocketAddr,
    /// Time the handler spent waiting rather than working (long-poll), in µs.
    pub remote_wait_us: Arc<std::sync::atomic::AtomicU64>,
    /// The request frame's size, header included: what producer_byte_rate counts.
    pub request_bytes: usize,
}

impl RequestContext {
    pub fn node_id(&self) -> i32 {
        self.services.node.node_id
    }

    /// Who quotas count this request against: the principal's name (`ANONYMOUS`
    /// without authentication, as Kafka's sanitized user is) and the client id.
    pub fn quota_client(&self) -> (&str, &str) {
        let user = match &self.principal {
            Principal::Anonymous => "ANONYMOUS",
            Principal::User(name) => name,
        };
        (user, self.client_id.as_deref().unwrap_or(""))
    }

    /// Records `value` of `kind` against this request's quota; the throttle in ms.
    pub fn record_quota(&self, kind: crate::quota::QuotaKind, value: f64) -> u64 {
        let (user, client_id) = self.quota_client();
        self.services.quotas.record(kind, user, client_id, value)
    }

    /// Records the handler time since `started` (less its long-poll wait) against
    /// `request_percentage`: Kafka counts a request thread's time as a percentage of
    /// one second, and caps the throttle at one quota window.
    pub fn record_request_time(&self, started: std::time::Instant) -> u64 {
        let waited = std::time::Duration::from_micros(
            self.remote_wait_us
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let worked = started.elapsed().saturating_sub(waited);
        let percent_seconds = worked.as_secs_f64() * 100.0;
        self.record_quota(crate::quota::QuotaKind::RequestPercentage, percent_seconds)
            .min(self.services.quotas.window().sample_ms)
    }

    /// Runs a topic mutation under the client's controller_mutation_rate: `None` when
    /// it is refused (THROTTLING_QUOTA_EXCEEDED), else what `mutate` returned; it
    /// returns the partitions it created or deleted with its outcome.
    pub async fn under_mutation_quota<T, F>(
        &self,
        strict: bool,
        mutate: impl FnOnce() -> F,
    ) -> Option<T>
    where
        F: std::future::Future<Output = (T, u32)>,
    {
        let (user, client_id) = self.quota_client();
        self.services
            .quotas
            .mutate(user, client_id, strict, mutate)
            .await
    }

    /// The throttle of a request that may mutate topics: its controller mutations'
    /// (0 for other requests).
    pub fn mutation_throttle(&self, key: kafka_protocol::messages::ApiKey) -> u64 {
        use kafka_protocol::messages::ApiKey;
        if !matches!(
            key,
            ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics
        ) {
            return 0;
        }
        let (user, client_id) = self.quota_client();
        self.services.quotas.mutation_throttle_ms(user, client_id)
    }

    /// Mutes this request's connection for `throttle_ms` and returns it as a
    /// response's `throttle_time_ms`.
    pub fn throttle(&self, throttle_ms: u64) -> i32 {
        self.connection.mute.extend(throttle_ms);
        i32::try_from(throttle_ms).unwrap_or(i32::MAX)
    }

    /// The name of the listener this request came in on.
    pub fn listener(&self) -> &'static str {
        self.connection.listener.name()
    }

    /// Whether this request's principal, from its address, may perform `operation` on
    /// the resource (always, when no authorizer is configured).
    pub fn authorize(
        &self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.ask_authorizer(|a, principal, host| {
            a.authorize(principal, host, operation, resource_type, name)
        })
        .unwrap_or(true)
    }

    /// Runs `decide` with the principal's and the client's names, or returns `None`
    /// without building them when no authorizer is configured: the produce and fetch
    /// paths ask once per topic, and pay nothing then.
    fn ask_authorizer<T>(&self, decide: impl FnOnce(&Authorizer, &str, &str) -> T) -> Option<T> {
        let authorizer = self.services.access.authorizer()?;
        Some(decide(
            &authorizer,
            &self.principal.kafka_name(),
            &self.peer.ip().to_string(),
        ))
    }

    /// `authorize` on the CLUSTER resource.
    pub fn authorize_cluster(&self, operation: AclOperation) -> bool {
        self.authorize(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// `authorize` on a topic.
    pub fn authorize_topic(&self, operation: AclOperation, topic: &str) -> bool {
        self.authorize(operation, ResourceType::Topic, topic)
    }

    /// Kafka's `authorizeByResourceType`: may the principal perform `operation` on at
    /// least one resource of `resource_type` (always, without an authorizer).
    pub fn authorize_any(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        self.ask_authorizer(|a, principal, host| {
            a.authorize_any(principal, host, operation, resource_type)
        })
        .unwrap_or(true)
    }

    /// `authorize` on a consumer group.
    pub fn authorize_group(&self, operation: AclOperation, group: &str) -> bool {
        self.authorize(operation, ResourceType::Group, group)
    }

    /// Kafka's `AuthHelper.partitionSeqByAuthorized`: `items` split, each keeping request
    /// order, into those whose resource (named by `name`) the principal may `operation`
    /// and those it may not: OffsetFetch answers (or hides) the second part and reads
    /// the first, OffsetDelete refuses the second and deletes the first.
    pub fn partition_by_authorized<T>(
        &self,
        operation: AclOperation,
        resource_type: ResourceType,
        items: impl IntoIterator<Item = T>,
        name: impl Fn(&T) -> &str,
    ) -> (Vec<T>, Vec<T>) {
        items
            .into_iter()
            .partition(|item| self.authorize(operation, resource_type, name(item)))
    }

    /// KIP-430's bit field for the resource: every supported operation when no authorizer
    /// is configured (Kafka's `AuthHelper.authorizedOperations`).
    pub fn authorized_operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        self.ask_authorizer(|a, principal, host| {
            a.authorized_operations(principal, host, resource_type, name)
        })
        .unwrap_or_else(|| crate::security::acl::all_operations(resource_type))
    }
}
