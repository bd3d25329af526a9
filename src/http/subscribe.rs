//! `POST /subscribe`, `POST /unsubscribe`, `GET /message`, `POST /ack`, `GET /stream`.
//!
//! A subscription of consumer C to topic T is the consumer group `http-C` with a
//! committed offset on every partition of T; the commit metadata records when it
//! subscribed (`{"subscribe_at": ms}`), which `message_status` needs. Reads start at
//! the committed offsets. `GET /message` remembers where what it returned ends and
//! commits that when the same consumer asks again (or on `POST /ack`): at-least-once.
//! `GET /stream` commits each message once the next one is asked of it.
//! A subscription with `"mode": "queue"` is a share group instead (`super::queue`).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::{Extension, Json};
use futures::Stream;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::auth::Caller;
use super::bodies::{json_body, Fields, MessageId};
use super::bodies::{AckBody, ConsumerTopic, MessageQuery, Mode};
use super::error::{params, ApiError, ApiResult, Params};
use super::state::{group_of, Advances, ApiState, HttpApi};
use crate::cluster::TopicSpec;
use crate::group::coordinator::OffsetCommit;
use crate::group::offsets::CommittedOffset;
use crate::log::txn::{AbortedTxn, CommittedFilter};
use crate::log::{batch, compression};
use crate::model::now_ms;
use crate::replication::ReadResult;
use crate::replication::{Partition, TopicReplicas};
use crate::security::acl::AclOperation;

/// A message as stored.
#[derive(Debug, Clone)]
pub struct Stored {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<String>,
    pub value: String,
}

/// What one read of a partition found, and where the next read starts.
#[derive(Debug, Default)]
pub struct Read {
    pub messages: Vec<Stored>,
    pub next: i64,
}

use crate::limits::{
    HTTP_MAX_DECOMPRESSED_BYTES as MAX_DECOMPRESSED_BYTES, HTTP_RETRY_BACKOFF,
    HTTP_STREAM_RETRY_FOR, HTTP_STREAM_WAIT,
};

/// Up to `max` messages of `partition` from offset `from`. Batches Kafka producers
/// compressed are decompressed here (the log stores them as sent); one that cannot be
/// is skipped with a warning, so that a subscriber never sticks on it.
pub fn read_from(partition: &Partition, from: i64, max: usize) -> Read {
    let log_start = partition.offsets().log_start().0;
    let from = from.max(log_start);
    let committed = crate::model::Isolation::ReadCommitted;
    match partition.read(crate::model::Offset(from), 1024 * 1024, true, committed) {
        Ok(ReadResult {
            records: Some(bytes),
            aborted,
            ..
        }) => parse_messages(&bytes, aborted, from, max, &partition.id().to_string()),
        _ => Read {
            messages: Vec::new(),
            next: from,
        },
    }
}

/// Up to `max` messages at or after `from` in `bytes` (whole record batches, as a
/// partition or a Fetch response holds them, read committed: `aborted` names the
/// aborted transactions in them, whose records are left out, as are markers);
/// `partition` names them in warnings.
pub fn parse_messages(
    bytes: &[u8],
    aborted: Vec<AbortedTxn>,
    from: i64,
    max: usize,
    partition: &str,
) -> Read {
    let mut out = Read {
        messages: Vec::new(),
        next: from,
    };
    let mut committed = CommittedFilter::new(aborted);
    for header in batch::batches(bytes) {
        let Ok(header) = header else { break };
        if !committed.keep(&header) {
            out.next = out.next.max(header.last_offset() + 1);
            continue;
        }
        let decompressed = match compression::decompress(
            header.compression(),
            header.records_section(),
            MAX_DECOMPRESSED_BYTES,
        ) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(partition, offset = header.base_offset(), %error,
                    "skipping a batch the HTTP API cannot decompress");
                out.next = out.next.max(header.last_offset() + 1);
                continue;
            }
        };
        let Some(records) = header.parse_records(&decompressed) else {
            tracing::warn!(
                partition,
                offset = header.base_offset(),
                "skipping a malformed batch"
            );
            out.next = out.next.max(header.last_offset() + 1);
            continue;
        };
        for record in records.into_iter().filter(|r| r.offset >= from) {
            if out.messages.len() >= max {
                return out;
            }
            out.next = record.offset + 1;
            out.messages.push(Stored {
                offset: record.offset,
                timestamp: record.timestamp,
                key: record.key.map(|k| String::from_utf8_lossy(k).into_owned()),
                value: String::from_utf8_lossy(record.value.unwrap_or_default()).into_owned(),
            });
        }
    }
    out
}

