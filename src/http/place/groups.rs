//! A subscription's group, wherever it is coordinated: its offsets read and committed
//! directly when this broker coordinates it, through OffsetFetch, OffsetCommit,
//! OffsetDelete, DeleteGroups and ListGroups to its coordinator otherwise.

use std::collections::BTreeMap;

use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

use super::{remote_error, topic_name, Owner};
use crate::cluster::TopicSpec;
use crate::group::coordinator::{CommitError, OffsetCommit};
use crate::group::offsets::{self, CommittedOffset};
use crate::http::subscribe::Subscription;
use crate::http::{ApiError, HttpApi};

/// One group of a multi-group OffsetFetch: its id and the topic partitions asked for
/// (`None`: all it has).
type GroupQuery<'a> = (String, Option<(&'a TopicSpec, Vec<i32>)>);

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

fn commit_error(error: CommitError) -> ApiError {
    ApiError::unavailable(format!("committing the subscription's position: {error}"))
}

impl HttpApi {
    /// The coordinator of `group`: here, another broker, or a 503 when there is none
    /// right now (this broker's session lapsed, or the group's partition is unplaced).
    async fn coordinator(&self, group: &str) -> Result<Owner<()>, ApiError> {
        let groups = &self.services.groups;
        if groups.is_coordinator_for(group) {
            return Ok(Owner::Here(()));
        }
        match offsets::coordinator_of(self.services.store.as_ref(), group).await {
            Some(leader) if leader != self.node_id() => Ok(Owner::Broker(leader)),
            _ => Err(ApiError::transient(format!(
                "group '{group}' has no coordinator right now; retry"
            ))),
        }
    }

