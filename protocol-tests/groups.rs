//! Consumer-group helpers: version-aware builders for FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit/OffsetFetch, DescribeGroups,
//! ListGroups, DeleteGroups and OffsetDelete, the embedded consumer protocol, and
//! requests that park (JoinGroup, follower SyncGroup) run on their own thread.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    consumer_protocol_assignment, join_group_request, leave_group_request, offset_commit_request,
    offset_delete_request, offset_fetch_request, sync_group_request, ApiKey,
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, DeleteGroupsRequest,
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::broker::unique_name;
use crate::client::{api_name, response_header_version, Client, Outcome};
use crate::ops::*;

pub const CONSUMER: &str = "consumer";
/// Session timeout of the suite's members: inside Kafka's default [6 s, 30 min].
pub const SESSION_MS: i32 = 30_000;
/// Rebalance timeout of the suite's members (how long a rebalance waits for them).
pub const REBALANCE_MS: i32 = 30_000;
/// Read timeout of connections that send requests the broker may park.
pub const PARKED_READ_TIMEOUT: Duration = Duration::from_secs(90);

pub fn gid(s: &str) -> GroupId {
    GroupId(sb(s))
}

pub fn unique_group(prefix: &str) -> String {
    unique_name(&format!("g-{prefix}"))
}

fn s_of(s: &StrBytes) -> String {
    s.as_str().to_string()
}

pub fn opt_s(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|x| x.as_str().to_string())
}

// ------------------------------------------------------------------ bounded calls

/// Sends a request and waits at most `within` for its (strictly decoded) response; a
/// parked request or a closed connection is an Err describing it, not a panic.
pub fn call_within<R: kafka_protocol::protocol::Request>(
    c: &mut Client,
    v: i16,
    req: &R,
    within: Duration,
) -> Result<R::Response, String> {
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;
    let what = format!("{} v{v}", api_name(R::KEY));
    let corr = c.send(v, req);
    let frame = match c.wait_outcome(within) {
        Outcome::Frame(f) => f,
        Outcome::Closed => return Err(format!("{what}: connection closed without an answer")),
        Outcome::Timeout => return Err(format!("{what}: no answer within {within:?}")),
    };
    let mut buf = Bytes::from(frame);
    let hv = response_header_version(R::KEY, v);
    let h = kafka_protocol::messages::ResponseHeader::decode(&mut buf, hv)
        .map_err(|e| format!("{what}: bad response header: {e}"))?;
    if h.correlation_id != corr {
        return Err(format!(
            "{what}: correlation id {} (expected {corr})",
            h.correlation_id
        ));
    }
    let r = R::Response::decode(&mut buf, v)
        .map_err(|e| format!("{what}: cannot decode the response: {e}"))?;
    if buf.remaining() != 0 {
        return Err(format!(
            "{what}: {} trailing bytes after the response",
            buf.remaining()
        ));
    }
    Ok(r)
}

// ------------------------------------------------------------------ context

/// The group-coordinator APIs every group test needs.
pub const GROUP_APIS: &[ApiKey] = &[
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
];

/// A context for group tests: fails early (and clearly) when the broker does not
/// advertise the consumer-group APIs.
pub fn group_ctx(extra: &[&str]) -> Ctx {
    let ctx = Ctx::with_args(extra);
    let missing: Vec<String> = GROUP_APIS
        .iter()
        .filter(|k| ctx.versions(**k, i16::MIN, i16::MAX).is_empty())
        .map(|k| format!("{k:?}"))
        .collect();
    assert!(
        missing.is_empty(),
        "the broker does not advertise the consumer-group APIs {missing:?} (ApiVersions)"
    );
    // Kafka creates __consumer_offsets on first use; wait until coordinators answer.
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, "pt-coordinator-probe");
    ctx
}

// ------------------------------------------------------------------ consumer protocol

/// ConsumerProtocolSubscription (version prefix + v0 body, the prefix all versions share).
pub fn subscription(topics: &[&str]) -> Bytes {
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|t| sb(t)).collect())
        .with_user_data(None);
    let mut b = BytesMut::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    sub.encode(&mut b, 0).expect("encode subscription");
    b.freeze()
}

