//! Queue subscriptions (`"mode": "queue"`): a consumer id's share group
//! (`http-queue-<consumer_id>`, KIP-932), so that every caller using that consumer id
//! takes messages off one queue: `GET /message?mode=queue` acquires messages (locked to
//! the consumer for `--group-share-record-lock-duration-ms`), `POST /ack` with
//! `"mode": "queue"` accepts one, `POST /nack` releases it for redelivery (or, with
//! `"reject": true`, archives it), and `GET /message_status?mode=queue&consumer_id=C`
//! reports its delivery state and count. A message neither acknowledged nor released
//! comes back after its lock; after `--group-share-delivery-count-limit` deliveries it
//! is archived.
//!
//! Subscribing fixes the queue's start at each partition's end (as the at-least-once
//! mode does); subscribing again keeps it. The records, locks and counts are the share
//! group's, through the same code a Kafka share consumer's requests run.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::auth::Caller;
use super::bodies::{json_body, AckBody, ConsumerTopic, Fields, MessageId, MessageQuery, NackBody};
use super::error::{ApiError, ApiResult};
use super::state::{queue_group_of, ApiState, HttpApi};
use crate::group::share::partition::{AckType, DeliveryState, OffsetStatus};
use crate::model::now_ms;
use crate::security::acl::AclOperation;
use crate::security::acl::ResourceType;

/// The share-group member an HTTP consumer id acquires as.
fn member_of(consumer_id: i64) -> String {
    format!("http-{consumer_id}")
}

impl HttpApi {
    /// The queue group of `consumer_id`, which the caller must be allowed to READ.
    fn queue_group_for(&self, caller: &Caller, consumer_id: i64) -> Result<String, ApiError> {
        let group = queue_group_of(consumer_id);
        caller.require(
            &self.services.access,
            AclOperation::Read,
            ResourceType::Group,
            &group,
            &format!("consumer_id {consumer_id}"),
        )?;
        Ok(group)
    }
}

pub async fn subscribe(api: &HttpApi, caller: &Caller, at: ConsumerTopic) -> ApiResult {
    let (spec, topic) = api
        .topic_for(caller, at.topic_id, AclOperation::Read)
        .await?;
    let group = api.queue_group_for(caller, at.consumer_id)?;
    if api.retrying(|| api.queue_subscribed(&group, &spec)).await? {
        return Ok(Json(
            json!({"status": "ok", "mode": "queue", "group": group}),
        ));
    }
    let mut starts = Vec::with_capacity(spec.partitions as usize);
    for index in 0..spec.partitions {
        let end = api.retrying(|| api.log_end(&topic, index)).await?;
        starts.push((index, Some(end)));
    }
    api.retrying(|| api.reset_queue(&group, &spec, &starts))
        .await?;
    Ok(Json(json!({
        "status": "ok",
        "mode": "queue",
        "subscribe_at": now_ms(),
        "group": group,
    })))
}

pub async fn unsubscribe(api: &HttpApi, caller: &Caller, at: ConsumerTopic) -> ApiResult {
    let (spec, _) = api
        .topic_for(caller, at.topic_id, AclOperation::Read)
        .await?;
    let group = api.queue_group_for(caller, at.consumer_id)?;
    require_subscribed(api, &group, &spec, at.consumer_id).await?;
    let gone: Vec<(i32, Option<i64>)> = (0..spec.partitions).map(|p| (p, None)).collect();
    api.retrying(|| api.reset_queue(&group, &spec, &gone))
        .await?;
    Ok(Json(
        json!({"status": "ok", "mode": "queue", "unsubscribe_at": now_ms()}),
    ))
}

async fn require_subscribed(
    api: &HttpApi,
    group: &str,
    spec: &crate::cluster::TopicSpec,
    consumer_id: i64,
) -> Result<(), ApiError> {
    match api.retrying(|| api.queue_subscribed(group, spec)).await? {
        true => Ok(()),
        false => Err(ApiError::not_found(format!(
            "consumer {consumer_id} has no queue subscription to topic {}",
            spec.numeric_id
        ))),
    }
}

