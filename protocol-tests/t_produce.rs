//! Produce v3-13 (and v0-2 robustness) with hand-built record batches.

use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use uuid::Uuid;

use crate::broker::{now_ms, unique_name};
use crate::client::{encode_header, frame, Outcome, CLIENT_ID};
use crate::ops::*;
use crate::records::*;

#[test]
fn produce_every_version_offsets_advance() {
    let ctx = Ctx::new();
    let t = ctx.topic("produce", 1, &[]);
    let mut c = ctx.client();
    let mut next = 0i64;
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        for n in [3usize, 2, 1] {
            let pr = produce(&mut c, v, &t, 0, batch_of(n, now_ms()));
            assert_code!(
                pr.error_code,
                NONE,
                "Produce v{v} of {n} records ({:?})",
                pr.error_message
            );
            assert_eq!(
                pr.base_offset, next,
                "Produce v{v}: base offset of a {n}-record batch"
            );
            if v >= 2 {
                assert_eq!(
                    pr.log_append_time_ms, -1,
                    "Produce v{v}: log_append_time_ms must be -1 for CreateTime topics"
                );
            }
            if v >= 5 {
                assert_eq!(pr.log_start_offset, 0, "Produce v{v}: log_start_offset");
            }
            next += n as i64;
        }
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        next,
        "ListOffsets latest after all produces"
    );
    // Everything produced is fetchable, in order, with correct CRCs.
    let fv = ctx.max_version(ApiKey::Fetch);
    let mut off = 0i64;
    let mut guard = 0;
    while off < next && guard < 100 {
        guard += 1;
        let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(off));
        assert_code!(p.error_code, NONE, "Fetch v{fv} at {off}");
        let bs = batches_of(fv, &p);
        assert!(
            !bs.is_empty(),
            "Fetch v{fv} at {off}: no batches though the log end is {next}"
        );
        for b in bs {
            assert!(b.crc_ok, "batch at {} has a bad CRC", b.base_offset);
            assert_eq!(b.base_offset, off, "batches must be contiguous");
            assert_eq!(b.records.len() as i32, b.record_count, "record count");
            off = b.next_offset();
        }
    }
    assert_eq!(off, next, "fetched up to the log end");
}

#[test]
fn produce_acks_zero_gets_no_response() {
    let ctx = Ctx::new();
    let t = ctx.topic("acks0", 1, &[]);
    let mut c = ctx.client();
    let v = ctx.max_version(ApiKey::Produce);
    let mv = ctx.max_version(ApiKey::Metadata);
    let _ = c.send(v, &produce_req(v, &t, 0, batch_of(2, now_ms()), 0));
    // The next response on the connection must be the Metadata one (recv checks the correlation id).
    let corr = c.send(mv, &metadata_req(mv, Some(&[&t.name]), false));
    let md: kafka_protocol::messages::MetadataResponse = c.recv(ApiKey::Metadata as i16, mv, corr);
    assert_eq!(md.topics.len(), 1);
    // And the acks=0 batch was appended.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let leo = offset_for(&ctx, &mut c, &t.name, 0, LATEST);
        if leo == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "acks=0 produce was not appended (log end {leo})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn produce_rejects_corrupt_batches() {
    let ctx = Ctx::new();
    let e = ctx.topic("pcorrupt", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        // Bad CRC.
        let mut bad = batch_of(3, now_ms());
        bad[17] ^= 0xff; // first CRC byte (offset 8+4+4+1)
        let pr = produce(&mut c, v, &e, 0, bad);
        assert_code!(
            pr.error_code,
            CORRUPT_MESSAGE,
            "Produce v{v} with a bad CRC"
        );

        // Payload flipped under a correct-looking header (CRC no longer matches).
        let mut flipped = batch_of(3, now_ms());
        let n = flipped.len();
        flipped[n - 3] ^= 0x55;
        let pr = produce(&mut c, v, &e, 0, flipped);
        assert_code!(
            pr.error_code,
            CORRUPT_MESSAGE,
            "Produce v{v} with a flipped record byte"
        );

        // Record count larger than the records present (CRC recomputed, so it is "valid").
        let mut lying = batch_of(1, now_ms());
        let n = lying.len();
        lying[57..61].copy_from_slice(&5i32.to_be_bytes()); // record count
        let crc = crc32c::crc32c(&lying[21..n]);
        lying[17..21].copy_from_slice(&crc.to_be_bytes());
        let pr = produce(&mut c, v, &e, 0, lying);
        assert_code_in!(
            pr.error_code,
            &[CORRUPT_MESSAGE, INVALID_RECORD],
            "Produce v{v} with record count 5 but 1 record"
        );

        // Batch length larger than the data sent.
        let mut long = batch_of(2, now_ms());
        let bl = i32::from_be_bytes([long[8], long[9], long[10], long[11]]) + 100;
        long[8..12].copy_from_slice(&bl.to_be_bytes());
        let pr = produce(&mut c, v, &e, 0, long);
        assert!(
            pr.error_code != NONE,
            "Produce v{v} with a batch length beyond the record set was accepted"
        );

        // Magic 1 message set (Produce v3+ requires magic 2).
        let pr = produce(
            &mut c,
            v,
            &e,
            0,
            magic1_message_set(now_ms(), Some(b"k"), b"v"),
        );
        assert!(
            pr.error_code != NONE,
            "Produce v{v} with a magic-1 message set was accepted"
        );
        assert_code_in!(
            pr.error_code,
            &[
                CORRUPT_MESSAGE,
                UNSUPPORTED_FOR_MESSAGE_FORMAT,
                INVALID_RECORD
            ],
            "Produce v{v} with a magic-1 message set"
        );

        // Empty record set.
        let pr = produce(&mut c, v, &e, 0, Vec::new());
        assert!(
            pr.error_code != NONE,
            "Produce v{v} with an empty record set was accepted"
        );
    }
    // None of the rejected batches was appended.
    assert_eq!(
        offset_for(&ctx, &mut c, &e.name, 0, LATEST),
        0,
        "rejected produces must not be appended"
    );
    assert_broker_serves(&ctx, "corrupt produce batches");
}

