//! ListOffsets v1-10.

use kafka_protocol::messages::ApiKey;

use crate::broker::now_ms;
use crate::ops::*;
use crate::records::*;

fn batch_with_ts(ts: &[i64]) -> Vec<u8> {
    let base = ts[0];
    let recs = ts
        .iter()
        .enumerate()
        .map(|(i, t)| Rec {
            ts_delta: t - base,
            ..Rec::value(format!("v{i}").as_bytes())
        })
        .collect();
    encode_batch(&BatchSpec::new(base, recs))
}

#[test]
fn list_offsets_every_version() {
    let ctx = Ctx::new();
    let mono = ctx.topic("lo-mono", 1, &[]);
    let mixed = ctx.topic("lo-mixed", 1, &[]);
    let empty = ctx.topic("lo-empty", 1, &[]);
    let mut c = ctx.client();
    let t0 = now_ms() - 60_000;
    assert_eq!(
        produce_ok(
            &ctx,
            &mut c,
            &mono,
            0,
            batch_with_ts(&[t0, t0 + 10, t0 + 20])
        ),
        0
    );
    assert_eq!(
        produce_ok(&ctx, &mut c, &mono, 0, batch_with_ts(&[t0 + 30, t0 + 40])),
        3
    );
    // Max timestamp in the middle of the first batch.
    assert_eq!(
        produce_ok(
            &ctx,
            &mut c,
            &mixed,
            0,
            batch_with_ts(&[t0, t0 + 5000, t0 + 1])
        ),
        0
    );
    assert_eq!(
        produce_ok(&ctx, &mut c, &mixed, 0, batch_with_ts(&[t0 + 1000])),
        3
    );

    for v in ctx.versions_req(ApiKey::ListOffsets, 1, 10) {
        let lo =
            |c: &mut crate::client::Client, t: &Topic, ts: i64| list_offsets(c, v, &t.name, 0, ts);

        let p = lo(&mut c, &mono, EARLIEST);
        assert_code!(p.error_code, NONE, "ListOffsets v{v} earliest");
        assert_eq!(p.offset, 0, "ListOffsets v{v} earliest (-2) = log start");
        assert_eq!(p.timestamp, -1, "ListOffsets v{v} earliest: timestamp");
        let p = lo(&mut c, &mono, LATEST);
        assert_code!(p.error_code, NONE, "ListOffsets v{v} latest");
        assert_eq!(
            p.offset, 5,
            "ListOffsets v{v} latest (-1) = next offset to write"
        );
        assert_eq!(p.timestamp, -1, "ListOffsets v{v} latest: timestamp");
        if v >= 4 {
            assert!(
                p.leader_epoch >= 0,
                "ListOffsets v{v} latest: leader epoch {}",
                p.leader_epoch
            );
        }

        // By timestamp: the first offset whose timestamp >= the target.
        for (target, want_off, want_ts) in [
            (t0 - 1000, 0, t0),
            (t0, 0, t0),
            (t0 + 15, 2, t0 + 20),
            (t0 + 20, 2, t0 + 20),
            (t0 + 25, 3, t0 + 30),
            (t0 + 40, 4, t0 + 40),
        ] {
            let p = lo(&mut c, &mono, target);
            assert_code!(
                p.error_code,
                NONE,
                "ListOffsets v{v} timestamp t0{:+}",
                target - t0
            );
            assert_eq!(
                (p.offset, p.timestamp),
                (want_off, want_ts),
                "ListOffsets v{v} timestamp t0{:+}: (offset, timestamp)",
                target - t0
            );
        }
        // Later than every record: offset -1, timestamp -1.
        let p = lo(&mut c, &mono, t0 + 100_000);
        assert_code!(
            p.error_code,
            NONE,
            "ListOffsets v{v} timestamp after all records"
        );
        assert_eq!(
            (p.offset, p.timestamp),
            (-1, -1),
            "ListOffsets v{v} timestamp after all records"
        );

        // Empty partition.
        assert_eq!(
            lo(&mut c, &empty, EARLIEST).offset,
            0,
            "ListOffsets v{v} earliest on an empty partition"
        );
        assert_eq!(
            lo(&mut c, &empty, LATEST).offset,
            0,
            "ListOffsets v{v} latest on an empty partition"
        );

        // Unknown partition / topic.
        let p = list_offsets(&mut c, v, &mono.name, 5, LATEST);
        assert_code!(
            p.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "ListOffsets v{v} partition 5 of a 1-partition topic"
        );
        let ghost = crate::broker::unique_name("ghost");
        let p = list_offsets(&mut c, v, &ghost, 0, LATEST);
        assert_code!(
            p.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "ListOffsets v{v} unknown topic"
        );
    }
}

/// KIP-734 (v7+): MAX_TIMESTAMP (-3) returns the offset and timestamp of the record with the
/// largest timestamp — the record itself, not the last offset of its batch (KAFKA-16310).
#[test]
fn list_offsets_max_timestamp() {
    let mut fails: Vec<String> = Vec::new();
    let ctx = Ctx::new();
    let mono = ctx.topic("lo-mono", 1, &[]);
    let mixed = ctx.topic("lo-mixed", 1, &[]);
    let empty = ctx.topic("lo-empty", 1, &[]);
    let mut c = ctx.client();
    let t0 = now_ms() - 60_000;
    assert_eq!(
        produce_ok(
            &ctx,
            &mut c,
            &mono,
            0,
            batch_with_ts(&[t0, t0 + 10, t0 + 20])
        ),
        0
    );
    assert_eq!(
        produce_ok(&ctx, &mut c, &mono, 0, batch_with_ts(&[t0 + 30, t0 + 40])),
        3
    );
    assert_eq!(
        produce_ok(
            &ctx,
            &mut c,
            &mixed,
            0,
            batch_with_ts(&[t0, t0 + 5000, t0 + 1])
        ),
        0
    );
    assert_eq!(
        produce_ok(&ctx, &mut c, &mixed, 0, batch_with_ts(&[t0 + 1000])),
        3
    );
    for v in ctx.versions_req(ApiKey::ListOffsets, 7, 10) {
        for (t, want, what) in [
            (&mono, (4, t0 + 40), "increasing timestamps"),
            (&empty, (-1, -1), "empty partition"),
            (
                &mixed,
                (1, t0 + 5000),
                "max-timestamp record at offset 1, in the middle of batch 0..2",
            ),
        ] {
            let p = list_offsets(&mut c, v, &t.name, 0, MAX_TIMESTAMP);
            check_code!(
                fails,
                p.error_code,
                NONE,
                "ListOffsets v{v} max timestamp, {what}"
            );
            if (p.offset, p.timestamp) != want {
                fails.push(format!(
                    "ListOffsets v{v} max timestamp (-3), {what}: (offset, timestamp) = ({}, t0{:+}), expected ({}, t0{:+})",
                    p.offset,
                    p.timestamp - t0,
                    want.0,
                    want.1 - t0
                ));
            }
        }
    }
    assert_no_failures(&fails);
}
