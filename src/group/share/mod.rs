//! KIP-932 share groups: consumers that share partitions, each record acquired by
//! one of them at a time and acknowledged one by one (queues on Kafka's logs).
//!
//! - [`group`]: membership and the assignment, at the group's coordinator (pure).
//! - [`partition`]: one share-partition's delivery state — acquisition locks,
//!   delivery counts, acknowledgements and the share-partition start offset (pure).
//! - [`session`]: share sessions, the partitions a member fetches from a broker (pure).
//! - [`records`]: a share-partition's state as a record of the group's offsets
//!   partition.
//! - [`leader`]: the share-partitions this broker leads: loads their state from the
//!   group's coordinator on first use or a leader change, and stores it there after
//!   every acknowledgement before answering, through a [`StateStore`]
//!   (`api::share::persister` carries it, over Kafka when the coordinator is elsewhere).

pub mod group;
pub mod leader;
pub mod partition;
pub mod records;
pub mod session;

pub use group::{ShareAnswer, ShareGroup, ShareGroupConfig, ShareHeartbeat, JOIN_EPOCH};
pub use records::{ShareKey, ShareState};

/// Why a share-partition's state could not be read or stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    #[error("this broker does not coordinate the group")]
    NotCoordinator,
    #[error("a newer leader of the partition has taken its share state over")]
    FencedLeaderEpoch,
    #[error("the share state was reset since it was loaded")]
    FencedStateEpoch,
    #[error("storing the share state: {0}")]
    Storage(String),
    #[error("the group's coordinator could not be asked: {0}")]
    Unreachable(String),
    #[error("the group's coordinator cannot store it now: {0}")]
    Unavailable(String),
}

impl PersistError {
    /// Whether the coordinator is moving or out of reach, so that asking again
    /// (finding it anew) may succeed: Kafka's persister retries exactly these
    /// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a
    /// failed send). A fence is final.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::NotCoordinator | Self::Unreachable(_) | Self::Unavailable(_)
        )
    }
}

/// Where share-partition states are kept: the group's coordinator, here or elsewhere.
#[async_trait::async_trait]
pub trait StateStore: Send + Sync {
    /// The stored state of `key`, taken over by its leader at `leader_epoch` (older
    /// leaders are fenced from then on); a negative epoch only looks.
    async fn read(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, PersistError>;

    /// Stores `state` of `key`; `Ok` once it is durable.
    async fn write(&self, key: &ShareKey, state: ShareState) -> Result<(), PersistError>;
}