/// One subscription's position on one partition.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub position: i64,
    pub subscribe_at: i64,
}

impl Subscription {
    pub fn of(offset: &CommittedOffset) -> Self {
        Self {
            position: offset.offset,
            subscribe_at: subscribe_at(offset),
        }
    }
}

fn subscribe_at(offset: &CommittedOffset) -> i64 {
    offset
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
        .and_then(|v| v.get("subscribe_at").and_then(Value::as_i64))
        .unwrap_or(0)
}

fn message_json(topic_id: i64, partition: i32, message: &Stored) -> Value {
    let id = MessageId {
        topic_id,
        partition,
        offset: message.offset,
    };
    json!({
        "message_id": id.encode(),
        "message_content": message.value,
        "key": message.key,
        "created_at": message.timestamp,
        "partition": partition,
        "offset": message.offset,
    })
}

impl HttpApi {
    /// The position on `topic`'s partition `partition` of every HTTP subscription this
    /// broker coordinates.
    pub(super) fn local_subscriptions_of(&self, topic: &str, partition: i32) -> Vec<Subscription> {
        let groups = &self.services.groups;
        let wanted = [(topic.to_string(), vec![partition])];
        groups
            .list()
            .into_iter()
            .filter(|listed| listed.group_id.starts_with("http-"))
            .filter_map(|listed| {
                let (_, _, offset) = groups
                    .fetch_offsets(&listed.group_id, Some(&wanted))
                    .pop()?;
                Some(Subscription::of(&offset?))
            })
            .collect()
    }

    /// The subscription's committed offsets by partition; `None` when not subscribed.
    async fn positions(
        &self,
        consumer_id: i64,
        spec: &TopicSpec,
    ) -> Result<Option<BTreeMap<i32, CommittedOffset>>, ApiError> {
        let group = group_of(consumer_id);
        let found = self.retrying(|| self.committed(&group, spec)).await?;
        Ok((!found.is_empty()).then_some(found))
    }

    /// The subscription's committed offsets, or a 404 when there is none.
    async fn subscribed(
        &self,
        consumer_id: i64,
        spec: &TopicSpec,
    ) -> Result<BTreeMap<i32, CommittedOffset>, ApiError> {
        self.positions(consumer_id, spec).await?.ok_or_else(|| {
            ApiError::not_found(format!(
                "consumer {consumer_id} is not subscribed to topic {}",
                spec.numeric_id
            ))
        })
    }

    /// Commits `advances` (partition, next offset) where they move a position forward,
    /// keeping the subscription's metadata.
    async fn advance(
        &self,
        consumer_id: i64,
        spec: &TopicSpec,
        advances: &[(i32, i64)],
    ) -> Result<(), ApiError> {
        let Some(positions) = self.positions(consumer_id, spec).await? else {
            return Ok(());
        };
        let commits: Vec<OffsetCommit> = advances
            .iter()
            .filter_map(|&(partition, next)| {
                let current = positions.get(&partition)?;
                (next > current.offset).then(|| OffsetCommit {
                    topic: spec.name.clone(),
                    partition,
                    offset: next,
                    leader_epoch: -1,
                    metadata: current.metadata.clone(),
                })
            })
            .collect();
        if commits.is_empty() {
            return Ok(());
        }
        let group = group_of(consumer_id);
        self.retrying(|| self.commit(&group, commits.clone())).await
    }

    /// Commits what the previous `GET /message` of this consumer and topic returned.
    async fn commit_delivered(&self, consumer_id: i64, spec: &TopicSpec) -> Result<(), ApiError> {
        let delivered = self
            .delivered
            .lock()
            .remove(&(consumer_id, spec.numeric_id));
        match delivered {
            Some(advances) => self.advance(consumer_id, spec, &advances).await,
            None => Ok(()),
        }
    }