/// ConsumerProtocolAssignment v0 with a version prefix.
pub fn assignment(parts: &[(&str, &[i32])]) -> Bytes {
    let a = ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            parts
                .iter()
                .map(|(t, ps)| {
                    consumer_protocol_assignment::TopicPartition::default()
                        .with_topic(tn(t))
                        .with_partitions(ps.to_vec())
                })
                .collect(),
        )
        .with_user_data(None);
    let mut b = BytesMut::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    a.encode(&mut b, 0).expect("encode assignment");
    b.freeze()
}

// ------------------------------------------------------------------ FindCoordinator

pub const KEY_GROUP: i8 = 0;
pub const KEY_TRANSACTION: i8 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct Coord {
    pub key: String,
    pub error: i16,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// FindCoordinator for several keys of one type; v0-3 send one request per key.
pub fn find_coordinators(c: &mut Client, v: i16, key_type: i8, keys: &[&str]) -> Vec<Coord> {
    if v >= 4 {
        let r = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(keys.iter().map(|k| sb(k)).collect());
        let resp = c.call(v, &r);
        return resp
            .coordinators
            .iter()
            .map(|co| Coord {
                key: s_of(&co.key),
                error: co.error_code,
                node_id: *co.node_id,
                host: s_of(&co.host),
                port: co.port,
            })
            .collect();
    }
    keys.iter()
        .map(|k| {
            let mut r = FindCoordinatorRequest::default().with_key(sb(k));
            if v >= 1 {
                r = r.with_key_type(key_type);
            } else {
                assert_eq!(
                    key_type, KEY_GROUP,
                    "test bug: FindCoordinator v0 is group-only"
                );
            }
            let resp = c.call(v, &r);
            Coord {
                key: k.to_string(),
                error: resp.error_code,
                node_id: *resp.node_id,
                host: s_of(&resp.host),
                port: resp.port,
            }
        })
        .collect()
}

/// Polls FindCoordinator (newest version) for a group until it answers without error
/// (Kafka creates __consumer_offsets lazily and answers COORDINATOR_NOT_AVAILABLE meanwhile),
/// then waits until the coordinator has loaded (OffsetFetch without COORDINATOR_LOAD_IN_PROGRESS).
pub fn wait_coordinator(ctx: &Ctx, c: &mut Client, group: &str) -> Coord {
    let v = ctx.max_version(ApiKey::FindCoordinator);
    let deadline = Instant::now() + Duration::from_secs(60);
    let coord = loop {
        let co = find_coordinators(c, v, KEY_GROUP, &[group]).remove(0);
        if co.error == NONE {
            break co;
        }
        assert!(
            [
                COORDINATOR_NOT_AVAILABLE,
                COORDINATOR_LOAD_IN_PROGRESS,
                NOT_COORDINATOR
            ]
            .contains(&co.error)
                && Instant::now() < deadline,
            "FindCoordinator v{v} for group {group}: {} (for 60 s)",
            ename(co.error)
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let fv = ctx.max_version(ApiKey::OffsetFetch);
    loop {
        let (top, _) = offset_fetch_raw(c, fv, group, Some(&[]));
        if top != COORDINATOR_LOAD_IN_PROGRESS || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    coord
}

// ------------------------------------------------------------------ JoinGroup

#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub group: String,
    pub member_id: String,
    pub instance: Option<String>,
    pub session_ms: i32,
    pub rebalance_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

impl JoinSpec {
    /// A consumer ("consumer" protocol type, "range" then "roundrobin") subscribing to `topics`.
    pub fn consumer(group: &str, topics: &[&str]) -> JoinSpec {
        let sub = subscription(topics);
        JoinSpec {
            group: group.to_string(),
            member_id: String::new(),
            instance: None,
            session_ms: SESSION_MS,
            rebalance_ms: REBALANCE_MS,
            protocol_type: CONSUMER.to_string(),
            protocols: vec![
                ("range".to_string(), sub.clone()),
                ("roundrobin".to_string(), sub),
            ],
        }
    }

    pub fn member(mut self, id: &str) -> JoinSpec {
        self.member_id = id.to_string();
        self
    }

    pub fn instance(mut self, id: &str) -> JoinSpec {
        self.instance = Some(id.to_string());
        self
    }

    pub fn session(mut self, ms: i32) -> JoinSpec {
        self.session_ms = ms;
        self
    }

    pub fn rebalance(mut self, ms: i32) -> JoinSpec {
        self.rebalance_ms = ms;
        self
    }

    pub fn protocol_type(mut self, t: &str) -> JoinSpec {
        self.protocol_type = t.to_string();
        self
    }

    pub fn protocols(mut self, ps: &[(&str, Bytes)]) -> JoinSpec {
        self.protocols = ps.iter().map(|(n, m)| (n.to_string(), m.clone())).collect();
        self
    }
}

pub fn join_req(v: i16, s: &JoinSpec) -> JoinGroupRequest {
    let mut r = JoinGroupRequest::default()
        .with_group_id(gid(&s.group))
        .with_session_timeout_ms(s.session_ms)
        .with_rebalance_timeout_ms(s.rebalance_ms)
        .with_member_id(sb(&s.member_id))
        .with_protocol_type(sb(&s.protocol_type))
        .with_protocols(
            s.protocols
                .iter()
                .map(|(n, m)| {
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(sb(n))
                        .with_metadata(m.clone())
                })
                .collect(),
        );
    if v >= 5 {
        r = r.with_group_instance_id(s.instance.as_deref().map(sb));
    } else {
        assert!(
            s.instance.is_none(),
            "test bug: JoinGroup v{v} has no group_instance_id"
        );
    }
    if v >= 8 {
        r = r.with_reason(Some(sb("protocol-tests")));
    }
    r
}

pub fn join_raw(c: &mut Client, v: i16, s: &JoinSpec) -> JoinGroupResponse {
    c.call(v, &join_req(v, s))
}

/// A joined member: its connection, ids and the JoinGroup answer that made it one.
#[derive(Debug)]
pub struct Member {
    pub c: Client,
    pub spec: JoinSpec,
    pub member_id: String,
    pub generation: i32,
    pub leader: String,
    pub protocol: Option<String>,
    pub join: JoinGroupResponse,
}

impl Member {
    pub fn is_leader(&self) -> bool {
        self.member_id == self.leader
    }
}

/// Joins like a real client: with JoinGroup v4+ and no instance id, the first answer is
/// MEMBER_ID_REQUIRED with the id to rejoin with. Returns the final response and the
/// spec (with the member id used). Asserts the MEMBER_ID_REQUIRED step.
pub fn join_dance(c: &mut Client, v: i16, spec: &JoinSpec) -> (JoinGroupResponse, JoinSpec) {
    let mut spec = spec.clone();
    let r = join_raw(c, v, &spec);
    if v >= 4 && spec.member_id.is_empty() && spec.instance.is_none() {
        assert_code!(
            r.error_code,
            MEMBER_ID_REQUIRED,
            "JoinGroup v{v} to {} with an empty member id",
            spec.group
        );
        assert!(
            !r.member_id.is_empty(),
            "JoinGroup v{v}: MEMBER_ID_REQUIRED without a member id"
        );
        spec.member_id = s_of(&r.member_id);
        let r2 = join_raw(c, v, &spec);
        return (r2, spec);
    }
    (r, spec)
}

/// Joins (v = newest JoinGroup) on a fresh connection and asserts success.
pub fn join_ok(ctx: &Ctx, spec: &JoinSpec) -> Member {
    let v = ctx.max_version(ApiKey::JoinGroup);
    let c = ctx.client();
    c.set_read_timeout(PARKED_READ_TIMEOUT);
    join_ok_on(c, v, spec)
}

pub fn join_ok_on(mut c: Client, v: i16, spec: &JoinSpec) -> Member {
    let (r, spec) = join_dance(&mut c, v, spec);
    assert_code!(r.error_code, NONE, "JoinGroup v{v} to {}", spec.group);
    member_from(c, spec, r)
}

pub fn member_from(c: Client, mut spec: JoinSpec, r: JoinGroupResponse) -> Member {
    spec.member_id = s_of(&r.member_id);
    Member {
        c,
        member_id: s_of(&r.member_id),
        generation: r.generation_id,
        leader: s_of(&r.leader),
        protocol: opt_s(&r.protocol_name),
        spec,
        join: r,
    }
}

/// The member rejoins with its member id (newest JoinGroup), returning the raw response.
pub fn rejoin(ctx: &Ctx, m: &mut Member) -> JoinGroupResponse {
    let v = ctx.max_version(ApiKey::JoinGroup);
    let spec = m.spec.clone().member(&m.member_id);
    let r = join_raw(&mut m.c, v, &spec);
    if r.error_code == NONE {
        m.generation = r.generation_id;
        m.leader = s_of(&r.leader);
        m.protocol = opt_s(&r.protocol_name);
        m.join = r.clone();
    }
    r
}

// ------------------------------------------------------------------ parked calls

/// A request running on its own thread (JoinGroup/SyncGroup may be parked by the broker).
#[derive(Debug)]
pub struct Pending<T: Send + 'static> {
    what: String,
    rx: mpsc::Receiver<T>,
    handle: Option<JoinHandle<()>>,
    got: Option<T>,
}

pub fn spawn<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn thread");
    Pending {
        what: what.to_string(),
        rx,
        handle: Some(handle),
        got: None,
    }
}

impl<T: Send + 'static> Pending<T> {
    fn poll(&mut self, d: Duration) -> bool {
        if self.got.is_some() {
            return true;
        }
        match self.rx.recv_timeout(d) {
            Ok(v) => {
                self.got = Some(v);
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The thread panicked: re-raise its panic here.
                if let Some(h) = self.handle.take() {
                    if let Err(p) = h.join() {
                        std::panic::resume_unwind(p);
                    }
                }
                panic!("{}: thread ended without a result", self.what);
            }
        }
    }

    /// True when no result arrived within `d`.
    pub fn still_pending(&mut self, d: Duration) -> bool {
        !self.poll(d)
    }

    pub fn wait(mut self, d: Duration) -> T {
        if !self.poll(d) {
            panic!("{}: no response within {d:?}", self.what);
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.got.take().expect("result")
    }
}

/// JoinGroup (with the MEMBER_ID_REQUIRED step) on its own connection and thread.
pub fn spawn_join(
    ctx: &Ctx,
    what: &str,
    spec: &JoinSpec,
) -> Pending<(Client, JoinSpec, JoinGroupResponse)> {
    let v = ctx.max_version(ApiKey::JoinGroup);
    let mut c = ctx.client();
    c.set_read_timeout(PARKED_READ_TIMEOUT);
    let spec = spec.clone();
    spawn(what, move || {
        let (r, spec) = join_dance(&mut c, v, &spec);
        (c, spec, r)
    })
}

/// The member rejoins on its own thread (moving its connection there).
pub fn spawn_rejoin(ctx: &Ctx, what: &str, mut m: Member) -> Pending<(Member, JoinGroupResponse)> {
    let v = ctx.max_version(ApiKey::JoinGroup);
    spawn(what, move || {
        let spec = m.spec.clone().member(&m.member_id);
        let r = join_raw(&mut m.c, v, &spec);
        if r.error_code == NONE {
            m.generation = r.generation_id;
            m.leader = s_of(&r.leader);
            m.protocol = opt_s(&r.protocol_name);
            m.join = r.clone();
        }
        (m, r)
    })
}

// ------------------------------------------------------------------ SyncGroup

pub fn sync_req(
    v: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
    protocol: Option<(&str, &str)>,
    assignments: &[(&str, Bytes)],
) -> SyncGroupRequest {
    let mut r = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(sb(member_id))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(sb(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        );
    if v >= 3 {
        r = r.with_group_instance_id(instance.map(sb));
    }
    if v >= 5 {
        if let Some((t, n)) = protocol {
            r = r
                .with_protocol_type(Some(sb(t)))
                .with_protocol_name(Some(sb(n)));
        }
    }
    r
}

/// SyncGroup for a member at newest version (with the protocol type/name of its join).
pub fn sync_member(ctx: &Ctx, m: &mut Member, assignments: &[(&str, Bytes)]) -> SyncGroupResponse {
    let v = ctx.max_version(ApiKey::SyncGroup);
    sync_member_v(m, v, assignments)
}

pub fn sync_member_v(m: &mut Member, v: i16, assignments: &[(&str, Bytes)]) -> SyncGroupResponse {
    let proto = m.protocol.clone().unwrap_or_default();
    let r = sync_req(
        v,
        &m.spec.group,
        m.generation,
        &m.member_id,
        m.spec.instance.as_deref(),
        Some((&m.spec.protocol_type, &proto)),
        assignments,
    );
    m.c.call(v, &r)
}

/// A follower's SyncGroup, which the broker parks until the leader's, on its own thread.
pub fn spawn_sync(ctx: &Ctx, what: &str, mut m: Member) -> Pending<(Member, SyncGroupResponse)> {
    let v = ctx.max_version(ApiKey::SyncGroup);
    spawn(what, move || {
        let r = sync_member_v(&mut m, v, &[]);
        (m, r)
    })
}

/// Joins a fresh single-member group and syncs it (leader assigns `assign` to itself):
/// the group is Stable afterwards.
pub fn stable_member(ctx: &Ctx, spec: &JoinSpec, assign: Bytes) -> Member {
    let mut m = join_ok(ctx, spec);
    assert!(
        m.is_leader(),
        "the only member of {} must lead it",
        spec.group
    );
    let id = m.member_id.clone();
    let r = sync_member(ctx, &mut m, &[(&id, assign.clone())]);
    assert_code!(
        r.error_code,
        NONE,
        "SyncGroup of the leader of {}",
        spec.group
    );
    assert_eq!(
        r.assignment, assign,
        "SyncGroup: the leader's own assignment"
    );
    m
}

// ------------------------------------------------------------------ Heartbeat

pub fn heartbeat_v(
    c: &mut Client,
    v: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    instance: Option<&str>,
) -> i16 {
    let mut r = HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(sb(member_id));
    if v >= 3 {
        r = r.with_group_instance_id(instance.map(sb));
    }
    c.call(v, &r).error_code
}

pub fn heartbeat(ctx: &Ctx, m: &mut Member) -> i16 {
    let v = ctx.max_version(ApiKey::Heartbeat);
    let g = m.spec.group.clone();
    let id = m.member_id.clone();
    let inst = m.spec.instance.clone();
    heartbeat_v(&mut m.c, v, &g, m.generation, &id, inst.as_deref())
}

/// Heartbeats every 200 ms until the answer is `code` (bounded by `within`); returns
/// the last answer.
pub fn heartbeat_until(ctx: &Ctx, m: &mut Member, code: i16, within: Duration) -> i16 {
    let deadline = Instant::now() + within;
    loop {
        let e = heartbeat(ctx, m);
        if e == code || Instant::now() > deadline {
            return e;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ------------------------------------------------------------------ LeaveGroup

/// LeaveGroup. v0-2 take exactly one member id; v3+ a batch of (member id, instance id).
pub fn leave(
    c: &mut Client,
    v: i16,
    group: &str,
    members: &[(&str, Option<&str>)],
) -> LeaveGroupResponse {
    let mut r = LeaveGroupRequest::default().with_group_id(gid(group));
    if v >= 3 {
        r = r.with_members(
            members
                .iter()
                .map(|(m, i)| {
                    let mut mi = leave_group_request::MemberIdentity::default()
                        .with_member_id(sb(m))
                        .with_group_instance_id(i.map(sb));
                    if v >= 5 {
                        mi = mi.with_reason(Some(sb("protocol-tests")));
                    }
                    mi
                })
                .collect(),
        );
    } else {
        assert_eq!(
            members.len(),
            1,
            "test bug: LeaveGroup v{v} takes one member"
        );
        assert!(
            members[0].1.is_none(),
            "test bug: LeaveGroup v{v} has no instance ids"
        );
        r = r.with_member_id(sb(members[0].0));
    }
    c.call(v, &r)
}

pub fn member_result<'a>(
    r: &'a LeaveGroupResponse,
    member_id: &str,
    instance: Option<&str>,
) -> Option<&'a MemberResponse> {
    r.members.iter().find(|m| {
        m.member_id.as_str() == member_id
            && m.group_instance_id.as_ref().map(|s| s.as_str()) == instance
    })
}

// ------------------------------------------------------------------ OffsetCommit

/// One partition to commit: (topic, partition, offset, leader epoch, metadata).
pub type CommitPart<'a> = (&'a str, i32, i64, i32, Option<&'a str>);

#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub generation: i32,
    pub member_id: &'a str,
    pub instance: Option<&'a str>,
}

/// A simple (non-member) committer: generation -1, empty member id.
pub const SIMPLE: Who<'static> = Who {
    generation: -1,
    member_id: "",
    instance: None,
};

impl Member {
    pub fn who(&self) -> Who<'_> {
        Who {
            generation: self.generation,
            member_id: &self.member_id,
            instance: self.spec.instance.as_deref(),
        }
    }
}

pub fn commit_req(v: i16, group: &str, who: Who, parts: &[CommitPart]) -> OffsetCommitRequest {
    let mut topics: Vec<offset_commit_request::OffsetCommitRequestTopic> = Vec::new();
    for (t, p, off, epoch, md) in parts {
        let mut part = offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(*p)
            .with_committed_offset(*off)
            .with_committed_metadata(md.map(sb));
        if v >= 6 {
            part = part.with_committed_leader_epoch(*epoch);
        }
        match topics.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(part),
            None => topics.push(
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(tn(t))
                    .with_partitions(vec![part]),
            ),
        }
    }
    let mut r = OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(who.generation)
        .with_member_id(sb(who.member_id))
        .with_topics(topics);
    if v >= 7 {
        r = r.with_group_instance_id(who.instance.map(sb));
    }
    if v <= 4 {
        r = r.with_retention_time_ms(-1);
    }
    r
}

