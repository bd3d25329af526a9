//! Topic and cluster administration APIs.

pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod elect_leaders;
pub mod group_configs;
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
pub(crate) const RESOURCE_BROKER_LOGGER: i8 = 8;
pub(crate) const RESOURCE_GROUP: i8 = 32;

/// What a config resource's ACL check is, as Kafka's `ConfigHelper` (DescribeConfigs),
/// `ControllerApis.authorizeAlterResource` (AlterConfigs) and
/// `processIncrementalAlterConfigsRequest` decide it: a topic is checked on itself and
/// refused with TOPIC_AUTHORIZATION_FAILED; a group on itself, refused with
/// GROUP_AUTHORIZATION_FAILED; a broker (and, except for the legacy AlterConfigs, a
/// broker logger) on the cluster, refused with CLUSTER_AUTHORIZATION_FAILED. `None`
/// for other types: they are answered by the
/// handler's own "not supported" path, needing no permission.
pub(crate) fn config_resource_acl(
    resource_type: i8,
    name: &str,
    broker_logger: bool,
) -> Option<(
    crate::security::acl::ResourceType,
    &str,
    kafka_protocol::ResponseError,
)> {
    use crate::security::acl::{ResourceType, CLUSTER_NAME};
    use kafka_protocol::ResponseError;
    match resource_type {
        RESOURCE_TOPIC => Some((
            ResourceType::Topic,
            name,
            ResponseError::TopicAuthorizationFailed,
        )),
        RESOURCE_BROKER => Some((
            ResourceType::Cluster,
            CLUSTER_NAME,
            ResponseError::ClusterAuthorizationFailed,
        )),
        RESOURCE_BROKER_LOGGER if broker_logger => Some((
            ResourceType::Cluster,
            CLUSTER_NAME,
            ResponseError::ClusterAuthorizationFailed,
        )),
        RESOURCE_GROUP => Some((
            ResourceType::Group,
            name,
            ResponseError::GroupAuthorizationFailed,
        )),
        _ => None,
    }
}

/// The refusal of one config resource: `Some(error)` when the principal may not
/// `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on it, see `config_resource_acl`.
pub(crate) fn config_resource_refusal(
    ctx: &super::context::RequestContext,
    operation: crate::security::acl::AclOperation,
    resource_type: i8,
    name: &str,
    broker_logger: bool,
) -> Option<kafka_protocol::ResponseError> {
    let (acl_type, acl_name, error) = config_resource_acl(resource_type, name, broker_logger)?;
    (!ctx.authorize(operation, acl_type, acl_name)).then_some(error)
}

/// Whether `name` is a broker config this broker has but does not change at run time.
pub(crate) fn read_only_broker_config(ctx: &super::context::RequestContext, name: &str) -> bool {
    !crate::cluster::broker_config::is_dynamic(name)
        && ctx.services.static_configs.iter().any(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{ResourceType, CLUSTER_NAME};
    use kafka_protocol::ResponseError;

    #[test]
    fn topic_configs_are_checked_on_the_topic_and_broker_configs_on_the_cluster() {
        assert_eq!(
            config_resource_acl(RESOURCE_TOPIC, "t", true),
            Some((
                ResourceType::Topic,
                "t",
                ResponseError::TopicAuthorizationFailed
            ))
        );
        assert_eq!(
            config_resource_acl(RESOURCE_BROKER, "1", false),
            Some((
                ResourceType::Cluster,
                CLUSTER_NAME,
                ResponseError::ClusterAuthorizationFailed
            ))
        );
    }

    #[test]
    fn group_configs_are_checked_on_the_group() {
        for broker_logger in [true, false] {
            assert_eq!(
                config_resource_acl(RESOURCE_GROUP, "orders", broker_logger),
                Some((
                    ResourceType::Group,
                    "orders",
                    ResponseError::GroupAuthorizationFailed
                ))
            );
        }
    }

    #[test]
    fn broker_loggers_are_cluster_resources_except_for_legacy_alter_configs() {
        assert_eq!(
            config_resource_acl(RESOURCE_BROKER_LOGGER, "1", true).map(|(t, _, e)| (t, e)),
            Some((
                ResourceType::Cluster,
                ResponseError::ClusterAuthorizationFailed
            ))
        );
        assert_eq!(
            config_resource_acl(RESOURCE_BROKER_LOGGER, "1", false),
            None
        );
        assert_eq!(config_resource_acl(1, "x", true), None);
    }
}
