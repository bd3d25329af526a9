//! The broker's current authorization state: whether an authorizer is configured
//! (`--authorizer acl`), and the `Authorizer` built from the store's bindings, swapped
//! whole when the store announces `AclsChanged` (so a request sees one consistent set).

use std::sync::Arc;

use parking_lot::RwLock;

use super::acl::{AclBinding, Authorizer};

/// What `--authorizer` and `--super-users` configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `--authorizer acl`; false (`none`, the default) allows everything, as before ACLs.
    pub enabled: bool,
    /// `super.users`, as `Type:name` strings.
    pub super_users: Vec<String>,
}

/// One broker's authorizer, shared by every connection.
#[derive(Debug)]
pub struct AccessControl {
    config: AuthorizerConfig,
    current: RwLock<Arc<Authorizer>>,
}

impl AccessControl {
    pub fn new(config: AuthorizerConfig, acls: Vec<AclBinding>) -> Self {
        let current = Authorizer::new(config.super_users.iter().cloned(), acls);
        Self {
            config,
            current: RwLock::new(Arc::new(current)),
        }
    }

    /// Whether an authorizer is configured at all (Kafka's `authorizer.isDefined`).
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// Replaces the bindings (on `AclsChanged`, `Resynced`).
    pub fn rebuild(&self, acls: Vec<AclBinding>) {
        let next = Authorizer::new(self.config.super_users.iter().cloned(), acls);
        *self.current.write() = Arc::new(next);
    }

    /// The current snapshot, `None` when no authorizer is configured.
    pub fn authorizer(&self) -> Option<Arc<Authorizer>> {
        self.config
            .enabled
            .then(|| Arc::clone(&self.current.read()))
    }
}