/// Commits and returns (topic, partition, error) for every partition in the response,
/// asserting the response answers exactly the partitions asked for.
pub fn commit(
    c: &mut Client,
    v: i16,
    group: &str,
    who: Who,
    parts: &[CommitPart],
) -> Vec<(String, i32, i16)> {
    let resp = c.call(v, &commit_req(v, group, who, parts));
    let mut out = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.push((t.name.0.to_string(), p.partition_index, p.error_code));
        }
    }
    let mut asked: Vec<(String, i32)> =
        parts.iter().map(|(t, p, ..)| (t.to_string(), *p)).collect();
    let mut got: Vec<(String, i32)> = out.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
    asked.sort();
    got.sort();
    assert_eq!(
        got, asked,
        "OffsetCommit v{v} to {group}: response partitions"
    );
    out
}

/// Commits (newest OffsetCommit) and asserts every partition succeeded.
pub fn commit_ok(ctx: &Ctx, c: &mut Client, group: &str, who: Who, parts: &[CommitPart]) {
    let v = ctx.max_version(ApiKey::OffsetCommit);
    for (t, p, e) in commit(c, v, group, who, parts) {
        assert_code!(e, NONE, "OffsetCommit v{v} to group {group}, {t}/{p}");
    }
}

/// The single error code of a commit (all partitions must agree).
pub fn commit_code(c: &mut Client, v: i16, group: &str, who: Who, parts: &[CommitPart]) -> i16 {
    let res = commit(c, v, group, who, parts);
    let e = res[0].2;
    assert!(
        res.iter().all(|r| r.2 == e),
        "OffsetCommit v{v} to {group}: partitions answered different errors: {res:?}"
    );
    e
}