#[test]
fn produce_unknown_partition() {
    let mut fails: Vec<String> = Vec::new();
    let ctx = Ctx::new();
    let e = ctx.topic("punkpart", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        for p in [1, 7, -1] {
            let pr = produce(&mut c, v, &e, p, batch_of(1, now_ms()));
            check_code!(
                fails,
                pr.error_code,
                UNKNOWN_TOPIC_OR_PARTITION,
                "Produce v{v} to partition {p} of a 1-partition topic"
            );
        }
    }
    assert_eq!(offset_for(&ctx, &mut c, &e.name, 0, LATEST), 0);
    assert_no_failures(&fails);
}

/// Kafka creates topics automatically only from Metadata requests; a Produce to a topic
/// that does not exist fails with UNKNOWN_TOPIC_OR_PARTITION and creates nothing.
#[test]
fn produce_to_unknown_topic_follows_auto_create() {
    // Apache Kafka auto-creates only from Metadata, so a Produce to a missing topic
    // fails there. tern also auto-creates on Produce (auto.create.topics.enable,
    // default true), as its issue asks and librdkafka's own tests expect.
    let mut fails: Vec<String> = Vec::new();
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let mut ghosts = Vec::new();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        let ghost = Topic {
            name: unique_name(&format!("ghost-v{v}")),
            id: Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0),
        };
        let pr = produce(&mut c, v, &ghost, 0, batch_of(1, now_ms()));
        if v >= 13 {
            // v13 names topics by id: an unknown id can't be created.
            check_code_in!(
                fails,
                pr.error_code,
                &[UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION],
                "Produce v{v} to an unknown topic id"
            );
        } else if ctx.external() {
            check_code!(
                fails,
                pr.error_code,
                UNKNOWN_TOPIC_OR_PARTITION,
                "Produce v{v} to unknown topic {}",
                ghost.name
            );
            ghosts.push((ghost.name, UNKNOWN_TOPIC_OR_PARTITION));
        } else {
            check_code!(
                fails,
                pr.error_code,
                0,
                "Produce v{v} to unknown topic {} (auto-created)",
                ghost.name
            );
            ghosts.push((ghost.name, 0));
        }
    }
    for (g, expected) in &ghosts {
        let t = topic_metadata(&ctx, &mut c, g);
        check_code!(
            fails,
            t.error_code,
            *expected,
            "Metadata (no auto-create) for {g} after producing to it"
        );
    }
    assert_no_failures(&fails);
}

