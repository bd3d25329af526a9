//! A consumer group's state as `__consumer_offsets` records, in Apache Kafka's formats
//! (its `group-coordinator` message schemas), so that a new coordinator resumes every
//! group with its epochs and assignments:
//!
//! ```text
//! key 3  ConsumerGroupMetadata            (group)          -> epoch
//! key 5  ConsumerGroupMemberMetadata      (group, member)  -> instance, rack, client,
//!                                                             subscription, assignor
//! key 6  ConsumerGroupTargetAssignmentMetadata (group)     -> assignment epoch
//! key 7  ConsumerGroupTargetAssignmentMember (group, member) -> target partitions
//! key 8  ConsumerGroupCurrentMemberAssignment (group, member) -> member epoch, previous
//!                                                             epoch, state, assigned,
//!                                                             pending revocation
//! ```
//! Keys are an i16 type then classic strings; values an i16 version (0) then Kafka's
//! flexible encoding (compact strings and arrays, empty tagged-field sections). A null
//! value deletes the key. [`Image`] is what the records say; [`diff`] the records that
//! turn one image into another, which is all a heartbeat writes.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, BytesMut};
use uuid::Uuid;

use super::assignor::Assignment;

pub const GROUP_EPOCH_KEY: i16 = 3;
pub const MEMBER_KEY: i16 = 5;
pub const TARGET_EPOCH_KEY: i16 = 6;
pub const TARGET_MEMBER_KEY: i16 = 7;
pub const CURRENT_KEY: i16 = 8;

/// Where a member is in reconciling to its target assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    /// It must release partitions before it may advance its epoch.
    UnrevokedPartitions,
    /// Some partitions of its target are still owned by others.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

/// What a member's metadata record holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set while the member speaks the classic protocol (tagged field 0).
    pub classic: Option<ClassicMemberMetadata>,
}

/// What a consumer group keeps of a member that joined with JoinGroup (Kafka's
/// `ClassicMemberMetadata`): enough to keep answering it in the classic protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// `(protocol name, metadata)`, in the member's order of preference.
    pub protocols: Vec<(String, bytes::Bytes)>,
}

/// What a member's current-assignment record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// One consumer group as its records describe it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Image {
    pub epoch: Option<i32>,
    pub assignment_epoch: Option<i32>,
    pub members: BTreeMap<String, MemberMetadata>,
    pub targets: BTreeMap<String, Assignment>,
    pub current: BTreeMap<String, CurrentAssignment>,
}

/// A record key of one of the types above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub kind: i16,
    pub group: String,
    pub member: Option<String>,
}

/// One record to write: key bytes and value bytes (`None`: a tombstone).
pub type Record = (Vec<u8>, Option<Vec<u8>>);

impl Image {
    /// Applies one record (decoded key, raw value); false if the value is unreadable.
    pub fn apply(&mut self, key: &Key, value: Option<&[u8]>) -> bool {
        let member = key.member.clone().unwrap_or_default();
        match (key.kind, value) {
            (GROUP_EPOCH_KEY, Some(v)) => match Reader::value(v).and_then(|mut r| r.epoch()) {
                Some(epoch) => self.epoch = Some(epoch),
                None => return false,
            },
            (GROUP_EPOCH_KEY, None) => self.epoch = None,
            (TARGET_EPOCH_KEY, Some(v)) => match Reader::value(v).and_then(|mut r| r.epoch()) {
                Some(epoch) => self.assignment_epoch = Some(epoch),
                None => return false,
            },
            (TARGET_EPOCH_KEY, None) => self.assignment_epoch = None,
            (MEMBER_KEY, Some(v)) => match decode_member(v) {
                Some(m) => {
                    self.members.insert(member, m);
                }
                None => return false,
            },
            (MEMBER_KEY, None) => {
                self.members.remove(&member);
            }
            (TARGET_MEMBER_KEY, Some(v)) => match Reader::value(v).and_then(|mut r| {
                let a = r.assignment()?;
                r.skip_tags()?;
                Some(a)
            }) {
                Some(a) => {
                    self.targets.insert(member, a);
                }
                None => return false,
            },
            (TARGET_MEMBER_KEY, None) => {
                self.targets.remove(&member);
            }
            (CURRENT_KEY, Some(v)) => match decode_current(v) {
                Some(c) => {
                    self.current.insert(member, c);
                }
                None => return false,
            },
            (CURRENT_KEY, None) => {
                self.current.remove(&member);
            }
            _ => return false,
        }
        true
    }

