//! DescribeCluster (key 60, v0–2): the brokers, the controller and the cluster id. The
//! Java admin client asks this before falling back to Metadata.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let node = &ctx.services.node;
    DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(ctx.services.store.cluster_id()))
        .with_controller_id(BrokerId(node.node_id))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(node.node_id))
            .with_host(str_bytes(node.host.clone()))
            .with_port(node.port)
            .with_rack(node.rack.clone().map(str_bytes))])
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