#[test]
fn produce_with_two_batches_in_one_partition_is_invalid_record() {
    // Kafka's ProduceRequest.validateRecords: v3+ allows exactly one batch per partition.
    let ctx = Ctx::new();
    let t = ctx.topic("ptwo", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        let two = [batch_of(1, now_ms()), batch_of(1, now_ms())].concat();
        let pr = produce(&mut c, v, &t, 0, two);
        assert_code!(
            pr.error_code,
            INVALID_RECORD,
            "Produce v{v}: two batches in one partition"
        );
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        0,
        "nothing was appended"
    );
}

#[test]
fn produce_message_too_large() {
    let ctx = Ctx::new();
    let small = ctx.topic("psmall", 1, &[("max.message.bytes", "1000")]);
    let mut c = ctx.client();
    let big = vec![b'x'; 2000];
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        let pr = produce(&mut c, v, &small, 0, simple_batch(now_ms(), &[&big]));
        assert_code!(
            pr.error_code,
            MESSAGE_TOO_LARGE,
            "Produce v{v}: 2000-byte batch to a topic with max.message.bytes=1000"
        );
        // Many small records adding up to more than the limit: the batch is what counts.
        let vals: Vec<&[u8]> = (0..20).map(|_| &big[..100]).collect();
        let pr = produce(&mut c, v, &small, 0, simple_batch(now_ms(), &vals));
        assert_code!(
            pr.error_code,
            MESSAGE_TOO_LARGE,
            "Produce v{v}: 20x100-byte batch to a topic with max.message.bytes=1000"
        );
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &small.name, 0, LATEST),
        0,
        "oversized batches must not be appended"
    );
    let v = ctx.max_version(ApiKey::Produce);
    let pr = produce(&mut c, v, &small, 0, simple_batch(now_ms(), &[&big[..500]]));
    assert_code!(
        pr.error_code,
        NONE,
        "Produce v{v}: 500-byte value to a topic with max.message.bytes=1000"
    );
}

#[test]
fn produce_invalid_acks() {
    let ctx = Ctx::new();
    let e = ctx.topic("packs", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        for acks in [2i16, -2, 100] {
            let pr = produce_acks(&mut c, v, &e, 0, batch_of(1, now_ms()), acks);
            assert_code!(
                pr.error_code,
                INVALID_REQUIRED_ACKS,
                "Produce v{v} with acks={acks}"
            );
        }
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &e.name, 0, LATEST),
        0,
        "invalid-acks produces must not be appended"
    );
}

/// The broker assigns offsets: whatever base offset the client writes is replaced.
#[test]
fn produce_assigns_offsets_regardless_of_client_base_offset() {
    let ctx = Ctx::new();
    let t = ctx.topic("pbase", 1, &[]);
    let mut c = ctx.client();
    let mut next = 0;
    for client_base in [12345i64, -7, 0, i64::MAX - 10] {
        let mut spec = BatchSpec::new(now_ms(), vec![Rec::value(b"a"), Rec::value(b"b")]);
        spec.base_offset = client_base;
        spec.partition_leader_epoch = 99;
        let base = produce_ok(&ctx, &mut c, &t, 0, encode_batch(&spec));
        assert_eq!(base, next, "produce with client base offset {client_base}");
        next += 2;
    }
    let fv = ctx.max_version(ApiKey::Fetch);
    let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(0));
    let bs = batches_of(fv, &p);
    let bases: Vec<i64> = bs.iter().map(|b| b.base_offset).collect();
    assert_eq!(
        bases,
        vec![0, 2, 4, 6],
        "stored batches must carry broker-assigned base offsets"
    );
    for b in &bs {
        assert!(
            b.crc_ok,
            "batch at {}: CRC must still be valid after offset assignment",
            b.base_offset
        );
        assert!(
            b.partition_leader_epoch >= 0 && b.partition_leader_epoch != 99,
            "batch at {}: partition leader epoch {} must be set by the broker",
            b.base_offset,
            b.partition_leader_epoch
        );
    }
}

