//! The consumer protocol embedded in classic groups' JoinGroup and SyncGroup bytes
//! (Kafka's `ConsumerProtocolSubscription` and `ConsumerProtocolAssignment`, versions
//! 0–3, not flexible): what a classic member subscribes to and owns, and what it is
//! given. A consumer group reads them to take over a live classic group and to serve
//! classic members (online migration); the coordinator reads them for OffsetDelete.
//!
//! ```text
//! Subscription: version i16, topics [string], user_data bytes?,
//!               v1+ owned_partitions [topic string, partitions [i32]],
//!               v2+ generation_id i32, v3+ rack_id string?
//! Assignment:   version i16, assigned_partitions [topic string, partitions [i32]],
//!               user_data bytes?
//! ```

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, BytesMut};

/// Partitions by topic name (what the embedded protocol carries).
pub type NamedPartitions = BTreeMap<String, BTreeSet<i32>>;

/// A classic member's subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// What the member reports owning (v1+; cooperative members fill it).
    pub owned: NamedPartitions,
    pub rack_id: Option<String>,
}

/// The embedded bytes could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed embedded consumer protocol")]
pub struct Malformed;

/// Reads a subscription; a version above 3 is read as 3 (later versions only add
/// fields at the end, as Kafka's own reader assumes).
pub fn decode_subscription(raw: &[u8]) -> Result<Subscription, Malformed> {
    let mut r = Reader(raw);
    let version = r.i16()?;
    if version < 0 {
        return Err(Malformed);
    }
    let mut subscription = Subscription {
        version,
        ..Subscription::default()
    };
    for _ in 0..r.count()? {
        subscription.topics.push(r.string()?);
    }
    r.bytes()?;
    if version >= 1 {
        subscription.owned = r.partitions()?;
    }
    if version >= 2 {
        r.i32()?;
    }
    if version >= 3 {
        subscription.rack_id = r.nullable_string()?;
    }
    Ok(subscription)
}

/// The version a subscription is written in (the assignment answered is written in it).
pub fn version_of(raw: &[u8]) -> Result<i16, Malformed> {
    Reader(raw).i16()
}

/// Reads an assignment's partitions.
pub fn decode_assignment(raw: &[u8]) -> Result<NamedPartitions, Malformed> {
    let mut r = Reader(raw);
    if r.i16()? < 0 {
        return Err(Malformed);
    }
    let partitions = r.partitions()?;
    r.bytes()?;
    Ok(partitions)
}

/// Writes an assignment in `version` (0–3: they are alike), without user data.
pub fn encode_assignment(partitions: &NamedPartitions, version: i16) -> Vec<u8> {
    let mut w = BytesMut::new();
    w.put_i16(version.clamp(0, 3));
    put_partitions(&mut w, partitions);
    w.put_i32(-1);
    w.to_vec()
}

/// Writes a subscription (version 1, with what the member owns); for tests and tools.
pub fn encode_subscription(topics: &[&str], owned: &NamedPartitions) -> Vec<u8> {
    let mut w = BytesMut::new();
    w.put_i16(1);
    w.put_i32(topics.len() as i32);
    for topic in topics {
        put_string(&mut w, topic);
    }
    w.put_i32(-1);
    put_partitions(&mut w, owned);
    w.to_vec()
}

fn put_partitions(w: &mut BytesMut, partitions: &NamedPartitions) {
    w.put_i32(partitions.len() as i32);
    for (topic, ps) in partitions {
        put_string(w, topic);
        w.put_i32(ps.len() as i32);
        for p in ps {
            w.put_i32(*p);
        }
    }
}

fn put_string(w: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    w.put_i16(len as i16);
    w.put_slice(&s.as_bytes()[..len]);
}

/// Bounds-checked reads; a count is never trusted beyond the bytes left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(self.take(2)?.get_i16())
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(self.take(4)?.get_i32())
    }

    /// An array's count: -1 (null) reads as empty.
    fn count(&mut self) -> Result<usize, Malformed> {
        let n = self.i32()?;
        let n = usize::try_from(n.max(0)).map_err(|_| Malformed)?;
        if n > self.0.len() {
            return Err(Malformed);
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, Malformed> {
        self.nullable_string()?.ok_or(Malformed)
    }

    fn nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let raw = self.take(len as usize)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| Malformed)
    }

    fn bytes(&mut self) -> Result<(), Malformed> {
        let len = self.i32()?;
        if len > 0 {
            self.take(len as usize)?;
        }
        Ok(())
    }

    fn partitions(&mut self) -> Result<NamedPartitions, Malformed> {
        let mut out = NamedPartitions::new();
        for _ in 0..self.count()? {
            let topic = self.string()?;
            let mut ps = BTreeSet::new();
            for _ in 0..self.count()? {
                ps.insert(self.i32()?);
            }
            out.entry(topic).or_default().extend(ps);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_and_assignments_round_trip() -> Result<(), Malformed> {
        let owned: NamedPartitions = [("a".to_string(), BTreeSet::from([0, 2]))].into();
        let raw = encode_subscription(&["a", "b"], &owned);
        let read = decode_subscription(&raw)?;
        assert_eq!(read.topics, vec!["a", "b"]);
        assert_eq!(read.owned, owned);
        assert_eq!(version_of(&raw)?, 1);
        let assigned: NamedPartitions = [
            ("a".to_string(), BTreeSet::from([1])),
            ("b".to_string(), BTreeSet::from([0, 3])),
        ]
        .into();
        assert_eq!(
            decode_assignment(&encode_assignment(&assigned, 3))?,
            assigned
        );
        Ok(())
    }

    /// Hostile bytes (a JoinGroup's metadata is the client's) are refused or read,
    /// never a panic or an allocation beyond their length; every cut of a valid
    /// encoding is refused.
    #[test]
    fn hostile_bytes_never_panic() {
        let mut rng = crate::replication::sim::Rng::new(848);
        for _ in 0..20_000 {
            let len = rng.below(64) as usize;
            let raw: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = decode_subscription(&raw);
            let _ = decode_assignment(&raw);
        }
        let owned: NamedPartitions = [("orders".to_string(), BTreeSet::from([1, 2]))].into();
        let valid = encode_subscription(&["orders"], &owned);
        for cut in 0..valid.len() {
            assert_eq!(
                decode_subscription(&valid[..cut]),
                Err(Malformed),
                "cut at {cut}"
            );
        }
        let valid = encode_assignment(&owned, 0);
        for cut in 0..valid.len() {
            assert_eq!(
                decode_assignment(&valid[..cut]),
                Err(Malformed),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_version_0_subscription_owns_nothing_and_garbage_is_refused() -> Result<(), Malformed> {
        // version 0, one topic "t", null user data.
        let raw = [0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
        let read = decode_subscription(&raw)?;
        assert_eq!(read.topics, vec!["t"]);
        assert!(read.owned.is_empty());
        assert_eq!(
            decode_subscription(&[0, 1, 0x7f, 0xff, 0xff, 0xff]),
            Err(Malformed)
        );
        assert_eq!(decode_subscription(&[0xff, 0xff]), Err(Malformed));
        assert_eq!(decode_assignment(&[0, 0, 0, 0, 0, 9]), Err(Malformed));
        Ok(())
    }
}
