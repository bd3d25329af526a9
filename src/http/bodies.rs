//! What each route accepts, read and checked from its JSON body or query before any
//! service is asked: pure functions, so that the fuzz targets (`crate::fuzzing`) run
//! exactly the validation the handlers run.

use std::collections::HashMap;

use serde_json::Value;

use axum::body::Body;

use super::error::ApiError;
use crate::limits::HTTP_MAX_BODY_BYTES as MAX_BODY_BYTES;
use crate::limits::HTTP_MAX_WAIT as MAX_WAIT;
use crate::topics::MAX_PARTITIONS_PER_TOPIC;

/// A request body's bytes as a JSON object (anything else is a 400).
pub fn json_object(bytes: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad("body", format!("body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad("body", "body must be a JSON object"));
    }
    Ok(value)
}

/// `POST /create_topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicBody {
    pub name: String,
    /// `None`: the broker's default.
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
}

impl CreateTopicBody {
    pub fn parse(body: &Value) -> Result<Self, ApiError> {
        let fields = Fields::Body(body);
        fields.int("publisher_id")?;
        let name = fields.string("topic_name")?;
        // Message ids have room for partitions below 8192.
        let max_partitions = i64::from(MAX_PARTITIONS_PER_TOPIC).min(MessageId::MAX_PARTITIONS);
        let partitions = fields.ranged("partitions", 1..=max_partitions)?;
        let replication_factor = fields.ranged("replication_factor", 1..=i64::from(i16::MAX))?;
        if crate::topics::is_internal(&name) {
            return Err(ApiError::bad(
                "topic_name",
                "internal topics cannot be created",
            ));
        }
        Ok(Self {
            name,
            // Both within their type by the ranges above.
            partitions: partitions.and_then(|p| i32::try_from(p).ok()),
            replication_factor: replication_factor.and_then(|r| i16::try_from(r).ok()),
        })
    }
}

/// `POST /publish_message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishBody {
    pub topic_id: i64,
    pub content: String,
    pub key: Option<String>,
}

impl PublishBody {
    pub fn parse(body: &Value) -> Result<Self, ApiError> {
        let fields = Fields::Body(body);
        Ok(Self {
            topic_id: fields.int("topic_id")?,
            content: fields.string("message_content")?,
            key: fields.opt_string("key")?,
        })
    }
}

/// `POST /subscribe`, `POST /unsubscribe`, `GET /stream`: a consumer and a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerTopic {
    pub consumer_id: i64,
    pub topic_id: i64,
}

impl ConsumerTopic {
    /// Only the `consumer_id` (a queue message status names the consumer).
    pub fn parse_consumer(fields: &Fields<'_>) -> Result<i64, ApiError> {
        fields.int("consumer_id")
    }

    pub fn parse(fields: &Fields<'_>) -> Result<Self, ApiError> {
        Ok(Self {
            consumer_id: fields.int("consumer_id")?,
            topic_id: fields.int("topic_id")?,
        })
    }
}

/// `GET /message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageQuery {
    pub at: ConsumerTopic,
    pub wait_ms: u64,
    /// `None`: one message, answered unwrapped.
    pub max: Option<usize>,
}

impl MessageQuery {
    pub fn parse(query: &HashMap<String, String>) -> Result<Self, ApiError> {
        let fields = Fields::Query(query);
        let at = ConsumerTopic::parse(&fields)?;
        let wait_ms = fields.ranged("wait_ms", 0..=MAX_WAIT.as_millis() as i64)?;
        let max = fields.ranged("max", 1..=1000)?;
        Ok(Self {
            at,
            // Non-negative and small by the ranges above.
            wait_ms: wait_ms.map_or(0, |w| w.unsigned_abs()),
            max: max.map(|m| m.unsigned_abs() as usize),
        })
    }
}

/// `POST /ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckBody {
    pub at: ConsumerTopic,
    pub message_id: i64,
    pub id: MessageId,
}

impl AckBody {
    pub fn parse(body: &Value) -> Result<Self, ApiError> {
        let (at, message_id, id) = message_of_topic(&Fields::Body(body))?;
        Ok(Self { at, message_id, id })
    }
}

