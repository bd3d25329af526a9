//! `POST /create_topic`, `GET /topics/{name}`, `POST /publish_message`,
//! `GET /message_status`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::auth::Caller;
use super::bodies::{json_body, Fields, MessageId, Mode};
use super::bodies::{status_query, CreateTopicBody, PublishBody};
use super::error::{params, ApiError, ApiResult, Params};
use super::state::{ApiState, HttpApi};
use crate::cluster::TopicSpec;
use crate::log::records::BatchBuilder;
use crate::model::now_ms;
use crate::security::acl::{AclOperation, ResourceType};
use crate::topics::{CreateTopic, TopicError};

pub async fn create_topic(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let body = CreateTopicBody::parse(&json_body(body).await?)?;
    let name = body.name;
    // CreateTopics' rule: CREATE on the cluster, or on the topic. A caller without it
    // who may DESCRIBE an existing topic is told its id, as `GET /topics/{name}` would.
    let access = &api.services.access;
    let may_create = caller.may_on_cluster(access, AclOperation::Create)
        || caller.may(access, AclOperation::Create, ResourceType::Topic, &name);
    if !may_create {
        let existing = match caller.may(access, AclOperation::Describe, ResourceType::Topic, &name)
        {
            true => api.services.store.topic(&name).await,
            false => None,
        };
        return match existing {
            Some(spec) => Ok(topic_json(&spec, false)),
            None => Err(caller.refusal(&format!("topic '{name}'"))),
        };
    }
    let request = CreateTopic {
        name: name.clone(),
        partitions: body.partitions.unwrap_or(-1),
        replication_factor: body.replication_factor.unwrap_or(-1),
        assignments: Vec::new(),
        configs: BTreeMap::new(),
    };
    let (spec, created) = match api.services.topics.create(&request).await {
        Ok(spec) => (spec, true),
        Err(TopicError::AlreadyExists(_)) => {
            let spec = api.services.store.topic(&name).await.ok_or_else(|| {
                ApiError::unavailable(format!("topic '{name}' is being deleted; retry"))
            })?;
            (spec, false)
        }
        Err(TopicError::InvalidName(reason)) => return Err(ApiError::bad("topic_name", reason)),
        Err(TopicError::InvalidPartitions(reason)) => {
            return Err(ApiError::bad("partitions", reason))
        }
        Err(TopicError::InvalidReplicationFactor(reason)) => {
            return Err(ApiError::bad("replication_factor", reason))
        }
        Err(other) => return Err(ApiError::unavailable(other.to_string())),
    };
    Ok(topic_json(&spec, created))
}

/// `GET /topics/{name}`: a topic's id by its name, for a caller that may DESCRIBE it.
/// Who may not gets the same refusal whether the topic exists or not (Kafka's rule).
pub async fn topic_by_name(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult {
    let access = &api.services.access;
    if !caller.may(access, AclOperation::Describe, ResourceType::Topic, &name) {
        return Err(caller.refusal(&format!("topic '{name}'")));
    }
    match api.services.store.topic(&name).await {
        Some(spec) if !crate::topics::is_internal(&spec.name) => Ok(topic_json(&spec, false)),
        _ => Err(ApiError::not_found(format!("no topic named '{name}'"))),
    }
}

fn topic_json(spec: &TopicSpec, created: bool) -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "topic_id": spec.numeric_id,
        "topic_name": spec.name,
        "partitions": spec.partitions,
        "created": created,
    }))
}

pub async fn publish_message(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let PublishBody {
        topic_id,
        content,
        key,
    } = PublishBody::parse(&json_body(body).await?)?;
    let (spec, topic) = api
        .topic_for(&caller, topic_id, AclOperation::Write)
        .await?;
    let index = match &key {
        Some(key) => (murmur2(key.as_bytes()) & 0x7fff_ffff) % spec.partitions.max(1),
        None => {
            // Unkeyed messages rotate over the partitions this broker leads, if any
            // (no hop to another broker), else over all of them.
            let led: Vec<i32> = (0..spec.partitions)
                .filter(|&i| topic.partition(i).is_ok())
                .collect();
            let turn = api.next_partition.fetch_add(1, Ordering::Relaxed);
            match led.len() {
                0 => (turn % spec.partitions.max(1) as usize) as i32,
                n => led[turn % n],
            }
        }
    };
    let now = now_ms();
    let mut batch = BatchBuilder::new();
    batch.push(
        now,
        key.as_deref().map(str::as_bytes),
        Some(content.as_bytes()),
        &[],
    );
    let batch = bytes::Bytes::from(batch.build());
    let base_offset = api
        .retrying(|| api.append(&topic, index, batch.clone(), now))
        .await?;
    let id = MessageId {
        topic_id,
        partition: index,
        offset: base_offset,
    };
    let message_id = id
        .encode()
        .ok_or_else(|| ApiError::unavailable(format!("{id:?} does not fit a message id")))?;
    Ok(Json(json!({
        "status": "ok",
        "message_id": message_id,
        "topic_id": topic_id,
        "partition": index,
        "offset": base_offset,
        "created_at": now,
    })))
}

