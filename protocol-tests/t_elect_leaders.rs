//! ElectLeaders v0-2 on one broker: it leads everything, so every election of a known
//! partition is ELECTION_NOT_NEEDED; unknown topics and partitions are
//! UNKNOWN_TOPIC_OR_PARTITION; an all-partitions request leaves out those not needing one.

use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse};

use crate::broker::unique_name;
use crate::ops::*;

pub const ELECTION_NOT_NEEDED: i16 = 84;

fn elect(
    c: &mut crate::client::Client,
    v: i16,
    election_type: i8,
    partitions: Option<Vec<(&str, Vec<i32>)>>,
) -> ElectLeadersResponse {
    let request = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_timeout_ms(5_000)
        .with_topic_partitions(partitions.map(|ps| {
            ps.into_iter()
                .map(|(topic, partitions)| {
                    TopicPartitions::default()
                        .with_topic(tn(topic))
                        .with_partitions(partitions)
                })
                .collect()
        }));
    c.call(v, &request)
}

/// The error code of `topic`-`partition` in the response, if listed.
fn code_of(resp: &ElectLeadersResponse, topic: &str, partition: i32) -> Option<i16> {
    resp.replica_election_results
        .iter()
        .filter(|r| r.topic.0.as_str() == topic)
        .flat_map(|r| r.partition_result.iter())
        .find(|p| p.partition_id == partition)
        .map(|p| p.error_code)
}

#[test]
fn elect_leaders_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let t = ctx.topic("el", 2, &[]);
    let missing = unique_name("el-missing");
    for v in ctx.versions_req(ApiKey::ElectLeaders, 0, 2) {
        let types: &[i8] = if v == 0 { &[0] } else { &[0, 1] };
        for &kind in types {
            let what = format!("ElectLeaders v{v} type {kind}");
            let resp = elect(
                &mut c,
                v,
                kind,
                Some(vec![(&t.name, vec![0, 1, 9]), (&missing, vec![0])]),
            );
            assert_code!(resp.error_code, NONE, "{what}");
            for p in [0, 1] {
                assert_code!(
                    code_of(&resp, &t.name, p).unwrap_or(-99),
                    ELECTION_NOT_NEEDED,
                    "{what}: {}-{p} is led by its only replica",
                    t.name
                );
            }
            assert_code!(
                code_of(&resp, &t.name, 9).unwrap_or(-99),
                UNKNOWN_TOPIC_OR_PARTITION,
                "{what}: partition 9"
            );
            assert_code!(
                code_of(&resp, &missing, 0).unwrap_or(-99),
                UNKNOWN_TOPIC_OR_PARTITION,
                "{what}: unknown topic"
            );
            // Null: every partition; those needing no election are left out.
            let resp = elect(&mut c, v, kind, None);
            assert_code!(resp.error_code, NONE, "{what} (all)");
            assert_eq!(
                code_of(&resp, &t.name, 0),
                None,
                "{what} (all): partitions needing no election are not listed"
            );
        }
        if v >= 1 && !ctx.external() {
            let resp = elect(&mut c, v, 7, Some(vec![(&t.name, vec![0])]));
            assert_code!(
                resp.error_code,
                INVALID_REQUEST,
                "ElectLeaders v{v}: unknown election type"
            );
        }
    }
}
