//! Fetch v4-18.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, FetchResponse};
use uuid::Uuid;

use crate::broker::now_ms;
use crate::client::Client;
use crate::ops::*;
use crate::records::*;

fn check_watermarks(
    v: i16,
    p: &kafka_protocol::messages::fetch_response::PartitionData,
    hw: i64,
    lso: i64,
    what: &str,
) {
    assert_eq!(p.high_watermark, hw, "Fetch v{v} {what}: high watermark");
    assert_eq!(
        p.last_stable_offset, hw,
        "Fetch v{v} {what}: last stable offset"
    );
    if v >= 5 {
        assert_eq!(
            p.log_start_offset, lso,
            "Fetch v{v} {what}: log start offset"
        );
    }
}

#[test]
fn fetch_every_version() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch", 1, &[]);
    let mut c = ctx.client();
    let ts = now_ms();
    let a = simple_batch(ts, &[b"a0", b"a1", b"a2"]);
    let b = simple_batch(ts + 10, &[b"b0", b"b1"]);
    let a_len = a.len();
    assert_eq!(produce_ok(&ctx, &mut c, &t, 0, a), 0);
    assert_eq!(produce_ok(&ctx, &mut c, &t, 0, b), 3);
    let leo = 5;
    for v in ctx.versions_req(ApiKey::Fetch, 4, 18) {
        // Everything from 0.
        let p = fetch(&mut c, v, &t, 0, FetchOpts::at(0));
        assert_code!(p.error_code, NONE, "Fetch v{v} at 0");
        check_watermarks(v, &p, leo, 0, "at 0");
        let bs = batches_of(v, &p);
        assert_eq!(bs.len(), 2, "Fetch v{v} at 0: expected both batches");
        assert_eq!(
            (bs[0].base_offset, bs[0].record_count),
            (0, 3),
            "Fetch v{v}: first batch"
        );
        assert_eq!(
            (bs[1].base_offset, bs[1].record_count),
            (3, 2),
            "Fetch v{v}: second batch"
        );
        for bt in &bs {
            assert!(
                bt.crc_ok,
                "Fetch v{v}: batch at {} has a bad CRC-32C",
                bt.base_offset
            );
            assert_eq!(bt.magic, 2);
            assert_eq!(
                bt.last_offset_delta + 1,
                bt.record_count,
                "Fetch v{v}: last offset delta"
            );
            assert_eq!(
                bt.producer_id, -1,
                "Fetch v{v}: producer id of a non-idempotent batch"
            );
        }
        let values: Vec<Vec<u8>> = bs
            .iter()
            .flat_map(|b| {
                b.records
                    .iter()
                    .map(|r| r.value.clone().unwrap_or_default())
            })
            .collect();
        assert_eq!(
            values,
            vec![
                b"a0".to_vec(),
                b"a1".to_vec(),
                b"a2".to_vec(),
                b"b0".to_vec(),
                b"b1".to_vec()
            ],
            "Fetch v{v}: values"
        );
        let offsets: Vec<i64> = bs
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.offset))
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 3, 4], "Fetch v{v}: record offsets");
        assert_eq!(
            bs[0].records[1].timestamp,
            ts + 1,
            "Fetch v{v}: record timestamp"
        );
        assert_eq!(
            bs[0].records[0].key.as_deref(),
            Some(&b"k0"[..]),
            "Fetch v{v}: record key"
        );

        // Offset inside a batch: the whole batch from its base offset.
        for (off, base) in [(1i64, 0i64), (2, 0), (4, 3)] {
            let p = fetch(&mut c, v, &t, 0, FetchOpts::at(off));
            assert_code!(p.error_code, NONE, "Fetch v{v} at {off}");
            let bs = batches_of(v, &p);
            assert!(!bs.is_empty(), "Fetch v{v} at {off}: no batch");
            assert_eq!(
                bs[0].base_offset, base,
                "Fetch v{v} at {off}: must return the whole containing batch"
            );
        }

        // At the log end: nothing, high watermark = log end.
        let p = fetch(
            &mut c,
            v,
            &t,
            0,
            FetchOpts {
                min_bytes: 0,
                ..FetchOpts::at(leo)
            },
        );
        assert_code!(p.error_code, NONE, "Fetch v{v} at the log end");
        assert!(
            records_of(&p).is_empty(),
            "Fetch v{v} at the log end: {} record bytes",
            records_of(&p).len()
        );
        check_watermarks(v, &p, leo, 0, "at the log end");

        // Past the log end.
        for off in [leo + 1, leo + 1000] {
            let p = fetch(&mut c, v, &t, 0, FetchOpts::at(off));
            assert_code!(
                p.error_code,
                OFFSET_OUT_OF_RANGE,
                "Fetch v{v} at {off} (log end {leo})"
            );
            assert!(
                records_of(&p).is_empty(),
                "Fetch v{v}: records returned with OFFSET_OUT_OF_RANGE"
            );
        }
        let p = fetch(&mut c, v, &t, 0, FetchOpts::at(-5));
        assert_code!(p.error_code, OFFSET_OUT_OF_RANGE, "Fetch v{v} at offset -5");

        // KIP-74: limits smaller than the first batch still return it whole.
        for (max_bytes, part_max) in [
            (1, 1),
            (1, 1 << 20),
            (1 << 20, 1),
            (a_len as i32 - 1, a_len as i32 - 1),
        ] {
            let o = FetchOpts {
                max_bytes,
                partition_max_bytes: part_max,
                ..FetchOpts::at(0)
            };
            let p = fetch(&mut c, v, &t, 0, o);
            assert_code!(
                p.error_code,
                NONE,
                "Fetch v{v} max_bytes={max_bytes} partition_max_bytes={part_max}"
            );
            let bs = batches_of(v, &p);
            assert!(!bs.is_empty(), "Fetch v{v} max_bytes={max_bytes} partition_max_bytes={part_max}: no complete batch (KIP-74)");
            assert_eq!(
                (bs[0].base_offset, bs[0].record_count),
                (0, 3),
                "Fetch v{v}: first batch under small limits"
            );
            assert!(bs[0].crc_ok);
        }

        // Unknown partition of a known topic.
        let p = fetch(&mut c, v, &t, 9, FetchOpts::at(0));
        assert_code!(
            p.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "Fetch v{v} partition 9 of a 1-partition topic"
        );

        // Unknown topic: by name (v<13) or id (v13+).
        let ghost = Topic {
            name: crate::broker::unique_name("ghost"),
            id: Uuid::from_u128(0xfeed_beef_0000_1111_2222_3333_4444_5555),
        };
        let resp: FetchResponse = c.call(v, &fetch_req(v, &ghost, 0, FetchOpts::at(0)));
        let want = if v >= 13 {
            UNKNOWN_TOPIC_ID
        } else {
            UNKNOWN_TOPIC_OR_PARTITION
        };
        let got = if resp.error_code != NONE {
            resp.error_code
        } else {
            let (_, p) = fetch_partition(v, resp, &ghost, 0);
            p.error_code
        };
        assert_code!(got, want, "Fetch v{v} of an unknown topic");
    }
}

