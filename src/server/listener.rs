//! The accept loop of one Kafka listener: one task per connection, all listeners
//! together bounded by `max.connections` and `max.connections.per.ip`
//! ([`ConnectionLimits`], which dynamic broker configs may change at run time). On a TLS listener the handshake (bounded in
//! time) and the client-certificate principal come first; on a SASL listener the
//! connection starts unauthenticated.

use crate::metrics::AuthFailure;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection;
use crate::api::context::{ConnectionSecurity, Services};
use crate::limits::TLS_HANDSHAKE_TIMEOUT;
use crate::security::listener::SecurityProtocol;
use crate::security::principal::SslPrincipalMapper;
use crate::security::session::SaslSession;
use crate::security::tls::{subject_name, ReloadingTls};

/// One bound listener, ready to accept.
#[derive(Debug)]
pub struct KafkaListener {
    pub socket: TcpListener,
    pub protocol: SecurityProtocol,
    /// The certificate source, on SSL and SASL_SSL listeners.
    pub tls: Option<Arc<ReloadingTls>>,
}

/// The connection limits every listener shares: `max.connections` as a semaphore of
/// connection slots (accepting waits for one), `max.connections.per.ip` as a count per
/// client address (a connection over it is closed).
#[derive(Debug)]
pub struct ConnectionLimits {
    slots: Arc<Semaphore>,
    /// The slots the semaphore stands for now (permits out plus available).
    max: Mutex<usize>,
    per_address: Arc<PerAddress>,
}

impl ConnectionLimits {
    pub fn new(max: usize, per_ip: usize) -> Arc<Self> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(max)),
            max: Mutex::new(max),
            per_address: PerAddress::new(per_ip),
        })
    }

    /// Puts new limits in force. More slots are free at once; fewer are taken back as
    /// connections close (open ones are not cut). At least one slot stays, so that an
    /// operator can always connect to raise it again.
    pub fn set(&self, max: usize, per_ip: usize) {
        self.per_address.limit.store(per_ip, Ordering::Relaxed);
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        let mut current = self.max.lock();
        if max > *current {
            self.slots.add_permits(max - *current);
        } else if max < *current {
            let surplus = u32::try_from(*current - max).unwrap_or(u32::MAX);
            let slots = Arc::clone(&self.slots);
            tokio::spawn(async move {
                if let Ok(permits) = slots.acquire_many_owned(surplus).await {
                    permits.forget();
                }
            });
        }
        *current = max;
    }

    /// The limits in force: `(max.connections, max.connections.per.ip)`.
    pub fn current(&self) -> (usize, usize) {
        (
            *self.max.lock(),
            self.per_address.limit.load(Ordering::Relaxed),
        )
    }
}

