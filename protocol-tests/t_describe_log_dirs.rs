//! DescribeLogDirs v1-4: one log dir with every local partition and its size; the
//! topic filter; v4's filesystem sizes.

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{ApiKey, DescribeLogDirsRequest};

use crate::broker::now_ms;
use crate::ops::*;
use crate::records::batch_of;

fn describe(
    c: &mut crate::client::Client,
    v: i16,
    topics: Option<Vec<(&str, Vec<i32>)>>,
) -> kafka_protocol::messages::DescribeLogDirsResponse {
    let request = DescribeLogDirsRequest::default().with_topics(topics.map(|ts| {
        ts.into_iter()
            .map(|(name, partitions)| {
                DescribableLogDirTopic::default()
                    .with_topic(tn(name))
                    .with_partitions(partitions)
            })
            .collect()
    }));
    c.call(v, &request)
}

#[test]
fn describe_log_dirs_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let t = ctx.topic("dld", 2, &[]);
    produce_ok(&ctx, &mut c, &t, 0, batch_of(20, now_ms()));
    for v in ctx.versions_req(ApiKey::DescribeLogDirs, 1, 4) {
        // Every partition.
        let resp = describe(&mut c, v, None);
        assert_code!(resp.error_code, NONE, "DescribeLogDirs v{v}");
        assert!(!resp.results.is_empty(), "DescribeLogDirs v{v}: no log dir");
        let dir = resp
            .results
            .iter()
            .find(|d| d.topics.iter().any(|x| x.name.0.as_str() == t.name))
            .unwrap_or_else(|| panic!("DescribeLogDirs v{v}: no dir lists {}", t.name));
        assert_code!(dir.error_code, NONE, "DescribeLogDirs v{v}: dir error");
        assert!(
            dir.log_dir.as_str().starts_with('/'),
            "DescribeLogDirs v{v}: log dir {:?} is not absolute",
            dir.log_dir
        );
        let topic = dir
            .topics
            .iter()
            .find(|x| x.name.0.as_str() == t.name)
            .unwrap();
        let mut indexes: Vec<i32> = topic.partitions.iter().map(|p| p.partition_index).collect();
        indexes.sort_unstable();
        assert_eq!(indexes, vec![0, 1], "DescribeLogDirs v{v}: partitions");
        let p0 = topic
            .partitions
            .iter()
            .find(|p| p.partition_index == 0)
            .unwrap();
        assert!(
            p0.partition_size > 0,
            "DescribeLogDirs v{v}: partition 0 holds 20 records, size {}",
            p0.partition_size
        );
        assert!(
            !p0.is_future_key,
            "DescribeLogDirs v{v}: not a future replica"
        );
        assert_eq!(
            p0.offset_lag, 0,
            "DescribeLogDirs v{v}: a leader has no lag"
        );
        if v >= 4 {
            assert!(
                dir.total_bytes > 0 && dir.usable_bytes > 0 && dir.usable_bytes <= dir.total_bytes,
                "DescribeLogDirs v{v}: total {} usable {}",
                dir.total_bytes,
                dir.usable_bytes
            );
        } else {
            assert_eq!(
                dir.total_bytes, -1,
                "DescribeLogDirs v{v}: no total before v4"
            );
        }
        // Only the named partitions; unknown topics and partitions are left out.
        let missing = crate::broker::unique_name("dld-missing");
        let resp = describe(
            &mut c,
            v,
            Some(vec![(&t.name, vec![1, 7]), (&missing, vec![0])]),
        );
        assert_code!(resp.error_code, NONE, "DescribeLogDirs v{v} filtered");
        let listed: Vec<(String, i32)> = resp
            .results
            .iter()
            .flat_map(|d| {
                d.topics.iter().flat_map(|x| {
                    x.partitions
                        .iter()
                        .map(|p| (x.name.0.to_string(), p.partition_index))
                })
            })
            .collect();
        assert_eq!(
            listed,
            vec![(t.name.clone(), 1)],
            "DescribeLogDirs v{v}: only {}-1",
            t.name
        );
        // An empty filter lists nothing.
        let resp = describe(&mut c, v, Some(vec![]));
        assert!(
            resp.results.iter().all(|d| d.topics.is_empty()),
            "DescribeLogDirs v{v}: an empty topic list names no partition"
        );
    }
}