#[test]
fn fetch_long_poll_times_out_on_empty_partition() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-poll", 1, &[]);
    let mut c = ctx.client();
    let mut versions = vec![ctx.max_version(ApiKey::Fetch)];
    if ctx.supports(ApiKey::Fetch, 4) && versions[0] != 4 {
        versions.push(4);
    }
    for v in versions {
        let o = FetchOpts {
            max_wait_ms: 2000,
            min_bytes: 1,
            ..FetchOpts::at(0)
        };
        let start = Instant::now();
        let p = fetch(&mut c, v, &t, 0, o);
        let el = start.elapsed();
        assert_code!(p.error_code, NONE, "Fetch v{v} long poll");
        assert!(
            records_of(&p).is_empty(),
            "Fetch v{v} long poll on an empty partition returned records"
        );
        assert!(
            el >= Duration::from_millis(1500),
            "Fetch v{v} with max_wait_ms=2000 min_bytes=1 returned after {el:?} (expected ~2 s)"
        );
        assert!(
            el < Duration::from_secs(5),
            "Fetch v{v} with max_wait_ms=2000 took {el:?}"
        );
        assert_eq!(p.high_watermark, 0);
    }
}

#[test]
fn fetch_long_poll_woken_by_produce() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-wake", 1, &[]);
    let v = ctx.max_version(ApiKey::Fetch);
    let mut waiter = ctx.client();
    waiter.set_read_timeout(Duration::from_secs(20));
    let o = FetchOpts {
        max_wait_ms: 10_000,
        min_bytes: 1,
        ..FetchOpts::at(0)
    };
    let start = Instant::now();
    let corr = waiter.send(v, &fetch_req(v, &t, 0, o));
    std::thread::sleep(Duration::from_millis(400));
    let mut producer = Client::connect(&ctx.broker.addr);
    let base = produce_ok(
        &ctx,
        &mut producer,
        &t,
        0,
        simple_batch(now_ms(), &[b"wake"]),
    );
    assert_eq!(base, 0);
    let resp: FetchResponse = waiter.recv(ApiKey::Fetch as i16, v, corr);
    let el = start.elapsed();
    let (top, p) = fetch_partition(v, resp, &t, 0);
    assert_code!(top, NONE, "woken Fetch v{v}");
    assert_code!(p.error_code, NONE, "woken Fetch v{v}");
    let bs = batches_of(v, &p);
    assert!(
        !bs.is_empty(),
        "Fetch v{v} (max_wait 10 s) returned after {el:?} without the record produced at ~400 ms"
    );
    assert_eq!(bs[0].records[0].value.as_deref(), Some(&b"wake"[..]));
    assert!(
        el < Duration::from_secs(5),
        "long-poll Fetch v{v} was not woken by the produce: returned after {el:?}"
    );
    assert!(
        el >= Duration::from_millis(350),
        "Fetch v{v} returned after {el:?}, before the produce"
    );
}