// ------------------------------------------------------------------ OffsetFetch

/// One fetched offset.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub error: i16,
}

fn fetch_group_req(
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> offset_fetch_request::OffsetFetchRequestGroup {
    offset_fetch_request::OffsetFetchRequestGroup::default()
        .with_group_id(gid(group))
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(tn(t))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }))
}

/// OffsetFetch for one group: (top-level / group error, offsets). `topics: None` = all
/// committed offsets of the group (v2+).
pub fn offset_fetch_raw(
    c: &mut Client,
    v: i16,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> (i16, Vec<Fetched>) {
    let mut r = offset_fetch_multi(c, v, &[(group, topics)]);
    assert_eq!(
        r.len(),
        1,
        "OffsetFetch v{v}: one group asked, {} answered",
        r.len()
    );
    let (g, e, f) = r.remove(0);
    assert_eq!(g, group, "OffsetFetch v{v}: group id of the answer");
    (e, f)
}

/// Partitions to fetch per topic: (topic, partitions).
pub type TopicParts<'a> = &'a [(&'a str, &'a [i32])];

/// OffsetFetch for several groups (v8+; below v8 exactly one group): per group
/// (group id, error, offsets). A group's topics `None` asks for all its offsets (v2+).
pub fn offset_fetch_multi(
    c: &mut Client,
    v: i16,
    groups: &[(&str, Option<TopicParts>)],
) -> Vec<(String, i16, Vec<Fetched>)> {
    if v >= 8 {
        let r = OffsetFetchRequest::default()
            .with_groups(
                groups
                    .iter()
                    .map(|(g, ts)| fetch_group_req(g, *ts))
                    .collect(),
            )
            .with_require_stable(false);
        let resp = c.call(v, &r);
        return resp
            .groups
            .iter()
            .map(|g| {
                let mut out = Vec::new();
                for t in &g.topics {
                    for p in &t.partitions {
                        out.push(Fetched {
                            topic: t.name.0.to_string(),
                            partition: p.partition_index,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: opt_s(&p.metadata),
                            error: p.error_code,
                        });
                    }
                }
                (g.group_id.0.to_string(), g.error_code, out)
            })
            .collect();
    }
    assert_eq!(
        groups.len(),
        1,
        "test bug: OffsetFetch v{v} takes one group"
    );
    let (group, topics) = groups[0];
    assert!(
        topics.is_some() || v >= 2,
        "test bug: OffsetFetch v{v} cannot ask for all topics"
    );
    let mut r = OffsetFetchRequest::default()
        .with_group_id(gid(group))
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(tn(t))
                        .with_partition_indexes(ps.to_vec())
                })
                .collect()
        }));
    if v >= 7 {
        r = r.with_require_stable(false);
    }
    let resp = c.call(v, &r);
    let mut out = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.push(Fetched {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: opt_s(&p.metadata),
                error: p.error_code,
            });
        }
    }
    vec![(group.to_string(), resp.error_code, out)]
}

