//! AlterPartitionReassignments v0 on one broker: validation as Kafka's (empty, repeated
//! or unknown brokers are INVALID_REPLICA_ASSIGNMENT; unknown topics and partitions
//! UNKNOWN_TOPIC_OR_PARTITION), a reassignment onto the broker itself is accepted and
//! completes at once, and a cancel with nothing in progress is NO_REASSIGNMENT_IN_PROGRESS.

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
};

use crate::broker::unique_name;
use crate::ops::*;
use crate::t_list_partition_reassignments::list;

pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// Sends one reassignment per `(topic, partition, replicas)`.
pub fn alter(
    c: &mut crate::client::Client,
    v: i16,
    entries: &[(&str, i32, Option<Vec<i32>>)],
) -> AlterPartitionReassignmentsResponse {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for (topic, partition, replicas) in entries {
        let entry = ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(
                replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| BrokerId(*b)).collect()),
            );
        match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partitions.push(entry),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(tn(topic))
                    .with_partitions(vec![entry]),
            ),
        }
    }
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(topics);
    c.call(v, &request)
}

pub fn code_of(resp: &AlterPartitionReassignmentsResponse, topic: &str, partition: i32) -> i16 {
    resp.responses
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map_or(-99, |p| p.error_code)
}

#[test]
fn alter_partition_reassignments_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let node = ctx.node_id;
    let missing = unique_name("apr-missing");
    for v in ctx.versions_req(ApiKey::AlterPartitionReassignments, 0, 0) {
        let t = ctx.topic(&format!("apr-v{v}"), 3, &[]);
        let resp = alter(
            &mut c,
            v,
            &[
                (&t.name, 0, Some(vec![node])),
                (&t.name, 1, Some(vec![])),
                (&t.name, 2, Some(vec![node, node])),
                (&t.name, 9, Some(vec![node])),
                (&missing, 0, Some(vec![node])),
            ],
        );
        assert_code!(resp.error_code, NONE, "AlterPartitionReassignments v{v}");
        assert_code!(code_of(&resp, &t.name, 0), NONE, "v{v}: onto itself");
        assert_code!(
            code_of(&resp, &t.name, 1),
            INVALID_REPLICA_ASSIGNMENT,
            "v{v}: empty replicas"
        );
        assert_code!(
            code_of(&resp, &t.name, 2),
            INVALID_REPLICA_ASSIGNMENT,
            "v{v}: a broker twice"
        );
        assert_code!(
            code_of(&resp, &t.name, 9),
            UNKNOWN_TOPIC_OR_PARTITION,
            "v{v}: unknown partition"
        );
        assert_code!(
            code_of(&resp, &missing, 0),
            UNKNOWN_TOPIC_OR_PARTITION,
            "v{v}: unknown topic"
        );
        let resp = alter(&mut c, v, &[(&t.name, 1, Some(vec![node + 1000]))]);
        assert_code!(
            code_of(&resp, &t.name, 1),
            INVALID_REPLICA_ASSIGNMENT,
            "v{v}: an unknown broker"
        );
        // Nothing moves on one broker: nothing is listed.
        let listed = list(&mut c, 0, Some(vec![(&t.name, vec![0, 1, 2])]));
        assert!(
            listed.topics.iter().all(|x| x.partitions.is_empty()),
            "v{v}: nothing in progress: {listed:?}"
        );
        // Cancelling what is neither pinned nor moving.
        let resp = alter(&mut c, v, &[(&t.name, 1, None)]);
        assert_code!(
            code_of(&resp, &t.name, 1),
            NO_REASSIGNMENT_IN_PROGRESS,
            "v{v}: cancel with nothing in progress"
        );
        if !ctx.external() {
            // tern keeps the pin of partition 0 until it is cancelled.
            let resp = alter(&mut c, v, &[(&t.name, 0, None)]);
            assert_code!(code_of(&resp, &t.name, 0), NONE, "v{v}: unpin");
            let resp = alter(&mut c, v, &[(&t.name, 0, None)]);
            assert_code!(
                code_of(&resp, &t.name, 0),
                NO_REASSIGNMENT_IN_PROGRESS,
                "v{v}: unpinned twice"
            );
        }
        // The partition still serves.
        let tm = topic_metadata(&ctx, &mut c, &t.name);
        assert_eq!(tm.partitions.len(), 3, "v{v}: partitions kept");
        assert!(
            tm.partitions.iter().all(|p| *p.leader_id == node),
            "v{v}: every partition led by {node}"
        );
    }
}