#[test]
fn fetch_multiple_partitions() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-multi", 3, &[]);
    let mut c = ctx.client();
    for p in 0..3 {
        let n = (p + 1) as usize;
        assert_eq!(produce_ok(&ctx, &mut c, &t, p, batch_of(n, now_ms())), 0);
    }
    for v in ctx.versions_req(ApiKey::Fetch, 4, 18) {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let mut ft = FetchTopic::default().with_partitions(
            (0..3)
                .map(|p| {
                    FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)
                })
                .collect(),
        );
        if v >= 13 {
            ft = ft.with_topic_id(t.id);
        } else {
            ft = ft.with_topic(tn(&t.name));
        }
        let req = kafka_protocol::messages::FetchRequest::default()
            .with_max_bytes(1 << 20)
            .with_min_bytes(1)
            .with_topics(vec![ft]);
        let resp = c.call(v, &req);
        assert_code!(resp.error_code, NONE, "Fetch v{v} 3 partitions");
        assert_eq!(resp.responses.len(), 1, "Fetch v{v}: topics");
        let parts = &resp.responses[0].partitions;
        assert_eq!(parts.len(), 3, "Fetch v{v}: partitions");
        for pd in parts {
            assert_code!(
                pd.error_code,
                NONE,
                "Fetch v{v} partition {}",
                pd.partition_index
            );
            assert_eq!(
                pd.high_watermark,
                (pd.partition_index + 1) as i64,
                "Fetch v{v} partition {} high watermark",
                pd.partition_index
            );
            let bs = batches_of(v, pd);
            assert_eq!(bs.len(), 1, "Fetch v{v} partition {}", pd.partition_index);
            assert_eq!(bs[0].record_count, pd.partition_index + 1);
        }
    }
}