/// Committed offset of one partition (newest OffsetFetch), asserting no error.
pub fn committed(ctx: &Ctx, c: &mut Client, group: &str, topic: &str, partition: i32) -> Fetched {
    let v = ctx.max_version(ApiKey::OffsetFetch);
    let (e, f) = offset_fetch_raw(c, v, group, Some(&[(topic, &[partition])]));
    assert_code!(e, NONE, "OffsetFetch v{v} for group {group}");
    let p = f
        .into_iter()
        .find(|x| x.topic == topic && x.partition == partition)
        .unwrap_or_else(|| {
            panic!("OffsetFetch v{v}: no answer for {topic}/{partition} of group {group}")
        });
    assert_code!(
        p.error,
        NONE,
        "OffsetFetch v{v} for group {group}, {topic}/{partition}"
    );
    p
}

pub fn find_fetched<'a>(f: &'a [Fetched], topic: &str, partition: i32) -> Option<&'a Fetched> {
    f.iter()
        .find(|x| x.topic == topic && x.partition == partition)
}

// ------------------------------------------------------------------ admin

pub fn describe_groups(c: &mut Client, v: i16, groups: &[&str]) -> Vec<DescribedGroup> {
    let mut r =
        DescribeGroupsRequest::default().with_groups(groups.iter().map(|g| gid(g)).collect());
    if v >= 3 {
        r = r.with_include_authorized_operations(false);
    }
    let resp = c.call(v, &r);
    assert_eq!(
        resp.groups.len(),
        groups.len(),
        "DescribeGroups v{v}: {} groups asked, {} described",
        groups.len(),
        resp.groups.len()
    );
    resp.groups
}

