//! DescribeLogDirs (key 35, v1–4): this broker's one log dir (its data directory, as
//! an absolute path) with every partition replica open here and its size. Each broker
//! answers for itself; admin clients ask every broker.
//!
//! `offset_lag` is 0, as Kafka answers for a non-future replica (its
//! `getLogEndOffsetLag` is the replica's own high watermark minus its own log end,
//! clamped at 0); tern has no future replicas (no moves between dirs), so
//! `is_future_key` is always false. v4's total and usable bytes come from the
//! filesystem (-1 when it cannot be read, as Kafka reports an unknown size).
//!
//! With an authorizer the request needs DESCRIBE on the cluster; without it the answer
//! has no log dirs and, from v3 (where the field exists), CLUSTER_AUTHORIZATION_FAILED
//! (Kafka's `handleDescribeLogDirsRequest`).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::super::context::RequestContext;
use super::super::{str_bytes, topic_name};
use crate::metrics;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    if !ctx.authorize_cluster(AclOperation::Describe) {
        let response = DescribeLogDirsResponse::default();
        return if ctx.api_version >= 3 {
            response
                .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code())
        } else {
            response
        };
    }
    let replicas = &ctx.services.replicas;
    // None: every partition; else only the named ones (unknown ones are left out).
    let wanted: Option<BTreeSet<(String, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
            .collect()
    });
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for partition in replicas.all_partitions() {
        let id = partition.id();
        let key = (id.topic.to_string(), id.partition);
        if wanted.as_ref().is_some_and(|w| !w.contains(&key)) {
            continue;
        }
        by_topic.entry(key.0).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(key.1)
                .with_partition_size(i64::try_from(partition.size_bytes()).unwrap_or(i64::MAX))
                .with_offset_lag(0)
                .with_is_future_key(false),
        );
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            DescribeLogDirsTopic::default()
                .with_name(topic_name(name))
                .with_partitions(partitions)
        })
        .collect();
    let dir = replicas.data_dir();
    let absolute = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let space = metrics::filesystem_space(dir);
    let size = |bytes: Option<u64>| bytes.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(absolute.to_string_lossy().into_owned()))
        .with_topics(topics)
        .with_total_bytes(size(space.map(|s| s.total)))
        .with_usable_bytes(size(space.map(|s| s.usable)));
    DescribeLogDirsResponse::default().with_results(vec![result])
}
