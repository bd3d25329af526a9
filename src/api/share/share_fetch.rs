//! ShareFetch (key 78, v1): a share-group member's fetch from the partitions this
//! broker leads. In one request: the share session moves on (`group::share::session`),
//! the acknowledgements it carries are applied and stored, and records are acquired
//! for the member from every partition of its session — the whole log batches that
//! hold them, with the acquired offset ranges and their delivery counts, which the
//! client filters by. Long poll: with nothing to acquire it waits for new records (or
//! for locks to time out) up to `max_wait_ms`. A share-partition whose state cannot be
//! loaded because its group's coordinator is moving is answered with nothing and tried
//! again while the fetch waits, as Kafka answers one still initializing; only a failure
//! that outlasts `limits::SHARE_STATE_LOADING_GRACE` is answered with the error (which
//! librdkafka raises to the application).
//!
//! Kafka's rules, as its `SharePartitionManager` applies them: acknowledgements on a
//! session-opening request are an INVALID_REQUEST, session errors are top-level, and
//! every partition that carried acknowledgements is answered with its
//! `acknowledge_error_code`. Records are never null (librdkafka reads a null as a
//! malformed set).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::super::context::RequestContext;
use super::super::str_bytes;
use super::persister::Persister;
use super::{acknowledge, count, led_partition, persist_error, persister, WireBatches};
use crate::group::share::leader::HoldError;
use crate::group::share::partition::Acquired;
use crate::group::share::session::{self, SessionRequest, FINAL_EPOCH, OPEN_EPOCH};
use crate::group::share::ShareKey;
use crate::security::acl::AclOperation;

/// `max_records` when the client names none.
const DEFAULT_MAX_RECORDS: usize = 500;
/// How often a waiting fetch looks again for records whose locks timed out.
const LOCK_RECHECK: Duration = Duration::from_millis(250);

type PartitionKey = (Uuid, i32);

