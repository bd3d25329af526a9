//! OffsetForLeaderEpoch v2-4 (KIP-101/279/320) on one broker, which leads under epoch 0.

use kafka_protocol::messages::ApiKey;

use crate::ops::*;
use crate::records::*;

const UNKNOWN_LEADER_EPOCH: i16 = 75;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

#[test]
fn offset_for_leader_epoch_answers_where_each_epoch_ends() {
    let ctx = Ctx::new();
    let topic = ctx.topic("ofle", 1, &[]);
    let mut c = ctx.client();
    let batch = encode_batch(&BatchSpec::new(0, vec![Rec::value(b"a"), Rec::value(b"b")]));
    produce_ok(&ctx, &mut c, &topic, 0, batch.clone());
    produce_ok(&ctx, &mut c, &topic, 0, batch);
    for v in ctx.versions_req(ApiKey::OffsetForLeaderEpoch, 2, 4) {
        // The latest epoch ends at the log end.
        assert_eq!(
            offset_for_leader_epoch(&mut c, v, &topic.name, 0, 0, 0),
            (0, 0, 4),
            "v{v}"
        );
        // Without a current epoch (-1) it is not checked.
        assert_eq!(
            offset_for_leader_epoch(&mut c, v, &topic.name, 0, -1, 0),
            (0, 0, 4),
            "v{v}"
        );
        // An epoch newer than any in the log: undefined, as Kafka's endOffsetFor.
        assert_eq!(
            offset_for_leader_epoch(&mut c, v, &topic.name, 0, -1, 7),
            (0, -1, -1),
            "v{v}"
        );
        // A current epoch from the future is unknown; the broker leads under 0.
        assert_eq!(
            offset_for_leader_epoch(&mut c, v, &topic.name, 0, 3, 0).0,
            UNKNOWN_LEADER_EPOCH,
            "v{v}"
        );
        assert_eq!(
            offset_for_leader_epoch(&mut c, v, "ofle-no-such-topic", 0, -1, 0).0,
            UNKNOWN_TOPIC_OR_PARTITION,
            "v{v}"
        );
    }
}