    /// Whether the records describe a consumer group at all.
    pub fn exists(&self) -> bool {
        self.epoch.is_some()
    }
}

/// The records that turn `before` into `after` (tombstones for what went away).
pub fn diff(group: &str, before: &Image, after: &Image) -> Vec<Record> {
    let mut out = Vec::new();
    let key = |kind, member: Option<&str>| encode_key(kind, group, member);
    let epoch_value = |epoch: Option<i32>| {
        epoch.map(|e| {
            let mut w = value_writer();
            w.put_i32(e);
            w.put_u8(0);
            w.to_vec()
        })
    };
    // Members' records before the epochs that count them; removals last.
    for (id, m) in &after.members {
        if before.members.get(id) != Some(m) {
            out.push((key(MEMBER_KEY, Some(id)), Some(encode_member(m))));
        }
    }
    if before.epoch != after.epoch {
        out.push((key(GROUP_EPOCH_KEY, None), epoch_value(after.epoch)));
    }
    for (id, t) in &after.targets {
        if before.targets.get(id) != Some(t) {
            let mut w = value_writer();
            put_assignment(&mut w, t);
            w.put_u8(0);
            out.push((key(TARGET_MEMBER_KEY, Some(id)), Some(w.to_vec())));
        }
    }
    if before.assignment_epoch != after.assignment_epoch {
        out.push((
            key(TARGET_EPOCH_KEY, None),
            epoch_value(after.assignment_epoch),
        ));
    }
    for (id, c) in &after.current {
        if before.current.get(id) != Some(c) {
            out.push((key(CURRENT_KEY, Some(id)), Some(encode_current(c))));
        }
    }
    for id in before
        .current
        .keys()
        .filter(|id| !after.current.contains_key(*id))
    {
        out.push((key(CURRENT_KEY, Some(id)), None));
    }
    for id in before
        .targets
        .keys()
        .filter(|id| !after.targets.contains_key(*id))
    {
        out.push((key(TARGET_MEMBER_KEY, Some(id)), None));
    }
    for id in before
        .members
        .keys()
        .filter(|id| !after.members.contains_key(*id))
    {
        out.push((key(MEMBER_KEY, Some(id)), None));
    }
    out
}

/// Decodes a key of the types above (`None` for any other type).
pub fn decode_key(raw: &[u8]) -> Option<Key> {
    let mut r = Reader(raw);
    let kind = r.i16()?;
    let group = r.classic_string()?;
    let member = match kind {
        MEMBER_KEY | TARGET_MEMBER_KEY | CURRENT_KEY => Some(r.classic_string()?),
        GROUP_EPOCH_KEY | TARGET_EPOCH_KEY => None,
        _ => return None,
    };
    Some(Key {
        kind,
        group,
        member,
    })
}

fn encode_key(kind: i16, group: &str, member: Option<&str>) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i16(kind);
    for s in std::iter::once(group).chain(member) {
        let len = s.len().min(i16::MAX as usize);
        out.put_i16(len as i16);
        out.put_slice(&s.as_bytes()[..len]);
    }
    out.to_vec()
}

fn value_writer() -> BytesMut {
    let mut w = BytesMut::new();
    w.put_i16(0);
    w
}

fn put_varint(w: &mut BytesMut, mut n: u64) {
    while n >= 0x80 {
        w.put_u8((n as u8) | 0x80);
        n >>= 7;
    }
    w.put_u8(n as u8);
}

fn put_compact_string(w: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            put_varint(w, s.len() as u64 + 1);
            w.put_slice(s.as_bytes());
        }
        None => put_varint(w, 0),
    }
}

fn put_assignment(w: &mut BytesMut, a: &Assignment) {
    put_varint(w, a.len() as u64 + 1);
    for (topic, partitions) in a {
        w.put_slice(topic.as_bytes());
        put_varint(w, partitions.len() as u64 + 1);
        for p in partitions {
            w.put_i32(*p);
        }
        w.put_u8(0);
    }
}

