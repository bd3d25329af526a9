//! DescribeCluster (key 60, v0–2): the live brokers, the controller and the cluster id. The
//! Java admin client asks this before falling back to Metadata. No permission is needed
//! (Kafka's `AuthHelper.computeDescribeClusterResponse`); KIP-430's
//! `cluster_authorized_operations`, when asked for, are the cluster's bits if the
//! principal may DESCRIBE the cluster and 0 otherwise.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let store = &ctx.services.store;
    let brokers = store
        .brokers()
        .into_iter()
        .map(|b| {
            let (host, port) = b.address_for(ctx.listener());
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.node_id))
                .with_host(str_bytes(host.to_string()))
                .with_port(port)
                .with_rack(b.rack.map(str_bytes))
        })
        .collect();
    let operations = if !request.include_cluster_authorized_operations {
        AUTHORIZED_OPERATIONS_OMITTED
    } else if ctx.authorize_cluster(AclOperation::Describe) {
        ctx.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
    } else {
        0
    };
    DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(store.cluster_id()))
        .with_controller_id(BrokerId(store.controller_id().unwrap_or(-1)))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(operations)
}