pub async fn message_status(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    query: Params,
) -> ApiResult {
    let query = params(query)?;
    let message_id = status_query(&query)?;
    let unknown = || ApiError::not_found(format!("no message with message_id {message_id}"));
    let id = MessageId::decode(message_id).ok_or_else(unknown)?;
    let (spec, topic) = match api
        .topic_for(&caller, id.topic_id, AclOperation::Describe)
        .await
    {
        Ok(found) => found,
        Err(e) if e.code == StatusCode::NOT_FOUND => return Err(unknown()),
        Err(refused) => return Err(refused),
    };
    if id.partition >= spec.partitions {
        return Err(unknown());
    }
    let found = api
        .retrying(|| api.read_partition(&topic, id.partition, id.offset, 1))
        .await?;
    let (log_start, log_end) = (found.log_start, found.log_end);
    if id.offset >= log_end {
        return Err(unknown());
    }
    let stored = found
        .read
        .messages
        .into_iter()
        .find(|m| m.offset == id.offset);
    let created_at = stored.as_ref().map_or(-1, |m| m.timestamp);
    let subscriptions = api
        .retrying(|| api.subscriptions_of(&spec, id.partition))
        .await?;
    let recipients = subscriptions
        .iter()
        .filter(|s| s.position > id.offset)
        .count();
    let at_publish: Vec<_> = subscriptions
        .iter()
        .filter(|s| created_at >= 0 && s.subscribe_at <= created_at)
        .collect();
    let gone = id.offset < log_start || (stored.is_none() && created_at < 0);
    let archived = match gone {
        true => archived_object(&api, &spec.name, id.partition, id.offset).await,
        false => None,
    };
    let message_status = if archived.is_some() {
        "archived"
    } else if gone {
        "expired"
    } else if !at_publish.is_empty() && at_publish.iter().all(|s| s.position > id.offset) {
        "delivered"
    } else {
        "pending"
    };
    let mut answer = json!({
        "status": "ok",
        "message_id": message_id,
        "topic_id": id.topic_id,
        "partition": id.partition,
        "offset": id.offset,
        "message_status": message_status,
        "created_at": created_at,
        "num_recipients": recipients,
    });
    if let Some(archive) = archived {
        answer["archive"] = archive;
    }
    if Mode::parse(&Fields::Query(&query))? == Mode::Queue {
        let queue = super::queue::status(&api, &caller, &Fields::Query(&query), id, &topic).await?;
        if let (Some(answer), Value::Object(queue)) = (answer.as_object_mut(), queue) {
            answer.extend(queue);
        }
    }
    Ok(Json(answer))
}

/// Where the archive holds `offset` of the partition, if it does: the object's path
/// from the archive's root, and its full location.
async fn archived_object(
    api: &HttpApi,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Option<serde_json::Value> {
    let archive = &api.services.archive;
    let manifest = match archive.manifest(topic, partition).await {
        Ok(manifest) => manifest,
        Err(error) => {
            tracing::debug!(topic, partition, %error, "archive manifest unreadable");
            return None;
        }
    };
    let entry = manifest.locate(offset)?;
    Some(json!({
        "path": entry.path,
        "location": archive.location(&entry.path),
    }))
}

/// Kafka's murmur2, as its default partitioner hashes keys, so that HTTP and Kafka
/// producers put a key in the same partition.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() == 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::murmur2;

    #[test]
    fn murmur2_matches_kafkas_reference_values() {
        // From Apache Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }
}