fn encode_member(m: &MemberMetadata) -> Vec<u8> {
    let mut w = value_writer();
    put_compact_string(&mut w, m.instance_id.as_deref());
    put_compact_string(&mut w, m.rack_id.as_deref());
    put_compact_string(&mut w, Some(&m.client_id));
    put_compact_string(&mut w, Some(&m.client_host));
    put_varint(&mut w, m.subscribed_topic_names.len() as u64 + 1);
    for name in &m.subscribed_topic_names {
        put_compact_string(&mut w, Some(name));
    }
    put_compact_string(&mut w, m.subscribed_topic_regex.as_deref());
    w.put_i32(m.rebalance_timeout_ms);
    put_compact_string(&mut w, m.server_assignor.as_deref());
    match &m.classic {
        None => w.put_u8(0),
        Some(classic) => {
            // One tagged field (tag 0), a nullable struct: its size counts the
            // leading 1 that says "present".
            let body = encode_classic(classic);
            put_varint(&mut w, 1);
            put_varint(&mut w, 0);
            put_varint(&mut w, body.len() as u64 + 1);
            put_varint(&mut w, 1);
            w.put_slice(&body);
        }
    }
    w.to_vec()
}

fn encode_classic(classic: &ClassicMemberMetadata) -> Vec<u8> {
    let mut w = BytesMut::new();
    w.put_i32(classic.session_timeout_ms);
    put_varint(&mut w, classic.protocols.len() as u64 + 1);
    for (name, metadata) in &classic.protocols {
        put_compact_string(&mut w, Some(name));
        put_varint(&mut w, metadata.len() as u64 + 1);
        w.put_slice(metadata);
        w.put_u8(0);
    }
    w.put_u8(0);
    w.to_vec()
}

fn decode_classic(raw: &[u8]) -> Option<Option<ClassicMemberMetadata>> {
    let mut r = Reader(raw);
    if r.varint()? == 0 {
        return Some(None);
    }
    let session_timeout_ms = r.i32()?;
    let count = r.compact_len()?;
    let mut protocols = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.compact_string()?.unwrap_or_default();
        let len = r.compact_len()?;
        let metadata = bytes::Bytes::copy_from_slice(r.take(len)?);
        r.skip_tags()?;
        protocols.push((name, metadata));
    }
    r.skip_tags()?;
    Some(Some(ClassicMemberMetadata {
        session_timeout_ms,
        protocols,
    }))
}

fn decode_member(raw: &[u8]) -> Option<MemberMetadata> {
    let mut r = Reader::value(raw)?;
    let instance_id = r.compact_string()?;
    let rack_id = r.compact_string()?;
    let client_id = r.compact_string()?.unwrap_or_default();
    let client_host = r.compact_string()?.unwrap_or_default();
    let count = r.compact_len()?;
    let mut subscribed_topic_names = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        subscribed_topic_names.push(r.compact_string()?.unwrap_or_default());
    }
    let subscribed_topic_regex = r.compact_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.compact_string()?;
    let mut classic = None;
    for _ in 0..r.varint()? {
        let tag = r.varint()?;
        let size = usize::try_from(r.varint()?).ok()?;
        let field = r.take(size)?;
        if tag == 0 {
            classic = decode_classic(field)?;
        }
    }
    Some(MemberMetadata {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    })
}

fn encode_current(c: &CurrentAssignment) -> Vec<u8> {
    let mut w = value_writer();
    w.put_i32(c.member_epoch);
    w.put_i32(c.previous_member_epoch);
    w.put_i8(match c.state {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    });
    put_assignment(&mut w, &c.assigned);
    put_assignment(&mut w, &c.pending_revocation);
    w.put_u8(0);
    w.to_vec()
}

fn decode_current(raw: &[u8]) -> Option<CurrentAssignment> {
    let mut r = Reader::value(raw)?;
    let member_epoch = r.i32()?;
    let previous_member_epoch = r.i32()?;
    // Kafka's UNKNOWN (127) and anything newer: reconcile again from scratch.
    let state = match r.i8()? {
        1 => MemberState::UnrevokedPartitions,
        2 => MemberState::UnreleasedPartitions,
        _ => MemberState::Stable,
    };
    let assigned = r.assignment()?;
    let pending_revocation = r.assignment()?;
    r.skip_tags()?;
    Some(CurrentAssignment {
        member_epoch,
        previous_member_epoch,
        state,
        assigned,
        pending_revocation,
    })
}