/// The consumer, topic and `message_id` an `/ack` or `/nack` names; the message must
/// be of that topic.
fn message_of_topic(fields: &Fields<'_>) -> Result<(ConsumerTopic, i64, MessageId), ApiError> {
    let at = ConsumerTopic::parse(fields)?;
    let message_id = fields.int("message_id")?;
    let id = MessageId::decode(message_id)
        .ok_or_else(|| ApiError::bad("message_id", "not a message id"))?;
    if id.topic_id != at.topic_id {
        return Err(ApiError::bad(
            "message_id",
            format!("message {message_id} belongs to topic {}", id.topic_id),
        ));
    }
    Ok((at, message_id, id))
}

/// `GET /message_status`.
pub fn status_query(query: &HashMap<String, String>) -> Result<i64, ApiError> {
    Fields::Query(query).int("message_id")
}

/// Reads a JSON object body of at most [`MAX_BODY_BYTES`].
pub(super) async fn json_body(body: Body) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError {
            code: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("request body is over {MAX_BODY_BYTES} bytes (or unreadable)"),
            field: None,
            transient: false,
        })?;
    json_object(&bytes)
}

/// How a subscription delivers: `at_least_once` (the default: a consumer group per
/// consumer, every subscriber gets every message) or `queue` (a share group per
/// consumer: each message acquired by one caller at a time, acknowledged one by one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AtLeastOnce,
    Queue,
}

impl Mode {
    pub fn parse(fields: &Fields<'_>) -> Result<Self, ApiError> {
        match fields.opt_string("mode")?.as_deref() {
            None | Some("at_least_once") => Ok(Mode::AtLeastOnce),
            Some("queue") => Ok(Mode::Queue),
            Some(other) => Err(ApiError::bad(
                "mode",
                format!("'mode' must be 'queue' or 'at_least_once', not '{other}'"),
            )),
        }
    }
}

/// `POST /nack`: give a queue message back (for redelivery) or reject it.
#[derive(Debug)]
pub struct NackBody {
    pub at: ConsumerTopic,
    pub id: MessageId,
    /// Archive it instead of redelivering it.
    pub reject: bool,
}

impl NackBody {
    pub fn parse(body: &Value) -> Result<Self, ApiError> {
        let (at, _, id) = message_of_topic(&Fields::Body(body))?;
        let reject = match body.get("reject") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::bad("reject", "'reject' must be true or false")),
        };
        Ok(Self { at, id, reject })
    }
}

/// A field of a JSON body or query, with errors that name it.
#[derive(Debug)]
pub enum Fields<'a> {
    Body(&'a Value),
    Query(&'a HashMap<String, String>),
}

impl Fields<'_> {
    fn int(&self, name: &'static str) -> Result<i64, ApiError> {
        self.opt_int(name)?
            .ok_or_else(|| ApiError::bad(name, format!("'{name}' is required")))
    }

    fn opt_int(&self, name: &'static str) -> Result<Option<i64>, ApiError> {
        let wrong = || ApiError::bad(name, format!("'{name}' must be an integer"));
        match self {
            Fields::Body(body) => match body.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(wrong),
                Some(_) => Err(wrong()),
            },
            Fields::Query(query) => match query.get(name) {
                None => Ok(None),
                Some(text) => text.trim().parse().map(Some).map_err(|_| wrong()),
            },
        }
    }

    fn string(&self, name: &'static str) -> Result<String, ApiError> {
        self.opt_string(name)?
            .ok_or_else(|| ApiError::bad(name, format!("'{name}' is required")))
    }

    fn opt_string(&self, name: &'static str) -> Result<Option<String>, ApiError> {
        let wrong = || ApiError::bad(name, format!("'{name}' must be a string"));
        match self {
            Fields::Body(body) => match body.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(wrong()),
            },
            Fields::Query(query) => Ok(query.get(name).cloned()),
        }
    }

    /// An integer within `range`, or `None` when absent.
    fn ranged(
        &self,
        name: &'static str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, ApiError> {
        match self.opt_int(name)? {
            Some(v) if !range.contains(&v) => Err(ApiError::bad(
                name,
                format!(
                    "'{name}' must be between {} and {}, got {v}",
                    range.start(),
                    range.end()
                ),
            )),
            other => Ok(other),
        }
    }
}