    /// Up to `max` messages after `positions`, fairly over the partitions (starting
    /// at a different one each time), wherever they are led: partitions of other
    /// brokers are fetched first, one Fetch per leader; those led here are read in turn
    /// for what room is left. A partition that cannot be read right now is passed over;
    /// only when nothing could be read is that an error.
    async fn collect(
        &self,
        topic: &TopicReplicas,
        positions: &BTreeMap<i32, CommittedOffset>,
        max: usize,
    ) -> Result<(Vec<(i32, Stored)>, Advances), ApiError> {
        let count = topic.spec.partitions.max(1);
        let start = (now_ms().rem_euclid(i64::from(count))) as i32;
        let wanted: Vec<(i32, i64)> = (0..count)
            .map(|step| (start + step) % count)
            .filter_map(|index| Some((index, positions.get(&index)?.offset)))
            .collect();
        let mut messages = Vec::new();
        let mut ends = Vec::new();
        let mut failure = None;
        let mut read_any = false;
        let mut remote = self.read_remote_partitions(topic, &wanted, max).await;
        for (index, from) in wanted {
            let room = max - messages.len();
            if room == 0 {
                break;
            }
            let read = match remote.remove(&index) {
                Some(read) => read,
                None => self.read_partition(topic, index, from, room).await,
            };
            let read = match read {
                Ok(partition) => partition.read,
                Err(error) => {
                    failure.get_or_insert(error);
                    continue;
                }
            };
            read_any = true;
            // Where this partition's handed-out messages end: all of the read, or the
            // last one that fits.
            let next = match read.messages.get(room.saturating_sub(1)) {
                Some(last) if read.messages.len() > room => last.offset + 1,
                _ => read.next,
            };
            if next > from {
                ends.push((index, next));
            }
            messages.extend(read.messages.into_iter().take(room).map(|m| (index, m)));
        }
        match failure {
            Some(error) if !read_any => Err(error),
            _ => Ok((messages, ends)),
        }
    }
}

use crate::limits::HTTP_REMOTE_POLL as REMOTE_POLL;

/// What a waiting reader waits on: log-end watches of the partitions of `topic` led
/// here, taken before a read so that an append between the read and the wait still
/// wakes it, and whether some partition is led elsewhere and must be polled.
struct Appends {
    watches: Vec<watch::Receiver<i64>>,
    poll_remote: bool,
}

fn watch_appends(topic: &TopicReplicas) -> Appends {
    let watches: Vec<_> = topic.led().map(|p| p.watch_log_end()).collect();
    let poll_remote = watches.len() < topic.spec.partitions.max(0) as usize;
    Appends {
        watches,
        poll_remote,
    }
}

/// Waits until a partition led here grows, `deadline` passes or the broker stops;
/// with partitions led elsewhere, at most [`REMOTE_POLL`].
async fn wait_for_append(
    appends: Appends,
    deadline: tokio::time::Instant,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let Appends {
        mut watches,
        poll_remote,
    } = appends;
    let deadline = if poll_remote {
        deadline.min(tokio::time::Instant::now() + REMOTE_POLL)
    } else {
        deadline
    };
    if watches.is_empty() {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.cancelled() => {}
        }
        return;
    }
    let changed = futures::future::select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
    tokio::select! {
        _ = changed => {}
        _ = tokio::time::sleep_until(deadline) => {}
        _ = shutdown.cancelled() => {}
    }
}

pub async fn subscribe(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let body = json_body(body).await?;
    let at = ConsumerTopic::parse(&Fields::Body(&body))?;
    if Mode::parse(&Fields::Body(&body))? == Mode::Queue {
        return super::queue::subscribe(&api, &caller, at).await;
    }
    let ConsumerTopic {
        consumer_id,
        topic_id,
    } = at;
    let (spec, topic) = api.topic_for(&caller, topic_id, AclOperation::Read).await?;
    let group = api.group_for(&caller, consumer_id)?;
    if let Some(positions) = api.positions(consumer_id, &spec).await? {
        let at = positions.values().map(subscribe_at).min().unwrap_or(0);
        return Ok(Json(
            json!({"status": "ok", "subscribe_at": at, "group": group}),
        ));
    }
    let now = now_ms();
    let metadata = json!({ "subscribe_at": now }).to_string();
    let mut commits = Vec::with_capacity(spec.partitions as usize);
    for index in 0..spec.partitions {
        commits.push(OffsetCommit {
            topic: spec.name.clone(),
            partition: index,
            offset: api.retrying(|| api.log_end(&topic, index)).await?,
            leader_epoch: -1,
            metadata: Some(metadata.clone()),
        });
    }
    api.retrying(|| api.commit(&group, commits.clone())).await?;
    Ok(Json(
        json!({"status": "ok", "subscribe_at": now, "group": group}),
    ))
}

pub async fn unsubscribe(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let body = json_body(body).await?;
    let at = ConsumerTopic::parse(&Fields::Body(&body))?;
    if Mode::parse(&Fields::Body(&body))? == Mode::Queue {
        return super::queue::unsubscribe(&api, &caller, at).await;
    }
    let ConsumerTopic {
        consumer_id,
        topic_id,
    } = at;
    let (spec, _) = api.topic_for(&caller, topic_id, AclOperation::Read).await?;
    let group = api.group_for(&caller, consumer_id)?;
    let positions = api.subscribed(consumer_id, &spec).await?;
    let partitions: Vec<i32> = positions.into_keys().collect();
    api.retrying(|| api.forget(&group, &spec, partitions.clone()))
        .await?;
    api.delivered.lock().remove(&(consumer_id, topic_id));
    Ok(Json(json!({"status": "ok", "unsubscribe_at": now_ms()})))
}

