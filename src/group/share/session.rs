//! Share sessions (KIP-932): which share-partitions a member fetches from this broker.
//!
//! A member's ShareFetch names a partition only when it adds it (or acknowledges in
//! it); later requests are incremental and often empty, and the broker fetches from
//! every partition in the session. The epoch orders the requests: 0 opens a new
//! session (the next request carries 1), each answer moves it on, -1 closes it after
//! its acknowledgements, and a request with any other epoch than the expected one is
//! refused, so a client that lost track starts over at 0 with all its partitions.

use std::collections::{BTreeSet, HashMap};

use uuid::Uuid;

/// The epoch that opens a session.
pub const OPEN_EPOCH: i32 = 0;
/// The epoch that closes one.
pub const FINAL_EPOCH: i32 = -1;

/// A partition of a session: topic id and partition index.
pub type SessionPartition = (Uuid, i32);

/// Why a request's session was refused (each one Kafka error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("share session not found")]
    NotFound,
    #[error("invalid share session epoch")]
    InvalidEpoch,
    #[error("the broker holds as many share sessions as it may")]
    LimitReached,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    partitions: BTreeSet<SessionPartition>,
    last_used_ms: u64,
}

/// The sessions of this broker, by (group id, member id).
#[derive(Debug)]
pub struct ShareSessions {
    sessions: HashMap<(String, String), Session>,
    max_sessions: usize,
    /// A full cache evicts a session unused this long to make room.
    idle_eviction_ms: u64,
}

/// What a request's session asks for.
#[derive(Debug)]
pub struct SessionRequest<'a> {
    pub group_id: &'a str,
    pub member_id: &'a str,
    pub epoch: i32,
    pub added: &'a [SessionPartition],
    pub forgotten: &'a [SessionPartition],
}

impl ShareSessions {
    pub fn new(max_sessions: usize, idle_eviction_ms: u64) -> Self {
        Self {
            sessions: HashMap::new(),
            max_sessions,
            idle_eviction_ms,
        }
    }

    /// Applies a ShareFetch's (or ShareAcknowledge's, with nothing added) session
    /// part; the partitions to fetch from. A final request leaves the session in place
    /// for [`Self::close`], which the caller runs after the acknowledgements.
    pub fn update(
        &mut self,
        request: SessionRequest<'_>,
        now_ms: u64,
    ) -> Result<Vec<SessionPartition>, SessionError> {
        let key = (request.group_id.to_string(), request.member_id.to_string());
        if request.epoch == OPEN_EPOCH {
            self.sessions.remove(&key);
            if self.sessions.len() >= self.max_sessions && !self.evict_idle(now_ms) {
                return Err(SessionError::LimitReached);
            }
            let session = Session {
                next_epoch: next_epoch(OPEN_EPOCH),
                partitions: request.added.iter().copied().collect(),
                last_used_ms: now_ms,
            };
            let partitions = session.partitions.iter().copied().collect();
            self.sessions.insert(key, session);
            return Ok(partitions);
        }
        let session = self.sessions.get_mut(&key).ok_or(SessionError::NotFound)?;
        if request.epoch != FINAL_EPOCH && request.epoch != session.next_epoch {
            return Err(SessionError::InvalidEpoch);
        }
        session.partitions.extend(request.added.iter().copied());
        for forgotten in request.forgotten {
            session.partitions.remove(forgotten);
        }
        session.last_used_ms = now_ms;
        if request.epoch != FINAL_EPOCH {
            session.next_epoch = next_epoch(request.epoch);
        }
        Ok(session.partitions.iter().copied().collect())
    }

    /// Ends a session (final epoch); the partitions it had, whose acquisitions by the
    /// member the caller releases.
    pub fn close(&mut self, group_id: &str, member_id: &str) -> Vec<SessionPartition> {
        let key = (group_id.to_string(), member_id.to_string());
        self.sessions
            .remove(&key)
            .map(|s| s.partitions.into_iter().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Drops the least recently used session if it has been idle long enough.
    fn evict_idle(&mut self, now_ms: u64) -> bool {
        let oldest = self
            .sessions
            .iter()
            .min_by_key(|(_, s)| s.last_used_ms)
            .filter(|(_, s)| now_ms.saturating_sub(s.last_used_ms) >= self.idle_eviction_ms)
            .map(|(key, _)| key.clone());
        oldest.is_some_and(|key| self.sessions.remove(&key).is_some())
    }
}

/// Kafka's `ShareRequestMetadata.nextEpoch`: past i32::MAX it wraps to 1, never to the
/// open or final epoch.
fn next_epoch(epoch: i32) -> i32 {
    match epoch {
        i32::MAX => 1,
        e => e + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Uuid = Uuid::from_u128(1);

    fn request<'a>(
        epoch: i32,
        added: &'a [SessionPartition],
        forgotten: &'a [SessionPartition],
    ) -> SessionRequest<'a> {
        SessionRequest {
            group_id: "g",
            member_id: "m",
            epoch,
            added,
            forgotten,
        }
    }

    #[test]
    fn a_session_is_incremental_and_ordered_by_its_epoch() {
        let mut sessions = ShareSessions::new(10, 1_000);
        let opened = sessions.update(request(0, &[(T, 0)], &[]), 0);
        assert_eq!(opened, Ok(vec![(T, 0)]));
        let next = sessions.update(request(1, &[(T, 1)], &[]), 0);
        assert_eq!(next, Ok(vec![(T, 0), (T, 1)]));
        let empty = sessions.update(request(2, &[], &[(T, 0)]), 0);
        assert_eq!(empty, Ok(vec![(T, 1)]));
        assert_eq!(
            sessions.update(request(2, &[], &[]), 0),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(sessions.update(request(-1, &[], &[]), 0), Ok(vec![(T, 1)]));
        assert_eq!(sessions.close("g", "m"), vec![(T, 1)]);
        assert_eq!(
            sessions.update(request(4, &[], &[]), 0),
            Err(SessionError::NotFound)
        );
    }

    #[test]
    fn a_full_cache_evicts_only_idle_sessions() {
        let mut sessions = ShareSessions::new(1, 1_000);
        let other = SessionRequest {
            member_id: "n",
            ..request(0, &[], &[])
        };
        assert!(sessions.update(request(0, &[], &[]), 0).is_ok());
        assert_eq!(sessions.update(other, 500), Err(SessionError::LimitReached));
        let other = SessionRequest {
            member_id: "n",
            ..request(0, &[], &[])
        };
        assert!(sessions.update(other, 1_000).is_ok());
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn the_epoch_wraps_past_the_largest() {
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(5), 6);
    }
}
