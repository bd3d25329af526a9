//! Produce (key 0): served v3–13. v0–2 are advertised for old librdkafka's feature
//! checks and never reach this handler: the connection closes, as in Kafka 4
//! (`server::dispatch`).
//!
//! acks=0 gets no response; acks=1 is answered once the batches are in the leader's log
//! (page cache); acks=all is refused up front (NOT_ENOUGH_REPLICAS) when the ISR is
//! below min.insync.replicas, and answered once the high watermark has passed the
//! batch (every in-sync replica has it) — or REQUEST_TIMED_OUT after the request's
//! `timeout_ms`. Either waits for an fsync too when the topic's `flush.messages` says
//! so (`Partition::flush_due`).
//!
//! The batch attribute bits decide, as in Kafka: transactional batches without a
//! transactional id the principal may WRITE refuse the whole request
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, `KafkaApis.handleProduceRequest`); with one,
//! a transactional batch opens (or continues) its producer's transaction on the
//! partition (`log::producer_state`); a control batch from a client is INVALID_RECORD
//! (`LogValidator`), and the log refuses one from any writer (`log::AppendError`).
//!
//! With an authorizer, each topic needs WRITE (else TOPIC_AUTHORIZATION_FAILED on every
//! partition, nothing appended), and auto-creation CREATE on the cluster or the topic.

use std::sync::Arc;

use kafka_protocol::messages::produce_request::TopicProduceData;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::log::batch::BatchHeader;
use crate::log::{AppendError, AppendInfo};
use crate::model::{
    coordinator_partition, now_ms, ProducerEpoch, ProducerId, TopicPartition,
    TRANSACTION_STATE_TOPIC,
};
use crate::replication::{Acks, NotServed, Partition, PartitionError};
use crate::security::acl::{AclOperation, ResourceType};
use crate::txn::TxnError;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// The answer for a topic none of whose batches is appended: `error` on every partition.
fn refused(
    topic: TopicProduceData,
    error: ResponseError,
    message: Option<&'static str>,
) -> TopicProduceResponse {
    let partitions = topic
        .partition_data
        .iter()
        .map(|d| {
            PartitionProduceResponse::default()
                .with_index(d.index)
                .with_error_code(error.code())
                .with_base_offset(-1)
                .with_error_message(message.map(str_bytes))
        })
        .collect();
    TopicProduceResponse::default()
        .with_name(topic.name)
        .with_topic_id(topic.topic_id)
        .with_partition_responses(partitions)
}

/// What a produce request needs after its batches are appended.
#[derive(Debug)]
pub enum Outcome {
    /// Answer now.
    Done(ProduceResponse),
    /// acks=0: no answer at all.
    Silent,
    /// acks=all, or a write `flush.messages` makes wait for its fsync: answer once
    /// the appended data is acknowledged.
    AwaitingAcks(PendingAcks),
}

/// A response waiting for its writes to be acknowledged.
#[derive(Debug)]
pub struct PendingAcks {
    responses: Vec<TopicProduceResponse>,
    waits: Vec<(Arc<Partition>, AppendInfo)>,
    acks: Acks,
    timeout: std::time::Duration,
}

impl PendingAcks {
    pub async fn finish(mut self) -> ProduceResponse {
        wait_acknowledged(&mut self.responses, self.waits, self.acks, self.timeout).await;
        ProduceResponse::default().with_responses(self.responses)
    }
}