/// Open connections by client address, for `max.connections.per.ip`.
#[derive(Debug)]
struct PerAddress {
    limit: AtomicUsize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in [`PerAddress`], given back when it closes.
#[derive(Debug)]
struct AddressSlot {
    table: Arc<PerAddress>,
    address: IpAddr,
}

impl PerAddress {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: AtomicUsize::new(limit),
            open: Mutex::new(HashMap::new()),
        })
    }

    fn admit(self: &Arc<Self>, address: IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock();
        let count = open.entry(address).or_default();
        if *count >= self.limit.load(Ordering::Relaxed) {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: Arc::clone(self),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock();
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Accepts connections until `shutdown`; each connection runs on `tasks` and holds a
/// slot and a place per address of `limits` (shared by every listener) while it is open.
pub async fn run_listener(
    listener: KafkaListener,
    limits: Arc<ConnectionLimits>,
    services: Arc<Services>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let listener = Arc::new(listener);
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = Arc::clone(&limits.slots).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.socket.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(address_slot) = limits.per_address.admit(peer.ip()) else {
                    metrics::counter!(crate::metrics::CONNECTIONS_REFUSED_TOTAL, "reason" => crate::metrics::REFUSED_PER_IP)
                        .increment(1);
                    tracing::debug!(%peer, "closing connection: max_connections_per_ip reached");
                    drop(stream);
                    continue;
                };
                if let Some(throttle_ms) = services.quotas.record_connection(peer.ip()) {
                    // KIP-612: over its address's connection_creation_rate, a connection
                    // is held unserved for the throttle time and then closed, so that a
                    // reconnecting client slows down instead of spinning.
                    metrics::counter!(crate::metrics::CONNECTIONS_REFUSED_TOTAL, "reason" => crate::metrics::REFUSED_IP_RATE)
                        .increment(1);
                    tracing::debug!(%peer, throttle_ms, "closing connection: connection_creation_rate exceeded");
                    drop(address_slot);
                    let shutdown = shutdown.clone();
                    tasks.spawn(async move {
                        let hold = std::time::Duration::from_millis(throttle_ms);
                        tokio::select! {
                            _ = shutdown.cancelled() => {}
                            _ = tokio::time::sleep(hold) => {}
                        }
                        drop(stream);
                    });
                    continue;
                }
                let _ = stream.set_nodelay(true);
                tasks.spawn(serve(
                    stream,
                    peer,
                    Arc::clone(&listener),
                    Arc::clone(&services),
                    shutdown.clone(),
                    (permit, address_slot),
                ));
            }
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(crate::limits::ACCEPT_BACKOFF).await;
            }
        }
    }
}

async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<KafkaListener>,
    services: Arc<Services>,
    shutdown: CancellationToken,
    permit: (OwnedSemaphorePermit, AddressSlot),
) {
    let protocol = listener.protocol;
    let sasl = || {
        protocol.uses_sasl().then(|| {
            parking_lot::Mutex::new(SaslSession::new(Arc::clone(&services.server.security.sasl)))
        })
    };
    let Some(tls) = &listener.tls else {
        let security = Arc::new(ConnectionSecurity::new(protocol, None, sasl()));
        connection::serve(stream, peer, security, services, shutdown).await;
        drop(permit);
        return;
    };
    let mapper = &services.server.security.principal_mapper;
    let Some((stream, tls_user)) = tls_handshake(tls, stream, peer, mapper, protocol.name()).await
    else {
        return;
    };
    let security = Arc::new(ConnectionSecurity::new(protocol, tls_user, sasl()));
    connection::serve_stream(stream, peer, security, services, shutdown).await;
    drop(permit);
}

/// The TLS handshake of an accepted connection (bounded in time) and the principal
/// name its client certificate maps to, if it presented one. `None` (counted and
/// logged) when the handshake fails or no mapping rule applies: the connection is
/// closed, as Kafka closes it. Shared by the Kafka listeners and the HTTP API.
pub(crate) async fn tls_handshake(
    tls: &ReloadingTls,
    stream: TcpStream,
    peer: SocketAddr,
    mapper: &SslPrincipalMapper,
    listener: &'static str,
) -> Option<(TlsStream<TcpStream>, Option<String>)> {
    let acceptor = TlsAcceptor::from(tls.current());
    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return tls_failed(peer, listener, &error.to_string()),
        Err(_) => return tls_failed(peer, listener, "handshake timed out"),
    };
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.as_ref().to_vec());
    let Some(der) = certificate else {
        return Some((stream, None));
    };
    let subject = subject_name(&der).unwrap_or_default();
    match mapper.name(&subject) {
        Some(name) => Some((stream, Some(name))),
        None => {
            crate::metrics::authentication_failed(listener, AuthFailure::Principal);
            tracing::warn!(%peer, subject, "no ssl.principal.mapping.rules rule applies to the client certificate; closing");
            None
        }
    }
}

fn tls_failed<T>(peer: SocketAddr, listener: &'static str, error: &str) -> Option<T> {
    crate::metrics::authentication_failed(listener, AuthFailure::Tls);
    tracing::info!(%peer, listener, error, "TLS handshake failed");
    None
}
