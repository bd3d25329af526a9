//! DescribeCluster (key 60, v0–2): the live brokers, the controller and the cluster id. The
//! Java admin client asks this before falling back to Metadata.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};

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
    DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(store.cluster_id()))
        .with_controller_id(BrokerId(store.controller_id().unwrap_or(-1)))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
