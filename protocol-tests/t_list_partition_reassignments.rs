//! ListPartitionReassignments v0 on one broker: nothing ever moves, so nothing is listed,
//! whether asked for every topic, named partitions or unknown ones.

use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    ApiKey, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use crate::broker::unique_name;
use crate::ops::*;

pub fn list(
    c: &mut crate::client::Client,
    v: i16,
    topics: Option<Vec<(&str, Vec<i32>)>>,
) -> ListPartitionReassignmentsResponse {
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(topics.map(|ts| {
            ts.into_iter()
                .map(|(name, partitions)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(tn(name))
                        .with_partition_indexes(partitions)
                })
                .collect()
        }));
    c.call(v, &request)
}

#[test]
fn list_partition_reassignments_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let t = ctx.topic("lpr", 2, &[]);
    let missing = unique_name("lpr-missing");
    for v in ctx.versions_req(ApiKey::ListPartitionReassignments, 0, 0) {
        let all = list(&mut c, v, None);
        assert_code!(all.error_code, NONE, "ListPartitionReassignments v{v}");
        assert!(
            all.topics.iter().all(|x| x.name.0.as_str() != t.name),
            "v{v}: {} is not moving",
            t.name
        );
        let named = list(
            &mut c,
            v,
            Some(vec![(&t.name, vec![0, 1, 5]), (&missing, vec![0])]),
        );
        assert_code!(
            named.error_code,
            NONE,
            "ListPartitionReassignments v{v} named"
        );
        assert!(
            named.topics.iter().all(|x| x.partitions.is_empty()),
            "v{v}: nothing listed: {named:?}"
        );
    }
}