pub fn describe_group(ctx: &Ctx, c: &mut Client, group: &str) -> DescribedGroup {
    let v = ctx.max_version(ApiKey::DescribeGroups);
    let g = describe_groups(c, v, &[group]).remove(0);
    assert_eq!(
        g.group_id.0.as_str(),
        group,
        "DescribeGroups v{v}: group id"
    );
    g
}

/// The group's state per DescribeGroups (newest version).
pub fn group_state(ctx: &Ctx, c: &mut Client, group: &str) -> String {
    describe_group(ctx, c, group).group_state.to_string()
}

/// Polls DescribeGroups until the group is in `state` (bounded); returns the last state.
pub fn wait_state(ctx: &Ctx, c: &mut Client, group: &str, state: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let s = group_state(ctx, c, group);
        if s == state || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn list_groups(c: &mut Client, v: i16, states: &[&str], types: &[&str]) -> ListGroupsResponse {
    let mut r = ListGroupsRequest::default();
    if v >= 4 {
        r = r.with_states_filter(states.iter().map(|s| sb(s)).collect());
    } else {
        assert!(
            states.is_empty(),
            "test bug: ListGroups v{v} has no states filter"
        );
    }
    if v >= 5 {
        r = r.with_types_filter(types.iter().map(|s| sb(s)).collect());
    } else {
        assert!(
            types.is_empty(),
            "test bug: ListGroups v{v} has no types filter"
        );
    }
    c.call(v, &r)
}

pub fn delete_groups(c: &mut Client, v: i16, groups: &[&str]) -> Vec<(String, i16)> {
    let r =
        DeleteGroupsRequest::default().with_groups_names(groups.iter().map(|g| gid(g)).collect());
    let resp = c.call(v, &r);
    resp.results
        .iter()
        .map(|r| (r.group_id.0.to_string(), r.error_code))
        .collect()
}

pub fn delete_group_code(c: &mut Client, v: i16, group: &str) -> i16 {
    let r = delete_groups(c, v, &[group]);
    assert_eq!(
        r.len(),
        1,
        "DeleteGroups v{v}: one group asked, {} answered",
        r.len()
    );
    assert_eq!(r[0].0, group, "DeleteGroups v{v}: group id of the answer");
    r[0].1
}

pub fn offset_delete(
    c: &mut Client,
    group: &str,
    topics: &[(&str, &[i32])],
) -> OffsetDeleteResponse {
    let r = OffsetDeleteRequest::default()
        .with_group_id(gid(group))
        .with_topics(
            topics
                .iter()
                .map(|(t, ps)| {
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(tn(t))
                        .with_partitions(
                            ps.iter()
                                .map(|p| {
                                    offset_delete_request::OffsetDeleteRequestPartition::default()
                                        .with_partition_index(*p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    c.call(0, &r)
}

/// Per-partition errors of an OffsetDelete response.
pub fn offset_delete_parts(r: &OffsetDeleteResponse) -> Vec<(String, i32, i16)> {
    let mut out = Vec::new();
    for t in &r.topics {
        for p in &t.partitions {
            out.push((t.name.0.to_string(), p.partition_index, p.error_code));
        }
    }
    out
}

/// Two members of a fresh group, Stable at generation 2: A joins and syncs alone
/// (generation 1), B joins (parked), A learns of the rebalance by heartbeat and rejoins,
/// then A (the leader) assigns `asg_a` / `asg_b` while B's SyncGroup is parked.
pub fn two_member_group(
    ctx: &Ctx,
    spec_a: &JoinSpec,
    spec_b: &JoinSpec,
    asg_a: Bytes,
    asg_b: Bytes,
) -> (Member, Member) {
    let group = spec_a.group.clone();
    let mut a = stable_member(ctx, spec_a, asg_a.clone());
    let pb = spawn_join(ctx, "second member's JoinGroup", spec_b);
    let e = heartbeat_until(ctx, &mut a, REBALANCE_IN_PROGRESS, Duration::from_secs(20));
    assert_code!(
        e,
        REBALANCE_IN_PROGRESS,
        "heartbeat of the first member of {group} after a second member joined"
    );
    let ra = rejoin(ctx, &mut a);
    assert_code!(ra.error_code, NONE, "rejoin of the first member of {group}");
    let (cb, specb, rb) = pb.wait(Duration::from_secs(60));
    assert_code!(
        rb.error_code,
        NONE,
        "JoinGroup of the second member of {group}"
    );
    let b = member_from(cb, specb, rb);
    assert_eq!(
        a.generation, b.generation,
        "both members of {group} must get the same generation"
    );
    assert!(
        a.is_leader(),
        "the first member keeps leading {group} (leader {:?})",
        a.leader
    );
    let pbs = spawn_sync(ctx, "second member's SyncGroup", b);
    let b_id = pbs_member_id(&ra, &a.member_id);
    let ra_id = a.member_id.clone();
    let r = sync_member(
        ctx,
        &mut a,
        &[(&ra_id, asg_a.clone()), (&b_id, asg_b.clone())],
    );
    assert_code!(r.error_code, NONE, "leader's SyncGroup of {group}");
    assert_eq!(r.assignment, asg_a, "leader's assignment in {group}");
    let (b, rbs) = pbs.wait(Duration::from_secs(60));
    assert_code!(rbs.error_code, NONE, "follower's SyncGroup of {group}");
    assert_eq!(rbs.assignment, asg_b, "follower's assignment in {group}");
    (a, b)
}

/// The other member's id from the leader's JoinGroup member list.
fn pbs_member_id(leader_join: &JoinGroupResponse, leader_id: &str) -> String {
    let others: Vec<String> = leader_join
        .members
        .iter()
        .map(|m| s_of(&m.member_id))
        .filter(|m| m != leader_id)
        .collect();
    assert_eq!(
        others.len(),
        1,
        "leader's JoinGroup members besides itself: {others:?}"
    );
    others[0].clone()
}
