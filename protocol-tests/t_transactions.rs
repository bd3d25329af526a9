//! The transaction APIs raw: InitProducerId with transactional ids, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, WriteTxnMarkers, DescribeProducers, DescribeTransactions,
//! ListTransactions, and what they do to Fetch and ListOffsets (the last stable offset,
//! aborted transactions). Error codes follow Kafka's version rules: PRODUCER_FENCED is
//! INVALID_PRODUCER_EPOCH for clients too old to know it.

use std::time::{Duration, Instant};

use kafka_protocol::messages::*;

use crate::client::Client;
use crate::groups::{find_coordinators, gid, KEY_TRANSACTION};
use crate::ops::*;
use crate::records::{encode_batch, BatchSpec, Rec};

const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
const OPERATION_NOT_ATTEMPTED: i16 = 55;
const PRODUCER_FENCED: i16 = 90;

fn txn_ctx() -> Ctx {
    Ctx::with_args(&["--transaction-state-log-num-partitions", "2"])
}

/// Waits until the broker coordinates transactional ids (the first lookup creates
/// `__transaction_state`).
fn wait_txn_coordinator(c: &mut Client, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while find_coordinators(c, 3, KEY_TRANSACTION, &[id])[0].error != NONE {
        assert!(
            Instant::now() < deadline,
            "no transaction coordinator within 15 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn init(c: &mut Client, v: i16, id: &str, timeout_ms: i32) -> InitProducerIdResponse {
    c.call(
        v,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(sb(id))))
            .with_transaction_timeout_ms(timeout_ms),
    )
}

fn add_partitions(
    c: &mut Client,
    v: i16,
    id: &str,
    pid: i64,
    epoch: i16,
    topics: &[(&str, i32)],
) -> Vec<(String, i32, i16)> {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(sb(id)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(
            topics
                .iter()
                .map(|(t, p)| {
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(tn(t))
                        .with_partitions(vec![*p])
                })
                .collect(),
        );
    let response = c.call(v, &request);
    response
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| {
            t.results_by_partition.iter().map(move |p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    p.partition_error_code,
                )
            })
        })
        .collect()
}

