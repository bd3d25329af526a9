//! Topic and cluster administration APIs.

pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod elect_leaders;
pub mod incremental_alter_configs;
pub mod list_partition_reassignments;

/// Why an ACL API (Create/Describe/DeleteAcls) is refused as a whole, as Kafka refuses
/// it: SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
/// `operation` on the cluster.
pub(crate) fn acl_api_refusal(
    ctx: &super::context::RequestContext,
    operation: crate::security::acl::AclOperation,
) -> Option<(kafka_protocol::ResponseError, &'static str)> {
    use kafka_protocol::ResponseError;
    if !ctx.services.access.enabled() {
        return Some((
            ResponseError::SecurityDisabled,
            "No Authorizer is configured.",
        ));
    }
    if !ctx.authorize_cluster(operation) {
        return Some((
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        ));
    }
    None
}

/// DescribeConfigs/AlterConfigs resource types.
pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;

/// Whether `name` is a broker config this broker has but does not change at run time.
pub(crate) fn read_only_broker_config(ctx: &super::context::RequestContext, name: &str) -> bool {
    !crate::cluster::broker_config::is_dynamic(name)
        && ctx.services.static_configs.iter().any(|c| c.name == name)
}