#[test]
fn concurrent_producers_get_unique_contiguous_offsets() {
    let ctx = Ctx::new();
    let t = ctx.topic("pconc", 1, &[]);
    let v = ctx.max_version(ApiKey::Produce);
    let threads = 6;
    let per = 40;
    let results: Vec<Vec<(i64, usize)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let ctx = &ctx;
                let t = &t;
                s.spawn(move || {
                    let mut c = ctx.client();
                    let mut out = Vec::new();
                    for j in 0..per {
                        let n = 1 + (i + j) % 3;
                        let pr = produce(&mut c, v, t, 0, batch_of(n, now_ms()));
                        assert_code!(pr.error_code, NONE, "concurrent Produce v{v}");
                        out.push((pr.base_offset, n));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("producer thread"))
            .collect()
    });
    let mut all: Vec<(i64, usize)> = results.into_iter().flatten().collect();
    all.sort();
    let mut expect = 0i64;
    for (base, n) in &all {
        assert_eq!(
            *base, expect,
            "offsets must be unique and contiguous across concurrent producers"
        );
        expect += *n as i64;
    }
    let mut c = ctx.client();
    assert_eq!(offset_for(&ctx, &mut c, &t.name, 0, LATEST), expect);
}

/// Produce v0-2 body: acks, timeout, [topic [partition, message set]].
fn legacy_produce_body(topic: &str, message_set: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    b.extend_from_slice(&5000i32.to_be_bytes()); // timeout
    b.extend_from_slice(&1i32.to_be_bytes()); // topics
    b.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    b.extend_from_slice(topic.as_bytes());
    b.extend_from_slice(&1i32.to_be_bytes()); // partitions
    b.extend_from_slice(&0i32.to_be_bytes());
    b.extend_from_slice(&(message_set.len() as i32).to_be_bytes());
    b.extend_from_slice(message_set);
    b
}

/// Parses a Produce v0-2 response body; returns the partition error codes.
fn parse_legacy_produce_response(v: i16, mut b: Bytes) -> Result<Vec<i16>, String> {
    fn need(b: &Bytes, n: usize) -> Result<(), String> {
        if b.remaining() < n {
            Err(format!("truncated response ({} < {n})", b.remaining()))
        } else {
            Ok(())
        }
    }
    let mut codes = Vec::new();
    need(&b, 4)?;
    let nt = b.get_i32();
    if !(0..=16).contains(&nt) {
        return Err(format!("implausible topic count {nt}"));
    }
    for _ in 0..nt {
        need(&b, 2)?;
        let l = b.get_i16();
        need(&b, l.max(0) as usize)?;
        b.advance(l.max(0) as usize);
        need(&b, 4)?;
        let np = b.get_i32();
        if !(0..=16).contains(&np) {
            return Err(format!("implausible partition count {np}"));
        }
        for _ in 0..np {
            need(&b, 4 + 2 + 8)?;
            let _idx = b.get_i32();
            codes.push(b.get_i16());
            let _base = b.get_i64();
            if v >= 2 {
                need(&b, 8)?;
                let _t = b.get_i64();
            }
        }
    }
    if v >= 1 {
        need(&b, 4)?;
        let _throttle = b.get_i32();
    }
    if b.remaining() != 0 {
        return Err(format!("{} trailing bytes", b.remaining()));
    }
    Ok(codes)
}

#[test]
fn produce_v0_to_v2_do_not_crash() {
    let mut ctx = Ctx::new();
    let t = ctx.topic("legacy", 1, &[]);
    for v in 0i16..=2 {
        let ms = if v < 2 {
            magic0_message_set(b"old")
        } else {
            magic1_message_set(now_ms(), None, b"old")
        };
        let body = legacy_produce_body(&t.name, &ms);
        let mut c = ctx.client();
        let corr = 5000 + v as i32;
        let mut payload = encode_header(ApiKey::Produce as i16, v, corr, Some(CLIENT_ID));
        payload.extend_from_slice(&body);
        c.write_all(&frame(&payload)).expect("write");
        match c.wait_outcome(Duration::from_secs(10)) {
            Outcome::Closed => {}
            Outcome::Frame(f) => {
                let mut buf = Bytes::from(f);
                let h = ResponseHeader::decode(&mut buf, 0).expect("v0 response header");
                assert_eq!(h.correlation_id, corr, "Produce v{v}: correlation id");
                match parse_legacy_produce_response(v, buf) {
                    Ok(codes) => eprintln!(
                        "Produce v{v}: answered with partition errors {:?}",
                        codes.iter().map(|c| ename(*c)).collect::<Vec<_>>()
                    ),
                    Err(e) => panic!(
                        "Produce v{v}: the response is not a valid v{v} Produce response: {e}"
                    ),
                }
            }
            Outcome::Timeout => panic!("Produce v{v}: neither answered nor closed within 10 s"),
        }
        ctx.assert_alive(&format!("Produce v{v}"));
    }
    assert_broker_serves(&ctx, "Produce v0-2");
}

