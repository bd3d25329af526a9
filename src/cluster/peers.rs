//! This broker's Kafka connections to the other brokers of its cluster: what a broker
//! asks of a partition's leader or a group's coordinator when it is not that broker
//! itself (the HTTP API in a cluster; replication's fetchers later).
//!
//! Up to [`CONNECTIONS_PER_PEER`] connections per peer, each made on first use and
//! replaced after any error, addressed by node id through the metadata store's
//! live-broker list, so a peer that restarts elsewhere is found again. A request takes
//! a free connection (or waits for one): requests that wait on the peer's fsync
//! (Produce acks=all) overlap up to that many, and callers keep them short (no
//! long-poll waits on a peer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request};
use parking_lot::Mutex;

use super::store::MetadataStore;
use crate::client::{Client, ClientError, ClientSecurity};

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("broker {0} is not a live member of the cluster")]
    UnknownBroker(i32),
    /// No connection could be made: the request was not sent.
    #[error("connecting: {0}")]
    Connect(ClientError),
    /// The exchange failed: the request may or may not have been carried out.
    #[error(transparent)]
    Client(#[from] ClientError),
}

use crate::limits::CONNECTIONS_PER_PEER;

type Slot = Arc<tokio::sync::Mutex<Option<Client>>>;

/// The connections to one peer, and whose turn it is to be waited on when all are busy.
#[derive(Debug)]
struct Pool {
    slots: Vec<Slot>,
    turn: AtomicUsize,
}

impl Pool {
    fn new() -> Self {
        Self {
            slots: (0..CONNECTIONS_PER_PEER).map(|_| Slot::default()).collect(),
            turn: AtomicUsize::new(0),
        }
    }

    /// A free connection slot, or the next one in turn once it is free.
    async fn take(&self) -> tokio::sync::OwnedMutexGuard<Option<Client>> {
        for slot in &self.slots {
            if let Ok(guard) = Arc::clone(slot).try_lock_owned() {
                return guard;
            }
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        Arc::clone(&self.slots[turn]).lock_owned().await
    }
}

#[derive(Debug)]
pub struct Peers {
    store: Arc<dyn MetadataStore>,
    pools: Mutex<HashMap<i32, Arc<Pool>>>,
    /// How the inter-broker listener is reached (TLS, the broker's SASL login).
    security: ClientSecurity,
}

impl Peers {
    pub fn new(store: Arc<dyn MetadataStore>, security: ClientSecurity) -> Self {
        Self {
            store,
            pools: Mutex::new(HashMap::new()),
            security,
        }
    }

    /// Sends `request` to broker `node` at the best common version up to `preferred`.
    pub async fn send<R>(
        &self,
        node: i32,
        request: R,
        preferred: i16,
    ) -> Result<R::Response, PeerError>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        let address = self
            .store
            .brokers()
            .into_iter()
            .find(|b| b.node_id == node)
            .map(|b| b.peer_address())
            .ok_or(PeerError::UnknownBroker(node))?;
        let pool = Arc::clone(
            self.pools
                .lock()
                .entry(node)
                .or_insert_with(|| Arc::new(Pool::new())),
        );
        let mut connection = pool.take().await;
        let client = match connection.take() {
            Some(client) if client.address() == address => client,
            _ => Client::connect_with(&address, "tern-broker", &self.security)
                .await
                .map_err(PeerError::Connect)?,
        };
        let client = connection.insert(client);
        match client.send(request, preferred).await {
            Ok((_, response)) => Ok(response),
            Err(error) => {
                // The connection's state is unknown after a failed exchange.
                *connection = None;
                Err(error.into())
            }
        }
    }
}