/// Appends every partition's batches (in request order) and says what is left to do.
pub async fn handle(ctx: &RequestContext, request: ProduceRequest) -> Outcome {
    let acks = request.acks;
    let level = if acks == -1 { Acks::All } else { Acks::Leader };
    let mut durable_waits: Vec<(Arc<Partition>, AppendInfo)> = Vec::new();
    let mut responses = Vec::with_capacity(request.topic_data.len());
    // Kafka's KafkaApis.handleProduceRequest: transactional records need a transactional
    // id the principal may WRITE; without one the whole request is refused.
    let transactional_id_authorized = request
        .transactional_id
        .as_ref()
        .is_some_and(|id| ctx.authorize(AclOperation::Write, ResourceType::TransactionalId, id));
    if !transactional_id_authorized && has_transactional_records(&request) {
        let responses = request
            .topic_data
            .into_iter()
            .map(|topic| {
                refused(
                    topic,
                    ResponseError::TransactionalIdAuthorizationFailed,
                    None,
                )
            })
            .collect::<Vec<_>>();
        count_partition_errors(&responses);
        if acks == 0 {
            return Outcome::Silent;
        }
        return Outcome::Done(ProduceResponse::default().with_responses(responses));
    }
    for topic in request.topic_data {
        if crate::topics::is_internal(&topic.name) {
            responses.push(refused(
                topic,
                ResponseError::InvalidTopicException,
                Some("internal topics are written by the broker only"),
            ));
            continue;
        }
        // v13+ names topics by id: the one lookup serves the check and the append.
        let by_id =
            (ctx.api_version >= 13).then(|| ctx.services.replicas.topic_by_id(topic.topic_id));
        let name = match &by_id {
            Some(known) => known.as_ref().map(|t| t.spec.name.as_str()),
            None => Some(topic.name.as_str()),
        };
        // WRITE on the topic, checked before anything is created, so that a principal
        // without it learns nothing (Kafka's handleProduceRequest).
        if name.is_some_and(|n| !ctx.authorize_topic(AclOperation::Write, n)) {
            responses.push(refused(
                topic,
                ResponseError::TopicAuthorizationFailed,
                None,
            ));
            continue;
        }
        let replicas = if let Some(known) = by_id {
            Ok(known)
        } else {
            let may_create = ctx.authorize_cluster(AclOperation::Create)
                || ctx.authorize_topic(AclOperation::Create, &topic.name);
            ctx.services
                .topics
                .get_or_auto_create(&topic.name, may_create)
                .await
        };
        let internal_by_id =
            matches!(&replicas, Ok(Some(t)) if crate::topics::is_internal(&t.spec.name));
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let response = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let error = |e: ResponseError, message: String| {
                response
                    .clone()
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(message)))
            };
            if internal_by_id {
                partitions.push(error(
                    ResponseError::InvalidTopicException,
                    "internal topics are written by the broker only".into(),
                ));
                continue;
            }
            let partition = match &replicas {
                Ok(Some(t)) => t.partition(data.index).cloned(),
                Ok(None) => Err(NotServed::Unknown),
                Err(e) => {
                    partitions.push(error(errors::topic_error(e), e.to_string()));
                    continue;
                }
            };
            let partition = match partition {
                // Whether this broker may still lead (its cluster session) is checked
                // inside the append (`Partition::append`'s lease), for every writer.
                Ok(partition) => partition,
                Err(NotServed::NotLeader) => {
                    partitions.push(error(
                        ResponseError::NotLeaderOrFollower,
                        format!(
                            "broker {} does not lead partition {}",
                            ctx.node_id(),
                            data.index
                        ),
                    ));
                    continue;
                }
                Err(NotServed::Unknown) => {
                    let topic_known = !matches!(replicas, Ok(None));
                    let unknown = errors::unknown_partition(topic_known, ctx.api_version >= 13);
                    partitions.push(error(unknown, format!("no partition {} here", data.index)));
                    continue;
                }
            };
            if !matches!(acks, -1..=1) {
                partitions.push(error(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks={acks}"),
                ));
                continue;
            }
            let Some(records) = data.records else {
                partitions.push(error(ResponseError::CorruptMessage, "no records".into()));
                continue;
            };
            // KIP-890 part 1: a transactional write that would open a transaction here is
            // checked with the coordinator first (Kafka's default,
            // transaction.partition.verification.enable), under a guard a marker clears.
            let verified = match transactional_producer(&records) {
                Some((pid, epoch)) if !partition.has_open_transaction(pid) => {
                    let token = partition.begin_verification(pid);
                    let txn_id = request
                        .transactional_id
                        .as_deref()
                        .map_or("", |id| id.as_str());
                    if let Err(code) =
                        verify_in_transaction(ctx, txn_id, (pid, epoch), partition.id()).await
                    {
                        partitions.push(error(
                            code,
                            "the partition is not in the producer's transaction".into(),
                        ));
                        continue;
                    }
                    Some((pid, token))
                }
                _ => None,
            };
            if BatchHeader::parse(&records).is_ok_and(|batch| batch.is_control()) {
                // Kafka's LogValidator.validateBatch: control records are the broker's.
                partitions.push(error(
                    ResponseError::InvalidRecord,
                    "Clients are not allowed to write control records".into(),
                ));
                continue;
            }
            if holds_more_than_one_batch(&records) {
                // Kafka's ProduceRequest.validateRecords: v3+ carries exactly one batch.
                let message = "Produce requests with version 3+ are only allowed to contain exactly one record batch per partition";
                partitions.push(error(ResponseError::InvalidRecord, message.into()));
                continue;
            }
            let appended = match verified {
                Some(guard) => partition.append_verified(&records, now_ms(), level, guard),
                None => partition.append(&records, now_ms(), level),
            };
            match appended {
                Ok(info) => {
                    let topic_label = partition.id().topic.clone();
                    metrics::counter!(crate::metrics::TOPIC_BYTES_IN_TOTAL, "topic" => topic_label.clone())
                        .increment(records.len() as u64);
                    metrics::counter!(crate::metrics::TOPIC_MESSAGES_IN_TOTAL, "topic" => topic_label)
                        .increment((info.last_offset - info.base_offset + 1).max(0) as u64);
                    if let Some((batches, took)) = info.recompressed {
                        let topic = partition.id().topic.clone();
                        metrics::counter!(crate::metrics::PRODUCE_RECOMPRESSED_BATCHES_TOTAL, "topic" => topic.clone())
                            .increment(batches as u64);
                        metrics::histogram!(crate::metrics::PRODUCE_RECOMPRESSION_SECONDS, "topic" => topic)
                            .record(took.as_secs_f64());
                    }
                    let log_start = partition.offsets().log_start().0;
                    if acks == -1 || (acks == 1 && partition.flush_due(info.last_offset)) {
                        durable_waits.push((Arc::clone(&partition), info));
                    }
                    partitions.push(
                        response
                            .with_base_offset(info.base_offset)
                            .with_log_append_time_ms(info.log_append_time.unwrap_or(-1))
                            .with_log_start_offset(log_start),
                    );
                }
                Err(PartitionError::Append(AppendError::MissingKey { records })) => {
                    partitions.push(keyless_refusal(response, partition.id(), &records));
                }
                Err(e) => {
                    tracing::debug!(partition = %partition.id(), error = %e, "produce refused");
                    partitions.push(error(errors::partition_error(&e), e.to_string()));
                }
            }
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_topic_id(topic.topic_id)
                .with_partition_responses(partitions),
        );
    }
    count_partition_errors(&responses);
    if acks == 0 {
        return Outcome::Silent;
    }
    if !durable_waits.is_empty() {
        return Outcome::AwaitingAcks(PendingAcks {
            responses,
            waits: durable_waits,
            acks: level,
            timeout: std::time::Duration::from_millis(request.timeout_ms.max(0) as u64),
        });
    }
    Outcome::Done(ProduceResponse::default().with_responses(responses))
}