pub async fn handle(ctx: &RequestContext, request: ShareFetchRequest) -> ShareFetchResponse {
    let lock_ms = ctx.services.shares.config().partition.lock_duration_ms;
    let answer = ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX));
    let group_id = request.group_id.as_ref().map(|g| g.to_string());
    let member_id = request.member_id.as_ref().map(|m| m.to_string());
    let (Some(group_id), Some(member_id)) = (
        group_id.filter(|g| !g.is_empty()),
        member_id.filter(|m| !m.is_empty()),
    ) else {
        return refused(
            answer,
            ResponseError::InvalidRequest,
            "GroupId and MemberId are required.",
        );
    };
    if !ctx.authorize_group(AclOperation::Read, &group_id) {
        return refused(answer, ResponseError::GroupAuthorizationFailed, "");
    }
    // The lock this group's records get (its share.record.lock.duration.ms).
    let lock_ms = ctx
        .services
        .groups
        .group_configs()
        .settings(&group_id)
        .share_record_lock_duration_ms;
    let answer =
        answer.with_acquisition_lock_timeout_ms(i32::try_from(lock_ms).unwrap_or(i32::MAX));
    let (named, acks) = merged(&request);
    let epoch = request.share_session_epoch;
    if epoch == OPEN_EPOCH && !acks.is_empty() {
        return refused(
            answer,
            ResponseError::InvalidRequest,
            "Acknowledge data present on initial fetch request.",
        );
    }
    let fetch_only: Vec<PartitionKey> = named
        .iter()
        .filter(|p| !acks.contains_key(p))
        .copied()
        .collect();
    if epoch == FINAL_EPOCH && !fetch_only.is_empty() {
        return refused(
            answer,
            ResponseError::InvalidRequest,
            "A final share fetch may only acknowledge.",
        );
    }
    let forgotten: Vec<PartitionKey> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |&p| (t.topic_id, p)))
        .collect();
    let added = match epoch {
        FINAL_EPOCH => Vec::new(),
        _ => named.clone(),
    };
    let updated = ctx.services.shares.sessions().update(
        SessionRequest {
            group_id: &group_id,
            member_id: &member_id,
            epoch,
            added: &added,
            forgotten: &forgotten,
        },
        crate::model::monotonic_ms(),
    );
    let session_partitions = match updated {
        Ok(partitions) => partitions,
        Err(error) => return refused(answer, session_error(error), ""),
    };
    let persister = persister(ctx);
    let mut out: BTreeMap<PartitionKey, PartitionData> = BTreeMap::new();
    for (&(topic_id, index), wire) in &acks {
        let result = acknowledge(
            ctx, &persister, &group_id, &member_id, topic_id, index, wire,
        )
        .await;
        let data = entry(index).with_acknowledge_error_code(result.err().map_or(0, |e| e.code()));
        out.insert((topic_id, index), data);
    }
    if epoch == FINAL_EPOCH {
        let closed = ctx.services.shares.sessions().close(&group_id, &member_id);
        super::release_session(ctx, &persister, &group_id, &member_id, &closed).await;
        return answer.with_responses(responses(out));
    }
    let mut fetch = Fetch {
        persister,
        verify: epoch == OPEN_EPOCH,
        group_id: &group_id,
        member_id: &member_id,
        max_records: usize::try_from(request.max_records)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_MAX_RECORDS),
        max_bytes: u64::try_from(request.max_bytes).unwrap_or(0).max(1),
    };
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0))
        .min(ctx.services.server.fetch_max_wait);
    let deadline = Instant::now() + max_wait;
    loop {
        let attempt = fetch.once(ctx, &session_partitions).await;
        // A share-partition still loading was not verified either: the next pass does.
        fetch.verify &= attempt.loading;
        let now = Instant::now();
        if attempt.acquired || attempt.failed || now >= deadline || session_partitions.is_empty() {
            for (key, data) in attempt.partitions {
                let merged_entry = match out.remove(&key) {
                    Some(acked) => data.with_acknowledge_error_code(acked.acknowledge_error_code),
                    None => data,
                };
                out.insert(key, merged_entry);
            }
            return answer.with_responses(responses(out));
        }
        wait_for_records(attempt.watches, deadline.min(now + LOCK_RECHECK)).await;
    }
}

/// The request's partitions, each topic id merged once (librdkafka may repeat one),
/// and their acknowledgement batches.
fn merged(request: &ShareFetchRequest) -> (Vec<PartitionKey>, BTreeMap<PartitionKey, WireBatches>) {
    let mut named = Vec::new();
    let mut acks: BTreeMap<PartitionKey, WireBatches> = BTreeMap::new();
    for topic in &request.topics {
        for partition in &topic.partitions {
            let key = (topic.topic_id, partition.partition_index);
            if !named.contains(&key) {
                named.push(key);
            }
            if !partition.acknowledgement_batches.is_empty() {
                acks.entry(key).or_default().extend(
                    partition
                        .acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
            }
        }
    }
    (named, acks)
}

struct Fetch<'a> {
    persister: Persister<'a>,
    /// Check with the coordinator that the share-partitions were not reset since they
    /// were loaded (a new session's first fetch).
    verify: bool,
    group_id: &'a str,
    member_id: &'a str,
    max_records: usize,
    max_bytes: u64,
}

struct Attempt {
    partitions: Vec<(PartitionKey, PartitionData)>,
    acquired: bool,
    failed: bool,
    /// A share-partition's state could not be loaded yet (its coordinator is moving):
    /// answered with nothing, and tried again while the fetch waits.
    loading: bool,
    watches: Vec<watch::Receiver<i64>>,
}