/// Record fields survive the round trip byte-for-byte: null keys, tombstones, empty values,
/// headers (with null values), negative timestamp deltas, a large value.
#[test]
fn record_fields_round_trip() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-fields", 1, &[]);
    let mut c = ctx.client();
    let ts = now_ms() - 10_000;
    let large: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let recs = vec![
        Rec {
            key: None,
            value: Some(b"null-key".to_vec()),
            ts_delta: 0,
            headers: vec![],
        },
        Rec {
            key: Some(b"tombstone".to_vec()),
            value: None,
            ts_delta: 5,
            headers: vec![],
        },
        Rec {
            key: Some(vec![]),
            value: Some(vec![]),
            ts_delta: -3,
            headers: vec![],
        },
        Rec {
            key: Some(b"h".to_vec()),
            value: Some(b"with-headers".to_vec()),
            ts_delta: 7,
            headers: vec![
                ("a".into(), Some(b"1".to_vec())),
                ("null".into(), None),
                ("".into(), Some(vec![])),
            ],
        },
        Rec {
            key: Some(b"big".to_vec()),
            value: Some(large.clone()),
            ts_delta: 1,
            headers: vec![],
        },
    ];
    let batch = encode_batch(&BatchSpec::new(ts, recs.clone()));
    assert_eq!(produce_ok(&ctx, &mut c, &t, 0, batch), 0);
    for v in ctx.versions_req(ApiKey::Fetch, 4, 18) {
        let p = fetch(&mut c, v, &t, 0, FetchOpts::at(0));
        assert_code!(p.error_code, NONE, "Fetch v{v}");
        let bs = batches_of(v, &p);
        assert_eq!(bs.len(), 1, "Fetch v{v}: one batch");
        let b = &bs[0];
        assert!(b.crc_ok, "Fetch v{v}: CRC");
        assert_eq!(b.base_timestamp, ts, "Fetch v{v}: base timestamp");
        assert_eq!(b.max_timestamp, ts + 7, "Fetch v{v}: max timestamp");
        assert_eq!(b.records.len(), recs.len(), "Fetch v{v}: record count");
        for (i, (got, want)) in b.records.iter().zip(&recs).enumerate() {
            assert_eq!(got.key, want.key, "Fetch v{v} record {i}: key");
            assert_eq!(got.value, want.value, "Fetch v{v} record {i}: value");
            assert_eq!(
                got.timestamp,
                ts + want.ts_delta,
                "Fetch v{v} record {i}: timestamp"
            );
            assert_eq!(
                got.headers,
                want.headers.len(),
                "Fetch v{v} record {i}: header count"
            );
            assert_eq!(got.offset, i as i64, "Fetch v{v} record {i}: offset");
        }
    }
}