fn end(c: &mut Client, v: i16, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    c.call(
        v,
        &EndTxnRequest::default()
            .with_transactional_id(TransactionalId(sb(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit),
    )
    .error_code
}

/// EndTxn until the previous commit or abort has completed (CONCURRENT_TRANSACTIONS
/// meanwhile, as in Kafka); returns the final code.
fn end_settled(c: &mut Client, v: i16, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let code = end(c, v, id, pid, epoch, commit);
        if code != CONCURRENT_TRANSACTIONS || Instant::now() > deadline {
            return code;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn txn_batch(pid: i64, epoch: i16, seq: i32, values: &[&[u8]]) -> Vec<u8> {
    let mut spec = BatchSpec::new(
        crate::broker::now_ms(),
        values.iter().map(|v| Rec::value(v)).collect(),
    );
    spec.attributes = 1 << 4;
    spec.producer_id = pid;
    spec.producer_epoch = epoch;
    spec.base_sequence = seq;
    encode_batch(&spec)
}

fn fetch_committed(c: &mut Client, topic: &Topic, offset: i64) -> fetch_response::PartitionData {
    let v = 12;
    let mut request = fetch_req(v, topic, 0, FetchOpts::at(offset));
    request.isolation_level = 1;
    let (top, p) = fetch_partition(v, c.call(v, &request), topic, 0);
    assert_code!(top, NONE, "Fetch read_committed");
    p
}

fn latest_committed(c: &mut Client, topic: &str) -> i64 {
    let v = 7;
    let mut request = list_offsets_req(v, topic, 0, LATEST);
    request.isolation_level = 1;
    let r = c.call(v, &request);
    r.topics[0].partitions[0].offset
}

#[test]
fn init_producer_id_checks_the_timeout_and_bumps_the_epoch_of_a_transactional_id() {
    let ctx = txn_ctx();
    let mut c = ctx.client();
    wait_txn_coordinator(&mut c, "init-a");
    for v in ctx.versions_req(ApiKey::InitProducerId, 0, 5) {
        let id = format!("init-{v}");
        let r = init(&mut c, v, &id, 900_001);
        assert_code!(
            r.error_code,
            INVALID_TRANSACTION_TIMEOUT,
            "InitProducerId v{v}: timeout above the max"
        );
        let first = init(&mut c, v, &id, 60_000);
        assert_code!(first.error_code, NONE, "InitProducerId v{v}");
        assert_eq!(first.producer_epoch, 0, "v{v}: a new id starts at epoch 0");
        let second = init(&mut c, v, &id, 60_000);
        assert_code!(second.error_code, NONE, "InitProducerId v{v} again");
        assert_eq!(
            (second.producer_id, second.producer_epoch),
            (first.producer_id, 1),
            "v{v}: a restart keeps the id and bumps the epoch"
        );
    }
    let v = ctx.max_version(ApiKey::InitProducerId);
    assert_code!(
        init(&mut c, v, "", 60_000).error_code,
        INVALID_REQUEST,
        "an empty transactional id"
    );
}

#[test]
fn a_fenced_epoch_is_producer_fenced_or_invalid_producer_epoch_by_version() {
    let ctx = txn_ctx();
    let t = ctx.topic("txnfence", 1, &[]);
    let mut c = ctx.client();
    let id = "fence-id";
    wait_txn_coordinator(&mut c, id);
    let old = init(&mut c, 3, id, 60_000);
    let new = init(&mut c, 3, id, 60_000);
    let (pid, stale) = (old.producer_id.0, old.producer_epoch);
    assert_eq!(new.producer_epoch, stale + 1);
    for v in ctx.versions_req(ApiKey::AddPartitionsToTxn, 0, 3) {
        let want = if v < 2 {
            INVALID_PRODUCER_EPOCH
        } else {
            PRODUCER_FENCED
        };
        for (_, _, code) in add_partitions(&mut c, v, id, pid, stale, &[(&t.name, 0)]) {
            assert_code!(code, want, "AddPartitionsToTxn v{v} with the fenced epoch");
        }
    }
    for v in ctx.versions_req(ApiKey::EndTxn, 0, 5) {
        let want = if v < 2 {
            INVALID_PRODUCER_EPOCH
        } else {
            PRODUCER_FENCED
        };
        assert_code!(
            end(&mut c, v, id, pid, stale, true),
            want,
            "EndTxn v{v} with the fenced epoch"
        );
    }
    for v in ctx.versions_req(ApiKey::AddOffsetsToTxn, 0, 4) {
        let want = if v < 2 {
            INVALID_PRODUCER_EPOCH
        } else {
            PRODUCER_FENCED
        };
        let r = c.call(
            v,
            &AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(sb(id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(stale)
                .with_group_id(gid("fence-group")),
        );
        assert_code!(
            r.error_code,
            want,
            "AddOffsetsToTxn v{v} with the fenced epoch"
        );
    }
    // An id no InitProducerId made, and a producer id that is not the id's.
    let v = 3;
    for (_, _, code) in add_partitions(&mut c, v, "never-made", pid, 0, &[(&t.name, 0)]) {
        assert_code!(
            code,
            INVALID_PRODUCER_ID_MAPPING,
            "AddPartitionsToTxn of an unknown id"
        );
    }
    assert_code!(
        end(&mut c, v, id, pid + 999, new.producer_epoch, true),
        INVALID_PRODUCER_ID_MAPPING,
        "EndTxn of another producer id"
    );
    // Nothing to end in Empty; an unknown topic fails the whole add.
    assert_code!(
        end(&mut c, v, id, pid, new.producer_epoch, true),
        INVALID_TXN_STATE,
        "EndTxn with no transaction"
    );
    let results = add_partitions(
        &mut c,
        v,
        id,
        pid,
        new.producer_epoch,
        &[(&t.name, 0), ("txn-no-such-topic", 0)],
    );
    for (topic, _, code) in results {
        let want = if topic == t.name {
            OPERATION_NOT_ATTEMPTED
        } else {
            UNKNOWN_TOPIC_OR_PARTITION
        };
        assert_code!(
            code,
            want,
            "AddPartitionsToTxn with an unknown topic: {topic}"
        );
    }
}

#[test]
fn a_transaction_commits_through_the_apis_and_holds_the_last_stable_offset_until_then() {
    let ctx = txn_ctx();
    let t = ctx.topic("txncommit", 1, &[]);
    let mut c = ctx.client();
    let id = "commit-id";
    wait_txn_coordinator(&mut c, id);
    let r = init(&mut c, 4, id, 60_000);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    // A transactional write to a partition not in the transaction is refused (KIP-890).
    let pr = produce_txn(&mut c, &t, id, txn_batch(pid, epoch, 0, &[b"early"]));
    assert_code!(
        pr.error_code,
        INVALID_TXN_STATE,
        "Produce before AddPartitionsToTxn"
    );
    for (_, _, code) in add_partitions(&mut c, 3, id, pid, epoch, &[(&t.name, 0)]) {
        assert_code!(code, NONE, "AddPartitionsToTxn");
    }
    let pr = produce_txn(&mut c, &t, id, txn_batch(pid, epoch, 0, &[b"a", b"b"]));
    assert_code!(pr.error_code, NONE, "transactional Produce");
    let p = fetch_committed(&mut c, &t, 0);
    assert_eq!(
        (p.high_watermark, p.last_stable_offset),
        (2, 0),
        "open: LSO at its first offset"
    );
    assert!(
        records_of(&p).is_empty(),
        "read_committed reads nothing of an open transaction"
    );
    assert_eq!(
        latest_committed(&mut c, &t.name),
        0,
        "ListOffsets read_committed: the LSO"
    );
    let producers = c.call(
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(tn(&t.name))
                .with_partition_indexes(vec![0]),
        ]),
    );
    let state = &producers.topics[0].partitions[0].active_producers[0];
    assert_eq!(
        (state.producer_id.0, state.current_txn_start_offset),
        (pid, 0)
    );
    let described = c.call(
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(sb(id))]),
    );
    let d = &described.transaction_states[0];
    assert_eq!(
        (d.transaction_state.as_str(), d.producer_id.0),
        ("Ongoing", pid)
    );
    assert_eq!(d.topics[0].partitions, vec![0]);
    for v in ctx.versions_req(ApiKey::ListTransactions, 0, 2) {
        let listed = c.call(
            v,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![sb("Ongoing"), sb("NoSuchState")]),
        );
        assert!(
            listed
                .transaction_states
                .iter()
                .any(|s| s.transactional_id.as_str() == id),
            "ListTransactions v{v}"
        );
        assert_eq!(
            listed.unknown_state_filters,
            vec![sb("NoSuchState")],
            "v{v}"
        );
    }
    assert_code!(end(&mut c, 3, id, pid, epoch, true), NONE, "EndTxn commit");
    assert_code!(
        end_settled(&mut c, 3, id, pid, epoch, true),
        NONE,
        "a retried commit succeeds"
    );
    assert_code!(
        end(&mut c, 3, id, pid, epoch, false),
        INVALID_TXN_STATE,
        "abort after commit"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let p = loop {
        let p = fetch_committed(&mut c, &t, 0);
        if p.last_stable_offset == 3 || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (p.high_watermark, p.last_stable_offset),
        (3, 3),
        "the marker is offset 2"
    );
    let batches = batches_of(12, &p);
    assert_eq!(batches.len(), 2, "the data batch and the COMMIT marker");
    assert_eq!(
        batches[1].attributes & 0x30,
        0x30,
        "a transactional control batch"
    );
    assert_eq!(
        p.aborted_transactions.as_deref().map(<[_]>::len),
        Some(0),
        "nothing aborted"
    );
}

#[test]
fn an_abort_is_named_to_read_committed_fetches_though_its_marker_is_segments_later() {
    let ctx = txn_ctx();
    let t = ctx.topic("txnabortroll", 1, &[("internal.segment.bytes", "1024")]);
    let mut c = ctx.client();
    let id = "abort-roll-id";
    wait_txn_coordinator(&mut c, id);
    let r = init(&mut c, 4, id, 60_000);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    for (_, _, code) in add_partitions(&mut c, 3, id, pid, epoch, &[(&t.name, 0)]) {
        assert_code!(code, NONE, "AddPartitionsToTxn");
    }
    assert_code!(
        produce_txn(&mut c, &t, id, txn_batch(pid, epoch, 0, &[b"doomed"])).error_code,
        NONE,
        "Produce"
    );
    for i in 0..20 {
        let value = format!("plain-{i}-{}", "x".repeat(200));
        produce_ok(
            &ctx,
            &mut c,
            &t,
            0,
            crate::records::simple_batch(crate::broker::now_ms(), &[value.as_bytes()]),
        );
    }
    assert_code!(end(&mut c, 3, id, pid, epoch, false), NONE, "EndTxn abort");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let p = fetch_committed(&mut c, &t, 0);
        if p.last_stable_offset == p.high_watermark && p.high_watermark == 22 {
            let aborted = p.aborted_transactions.clone().unwrap_or_default();
            assert_eq!(aborted.len(), 1, "the abort is named");
            assert_eq!(
                (aborted[0].producer_id.0, aborted[0].first_offset),
                (pid, 0)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abort marker never became stable: {p:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut uncommitted = fetch_req(12, &t, 0, FetchOpts::at(0));
    uncommitted.isolation_level = 0;
    let (_, p) = fetch_partition(12, c.call(12, &uncommitted), &t, 0);
    assert!(
        p.aborted_transactions.is_none(),
        "read_uncommitted fetches are not told"
    );
}

#[test]
fn a_marker_from_an_older_coordinator_epoch_is_fenced() {
    let ctx = txn_ctx();
    let t = ctx.topic("txnmarkers", 1, &[]);
    let mut c = ctx.client();
    let id = "marker-id";
    wait_txn_coordinator(&mut c, id);
    let r = init(&mut c, 4, id, 60_000);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    let marker = |coordinator_epoch: i32| {
        WriteTxnMarkersRequest::default().with_markers(vec![
            write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(coordinator_epoch)
                .with_topics(vec![
                    write_txn_markers_request::WritableTxnMarkerTopic::default()
                        .with_name(tn(&t.name))
                        .with_partition_indexes(vec![0]),
                ]),
        ])
    };
    let code_of = |r: WriteTxnMarkersResponse| r.markers[0].topics[0].partitions[0].error_code;
    assert_code!(
        code_of(c.call(1, &marker(5))),
        NONE,
        "a marker at coordinator epoch 5"
    );
    assert_code!(
        code_of(c.call(1, &marker(4))),
        TRANSACTION_COORDINATOR_FENCED,
        "then one at epoch 4"
    );
    let ghost = WriteTxnMarkersRequest::default().with_markers(vec![
        write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(ProducerId(pid))
            .with_coordinator_epoch(5)
            .with_topics(vec![
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(tn("txn-no-such-topic"))
                    .with_partition_indexes(vec![0]),
            ]),
    ]);
    assert_code!(
        code_of(c.call(1, &ghost)),
        UNKNOWN_TOPIC_OR_PARTITION,
        "a marker for an unknown topic"
    );
}

fn produce_txn(
    c: &mut Client,
    t: &Topic,
    id: &str,
    batch: Vec<u8>,
) -> produce_response::PartitionProduceResponse {
    let v = 9;
    let request =
        produce_req(v, t, 0, batch, -1).with_transactional_id(Some(TransactionalId(sb(id))));
    c.call(v, &request).responses[0].partition_responses[0].clone()
}