/// A message's address packed into one integer: topic id (14 bits), partition (13
/// bits), offset (36 bits), so that status queries and Kafka offsets map both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageId {
    pub topic_id: i64,
    pub partition: i32,
    pub offset: i64,
}

impl MessageId {
    const OFFSET_BITS: u32 = 36;
    const PARTITION_BITS: u32 = 13;
    const TOPIC_BITS: u32 = 14;
    /// Partitions a topic may have for all its messages to have ids.
    pub const MAX_PARTITIONS: i64 = 1 << Self::PARTITION_BITS;

    /// The packed id; `None` when a part does not fit.
    pub fn encode(&self) -> Option<i64> {
        let fits = |v: i64, bits: u32| (0..1i64 << bits).contains(&v);
        (fits(self.topic_id, Self::TOPIC_BITS)
            && fits(i64::from(self.partition), Self::PARTITION_BITS)
            && fits(self.offset, Self::OFFSET_BITS))
        .then(|| {
            (self.topic_id << (Self::OFFSET_BITS + Self::PARTITION_BITS))
                | (i64::from(self.partition) << Self::OFFSET_BITS)
                | self.offset
        })
    }

    pub fn decode(id: i64) -> Option<Self> {
        if id < 0 {
            return None;
        }
        Some(Self {
            topic_id: id >> (Self::OFFSET_BITS + Self::PARTITION_BITS),
            partition: ((id >> Self::OFFSET_BITS) & ((1 << Self::PARTITION_BITS) - 1)) as i32,
            offset: id & ((1 << Self::OFFSET_BITS) - 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn create_topic_checks_ranges_and_internal_names() {
        // Partition indexes 0..=8191 fit a message id.
        let ok = json!({"publisher_id": 1, "topic_name": "t", "partitions": 8192});
        let body = CreateTopicBody::parse(&ok).expect("valid");
        assert_eq!(body.partitions, Some(8192));
        assert_eq!(body.replication_factor, None);
        let too_many = json!({"publisher_id": 1, "topic_name": "t", "partitions": 8193});
        assert_eq!(
            CreateTopicBody::parse(&too_many).map_err(|e| e.field),
            Err(Some("partitions"))
        );
        let internal = json!({"publisher_id": 1, "topic_name": "__consumer_offsets"});
        assert!(CreateTopicBody::parse(&internal).is_err());
        let no_publisher = json!({"topic_name": "t"});
        assert_eq!(
            CreateTopicBody::parse(&no_publisher).map_err(|e| e.field),
            Err(Some("publisher_id"))
        );
    }

    #[test]
    fn an_ack_names_a_message_of_its_topic() {
        let id = MessageId {
            topic_id: 3,
            partition: 2,
            offset: 10,
        };
        let encoded = id.encode().expect("fits");
        let ok = json!({"consumer_id": 1, "topic_id": 3, "message_id": encoded});
        assert_eq!(AckBody::parse(&ok).ok().map(|a| a.id), Some(id));
        let other_topic = json!({"consumer_id": 1, "topic_id": 4, "message_id": encoded});
        assert!(AckBody::parse(&other_topic).is_err());
        let negative = json!({"consumer_id": 1, "topic_id": 3, "message_id": -1});
        assert!(AckBody::parse(&negative).is_err());
    }

    #[test]
    fn message_query_reads_text_integers_within_range() {
        let query: HashMap<String, String> =
            [("consumer_id", " 7"), ("topic_id", "1"), ("max", "1000")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let parsed = MessageQuery::parse(&query).expect("valid");
        assert_eq!(parsed.at.consumer_id, 7);
        assert_eq!(parsed.max, Some(1000));
        assert_eq!(parsed.wait_ms, 0);
        let mut over = query.clone();
        over.insert("max".into(), "1001".into());
        assert!(MessageQuery::parse(&over).is_err());
        assert!(json_object(b"[1]").is_err());
        assert!(json_object(b"{\"a\":1}").is_ok());
    }
}