/// INVALID_RECORD for a batch with records without a key sent to a compacted topic,
/// in Kafka's words (`LogValidator.validateKey`, then `processRecordErrors`): one
/// record error per keyless record, and a message quoting the first three.
fn keyless_refusal(
    response: PartitionProduceResponse,
    partition: &TopicPartition,
    records: &[usize],
) -> PartitionProduceResponse {
    let each = format!(
        "Compacted topic cannot accept message without key in topic partition {}-{}.",
        partition.topic, partition.partition
    );
    let quoted: Vec<String> = records
        .iter()
        .take(3)
        .map(|i| format!("RecordError(batchIndex={i}, message='{each}')"))
        .collect();
    let message = format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        records.len(),
        quoted.join(", ")
    );
    let record_errors = records
        .iter()
        .map(|&i| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(i32::try_from(i).unwrap_or(i32::MAX))
                .with_batch_index_error_message(Some(str_bytes(each.clone())))
        })
        .collect();
    response
        .with_error_code(ResponseError::InvalidRecord.code())
        .with_error_message(Some(str_bytes(message)))
        .with_record_errors(record_errors)
}

/// The producer id and epoch of a transactional batch (a marker-like one too: Kafka
/// verifies before it validates).
fn transactional_producer(records: &[u8]) -> Option<(i64, i16)> {
    BatchHeader::parse(records)
        .ok()
        .filter(|b| b.is_transactional())
        .map(|b| (b.producer_id(), b.producer_epoch()))
}