impl Fetch<'_> {
    /// One pass over the session's partitions, acquiring what there is.
    async fn once(&self, ctx: &RequestContext, partitions: &[PartitionKey]) -> Attempt {
        let mut attempt = Attempt {
            partitions: Vec::with_capacity(partitions.len()),
            acquired: false,
            failed: false,
            loading: false,
            watches: Vec::new(),
        };
        let mut records_left = self.max_records;
        let mut bytes_left = self.max_bytes;
        for &(topic_id, index) in partitions {
            let data = match self
                .partition(ctx, topic_id, index, records_left, bytes_left, &mut attempt)
                .await
            {
                Ok(data) => data,
                Err(error) => {
                    attempt.failed = true;
                    entry(index).with_error_code(error.code())
                }
            };
            let served: usize = data
                .acquired_records
                .iter()
                .map(|r| usize::try_from(r.last_offset - r.first_offset + 1).unwrap_or(0))
                .sum();
            records_left = records_left.saturating_sub(served);
            bytes_left =
                bytes_left.saturating_sub(data.records.as_ref().map_or(0, |r| r.len() as u64));
            attempt.acquired |= served > 0;
            attempt.partitions.push(((topic_id, index), data));
        }
        attempt
    }

    async fn partition(
        &self,
        ctx: &RequestContext,
        topic_id: Uuid,
        index: i32,
        records_left: usize,
        bytes_left: u64,
        attempt: &mut Attempt,
    ) -> Result<PartitionData, ResponseError> {
        let (topic, partition) = led_partition(ctx, topic_id, index)?;
        attempt.watches.push(partition.watch_high_watermark());
        let key = ShareKey {
            group: self.group_id.to_string(),
            topic_id,
            partition: index,
        };
        let held = ctx
            .services
            .shares
            .hold_checked(&key, &partition, &self.persister, self.verify)
            .await;
        let mut held = match held {
            Ok(held) => held,
            Err(HoldError::Loading(error)) => {
                tracing::debug!(group = self.group_id, %topic, partition = index, %error, "share-partition still loading");
                attempt.loading = true;
                return Ok(entry(index));
            }
            Err(HoldError::Failed(error)) => {
                tracing::warn!(group = self.group_id, %topic, partition = index, %error, "share-partition state not loaded");
                return Err(persist_error(&error));
            }
        };
        let before = held.partition().stats;
        let mut data = entry(index);
        if records_left > 0 && bytes_left > 0 {
            let taken = held.acquire(&partition, self.member_id, records_left, bytes_left);
            data = data
                .with_records(Some(taken.records))
                .with_acquired_records(taken.ranges.iter().map(wire_range).collect());
        }
        count(self.group_id, &topic, before, held.partition().stats);
        Ok(data)
    }
}

fn wire_range(range: &Acquired) -> AcquiredRecords {
    AcquiredRecords::default()
        .with_first_offset(range.first)
        .with_last_offset(range.last)
        .with_delivery_count(range.delivery_count)
}

/// An answer for one partition: no error, no records (but never null).
fn entry(index: i32) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(-1)
                .with_leader_epoch(-1),
        )
        .with_records(Some(Bytes::new()))
}

fn responses(out: BTreeMap<PartitionKey, PartitionData>) -> Vec<ShareFetchableTopicResponse> {
    let mut topics: Vec<ShareFetchableTopicResponse> = Vec::new();
    for ((topic_id, _), data) in out {
        match topics.last_mut() {
            Some(topic) if topic.topic_id == topic_id => topic.partitions.push(data),
            _ => topics.push(
                ShareFetchableTopicResponse::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![data]),
            ),
        }
    }
    topics
}

pub(super) fn session_error(error: session::SessionError) -> ResponseError {
    match error {
        session::SessionError::NotFound => ResponseError::ShareSessionNotFound,
        session::SessionError::InvalidEpoch => ResponseError::InvalidShareSessionEpoch,
        session::SessionError::LimitReached => ResponseError::ShareSessionLimitReached,
    }
}

fn refused(answer: ShareFetchResponse, error: ResponseError, message: &str) -> ShareFetchResponse {
    answer
        .with_error_code(error.code())
        .with_error_message((!message.is_empty()).then(|| str_bytes(message)))
}

async fn wait_for_records(mut watches: Vec<watch::Receiver<i64>>, until: Instant) {
    if watches.is_empty() {
        tokio::time::sleep_until(until).await;
        return;
    }
    let changed = futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
    let _ = tokio::time::timeout_at(until, changed).await;
}