#[test]
fn produce_multiple_partitions_and_topics_in_one_request() {
    let ctx = Ctx::new();
    let a = ctx.topic("pmulti-a", 2, &[]);
    let b = ctx.topic("pmulti-b", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        let mk = |t: &Topic, parts: &[i32]| {
            let mut td = TopicProduceData::default().with_partition_data(
                parts
                    .iter()
                    .map(|p| {
                        PartitionProduceData::default()
                            .with_index(*p)
                            .with_records(Some(Bytes::from(batch_of(2, now_ms()))))
                    })
                    .collect(),
            );
            if v >= 13 {
                td = td.with_topic_id(t.id);
            } else {
                td = td.with_name(tn(&t.name));
            }
            td
        };
        let req = kafka_protocol::messages::ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![mk(&a, &[0, 1]), mk(&b, &[0])]);
        let resp = c.call(v, &req);
        assert_eq!(
            resp.responses.len(),
            2,
            "Produce v{v}: one response per topic"
        );
        let mut total = 0;
        for tr in &resp.responses {
            for pr in &tr.partition_responses {
                assert_code!(
                    pr.error_code,
                    NONE,
                    "Produce v{v} multi partition {}",
                    pr.index
                );
                assert!(
                    pr.base_offset >= 0 && pr.base_offset % 2 == 0,
                    "Produce v{v}: base offset {}",
                    pr.base_offset
                );
                total += 1;
            }
        }
        assert_eq!(total, 3, "Produce v{v}: one response per partition");
    }
}

#[test]
fn produce_of_keyless_records_to_a_compacted_topic_is_refused_with_kafkas_record_errors() {
    let ctx = Ctx::new();
    let t = ctx.topic("pkeyless", 1, &[("cleanup.policy", "compact")]);
    let mut c = ctx.client();
    let each = format!(
        "Compacted topic cannot accept message without key in topic partition {}-0.",
        t.name
    );
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        let records = vec![
            Rec::kv(b"k", b"1"),
            Rec::value(b"no key"),
            Rec::value(b"none"),
        ];
        let pr = produce(
            &mut c,
            v,
            &t,
            0,
            encode_batch(&BatchSpec::new(now_ms(), records)),
        );
        assert_code!(
            pr.error_code,
            INVALID_RECORD,
            "Produce v{v}: keyless records"
        );
        assert_eq!(pr.base_offset, -1, "Produce v{v}");
        if v >= 8 {
            let errors: Vec<(i32, Option<String>)> = pr
                .record_errors
                .iter()
                .map(|e| {
                    let message = e.batch_index_error_message.as_ref().map(|m| m.to_string());
                    (e.batch_index, message)
                })
                .collect();
            assert_eq!(
                errors,
                vec![(1, Some(each.clone())), (2, Some(each.clone()))],
                "Produce v{v}: one record error per keyless record"
            );
            let expected = format!(
                "One or more records have been rejected due to 2 record errors in total, and only \
                 showing the first three errors at most: [RecordError(batchIndex=1, message='{each}'), \
                 RecordError(batchIndex=2, message='{each}')]"
            );
            assert_eq!(
                pr.error_message.as_ref().map(|m| m.to_string()),
                Some(expected),
                "Produce v{v}: Kafka's processRecordErrors message"
            );
        }
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        0,
        "nothing of a refused batch was appended"
    );
    let keyed = encode_batch(&BatchSpec::new(now_ms(), vec![Rec::kv(b"k", b"1")]));
    assert_eq!(produce_ok(&ctx, &mut c, &t, 0, keyed), 0);
}