/// `GET /message?mode=queue`: acquires up to `max` messages (one, unwrapped, without
/// `max`), waiting up to `wait_ms` for some.
pub async fn message(api: &HttpApi, caller: &Caller, query: MessageQuery) -> ApiResult {
    let MessageQuery {
        at: ConsumerTopic {
            consumer_id,
            topic_id,
        },
        wait_ms,
        max,
    } = query;
    let (spec, topic) = api.topic_for(caller, topic_id, AclOperation::Read).await?;
    let group = api.queue_group_for(caller, consumer_id)?;
    require_subscribed(api, &group, &spec, consumer_id).await?;
    let member = member_of(consumer_id);
    let wanted = max.unwrap_or(1);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let mut taken = Vec::new();
    loop {
        for index in 0..spec.partitions {
            if taken.len() >= wanted {
                break;
            }
            let got = api
                .retrying(|| api.acquire(&topic, &group, &member, index, wanted - taken.len()))
                .await?;
            taken.extend(got.into_iter().map(|m| (index, m)));
        }
        if !taken.is_empty()
            || tokio::time::Instant::now() >= deadline
            || api.shutdown.is_cancelled()
        {
            break;
        }
        let pause = deadline.min(tokio::time::Instant::now() + Duration::from_millis(100));
        tokio::time::sleep_until(pause).await;
    }
    let rendered: Vec<Value> = taken
        .iter()
        .map(|(partition, (m, count))| {
            let id = MessageId {
                topic_id,
                partition: *partition,
                offset: m.offset,
            };
            json!({
                "message_id": id.encode(),
                "message_content": m.value,
                "key": m.key,
                "created_at": m.timestamp,
                "partition": partition,
                "offset": m.offset,
                "delivery_count": count,
            })
        })
        .collect();
    if max.is_some() {
        return Ok(Json(json!({"status": "ok", "messages": rendered})));
    }
    Ok(Json(match rendered.into_iter().next() {
        Some(mut one) => {
            one["status"] = json!("ok");
            one
        }
        None => json!({"status": "empty"}),
    }))
}

/// `POST /ack` with `"mode": "queue"`: the message is processed, never delivered again.
pub async fn ack(api: &HttpApi, caller: &Caller, body: AckBody) -> ApiResult {
    settle(api, caller, body.at, body.id, AckType::Accept).await
}

/// `POST /nack`: the message goes back for redelivery, or (`"reject": true`) is archived.
pub async fn nack(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let body = NackBody::parse(&json_body(body).await?)?;
    let kind = match body.reject {
        true => AckType::Reject,
        false => AckType::Release,
    };
    settle(&api, &caller, body.at, body.id, kind).await
}

async fn settle(
    api: &HttpApi,
    caller: &Caller,
    at: ConsumerTopic,
    id: MessageId,
    kind: AckType,
) -> ApiResult {
    let (spec, topic) = api
        .topic_for(caller, at.topic_id, AclOperation::Read)
        .await?;
    let group = api.queue_group_for(caller, at.consumer_id)?;
    if id.partition >= spec.partitions {
        return Err(ApiError::bad("message_id", "no such partition"));
    }
    let member = member_of(at.consumer_id);
    api.retrying(|| api.acknowledge_one(&topic, &group, &member, id.partition, id.offset, kind))
        .await?;
    Ok(Json(json!({"status": "ok"})))
}

/// The queue fields of `GET /message_status?mode=queue&consumer_id=C`.
pub async fn status(
    api: &HttpApi,
    caller: &Caller,
    fields: &Fields<'_>,
    id: MessageId,
    topic: &crate::replication::TopicReplicas,
) -> Result<Value, ApiError> {
    let consumer_id = ConsumerTopic::parse_consumer(fields)?;
    let group = api.queue_group_for(caller, consumer_id)?;
    let status = api
        .retrying(|| api.queue_status(topic, &group, id.partition, id.offset))
        .await?;
    let (state, count) = match status {
        OffsetStatus::Finished => ("finished", None),
        OffsetStatus::NotYetDelivered => ("not_delivered", None),
        OffsetStatus::InFlight(state, count) => (
            match state {
                DeliveryState::Available => "available",
                DeliveryState::Acquired => "acquired",
                DeliveryState::Acknowledged => "acknowledged",
                DeliveryState::Archived => "archived",
            },
            Some(count),
        ),
    };
    Ok(json!({"delivery_state": state, "delivery_count": count, "group": group}))
}