/// Without transactions, READ_COMMITTED sees everything up to the high watermark.
#[test]
fn fetch_read_committed_without_transactions() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-rc", 1, &[]);
    let mut c = ctx.client();
    produce_ok(&ctx, &mut c, &t, 0, batch_of(4, now_ms()));
    for v in ctx.versions_req(ApiKey::Fetch, 4, 18) {
        let req = fetch_req(v, &t, 0, FetchOpts::at(0)).with_isolation_level(1);
        let resp = c.call(v, &req);
        let (top, p) = fetch_partition(v, resp, &t, 0);
        assert_code!(top, NONE, "Fetch v{v} read_committed");
        assert_code!(p.error_code, NONE, "Fetch v{v} read_committed");
        assert_eq!(
            p.high_watermark, 4,
            "Fetch v{v} read_committed: high watermark"
        );
        assert_eq!(
            p.last_stable_offset, 4,
            "Fetch v{v} read_committed: last stable offset"
        );
        let bs = batches_of(v, &p);
        assert_eq!(
            bs.iter().map(|b| b.record_count).sum::<i32>(),
            4,
            "Fetch v{v} read_committed: records"
        );
        assert!(
            p.aborted_transactions.as_ref().is_none_or(|a| a.is_empty()),
            "Fetch v{v}: aborted transactions listed"
        );
    }
    for v in ctx.versions_req(ApiKey::ListOffsets, 2, 10) {
        let req = list_offsets_req(v, &t.name, 0, LATEST).with_isolation_level(1);
        let resp = c.call(v, &req);
        let p = &resp.topics[0].partitions[0];
        assert_code!(p.error_code, NONE, "ListOffsets v{v} read_committed");
        assert_eq!(
            p.offset, 4,
            "ListOffsets v{v} read_committed latest = last stable offset"
        );
    }
}

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// KIP-227 fetch sessions (v7+). A broker may decline to create sessions (session id 0), but
/// an incremental fetch naming a session it never created must fail with
/// FETCH_SESSION_ID_NOT_FOUND; and a session it did create must behave incrementally.
#[test]
fn fetch_sessions() {
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-sess", 1, &[]);
    let mut c = ctx.client();
    produce_ok(&ctx, &mut c, &t, 0, batch_of(2, now_ms()));
    for v in ctx.versions_req(ApiKey::Fetch, 7, 18) {
        // New session request: full fetch with epoch 0.
        let req = fetch_req(v, &t, 0, FetchOpts::at(0))
            .with_session_id(0)
            .with_session_epoch(0);
        let resp: FetchResponse = c.call(v, &req);
        assert_code!(resp.error_code, NONE, "Fetch v{v} creating a session");
        let sid = resp.session_id;
        let (_, p) = fetch_partition(v, resp, &t, 0);
        assert_eq!(
            batches_of(v, &p)
                .iter()
                .map(|b| b.record_count)
                .sum::<i32>(),
            2,
            "Fetch v{v} session-creating fetch returns the data"
        );
        if sid == 0 {
            eprintln!("Fetch v{v}: broker declined to create a fetch session");
            continue;
        }
        // Incremental fetch, nothing new, no partitions listed: no partitions in the response.
        let inc = |epoch: i32| {
            kafka_protocol::messages::FetchRequest::default()
                .with_session_id(sid)
                .with_session_epoch(epoch)
                .with_max_wait_ms(0)
                .with_min_bytes(0)
                .with_max_bytes(1 << 20)
        };
        // The session's fetch position is still 0 (the client has not moved it), so the
        // incremental fetch keeps returning data; advance it explicitly to 2.
        let mut ft = kafka_protocol::messages::fetch_request::FetchTopic::default()
            .with_partitions(vec![
                kafka_protocol::messages::fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(2)
                    .with_partition_max_bytes(1 << 20),
            ]);
        if v >= 13 {
            ft = ft.with_topic_id(t.id);
        } else {
            ft = ft.with_topic(tn(&t.name));
        }
        let resp: FetchResponse = c.call(v, &inc(1).with_topics(vec![ft]));
        assert_code!(resp.error_code, NONE, "Fetch v{v} incremental epoch 1");
        assert_eq!(resp.session_id, sid, "Fetch v{v} incremental: session id");
        let resp: FetchResponse = c.call(v, &inc(2));
        assert_code!(resp.error_code, NONE, "Fetch v{v} incremental epoch 2");
        let parts: usize = resp.responses.iter().map(|r| r.partitions.len()).sum();
        assert_eq!(
            parts, 0,
            "Fetch v{v} incremental fetch with no changes must list no partitions"
        );
        // New data: the partition comes back.
        produce_ok(&ctx, &mut c, &t, 0, batch_of(1, now_ms()));
        let resp: FetchResponse = c.call(v, &inc(3));
        assert_code!(resp.error_code, NONE, "Fetch v{v} incremental epoch 3");
        let recs: i32 = resp
            .responses
            .iter()
            .flat_map(|r| r.partitions.iter())
            .map(|p| batches_of(v, p).iter().map(|b| b.record_count).sum::<i32>())
            .sum();
        assert_eq!(
            recs, 1,
            "Fetch v{v} incremental fetch after a produce must return the new record"
        );
        // Wrong epoch.
        let resp: FetchResponse = c.call(v, &inc(9));
        assert_code!(
            resp.error_code,
            INVALID_FETCH_SESSION_EPOCH,
            "Fetch v{v} incremental fetch with a skipped epoch"
        );
        // Re-sync: position moved past the new record for the next version's run.
        let _ = c.call(
            v,
            &fetch_req(v, &t, 0, FetchOpts::at(0))
                .with_session_id(sid)
                .with_session_epoch(-1),
        );
    }
}

/// KIP-227: an incremental fetch naming a session the broker never issued fails with
/// FETCH_SESSION_ID_NOT_FOUND (70) — also on brokers that never create sessions.
#[test]
fn fetch_unknown_session_id() {
    let mut fails: Vec<String> = Vec::new();
    let ctx = Ctx::new();
    let t = ctx.topic("fetch-nosess", 1, &[]);
    let mut c = ctx.client();
    produce_ok(&ctx, &mut c, &t, 0, batch_of(2, now_ms()));
    for v in ctx.versions_req(ApiKey::Fetch, 7, 18) {
        // Unknown session.
        let req = fetch_req(v, &t, 0, FetchOpts::at(0))
            .with_session_id(0x4242_4242)
            .with_session_epoch(3);
        let resp: FetchResponse = c.call(v, &req);
        check_code!(
            fails,
            resp.error_code,
            FETCH_SESSION_ID_NOT_FOUND,
            "Fetch v{v} with a session id the broker never issued"
        );
    }
    assert_no_failures(&fails);
}
