//! The key layout of the cluster's metadata in etcd, all under `/tern/<cluster-id>/`,
//! and how a key names what it holds. Knows no client and no cache.
//!
//! | key                   | value                      | written by                    |
//! |-----------------------|----------------------------|-------------------------------|
//! | `brokers/<id>`        | `BrokerInfo` JSON          | that broker, on its lease     |
//! | `controller`          | `{"node_id": id}`          | the elected controller, on its lease |
//! | `topics/<name>`       | `TopicSpec` JSON           | any broker (admin requests), compare-and-swap |
//! | `assignments/<name>`  | `TopicAssignment` JSON     | the controller only, fenced   |
//! | `controller-incarnations` | `{"<id>": create revision}` the controller placed with | the controller only, fenced; read by the next one |
//! | `counters/topic_id`, `counters/producer_id` | next id | any broker, compare-and-swap |
//! | `configs/brokers/<id>`, `configs/brokers/<default>` | dynamic broker configs, JSON map | any broker (AlterConfigs on a BROKER resource) |
//! | `users/<mechanism>/<user, percent-encoded>` | a SCRAM credential (salt, stored and server keys, iterations), JSON | any broker (AlterUserScramCredentials) |
//! | `configs/quotas/<entity, percent-encoded>` | client quota values by key, JSON map | any broker (AlterClientQuotas) |
//! | `acls/<binding key>`  | `AclBinding` JSON (the key encodes every field, `AclBinding::storage_key`) | any broker (CreateAcls, DeleteAcls): one key per binding, so concurrent writers need no compare-and-swap |

use serde::{Deserialize, Serialize};

use crate::security::acl::AclBinding;
use crate::security::credentials::ScramMechanism;

/// The key layout (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    pub(super) fn broker(&self, id: i32) -> String {
        format!("{}brokers/{id}", self.prefix)
    }
    pub(super) fn brokers(&self) -> String {
        format!("{}brokers/", self.prefix)
    }
    pub(super) fn controller(&self) -> String {
        format!("{}controller", self.prefix)
    }
    pub(super) fn controller_incarnations(&self) -> String {
        format!("{}controller-incarnations", self.prefix)
    }
    pub(super) fn topic(&self, name: &str) -> String {
        format!("{}topics/{name}", self.prefix)
    }
    pub(super) fn assignment(&self, name: &str) -> String {
        format!("{}assignments/{name}", self.prefix)
    }
    pub(super) fn topic_ids(&self) -> String {
        format!("{}counters/topic_id", self.prefix)
    }
    pub(super) fn producer_ids(&self) -> String {
        format!("{}counters/producer_id", self.prefix)
    }
    /// `users/<mechanism>/<user, percent-encoded>`.
    pub(super) fn user(&self, mechanism: ScramMechanism, user: &str) -> String {
        format!(
            "{}users/{}/{}",
            self.prefix,
            mechanism.name(),
            encode_key_part(user)
        )
    }
    /// `acls/<binding key>`: one key per binding.
    pub(super) fn acl(&self, binding: &AclBinding) -> String {
        format!("{}acls/{}", self.prefix, binding.storage_key())
    }
    /// `configs/quotas/<client quota entity's storage key, percent-encoded>`.
    pub(super) fn client_quotas(&self, entity: &str) -> String {
        format!("{}configs/quotas/{}", self.prefix, encode_key_part(entity))
    }
    /// `configs/groups/<group id, percent-encoded>`.
    pub(super) fn group_configs(&self, group: &str) -> String {
        format!("{}configs/groups/{}", self.prefix, encode_key_part(group))
    }
    /// `configs/brokers/<id>`, or `configs/brokers/<default>` for the cluster default.
    pub(super) fn broker_configs(&self, broker: Option<i32>) -> String {
        match broker {
            Some(id) => format!("{}configs/brokers/{id}", self.prefix),
            None => format!("{}configs/brokers/<default>", self.prefix),
        }
    }
}

/// What a key under the prefix is.
pub(super) enum Entry<'a> {
    Broker(i32),
    Controller,
    Topic(&'a str),
    Assignment(&'a str),
    /// Dynamic broker configs: `None` for `<default>`.
    BrokerConfigs(Option<i32>),
    /// A group's dynamic configs, by group id.
    GroupConfigs(String),
    /// A SCRAM credential: mechanism name and user.
    User(&'a str, String),
    /// An ACL binding, by its storage key.
    Acl(&'a str),
    /// A client quota entity's values, by the entity's storage key.
    ClientQuotas(String),
    Other,
}

/// A user name as one etcd key segment: everything but ASCII letters, digits and
/// `-._~` percent-encoded, so that a `/` in a name cannot change the key's shape.
fn encode_key_part(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode_key_part(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

pub(super) fn classify<'a>(prefix: &str, key: &'a str) -> Entry<'a> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return Entry::Other;
    };
    if rest == "controller" {
        Entry::Controller
    } else if let Some(id) = rest.strip_prefix("brokers/") {
        id.parse().map_or(Entry::Other, Entry::Broker)
    } else if let Some(name) = rest.strip_prefix("topics/") {
        Entry::Topic(name)
    } else if let Some(name) = rest.strip_prefix("assignments/") {
        Entry::Assignment(name)
    } else if let Some(user) = rest.strip_prefix("users/") {
        user.split_once('/')
            .and_then(|(mechanism, name)| Some(Entry::User(mechanism, decode_key_part(name)?)))
            .unwrap_or(Entry::Other)
    } else if let Some(binding) = rest.strip_prefix("acls/") {
        Entry::Acl(binding)
    } else if let Some(entity) = rest.strip_prefix("configs/quotas/") {
        decode_key_part(entity).map_or(Entry::Other, Entry::ClientQuotas)
    } else if let Some(group) = rest.strip_prefix("configs/groups/") {
        decode_key_part(group).map_or(Entry::Other, Entry::GroupConfigs)
    } else if let Some(level) = rest.strip_prefix("configs/brokers/") {
        if level == "<default>" {
            Entry::BrokerConfigs(None)
        } else {
            level
                .parse()
                .map_or(Entry::Other, |id| Entry::BrokerConfigs(Some(id)))
        }
    } else {
        Entry::Other
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ControllerRecord {
    pub(super) node_id: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_classified_by_their_place_under_the_prefix() {
        let prefix = "/tern/c/";
        assert!(matches!(
            classify(prefix, "/tern/c/brokers/7"),
            Entry::Broker(7)
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/controller"),
            Entry::Controller
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/topics/a.b"),
            Entry::Topic("a.b")
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/assignments/x"),
            Entry::Assignment("x")
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/brokers/x"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/other/controller"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/counters/topic_id"),
            Entry::Other
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/<default>"),
            Entry::BrokerConfigs(None)
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/2"),
            Entry::BrokerConfigs(Some(2))
        ));
        assert!(matches!(
            classify(prefix, "/tern/c/configs/brokers/x"),
            Entry::Other
        ));
    }
}