/// Asks the transactional id's coordinator (this broker, or another by
/// AddPartitionsToTxn v4 `verify_only`) whether `partition` is in the producer's open
/// transaction. A coordinator that cannot answer is NOT_ENOUGH_REPLICAS, which
/// producers retry, as Kafka maps it (`ReplicaManager`'s verification callback).
async fn verify_in_transaction(
    ctx: &RequestContext,
    transactional_id: &str,
    (producer_id, epoch): (i64, i16),
    partition: &TopicPartition,
) -> Result<(), ResponseError> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{AddPartitionsToTxnRequest, TransactionalId};
    let unavailable = |e: TxnError| match e {
        TxnError::NotCoordinator
        | TxnError::CoordinatorNotAvailable
        | TxnError::CoordinatorLoadInProgress
        | TxnError::ConcurrentTransactions => ResponseError::NotEnoughReplicas,
        other => errors::txn_error(&other, ctx.api_version, 0),
    };
    let txn = &ctx.services.txn;
    if txn.is_coordinator_for(transactional_id) {
        let parts = [partition.clone()];
        let added = txn
            .verify_partitions(
                transactional_id,
                ProducerId(producer_id),
                ProducerEpoch(epoch),
                &parts,
            )
            .map_err(unavailable)?;
        return if added.first() == Some(&true) {
            Ok(())
        } else {
            Err(ResponseError::InvalidTxnState)
        };
    }
    let store = ctx.services.store.as_ref();
    // No `__transaction_state` yet: no coordinator knows any transactional id.
    let spec = store
        .topic(TRANSACTION_STATE_TOPIC)
        .await
        .ok_or(ResponseError::InvalidProducerIdMapping)?;
    let coordinator = store
        .leader_of(
            &spec,
            coordinator_partition(transactional_id, spec.partitions),
        )
        .ok_or(ResponseError::NotEnoughReplicas)?;
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(kafka_protocol::messages::ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_verify_only(true)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(partition.topic.clone())))
                .with_partitions(vec![partition.partition])]),
    ]);
    let response = ctx
        .services
        .peers
        .send(coordinator, request, 5)
        .await
        .map_err(|_| ResponseError::NotEnoughReplicas)?;
    if response.error_code != 0 {
        return Err(ResponseError::NotEnoughReplicas);
    }
    let code = response
        .results_by_transaction
        .iter()
        .flat_map(|t| &t.topic_results)
        .flat_map(|t| &t.results_by_partition)
        .map(|p| p.partition_error_code)
        .next()
        .unwrap_or(ResponseError::InvalidTxnState.code());
    match code {
        0 => Ok(()),
        c if c == ResponseError::NotCoordinator.code()
            || c == ResponseError::CoordinatorNotAvailable.code()
            || c == ResponseError::CoordinatorLoadInProgress.code()
            || c == ResponseError::ConcurrentTransactions.code() =>
        {
            Err(ResponseError::NotEnoughReplicas)
        }
        c => Err(ResponseError::try_from_code(c).unwrap_or(ResponseError::InvalidTxnState)),
    }
}

/// Kafka's `RequestUtils.hasTransactionalRecords`: some partition's first batch has the
/// transactional bit.
fn has_transactional_records(request: &ProduceRequest) -> bool {
    request
        .topic_data
        .iter()
        .flat_map(|topic| &topic.partition_data)
        .filter_map(|data| data.records.as_deref())
        .any(|records| BatchHeader::parse(records).is_ok_and(|batch| batch.is_transactional()))
}

/// Whether a record set continues past its first batch, judged from the first
/// batch's length field alone (the log validates the batch itself).
fn holds_more_than_one_batch(records: &[u8]) -> bool {
    let Some(length) = records.get(8..12) else {
        return false;
    };
    let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
    usize::try_from(length).is_ok_and(|l| records.len() > crate::log::batch::LOG_OVERHEAD + l)
}

fn count_partition_errors(responses: &[TopicProduceResponse]) {
    for response in responses.iter().flat_map(|t| t.partition_responses.iter()) {
        if response.error_code != 0 {
            count_partition_error(response.error_code);
        }
    }
}

fn count_partition_error(code: i16) {
    let error = code.to_string();
    metrics::counter!(crate::metrics::PARTITION_ERRORS_TOTAL, "api" => "Produce", "error" => error)
        .increment(1);
}

/// Waits until every appended partition acknowledges its write; one that cannot
/// (replication timed out, the ISR shrank below its minimum, leadership lost, a failed
/// flush) gets its error instead of its offset.
async fn wait_acknowledged(
    responses: &mut [TopicProduceResponse],
    waits: Vec<(Arc<Partition>, AppendInfo)>,
    acks: Acks,
    timeout: std::time::Duration,
) {
    let results = futures::future::join_all(waits.iter().map(|(p, written)| async move {
        match tokio::time::timeout(timeout, p.wait_acknowledged(written, acks)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(PartitionError::TimedOut(p.id().clone())),
        }
    }))
    .await;
    for ((partition, _), result) in waits.iter().zip(results) {
        if let Err(e) = result {
            let failed = responses
                .iter_mut()
                .filter(|t| {
                    t.name.0.as_str() == partition.id().topic || t.topic_id == partition.topic_id()
                })
                .flat_map(|t| t.partition_responses.iter_mut())
                .find(|r| {
                    r.index == partition.id().partition && r.error_code == 0 && r.base_offset >= 0
                });
            if let Some(r) = failed {
                // Counted here, not with the append's refusals: a leadership lost while
                // an acks=all write waits is the NOT_LEADER_OR_FOLLOWER a producer most
                // often follows.
                r.error_code = errors::partition_error(&e).code();
                r.base_offset = -1;
                count_partition_error(r.error_code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_batch_in_one_partition_is_detected_from_the_first_length() {
        let one = crate::log::records::testing::simple_batch(2, 0);
        assert!(!holds_more_than_one_batch(&one));
        assert!(holds_more_than_one_batch(
            &[one.clone(), one.clone()].concat()
        ));
        assert!(
            !holds_more_than_one_batch(&one[..one.len() - 3]),
            "truncated: left to the log"
        );
        assert!(!holds_more_than_one_batch(&[0u8; 5]));
    }
}