    /// `group`'s committed offsets on `spec`'s partitions.
    pub(in crate::http) async fn committed(
        &self,
        group: &str,
        spec: &TopicSpec,
    ) -> Result<BTreeMap<i32, CommittedOffset>, ApiError> {
        let wanted = (0..spec.partitions).collect::<Vec<_>>();
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                let wanted = [(spec.name.clone(), wanted)];
                return Ok(self
                    .services
                    .groups
                    .fetch_offsets(group, Some(&wanted))
                    .into_iter()
                    .filter_map(|(_, p, o)| o.map(|o| (p, o)))
                    .collect());
            }
            Owner::Broker(node) => node,
        };
        let mut found = self
            .fetch_remote_offsets(node, vec![(group.to_string(), Some((spec, wanted)))])
            .await?;
        Ok(found.pop().map(|(_, offsets)| offsets).unwrap_or_default())
    }

    /// OffsetFetch (v8, many groups at once) from broker `node`: per group, its offsets
    /// on one topic's partitions (or, with `None`, whether it has any at all: every
    /// offset it holds, keyed by partition of any topic, which callers only count).
    async fn fetch_remote_offsets(
        &self,
        node: i32,
        groups: Vec<GroupQuery<'_>>,
    ) -> Result<Vec<(String, BTreeMap<i32, CommittedOffset>)>, ApiError> {
        let request = OffsetFetchRequest::default().with_groups(
            groups
                .iter()
                .map(|(group, topic)| {
                    OffsetFetchRequestGroup::default()
                        .with_group_id(group_id(group))
                        .with_member_epoch(-1)
                        .with_topics(topic.as_ref().map(|(spec, partitions)| {
                            vec![OffsetFetchRequestTopics::default()
                                .with_name(topic_name(&spec.name))
                                .with_partition_indexes(partitions.clone())]
                        }))
                })
                .collect(),
        );
        let response = self.ask(node, request, 8).await?;
        response
            .groups
            .into_iter()
            .map(|g| group_offsets(node, g))
            .collect()
    }

    /// Commits `commits` for `group` (a simple commit: no generation, no member).
    pub(in crate::http) async fn commit(
        &self,
        group: &str,
        commits: Vec<OffsetCommit>,
    ) -> Result<(), ApiError> {
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                return self
                    .services
                    .groups
                    .commit(group, "", None, -1, commits)
                    .await
                    .map_err(commit_error);
            }
            Owner::Broker(node) => node,
        };
        let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for c in commits {
            topics.entry(c.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(c.partition)
                    .with_committed_offset(c.offset)
                    .with_committed_leader_epoch(c.leader_epoch)
                    .with_committed_metadata(c.metadata.map(StrBytes::from_string)),
            );
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(-1)
            .with_retention_time_ms(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(topic_name(&name))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let response = self.ask(node, request, 8).await?;
        let failed = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.error_code != 0);
        match failed {
            Some(p) => Err(remote_error(node, "OffsetCommit", p.error_code)),
            None => Ok(()),
        }
    }

    /// Drops `group`'s offsets on `partitions` of `spec`, and the group itself once it
    /// has no offsets left (it may already be gone).
    pub(in crate::http) async fn forget(
        &self,
        group: &str,
        spec: &TopicSpec,
        partitions: Vec<i32>,
    ) -> Result<(), ApiError> {
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                let groups = &self.services.groups;
                let partitions: Vec<(String, i32)> = partitions
                    .into_iter()
                    .map(|p| (spec.name.clone(), p))
                    .collect();
                groups
                    .delete_offsets(group, &partitions)
                    .await
                    .map_err(commit_error)?;
                if groups.fetch_offsets(group, None).is_empty() {
                    let _ = groups.delete_group(group).await;
                }
                return Ok(());
            }
            Owner::Broker(node) => node,
        };
        let request = OffsetDeleteRequest::default()
            .with_group_id(group_id(group))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(topic_name(&spec.name))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(p))
                        .collect(),
                )]);
        let response = self.ask(node, request, 0).await?;
        if response.error_code != 0 {
            return Err(remote_error(node, "OffsetDelete", response.error_code));
        }
        let left = self
            .fetch_remote_offsets(node, vec![(group.to_string(), None)])
            .await?;
        if left.iter().all(|(_, offsets)| offsets.is_empty()) {
            let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
            // Best effort, as here: the group may already be gone.
            let _ = self.ask(node, request, 2).await;
        }
        Ok(())
    }

    /// Every HTTP subscription's position on partition `index` of `spec`, over every
    /// coordinator of the cluster.
    pub(in crate::http) async fn subscriptions_of(
        &self,
        spec: &TopicSpec,
        index: i32,
    ) -> Result<Vec<Subscription>, ApiError> {
        let mut found: Vec<Subscription> = self.local_subscriptions_of(&spec.name, index);
        for broker in self.services.store.brokers() {
            if broker.node_id == self.node_id() {
                continue;
            }
            let node = broker.node_id;
            let listed = self.ask(node, ListGroupsRequest::default(), 4).await?;
            if listed.error_code != 0 {
                return Err(remote_error(node, "ListGroups", listed.error_code));
            }
            let groups: Vec<_> = listed
                .groups
                .iter()
                .map(|g| g.group_id.0.to_string())
                .filter(|g| g.starts_with("http-"))
                .map(|g| (g, Some((spec, vec![index]))))
                .collect();
            if groups.is_empty() {
                continue;
            }
            let offsets = self.fetch_remote_offsets(node, groups).await?;
            found.extend(
                offsets
                    .into_iter()
                    .filter_map(|(_, mut o)| o.remove(&index))
                    .map(|o| Subscription::of(&o)),
            );
        }
        Ok(found)
    }
}

/// One group's answer to a multi-group OffsetFetch: its committed offsets by partition.
fn group_offsets(
    node: i32,
    group: OffsetFetchResponseGroup,
) -> Result<(String, BTreeMap<i32, CommittedOffset>), ApiError> {
    if group.error_code != 0 {
        return Err(remote_error(node, "OffsetFetch", group.error_code));
    }
    let mut offsets = BTreeMap::new();
    for p in group.topics.iter().flat_map(|t| &t.partitions) {
        if p.error_code != 0 {
            return Err(remote_error(node, "OffsetFetch", p.error_code));
        }
        if p.committed_offset >= 0 {
            offsets.insert(
                p.partition_index,
                CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                    commit_timestamp: -1,
                },
            );
        }
    }
    Ok((group.group_id.0.to_string(), offsets))
}
