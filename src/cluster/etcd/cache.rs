//! The local copy of everything under the prefix, and how one key's put or delete
//! changes it (and which event that makes). Pure: the watch (`watch.rs`) feeds it.

use std::collections::BTreeMap;

use etcd_client::KeyValue;

use super::keys::{classify, ControllerRecord, Entry};
use crate::cluster::store::{
    BrokerInfo, MetadataEvent, TopicAssignment, TopicSpec, UserCredentials,
};
use crate::security::acl::AclBinding;
use crate::security::credentials::StoredScramCredential;

/// How a controller's write of a placement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Written,
    /// Someone (a leader's ISR change) wrote it since: re-read and decide again.
    Stale,
    /// This broker is no longer the controller.
    Fenced,
}

/// The elected controller: its id and the create revision of its key, which is its
/// term: writes guarded by "the controller key still has this create revision" fail
/// once it has been deposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerTerm {
    pub node_id: i32,
    pub revision: i64,
}

/// The local copy of everything under the prefix.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub topics: BTreeMap<String, TopicSpec>,
    pub assignments: BTreeMap<String, TopicAssignment>,
    /// The etcd mod revision of each `assignments/<name>` key: what a compare-and-swap
    /// of the controller's next write of it must match.
    pub assignment_revisions: BTreeMap<String, i64>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Each live broker's incarnation: the create revision of its registration, new on
    /// every (re)start or re-registration after a lapsed lease (Kafka's broker epoch).
    pub incarnations: BTreeMap<i32, i64>,
    pub controller: Option<ControllerTerm>,
    /// Dynamic broker configs by level (`None`: the cluster-wide default).
    pub broker_configs: BTreeMap<Option<i32>, BTreeMap<String, String>>,
    pub users: UserCredentials,
    /// ACL bindings by their storage key.
    pub acls: BTreeMap<String, AclBinding>,
}

impl Snapshot {
    /// Applies one put (`value` is `Some`) or delete; returns the event it makes.
    pub(super) fn apply(
        &mut self,
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
                    self.brokers.insert(id, broker);
                    self.incarnations.insert(id, kv.create_revision());
                } else {
                    self.brokers.remove(&id);
                    self.incarnations.remove(&id);
                }
                Some(MetadataEvent::BrokersChanged)
            }
            Entry::Controller => {
                self.controller = if put {
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
                    let existed = self.topics.insert(name.to_string(), spec.clone());
                    Some(match existed {
                        Some(_) => MetadataEvent::TopicChanged(spec),
                        None => MetadataEvent::TopicCreated(spec),
                    })
                } else {
                    self.topics.remove(name).map(MetadataEvent::TopicDeleted)
                }
            }
            Entry::Assignment(name) => {
                if put {
                    let assignment = parse::<TopicAssignment>(key, value)?;
                    self.assignments.insert(name.to_string(), assignment);
                    self.assignment_revisions
                        .insert(name.to_string(), kv.mod_revision());
                } else {
                    self.assignments.remove(name);
                    self.assignment_revisions.remove(name);
                }
                Some(MetadataEvent::AssignmentChanged(name.to_string()))
            }
            Entry::BrokerConfigs(level) => {
                if put {
                    let configs = parse::<BTreeMap<String, String>>(key, value)?;
                    self.broker_configs.insert(level, configs);
                } else {
                    self.broker_configs.remove(&level);
                }
                Some(MetadataEvent::BrokerConfigsChanged(level))
            }
            Entry::User(mechanism, user) => {
                let credential = match put {
                    true => Some(parse::<StoredScramCredential>(key, value)?),
                    false => None,
                };
                crate::cluster::store::set_user_credential(
                    &mut self.users,
                    &user,
                    mechanism,
                    credential,
                );
                None
            }
            Entry::Acl(binding_key) => {
                if put {
                    let binding = parse::<AclBinding>(key, value)?;
                    self.acls.insert(binding_key.to_string(), binding);
                } else {
                    self.acls.remove(binding_key);
                }
                Some(MetadataEvent::AclsChanged)
            }
            Entry::Other => None,
        }
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