/// Reads what the writers above write; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// A value: version 0 (a newer version is not read).
    fn value(raw: &'a [u8]) -> Option<Self> {
        let mut r = Reader(raw);
        (r.i16()? == 0).then_some(r)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn i8(&mut self) -> Option<i8> {
        Some(self.take(1)?.get_i8())
    }

    fn i16(&mut self) -> Option<i16> {
        Some(self.take(2)?.get_i16())
    }

    fn i32(&mut self) -> Option<i32> {
        Some(self.take(4)?.get_i32())
    }

    fn varint(&mut self) -> Option<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            out |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(out);
            }
        }
        None
    }

    /// A compact array's length (its count is stored plus one; 0 is null, read as empty).
    fn compact_len(&mut self) -> Option<usize> {
        let n = usize::try_from(self.varint()?.saturating_sub(1)).ok()?;
        // Never more elements than bytes left: a corrupt length cannot allocate.
        (n <= self.0.len()).then_some(n)
    }

    fn compact_string(&mut self) -> Option<Option<String>> {
        match self.varint()? {
            0 => Some(None),
            n => {
                let len = usize::try_from(n - 1).ok()?;
                Some(Some(String::from_utf8(self.take(len)?.to_vec()).ok()?))
            }
        }
    }

    fn classic_string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }

    /// An epoch value: an i32 and its (empty) tagged fields.
    fn epoch(&mut self) -> Option<i32> {
        let epoch = self.i32()?;
        self.skip_tags()?;
        Some(epoch)
    }

    fn skip_tags(&mut self) -> Option<()> {
        for _ in 0..self.varint()? {
            let _tag = self.varint()?;
            let size = usize::try_from(self.varint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }

    fn assignment(&mut self) -> Option<Assignment> {
        let topics = self.compact_len()?;
        let mut out = Assignment::new();
        for _ in 0..topics {
            let id = Uuid::from_slice(self.take(16)?).ok()?;
            let count = self.compact_len()?;
            let mut partitions = std::collections::BTreeSet::new();
            for _ in 0..count {
                partitions.insert(self.i32()?);
            }
            self.skip_tags()?;
            out.insert(id, partitions);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_diff_and_apply() {
        let topic = Uuid::from_u128(77);
        let mut after = Image {
            epoch: Some(4),
            assignment_epoch: Some(4),
            ..Image::default()
        };
        after.members.insert(
            "m1".into(),
            MemberMetadata {
                instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                subscribed_topic_names: vec!["orders".into()],
                subscribed_topic_regex: Some("logs-.*".into()),
                rebalance_timeout_ms: 300_000,
                server_assignor: Some("range".into()),
                ..MemberMetadata::default()
            },
        );
        // A member still speaking the classic protocol keeps its protocols (tag 0).
        after.members.insert(
            "m2".into(),
            MemberMetadata {
                client_id: "old".into(),
                subscribed_topic_names: vec!["orders".into()],
                classic: Some(ClassicMemberMetadata {
                    session_timeout_ms: 10_000,
                    protocols: vec![
                        (
                            "cooperative-sticky".into(),
                            bytes::Bytes::from_static(b"\x00\x01abc"),
                        ),
                        ("range".into(), bytes::Bytes::new()),
                    ],
                }),
                ..MemberMetadata::default()
            },
        );
        after
            .targets
            .insert("m1".into(), [(topic, [0, 2].into())].into());
        after.current.insert(
            "m1".into(),
            CurrentAssignment {
                member_epoch: 4,
                previous_member_epoch: 3,
                state: MemberState::UnrevokedPartitions,
                assigned: [(topic, [0].into())].into(),
                pending_revocation: [(topic, [1].into())].into(),
            },
        );
        let mut replayed = Image::default();
        for (key, value) in diff("g", &Image::default(), &after) {
            let key = decode_key(&key).expect("key");
            assert_eq!(key.group, "g");
            assert!(replayed.apply(&key, value.as_deref()));
        }
        assert_eq!(replayed, after);
        // The member leaves: tombstones take it out again.
        let mut gone = after.clone();
        gone.members.clear();
        gone.targets.clear();
        gone.current.clear();
        gone.epoch = Some(5);
        for (key, value) in diff("g", &after, &gone) {
            assert!(replayed.apply(&decode_key(&key).expect("key"), value.as_deref()));
        }
        assert_eq!(replayed, gone);
        // Truncated values are refused, not misread.
        for (key, value) in diff("g", &Image::default(), &after) {
            let value = value.expect("value");
            for cut in 0..value.len() {
                let key = decode_key(&key).expect("key");
                assert!(!Image::default().apply(&key, Some(&value[..cut])));
            }
        }
    }
}
