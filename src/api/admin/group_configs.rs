//! The one path that stores a group's configs (GROUP config resources), for both
//! AlterConfigs (the whole set) and IncrementalAlterConfigs (the set after its
//! operations): checked as a whole against the broker's settings, as Kafka's
//! `ControllerConfigurationValidator` checks them, then kept in the metadata store.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use crate::group::config::GROUP_CONFIGS;

/// Whether `name` is a group config; a refusal names it as Kafka does.
pub(crate) fn known(name: &str) -> Result<(), (ResponseError, String)> {
    if GROUP_CONFIGS.iter().any(|d| d.name == name) {
        Ok(())
    } else {
        Err((
            ResponseError::InvalidConfig,
            format!("Unknown group config name: {name}"),
        ))
    }
}

/// Replaces group `group`'s configs with `configs` (all of them: an empty map removes
/// every override), or only checks them with `validate_only`.
pub(crate) async fn replace(
    ctx: &RequestContext,
    group: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    if group.is_empty() {
        return Err((
            ResponseError::InvalidRequest,
            "Default group resources are not allowed.".to_string(),
        ));
    }
    ctx.services
        .groups
        .group_configs()
        .check(&configs)
        .map_err(|e| (ResponseError::InvalidConfig, e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    ctx.services
        .store
        .set_group_configs(group, configs)
        .await
        .map_err(|e| (ResponseError::UnknownServerError, e.to_string()))
}