pub async fn message(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    query: Params,
) -> ApiResult {
    let query = params(query)?;
    let parsed = MessageQuery::parse(&query)?;
    if Mode::parse(&Fields::Query(&query))? == Mode::Queue {
        return super::queue::message(&api, &caller, parsed).await;
    }
    let MessageQuery {
        at: ConsumerTopic {
            consumer_id,
            topic_id,
        },
        wait_ms,
        max,
    } = parsed;
    let (spec, topic) = api.topic_for(&caller, topic_id, AclOperation::Read).await?;
    api.group_for(&caller, consumer_id)?;
    api.commit_delivered(consumer_id, &spec).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let (messages, ends) = loop {
        let positions = api.subscribed(consumer_id, &spec).await?;
        let appends = watch_appends(&topic);
        let (messages, ends) = api.collect(&topic, &positions, max.unwrap_or(1)).await?;
        if !messages.is_empty()
            || tokio::time::Instant::now() >= deadline
            || api.shutdown.is_cancelled()
        {
            break (messages, ends);
        }
        wait_for_append(appends, deadline, &api.shutdown).await;
    };
    if !ends.is_empty() {
        api.delivered.lock().insert((consumer_id, topic_id), ends);
    }
    let rendered: Vec<Value> = messages
        .iter()
        .map(|(p, m)| message_json(topic_id, *p, m))
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

pub async fn ack(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult {
    let body = json_body(body).await?;
    let parsed = AckBody::parse(&body)?;
    if Mode::parse(&Fields::Body(&body))? == Mode::Queue {
        return super::queue::ack(&api, &caller, parsed).await;
    }
    let AckBody {
        at: ConsumerTopic {
            consumer_id,
            topic_id,
        },
        id,
        ..
    } = parsed;
    let (spec, _) = api.topic_for(&caller, topic_id, AclOperation::Read).await?;
    api.group_for(&caller, consumer_id)?;
    api.subscribed(consumer_id, &spec).await?;
    api.advance(consumer_id, &spec, &[(id.partition, id.offset + 1)])
        .await?;
    if let Some(pending) = api.delivered.lock().get_mut(&(consumer_id, topic_id)) {
        pending.retain(|&(p, next)| p != id.partition || next > id.offset + 1);
    }
    Ok(Json(json!({"status": "ok"})))
}

/// What a push stream carries between polls.
struct StreamState {
    api: Arc<HttpApi>,
    /// Checked again before every event: a revoked ACL ends the stream.
    caller: Caller,
    consumer_id: i64,
    topic_id: i64,
    buffer: VecDeque<(i32, Stored)>,
    /// The last message handed to the connection, committed when the next one is
    /// asked for or when the stream ends (the client left after reading it).
    sent: Option<(i32, i64)>,
    /// An `error` event was sent: the stream ends.
    failed: bool,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        let Some((partition, next)) = self.sent.take() else {
            return;
        };
        let (api, consumer_id, topic_id) = (Arc::clone(&self.api), self.consumer_id, self.topic_id);
        // Drop cannot wait: the commit finishes on its own.
        tokio::spawn(async move {
            if let Ok((spec, _)) = api.topic(topic_id).await {
                if let Err(error) = api.advance(consumer_id, &spec, &[(partition, next)]).await {
                    tracing::warn!(
                        consumer_id,
                        topic_id,
                        ?error,
                        "stream commit on close failed"
                    );
                }
            }
        });
    }
}

/// `GET /stream`: every message event carries its message id as the event's `id:`, so
/// a client that reconnects with `Last-Event-ID` (as EventSource does by itself) resumes
/// after the last message it received, even when the commit the old stream made on
/// close has not landed yet, or never did (its broker died).
pub async fn stream(
    State(api): ApiState,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    query: Params,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let ConsumerTopic {
        consumer_id,
        topic_id,
    } = ConsumerTopic::parse(&Fields::Query(&params(query)?))?;
    let last_received = last_event_id(&headers)?;
    let (spec, _) = api.topic_for(&caller, topic_id, AclOperation::Read).await?;
    api.group_for(&caller, consumer_id)?;
    api.subscribed(consumer_id, &spec).await?;
    if let Some(id) = last_received.filter(|id| id.topic_id == topic_id) {
        api.advance(consumer_id, &spec, &[(id.partition, id.offset + 1)])
            .await?;
    }
    let state = StreamState {
        api,
        caller,
        consumer_id,
        topic_id,
        buffer: VecDeque::new(),
        sent: None,
        failed: false,
    };
    let events = futures::stream::unfold(state, next_event);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// The message a reconnecting client names in `Last-Event-ID`; `None` without one.
fn last_event_id(headers: &HeaderMap) -> Result<Option<MessageId>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let bad = || ApiError::bad("Last-Event-ID", "Last-Event-ID is not a message id");
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let id = text.parse::<i64>().map_err(|_| bad())?;
    MessageId::decode(id).map(Some).ok_or_else(bad)
}

/// The stream's next event; `None` ends it (unsubscribed, broker stopping, or right
/// after an `error` event). A failure that may pass (a 503: the group coordinator or a
/// partition leader moving, another broker unreachable) is retried for up to
/// [`HTTP_STREAM_RETRY_FOR`], as a Kafka consumer waits out its retriable errors; any
/// other failure, or one that lasts, is sent as an `error` event with the JSON error
/// the same call would answer, and the stream ends after it: a client is never left
/// with a stream that ended without saying why.
async fn next_event(mut st: StreamState) -> Option<(Result<Event, Infallible>, StreamState)> {
    if st.failed {
        return None;
    }
    let mut failing_since: Option<tokio::time::Instant> = None;
    let (mut backoff, longest) = HTTP_RETRY_BACKOFF;
    loop {
        if st.api.shutdown.is_cancelled() {
            return None;
        }
        let error = match step(&mut st).await {
            Ok(Some(event)) => return Some((Ok(event), st)),
            Ok(None) => return None,
            Err(error) => error,
        };
        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
        if error.code == axum::http::StatusCode::SERVICE_UNAVAILABLE
            && since.elapsed() + backoff < HTTP_STREAM_RETRY_FOR
        {
            tracing::debug!(consumer_id = st.consumer_id, topic_id = st.topic_id, error = %error.message, "stream retrying");
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = st.api.shutdown.cancelled() => return None,
            }
            backoff = (backoff * 2).min(longest);
            continue;
        }
        tracing::info!(consumer_id = st.consumer_id, topic_id = st.topic_id, error = %error.message, "stream ends with an error");
        st.failed = true;
        let data = json!({"status": "error", "error": error.message}).to_string();
        return Some((Ok(Event::default().event("error").data(data)), st));
    }
}

