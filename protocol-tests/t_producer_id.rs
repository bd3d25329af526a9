//! InitProducerId v0-5 and idempotent produce.

use std::collections::HashSet;

use kafka_protocol::messages::ApiKey;

use crate::broker::now_ms;
use crate::ops::*;
use crate::records::*;

#[test]
fn init_producer_id_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let mut pids = HashSet::new();
    for v in ctx.versions_req(ApiKey::InitProducerId, 0, 5) {
        for _ in 0..2 {
            let r = init_producer_id(&mut c, v);
            assert_code!(r.error_code, NONE, "InitProducerId v{v}");
            assert!(
                *r.producer_id >= 0,
                "InitProducerId v{v}: producer id {:?}",
                r.producer_id
            );
            assert_eq!(
                r.producer_epoch, 0,
                "InitProducerId v{v}: producer epoch of a new idempotent producer"
            );
            assert!(
                pids.insert(*r.producer_id),
                "InitProducerId v{v}: producer id {:?} handed out twice",
                r.producer_id
            );
        }
    }
}

#[test]
fn idempotent_produce_dedup_and_sequence_checks() {
    let ctx = Ctx::new();
    let t = ctx.topic("idem", 1, &[]);
    let mut c = ctx.client();
    let iv = ctx.max_version(ApiKey::InitProducerId);
    let r = init_producer_id(&mut c, iv);
    assert_code!(r.error_code, NONE, "InitProducerId v{iv}");
    let pid = *r.producer_id;
    let epoch = r.producer_epoch;
    let v = ctx.max_version(ApiKey::Produce);
    let ts = now_ms();
    let b0 = idempotent_batch(pid, epoch, 0, ts, &[b"s0"]);
    let b1 = idempotent_batch(pid, epoch, 1, ts, &[b"s1"]);

    let pr = produce(&mut c, v, &t, 0, b0.clone());
    assert_code!(pr.error_code, NONE, "idempotent Produce v{v} seq 0");
    assert_eq!(pr.base_offset, 0, "seq 0 base offset");
    let pr = produce(&mut c, v, &t, 0, b1.clone());
    assert_code!(pr.error_code, NONE, "idempotent Produce v{v} seq 1");
    assert_eq!(pr.base_offset, 1, "seq 1 base offset");

    // Retried duplicates: same base offset, not appended again.
    let pr = produce(&mut c, v, &t, 0, b1.clone());
    assert_code!(
        pr.error_code,
        NONE,
        "retry of seq 1 must succeed as a duplicate"
    );
    assert_eq!(
        pr.base_offset, 1,
        "retry of seq 1 must return the original base offset"
    );
    let pr = produce(&mut c, v, &t, 0, b0.clone());
    assert_code!(
        pr.error_code,
        NONE,
        "retry of seq 0 must succeed as a duplicate"
    );
    assert_eq!(
        pr.base_offset, 0,
        "retry of seq 0 must return the original base offset"
    );
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        2,
        "duplicates must not be appended"
    );

    // A gap in the sequence.
    let pr = produce(
        &mut c,
        v,
        &t,
        0,
        idempotent_batch(pid, epoch, 5, ts, &[b"gap"]),
    );
    assert_code!(
        pr.error_code,
        OUT_OF_ORDER_SEQUENCE_NUMBER,
        "idempotent Produce v{v} with seq 5 after seq 1"
    );
    assert_eq!(
        offset_for(&ctx, &mut c, &t.name, 0, LATEST),
        2,
        "the out-of-order batch must not be appended"
    );

    // The producer can continue with the right sequence, including multi-record batches.
    let pr = produce(
        &mut c,
        v,
        &t,
        0,
        idempotent_batch(pid, epoch, 2, ts, &[b"s2", b"s3", b"s4"]),
    );
    assert_code!(pr.error_code, NONE, "idempotent Produce v{v} seq 2..4");
    assert_eq!(pr.base_offset, 2);
    let pr = produce(
        &mut c,
        v,
        &t,
        0,
        idempotent_batch(pid, epoch, 5, ts, &[b"s5"]),
    );
    assert_code!(
        pr.error_code,
        NONE,
        "idempotent Produce v{v} seq 5 after a 3-record batch at seq 2"
    );
    assert_eq!(pr.base_offset, 5);
    assert_eq!(offset_for(&ctx, &mut c, &t.name, 0, LATEST), 6);

    // Stored batches keep the producer id, epoch and base sequence.
    let fv = ctx.max_version(ApiKey::Fetch);
    let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(0));
    let bs = batches_of(fv, &p);
    let seqs: Vec<(i64, i32, i64, i16)> = bs
        .iter()
        .map(|b| {
            (
                b.base_offset,
                b.base_sequence,
                b.producer_id,
                b.producer_epoch,
            )
        })
        .collect();
    assert_eq!(
        seqs,
        vec![
            (0, 0, pid, epoch),
            (1, 1, pid, epoch),
            (2, 2, pid, epoch),
            (5, 5, pid, epoch)
        ],
        "fetched batches: (base offset, base sequence, producer id, epoch)"
    );
    assert!(
        bs.iter().all(|b| b.crc_ok),
        "fetched idempotent batches must have valid CRCs"
    );

    // Another producer id has its own sequence space.
    let r2 = init_producer_id(&mut c, iv);
    let pid2 = *r2.producer_id;
    assert_ne!(pid2, pid);
    let pr = produce(
        &mut c,
        v,
        &t,
        0,
        idempotent_batch(pid2, r2.producer_epoch, 0, ts, &[b"other"]),
    );
    assert_code!(pr.error_code, NONE, "second producer seq 0");
    assert_eq!(pr.base_offset, 6);
}
