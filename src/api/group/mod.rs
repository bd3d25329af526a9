//! Consumer-group APIs (classic and KIP-848): thin handlers over `group::GroupCoordinator`.

pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod delete_groups;
pub mod describe_groups;
pub mod find_coordinator;
pub mod heartbeat;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod sync_group;

use std::collections::{BTreeSet, HashMap};

use super::context::RequestContext;
use crate::cluster::TopicSpec;
use crate::group::consumer::{PartitionRacks, TopicsImage};

/// The topics a consumer group may subscribe to now, and where their replicas are (for
/// rack-aware assignment): what a consumer group's member changes are computed with.
pub(super) async fn topics_image(ctx: &RequestContext) -> (TopicsImage, PartitionRacks) {
    let specs = ctx.services.store.topics().await;
    let racks = partition_racks(ctx, &specs);
    let topics = specs
        .into_iter()
        .map(|t| (t.name, (t.topic_id, t.partitions)))
        .collect();
    (topics, racks)
}

/// Where each partition's replicas are, by rack; empty unless brokers name racks (the
/// common case costs nothing).
fn partition_racks(ctx: &RequestContext, specs: &[TopicSpec]) -> PartitionRacks {
    let store = &ctx.services.store;
    let rack_of: HashMap<i32, String> = store
        .brokers()
        .into_iter()
        .filter_map(|b| Some((b.node_id, b.rack?)))
        .collect();
    if rack_of.is_empty() {
        return PartitionRacks::new();
    }
    let mut racks = PartitionRacks::new();
    for spec in specs
        .iter()
        .filter(|s| !crate::topics::is_internal(&s.name))
    {
        let Some(assignment) = store.assignment(spec) else {
            continue;
        };
        for (index, partition) in assignment.partitions.iter().enumerate() {
            let of_partition: BTreeSet<String> = partition
                .replicas
                .iter()
                .filter_map(|b| rack_of.get(b).cloned())
                .collect();
            if !of_partition.is_empty() {
                racks.insert((spec.topic_id, index as i32), of_partition);
            }
        }
    }
    racks
}