/// Reads on until the stream has a message to send (`Some`), or the subscription is
/// gone (`None`); a failed call is the caller's to retry.
async fn step(st: &mut StreamState) -> Result<Option<Event>, ApiError> {
    loop {
        if st.api.shutdown.is_cancelled() {
            return Ok(None);
        }
        let (spec, topic) = st
            .api
            .topic_for(&st.caller, st.topic_id, AclOperation::Read)
            .await?;
        st.api.group_for(&st.caller, st.consumer_id)?;
        if let Some((partition, next)) = st.sent {
            // Cleared only once committed: if this step is cancelled (the client
            // left), `Drop` commits it instead.
            st.api
                .advance(st.consumer_id, &spec, &[(partition, next)])
                .await?;
            st.sent = None;
        }
        if let Some((partition, message)) = st.buffer.pop_front() {
            st.sent = Some((partition, message.offset + 1));
            let json = message_json(st.topic_id, partition, &message);
            let event = Event::default().event("message");
            let event = match json["message_id"].as_i64() {
                Some(id) => event.id(id.to_string()),
                None => event,
            };
            return Ok(Some(event.data(json.to_string())));
        }
        let Some(positions) = st.api.positions(st.consumer_id, &spec).await? else {
            return Ok(None);
        };
        let appends = watch_appends(&topic);
        let messages = match st.api.collect(&topic, &positions, 100).await {
            Ok((messages, _)) => messages,
            // Nothing readable right now (leaders moving): wait and look again.
            Err(_) => Vec::new(),
        };
        if messages.is_empty() {
            // Without this handle on the topic's partitions, a partition deleted (or
            // moved away) meanwhile drops its log-end watch, which ends the wait: the
            // next look sees the topic gone at once, not after HTTP_STREAM_WAIT.
            drop(topic);
            let deadline = tokio::time::Instant::now() + HTTP_STREAM_WAIT;
            wait_for_append(appends, deadline, &st.api.shutdown).await;
            continue;
        }
        // Per partition in offset order, as read.
        st.buffer.extend(messages);
    }
}
