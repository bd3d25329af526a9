//! How one key's put or delete under the prefix changes the local copy
//! (`cluster::cache::Snapshot`), and which event that makes. Pure: the watch
//! (`watch.rs`) feeds it.

use std::collections::BTreeMap;

use etcd_client::KeyValue;

use super::keys::{classify, ControllerRecord, Entry};
use crate::cluster::cache::Snapshot;
use crate::cluster::store::{
    BrokerInfo, ControllerTerm, MetadataEvent, TopicAssignment, TopicSpec,
};
use crate::security::acl::AclBinding;
use crate::security::credentials::StoredScramCredential;

/// Applies one put (`put`) or delete of `kv` to the cache; returns the event it makes.
pub(super) fn apply(
    cache: &mut Snapshot,
    prefix: &str,
    kv: &KeyValue,
    put: bool,
) -> Option<MetadataEvent> {
    let key = kv.key_str().ok()?;
    let value = kv.value();
    match classify(prefix, key) {
        Entry::Broker(id) => {
            if put {
                let broker = parse::<BrokerInfo>(key, value)?;
                cache.brokers.insert(id, broker);
                cache.incarnations.insert(id, kv.create_revision());
            } else {
                cache.brokers.remove(&id);
                cache.incarnations.remove(&id);
            }
            Some(MetadataEvent::BrokersChanged)
        }
        Entry::Controller => {
            cache.controller = if put {
                parse::<ControllerRecord>(key, value).map(|r| ControllerTerm {
                    node_id: r.node_id,
                    revision: kv.create_revision(),
                })
            } else {
                None
            };
            Some(MetadataEvent::ControllerChanged)
        }
        Entry::Topic(name) => {
            if put {
                let spec = parse::<TopicSpec>(key, value)?;
                let existed = cache.topics.insert(name.to_string(), spec.clone());
                Some(match existed {
                    Some(_) => MetadataEvent::TopicChanged(spec),
                    None => MetadataEvent::TopicCreated(spec),
                })
            } else {
                cache.topics.remove(name).map(MetadataEvent::TopicDeleted)
            }
        }
        Entry::Assignment(name) => {
            if put {
                let assignment = parse::<TopicAssignment>(key, value)?;
                cache.assignments.insert(name.to_string(), assignment);
                cache
                    .assignment_revisions
                    .insert(name.to_string(), kv.mod_revision());
            } else {
                cache.assignments.remove(name);
                cache.assignment_revisions.remove(name);
            }
            Some(MetadataEvent::AssignmentChanged(name.to_string()))
        }
        Entry::BrokerConfigs(level) => {
            if put {
                let configs = parse::<BTreeMap<String, String>>(key, value)?;
                cache.broker_configs.insert(level, configs);
            } else {
                cache.broker_configs.remove(&level);
            }
            Some(MetadataEvent::BrokerConfigsChanged(level))
        }
        Entry::GroupConfigs(group) => {
            // Read by the group on its next heartbeat: nothing to announce.
            if put {
                let configs = parse::<BTreeMap<String, String>>(key, value)?;
                cache.group_configs.insert(group, configs);
            } else {
                cache.group_configs.remove(&group);
            }
            None
        }
        Entry::User(mechanism, user) => {
            let credential = match put {
                true => Some(parse::<StoredScramCredential>(key, value)?),
                false => None,
            };
            crate::cluster::store::set_user_credential(
                &mut cache.users,
                &user,
                mechanism,
                credential,
            );
            None
        }
        Entry::Acl(binding_key) => {
            if put {
                let binding = parse::<AclBinding>(key, value)?;
                cache.acls.insert(binding_key.to_string(), binding);
            } else {
                cache.acls.remove(binding_key);
            }
            Some(MetadataEvent::AclsChanged)
        }
        Entry::ClientQuotas(entity) => {
            if put {
                let values = parse::<BTreeMap<String, String>>(key, value)?;
                cache.client_quotas.insert(entity, values);
            } else {
                cache.client_quotas.remove(&entity);
            }
            Some(MetadataEvent::ClientQuotasChanged)
        }
        Entry::Other => None,
    }
}

/// Parses a value, logging (not failing on) one that another version wrote badly:
/// one bad key must not stop the broker from following the rest.
fn parse<T: serde::de::DeserializeOwned>(key: &str, value: &[u8]) -> Option<T> {
    match serde_json::from_slice(value) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            tracing::warn!(key, %error, "ignoring unreadable metadata value");
            None
        }
    }
}