#[test]
fn a_topic_compression_type_recompresses_what_producers_send() {
    let ctx = Ctx::new();
    let zstd = ctx.topic("pzstd", 1, &[("compression.type", "zstd")]);
    let producer = ctx.topic("pproducer", 1, &[]);
    let mut c = ctx.client();
    for t in [&zstd, &producer] {
        assert_eq!(produce_ok(&ctx, &mut c, t, 0, batch_of(3, now_ms())), 0);
    }
    let v = ctx.max_version(ApiKey::Fetch);
    let stored = |t: &Topic, c: &mut crate::client::Client| {
        let batches = batches_of(v, &fetch(c, v, t, 0, FetchOpts::at(0)));
        assert_eq!(batches.len(), 1, "{}: one batch", t.name);
        let b = &batches[0];
        assert!(b.crc_ok, "{}: CRC of the stored batch", t.name);
        assert_eq!(
            (b.base_offset, b.last_offset_delta, b.record_count),
            (0, 2, 3),
            "{}: offsets and count kept",
            t.name
        );
        b.attributes & 0x07
    };
    assert_eq!(
        stored(&zstd, &mut c),
        4,
        "compression.type=zstd stores zstd"
    );
    assert_eq!(
        stored(&producer, &mut c),
        0,
        "producer keeps the batch as sent"
    );
}

#[test]
fn clients_cannot_write_control_or_stray_transactional_batches() {
    // Kafka's LogValidator refuses a client's control batch (INVALID_RECORD); its
    // KafkaApis refuses transactional records without a transactional id
    // (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Either would leave a batch that nothing
    // completes (and the cleaner would keep a control batch forever).
    let ctx = Ctx::new();
    let t = ctx.topic("ptxnbits", 1, &[]);
    let mut c = ctx.client();
    let batch_with = |attributes: i16| {
        let mut spec = BatchSpec::new(now_ms(), vec![Rec::value(b"v")]);
        spec.attributes = attributes;
        spec.producer_id = 7;
        spec.producer_epoch = 0;
        spec.base_sequence = 0;
        encode_batch(&spec)
    };
    for v in ctx.versions_req(ApiKey::Produce, 3, 13) {
        let pr = produce(&mut c, v, &t, 0, batch_with(1 << 5));
        assert_code!(
            pr.error_code,
            INVALID_RECORD,
            "Produce v{v}: a control batch"
        );
        let pr = produce(&mut c, v, &t, 0, batch_with(1 << 4));
        assert_code!(
            pr.error_code,
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "Produce v{v}: a transactional batch without a transactional id"
        );
        // With a transactional id no coordinator knows, Kafka's verification with the
        // transaction coordinator (on by default) answers INVALID_PRODUCER_ID_MAPPING,
        // also for a marker-like batch (verification comes before validation).
        for attributes in [1 << 4, (1 << 4) | (1 << 5)] {
            let pr = produce_with_transactional_id(&mut c, v, &t, batch_with(attributes));
            assert_code!(
                pr.error_code,
                INVALID_PRODUCER_ID_MAPPING,
                "Produce v{v}: attributes {attributes:#x} under an unknown transactional id"
            );
        }
    }
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        0,
        "nothing was appended"
    );
    // Kafka looks at the transactional id only for transactional batches: a plain
    // batch is appended whether or not the request names one.
    let v = ctx.max_version(ApiKey::Produce);
    let pr = produce_with_transactional_id(&mut c, v, &t, batch_of(1, now_ms()));
    assert_code!(
        pr.error_code,
        NONE,
        "Produce v{v}: a plain batch with a transactional id"
    );
    assert_eq!(pr.base_offset, 0);
    assert_broker_serves(&ctx, "control and transactional batches refused");
}

/// Produces one record set (acks=-1) in a request naming a transactional id that no
/// InitProducerId ever registered.
fn produce_with_transactional_id(
    c: &mut crate::client::Client,
    v: i16,
    t: &Topic,
    records: Vec<u8>,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    let request = produce_req(v, t, 0, records, -1).with_transactional_id(Some(
        kafka_protocol::messages::TransactionalId(sb("never-initialized")),
    ));
    let response = c.call(v, &request);
    response.responses[0].partition_responses[0].clone()
}
