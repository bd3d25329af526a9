//! KIP-932 share-group APIs: membership at the group's coordinator
//! (ShareGroupHeartbeat, ShareGroupDescribe), records at the partitions' leaders
//! (ShareFetch, ShareAcknowledge), the operator's view of a group's start offsets
//! (Describe/Alter/DeleteShareGroupOffsets), and the share-state APIs leaders use to
//! reach a coordinator (ReadShareGroupState, WriteShareGroupState). Thin handlers over
//! `group::share` and `group::GroupCoordinator`.

pub mod alter_share_group_offsets;
pub mod persister;
pub mod delete_share_group_offsets;
pub mod describe_share_group_offsets;
pub mod read_share_group_state;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod write_share_group_state;

use std::sync::Arc;

use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::context::RequestContext;
use super::errors;
use crate::group::share::partition::{AckBatch, AckError, AckType, ShareStats};
use crate::group::share::ShareKey;
use crate::replication::Partition;
use crate::security::acl::AclOperation;
use persister::Persister;

/// How this request reaches the coordinators of share groups.
fn persister(ctx: &RequestContext) -> Persister<'_> {
    Persister::for_request(&ctx.services)
}

/// The partition a share request names, led here and readable by the caller:
/// `(topic name, partition)`, or the partition's error.
fn led_partition(
    ctx: &RequestContext,
    topic_id: Uuid,
    index: i32,
) -> Result<(String, Arc<Partition>), ResponseError> {
    let Some(topic) = ctx.services.replicas.topic_by_id(topic_id) else {
        return Err(ResponseError::UnknownTopicId);
    };
    if !ctx.authorize_topic(AclOperation::Read, &topic.spec.name) {
        return Err(ResponseError::TopicAuthorizationFailed);
    }
    match topic.partition(index) {
        Ok(partition) => Ok((topic.spec.name.clone(), Arc::clone(partition))),
        Err(not_served) => Err(errors::not_served(not_served)),
    }
}

/// A partition's acknowledgement batches as the wire has them: `(first, last, types)`.
type WireBatches = Vec<(i64, i64, Vec<i8>)>;

/// Kafka's `validateAcknowledgementBatches`: the batches in order, each well formed;
/// `None` is INVALID_REQUEST for the partition.
fn ack_batches(wire: &WireBatches) -> Option<Vec<AckBatch>> {
    let mut previous_last = i64::MIN;
    let mut out = Vec::with_capacity(wire.len());
    for (first, last, types) in wire {
        let span = last.checked_sub(*first)?.checked_add(1)?;
        let well_formed = first <= last
            && *first > previous_last
            && !types.is_empty()
            && (types.len() == 1 || i64::try_from(types.len()).ok() == Some(span));
        if !well_formed {
            return None;
        }
        let types = types
            .iter()
            .map(|&t| AckType::try_from(t).ok())
            .collect::<Option<Vec<_>>>()?;
        out.push(AckBatch {
            first: *first,
            last: *last,
            types,
        });
        previous_last = *last;
    }
    Some(out)
}

/// Applies one partition's acknowledgements by `member`; `Ok` once they are stored.
async fn acknowledge(
    ctx: &RequestContext,
    persister: &Persister<'_>,
    group_id: &str,
    member_id: &str,
    topic_id: Uuid,
    index: i32,
    wire: &WireBatches,
) -> Result<(), ResponseError> {
    let (topic, partition) = led_partition(ctx, topic_id, index)?;
    let batches = ack_batches(wire).ok_or(ResponseError::InvalidRequest)?;
    let key = ShareKey {
        group: group_id.to_string(),
        topic_id,
        partition: index,
    };
    let shares = &ctx.services.shares;
    let mut held = shares
        .hold(&key, &partition, persister)
        .await
        .map_err(|e| persist_error(&e.into_persist_error()))?;
    let before = held.partition().stats;
    let outcome = held.acknowledge(&key, persister, member_id, &batches).await;
    count(group_id, &topic, before, held.partition().stats);
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(AckError::InvalidRecordState)) => Err(ResponseError::InvalidRecordState),
        Ok(Err(AckError::InvalidRequest)) => Err(ResponseError::InvalidRequest),
        Err(error) => Err(persist_error(&error)),
    }
}

/// Gives back every record `member_id` holds in the partitions of its closed session.
async fn release_session(
    ctx: &RequestContext,
    persister: &Persister<'_>,
    group_id: &str,
    member_id: &str,
    partitions: &[(Uuid, i32)],
) {
    for &(topic_id, index) in partitions {
        let Ok((topic, partition)) = led_partition(ctx, topic_id, index) else {
            continue;
        };
        let key = ShareKey {
            group: group_id.to_string(),
            topic_id,
            partition: index,
        };
        let Ok(mut held) = ctx.services.shares.hold(&key, &partition, persister).await else {
            continue;
        };
        let before = held.partition().stats;
        let released = held
            .change(&key, persister, |p| p.release_member(member_id))
            .await;
        count(group_id, &topic, before, held.partition().stats);
        if let Err(error) = released {
            tracing::warn!(group = group_id, %error, "could not store released share records");
        }
    }
}

fn persist_error(error: &crate::group::share::PersistError) -> ResponseError {
    ResponseError::try_from_code(persister::error_code(error))
        .unwrap_or(ResponseError::CoordinatorNotAvailable)
}

/// Adds what a share-partition did between two readings of its counters to the
/// metrics.
fn count(group: &str, topic: &str, before: ShareStats, after: ShareStats) {
    use crate::metrics as m;
    let labels = [("group", group.to_string()), ("topic", topic.to_string())];
    let counters = [
        (
            m::SHARE_RECORDS_ACQUIRED_TOTAL,
            after.acquired,
            before.acquired,
        ),
        (
            m::SHARE_RECORDS_REDELIVERED_TOTAL,
            after.redelivered,
            before.redelivered,
        ),
        (
            m::SHARE_RECORDS_ARCHIVED_TOTAL,
            after.archived_at_limit,
            before.archived_at_limit,
        ),
        (
            m::SHARE_LOCK_TIMEOUTS_TOTAL,
            after.lock_timeouts,
            before.lock_timeouts,
        ),
    ];
    for (name, now, then) in counters {
        if now > then {
            metrics::counter!(name, &labels).increment(now - then);
        }
    }
    let acknowledged = [
        ("accept", after.accepted, before.accepted),
        ("release", after.released, before.released),
        ("reject", after.rejected, before.rejected),
    ];
    for (kind, now, then) in acknowledged {
        if now > then {
            let labels = [
                ("group", group.to_string()),
                ("topic", topic.to_string()),
                ("type", kind.to_string()),
            ];
            metrics::counter!(m::SHARE_RECORDS_ACKNOWLEDGED_TOTAL, &labels).increment(now - then);
        }
    }
}
