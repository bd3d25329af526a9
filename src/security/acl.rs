//! Kafka's ACL model as pure code: resource and pattern types, operations, permissions with
//! their wire codes; bindings and binding filters (what CreateAcls, DescribeAcls and
//! DeleteAcls carry); the validation CreateAcls applies; and the `Authorizer`, Kafka's
//! `StandardAuthorizer` decision rules over a set of bindings.
//!
//! The rules, as Kafka's `StandardAuthorizerData` defines them:
//! - a super user (`super.users`, matched on the `Type:name` string) may do everything;
//! - otherwise an operation is allowed when some ALLOW binding matches and no DENY binding
//!   matches (deny beats allow), and denied when nothing matches
//!   (`allow.everyone.if.no.acl.found` is false);
//! - a binding matches a resource when its pattern is LITERAL and equal to the name, LITERAL
//!   `*` (any name), or PREFIXED with a prefix of the name;
//! - its principal is the request's or the wildcard `User:*`; its host the request's or `*`;
//! - its operation is the requested one or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
//!   allows DESCRIBE, and an ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS (a DENY implies
//!   nothing beyond its own operation).
//!
//! Nothing here does I/O: the store keeps the bindings, the handlers ask `authorize`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The one name a CLUSTER resource has (Kafka's `CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The resource name that matches every name of its type (LITERAL pattern only).
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal that matches every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host that matches every client address.
pub const WILDCARD_HOST: &str = "*";

/// Kafka's wire error codes this module answers with.
const INVALID_REQUEST: i16 = 42;

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:expr, $text:expr;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant),*];

            /// The wire code.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            /// From a wire code; codes this broker does not know read as UNKNOWN, as in Kafka.
            pub fn from_code(code: i8) -> Self {
                match code {
                    $($code => $name::$variant,)*
                    _ => $name::Unknown,
                }
            }

            /// Kafka's name (`TOPIC`, `DESCRIBE_CONFIGS`, …).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            /// From Kafka's name, case-insensitively; `-` and `_` are alike (`describe-configs`).
            pub fn parse(text: &str) -> Option<Self> {
                let wanted = text.trim().replace('-', "_").to_ascii_uppercase();
                let compact = wanted.replace('_', "");
                Self::ALL_VALUES
                    .iter()
                    .copied()
                    .find(|v| v.name() == wanted || v.name().replace('_', "") == compact)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

wire_enum!(
    /// Kafka's `ResourceType`.
    ResourceType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

wire_enum!(
    /// Kafka's `PatternType`.
    PatternType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

wire_enum!(
    /// Kafka's `AclOperation`.
    AclOperation {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
);

wire_enum!(
    /// Kafka's `AclPermissionType`.
    AclPermissionType {
        Unknown = 0, "UNKNOWN";
        Any = 1, "ANY";
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

impl ResourceType {
    /// The operations an ACL on this resource type can meaningfully name, as Kafka's
    /// `AclEntry.supportedOperations` lists them: the set KIP-430's authorized-operations
    /// bit field ranges over.
    pub fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
            ResourceType::Unknown | ResourceType::Any => &[],
        }
    }
}

/// One ACL: who may (or may not) do what on which resources from where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermissionType,
}

/// Why CreateAcls refuses a binding: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AclError {
    pub code: i16,
    pub message: String,
}

fn invalid(message: impl Into<String>) -> AclError {
    AclError {
        code: INVALID_REQUEST,
        message: message.into(),
    }
}

/// Whether `principal` has Kafka's `Type:name` form (`SecurityUtils.parseKafkaPrincipal`).
pub fn valid_principal(principal: &str) -> bool {
    principal
        .split_once(':')
        .is_some_and(|(kind, name)| !kind.is_empty() && !name.is_empty())
}

impl AclBinding {
    /// Kafka's CreateAcls checks (`AclControlManager.validateNewAcl` and the broker's own):
    /// a concrete resource type, LITERAL or PREFIXED, a concrete operation and permission,
    /// a non-empty name (`kafka-cluster` for CLUSTER), a `Type:name` principal.
    pub fn validate(&self) -> Result<(), AclError> {
        if matches!(
            self.resource_type,
            ResourceType::Unknown | ResourceType::Any
        ) {
            return Err(invalid(format!(
                "Invalid resourceType {}",
                self.resource_type
            )));
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return Err(invalid(format!(
                "Invalid patternType {}",
                self.pattern_type
            )));
        }
        if matches!(self.operation, AclOperation::Unknown | AclOperation::Any) {
            return Err(invalid(format!("Invalid operation {}", self.operation)));
        }
        if !matches!(
            self.permission,
            AclPermissionType::Allow | AclPermissionType::Deny
        ) {
            return Err(invalid(format!(
                "Invalid permissionType {}",
                self.permission
            )));
        }
        if self.resource_name.is_empty() {
            return Err(invalid("Resource name should not be empty"));
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Err(invalid(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )));
        }
        if !valid_principal(&self.principal) {
            return Err(invalid(format!(
                "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                self.principal
            )));
        }
        if self.host.is_empty() {
            return Err(invalid("Invalid empty host"));
        }
        Ok(())
    }

    /// Whether this binding's pattern covers resource `name` of `resource_type`.
    fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => {
                    self.resource_name == name || self.resource_name == WILDCARD_RESOURCE
                }
                PatternType::Prefixed => name.starts_with(&self.resource_name),
                _ => false,
            }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD_HOST)
    }

    /// Whether this binding's operation decides `operation` (with the implications
    /// only ALLOW has).
    fn decides(&self, operation: AclOperation) -> bool {
        use AclOperation::*;
        if self.operation == All || self.operation == operation {
            return true;
        }
        self.permission == AclPermissionType::Allow
            && match operation {
                Describe => matches!(self.operation, Read | Write | Delete | Alter),
                DescribeConfigs => self.operation == AlterConfigs,
                _ => false,
            }
    }

    /// A stable text key for this binding (the etcd store's key suffix): every field,
    /// names hex-encoded so that `/` and any byte are safe in a key.
    pub fn storage_key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}/{}/{}",
            self.resource_type.code(),
            self.pattern_type.code(),
            self.operation.code(),
            self.permission.code(),
            hex(&self.resource_name),
            hex(&self.principal),
            hex(&self.host)
        )
    }
}

fn hex(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() * 2 + 1);
    out.push('x');
    for byte in text.bytes() {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// What DescribeAcls and DeleteAcls select: `None` fields and ANY match everything;
/// pattern type MATCH selects the bindings that would apply to the named resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: AclPermissionType,
}

impl AclBindingFilter {
    /// A filter from the wire fields DescribeAcls and DeleteAcls both carry (codes the
    /// broker does not know read as UNKNOWN, which `validate` refuses).
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Self {
        Self {
            resource_type: ResourceType::from_code(resource_type),
            resource_name: resource_name.map(str::to_string),
            pattern_type: PatternType::from_code(pattern_type),
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: AclOperation::from_code(operation),
            permission: AclPermissionType::from_code(permission),
        }
    }

    /// The filter that matches every binding.
    pub fn any() -> Self {
        Self {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: AclPermissionType::Any,
        }
    }

    /// Kafka's `AclBindingFilter.isUnknown()`: a filter naming an UNKNOWN type, pattern,
    /// operation or permission matches nothing useful, and DescribeAcls/DeleteAcls refuse it
    /// with INVALID_REQUEST.
    pub fn validate(&self) -> Result<(), AclError> {
        if self.resource_type == ResourceType::Unknown || self.pattern_type == PatternType::Unknown
        {
            return Err(invalid("Unknown patternFilter."));
        }
        if self.operation == AclOperation::Unknown || self.permission == AclPermissionType::Unknown
        {
            return Err(invalid("Unknown entryFilter."));
        }
        Ok(())
    }

    /// Kafka's `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(binding) && self.matches_entry(binding)
    }

    fn matches_pattern(&self, binding: &AclBinding) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != binding.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != binding.pattern_type
        {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == binding.pattern_type {
            return *name == binding.resource_name;
        }
        // MATCH: the bindings that apply to resource `name`.
        match binding.pattern_type {
            PatternType::Literal => {
                *name == binding.resource_name || binding.resource_name == WILDCARD_RESOURCE
            }
            PatternType::Prefixed => name.starts_with(&binding.resource_name),
            _ => false,
        }
    }

    fn matches_entry(&self, binding: &AclBinding) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| *p == binding.principal)
            && self.host.as_ref().is_none_or(|h| *h == binding.host)
            && (self.operation == AclOperation::Any || self.operation == binding.operation)
            && (self.permission == AclPermissionType::Any || self.permission == binding.permission)
    }
}

/// The decisions of an ACL authorizer over one snapshot of the bindings.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    /// `Type:name` strings (`super.users`).
    pub super_users: BTreeSet<String>,
    pub acls: Vec<AclBinding>,
}

impl Authorizer {
    pub fn new(super_users: impl IntoIterator<Item = String>, acls: Vec<AclBinding>) -> Self {
        Self {
            super_users: super_users.into_iter().collect(),
            acls,
        }
    }

    /// Whether `principal` (`User:alice`) connecting from `host` may perform `operation`
    /// on resource `name` of `resource_type`.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let mut allowed = false;
        for acl in &self.acls {
            if !acl.covers(resource_type, name)
                || !acl.applies_to(principal, host)
                || !acl.decides(operation)
            {
                continue;
            }
            match acl.permission {
                AclPermissionType::Deny => return false,
                AclPermissionType::Allow => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// KIP-430's bit field: bit `1 << code` set for each of the resource type's supported
    /// operations the principal may perform on that resource.
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        operations_bits(
            resource_type
                .supported_operations()
                .iter()
                .copied()
                .filter(|&op| self.authorize(principal, host, op, resource_type, name)),
        )
    }

    /// Kafka's `authorizeByResourceType` (KIP-679, used by InitProducerId without a
    /// transactional id): whether the principal may perform `operation` on at least one
    /// resource of `resource_type` — some ALLOW binding applies that no DENY binding
    /// applying to the same principal and host overrides (a DENY on the literal wildcard,
    /// a DENY prefix of the allowed name, or a DENY of the same pattern).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let relevant = |acl: &&AclBinding| {
            acl.resource_type == resource_type
                && acl.applies_to(principal, host)
                && acl.decides(operation)
        };
        let denies: Vec<&AclBinding> = self
            .acls
            .iter()
            .filter(relevant)
            .filter(|a| a.permission == AclPermissionType::Deny)
            .collect();
        self.acls
            .iter()
            .filter(relevant)
            .filter(|a| a.permission == AclPermissionType::Allow)
            .any(|allow| {
                !denies.iter().any(|deny| {
                    (deny.pattern_type == PatternType::Literal
                        && deny.resource_name == WILDCARD_RESOURCE)
                        || (deny.pattern_type == PatternType::Prefixed
                            && allow.resource_name.starts_with(&deny.resource_name))
                        || (deny.pattern_type == allow.pattern_type
                            && deny.resource_name == allow.resource_name)
                })
            })
    }
}

/// The KIP-430 bit field of `ops`.
pub fn operations_bits(ops: impl IntoIterator<Item = AclOperation>) -> i32 {
    ops.into_iter()
        .fold(0i32, |bits, op| bits | (1i32 << op.code()))
}

/// The bit field of every supported operation of `resource_type`: what a broker without an
/// authorizer answers (Kafka's `AuthHelper.authorizedOperations` with no authorizer).
pub fn all_operations(resource_type: ResourceType) -> i32 {
    operations_bits(resource_type.supported_operations().iter().copied())
}

/// What a KIP-430 field holds when the client did not ask for it (Kafka: `Int.MinValue`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Parses `super.users`: `User:A;User:B` (spaces around entries ignored, empty ones dropped).
pub fn parse_super_users(text: &str) -> Vec<String> {
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation::*;

    fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: AclOperation,
        permission: AclPermissionType,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.to_string(),
            pattern_type,
            principal: principal.to_string(),
            host: "*".to_string(),
            operation,
            permission,
        }
    }

    fn allow_topic(name: &str, pattern: PatternType, op: AclOperation) -> AclBinding {
        acl(
            ResourceType::Topic,
            name,
            pattern,
            "User:alice",
            op,
            AclPermissionType::Allow,
        )
    }

    fn deny_topic(name: &str, pattern: PatternType, op: AclOperation) -> AclBinding {
        AclBinding {
            permission: AclPermissionType::Deny,
            ..allow_topic(name, pattern, op)
        }
    }

    fn can(authz: &Authorizer, op: AclOperation, topic: &str) -> bool {
        authz.authorize("User:alice", "127.0.0.1", op, ResourceType::Topic, topic)
    }

    #[test]
    fn wire_codes_are_kafkas() {
        assert_eq!(ResourceType::Topic.code(), 2);
        assert_eq!(ResourceType::Group.code(), 3);
        assert_eq!(ResourceType::Cluster.code(), 4);
        assert_eq!(ResourceType::TransactionalId.code(), 5);
        assert_eq!(ResourceType::User.code(), 7);
        assert_eq!(PatternType::Match.code(), 2);
        assert_eq!(PatternType::Literal.code(), 3);
        assert_eq!(PatternType::Prefixed.code(), 4);
        assert_eq!(All.code(), 2);
        assert_eq!(Describe.code(), 8);
        assert_eq!(IdempotentWrite.code(), 12);
        assert_eq!(AclPermissionType::Deny.code(), 2);
        assert_eq!(AclPermissionType::Allow.code(), 3);
        for op in AclOperation::ALL_VALUES {
            assert_eq!(AclOperation::from_code(op.code()), *op);
        }
        assert_eq!(AclOperation::from_code(99), Unknown);
        assert_eq!(ResourceType::from_code(-1), ResourceType::Unknown);
        assert_eq!(
            AclOperation::parse("describe-configs"),
            Some(DescribeConfigs)
        );
        assert_eq!(
            AclOperation::parse("DescribeConfigs"),
            Some(DescribeConfigs)
        );
        assert_eq!(
            ResourceType::parse("transactional_id"),
            Some(ResourceType::TransactionalId)
        );
        assert_eq!(AclOperation::parse("fly"), None);
    }

    #[test]
    fn nothing_is_allowed_without_an_acl() {
        let authz = Authorizer::default();
        assert!(!can(&authz, Read, "t"));
        assert!(!can(&authz, Describe, "t"));
    }

    #[test]
    fn a_literal_allow_allows_that_topic_only() {
        let authz = Authorizer::new([], vec![allow_topic("t", PatternType::Literal, Read)]);
        assert!(can(&authz, Read, "t"));
        assert!(!can(&authz, Read, "t2"));
        assert!(!can(&authz, Write, "t"));
        assert!(!authz.authorize("User:bob", "h", Read, ResourceType::Topic, "t"));
        assert!(!authz.authorize("User:alice", "h", Read, ResourceType::Group, "t"));
    }

    #[test]
    fn deny_beats_allow_whatever_the_order() {
        let allow = allow_topic("t", PatternType::Literal, Read);
        let deny = deny_topic("t", PatternType::Literal, Read);
        for acls in [
            vec![allow.clone(), deny.clone()],
            vec![deny.clone(), allow.clone()],
        ] {
            assert!(!can(&Authorizer::new([], acls), Read, "t"));
        }
        // A prefixed deny beats a literal allow, a literal deny beats an ALL allow.
        let authz = Authorizer::new(
            [],
            vec![
                allow_topic("pay.x", PatternType::Literal, All),
                deny_topic("pay.", PatternType::Prefixed, Write),
            ],
        );
        assert!(!can(&authz, Write, "pay.x"));
        assert!(can(&authz, Read, "pay.x"));
    }

    #[test]
    fn prefixed_patterns_cover_names_that_start_with_them() {
        let authz = Authorizer::new(
            [],
            vec![allow_topic("orders.", PatternType::Prefixed, Read)],
        );
        assert!(can(&authz, Read, "orders."));
        assert!(can(&authz, Read, "orders.eu"));
        assert!(!can(&authz, Read, "order"));
        assert!(!can(&authz, Read, "xorders.eu"));
    }

    #[test]
    fn wildcards_of_resource_principal_and_host() {
        let mut star = allow_topic("*", PatternType::Literal, Read);
        star.principal = WILDCARD_PRINCIPAL.to_string();
        let authz = Authorizer::new([], vec![star.clone()]);
        assert!(authz.authorize("User:bob", "10.0.0.1", Read, ResourceType::Topic, "any"));
        // A prefixed `*` is a prefix of nothing but names starting with `*`.
        let mut prefixed_star = star.clone();
        prefixed_star.pattern_type = PatternType::Prefixed;
        let authz = Authorizer::new([], vec![prefixed_star]);
        assert!(!authz.authorize("User:bob", "h", Read, ResourceType::Topic, "any"));
        // A host restriction.
        let mut from_one = allow_topic("t", PatternType::Literal, Read);
        from_one.host = "10.0.0.1".to_string();
        let authz = Authorizer::new([], vec![from_one]);
        assert!(authz.authorize("User:alice", "10.0.0.1", Read, ResourceType::Topic, "t"));
        assert!(!authz.authorize("User:alice", "10.0.0.2", Read, ResourceType::Topic, "t"));
        // `User:*` matches any principal (Kafka adds the wildcard to every request's set).
        let authz = Authorizer::new([], vec![star]);
        assert!(authz.authorize("Group:ops", "h", Read, ResourceType::Topic, "t"));
    }

    #[test]
    fn allows_imply_describe_but_denies_imply_nothing() {
        for op in [Read, Write, Delete, Alter, All] {
            let authz = Authorizer::new([], vec![allow_topic("t", PatternType::Literal, op)]);
            assert!(can(&authz, Describe, "t"), "{op} implies DESCRIBE");
        }
        for op in [Create, DescribeConfigs, AlterConfigs] {
            let authz = Authorizer::new([], vec![allow_topic("t", PatternType::Literal, op)]);
            assert!(!can(&authz, Describe, "t"), "{op} does not imply DESCRIBE");
        }
        let authz = Authorizer::new(
            [],
            vec![allow_topic("t", PatternType::Literal, AlterConfigs)],
        );
        assert!(can(&authz, DescribeConfigs, "t"));
        assert!(!can(&authz, Alter, "t"));
        let authz = Authorizer::new([], vec![allow_topic("t", PatternType::Literal, Read)]);
        assert!(!can(&authz, Write, "t"), "READ does not imply WRITE");
        // DENY READ leaves an allowed DESCRIBE alone; DENY ALL denies it.
        let authz = Authorizer::new(
            [],
            vec![
                allow_topic("t", PatternType::Literal, Describe),
                deny_topic("t", PatternType::Literal, Read),
            ],
        );
        assert!(can(&authz, Describe, "t"));
        let authz = Authorizer::new(
            [],
            vec![
                allow_topic("t", PatternType::Literal, Describe),
                deny_topic("t", PatternType::Literal, All),
            ],
        );
        assert!(!can(&authz, Describe, "t"));
    }

    #[test]
    fn super_users_pass_even_a_deny() {
        let authz = Authorizer::new(
            parse_super_users(" User:admin ; User:alice;"),
            vec![deny_topic("t", PatternType::Literal, All)],
        );
        assert_eq!(authz.super_users.len(), 2);
        assert!(can(&authz, Write, "t"));
        assert!(authz.authorize(
            "User:admin",
            "h",
            Alter,
            ResourceType::Cluster,
            CLUSTER_NAME
        ));
        assert!(!authz.authorize(
            "User:bob",
            "h",
            Describe,
            ResourceType::Cluster,
            CLUSTER_NAME
        ));
    }

    #[test]
    fn authorized_operations_are_the_kip_430_bit_field() {
        let authz = Authorizer::new([], vec![allow_topic("t", PatternType::Literal, Read)]);
        let bits = authz.authorized_operations("User:alice", "h", ResourceType::Topic, "t");
        assert_eq!(bits, (1 << 3) | (1 << 8), "READ and the implied DESCRIBE");
        assert_eq!(
            authz.authorized_operations("User:bob", "h", ResourceType::Topic, "t"),
            0
        );
        let admin = Authorizer::new(["User:alice".to_string()], vec![]);
        assert_eq!(
            admin.authorized_operations("User:alice", "h", ResourceType::Group, "g"),
            all_operations(ResourceType::Group)
        );
        // Group: READ, DESCRIBE, DELETE. ALL is never a bit of its own.
        assert_eq!(
            all_operations(ResourceType::Group),
            (1 << 3) | (1 << 8) | (1 << 6)
        );
        assert_eq!(
            all_operations(ResourceType::Cluster),
            (1 << 5) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 7) | (1 << 8)
        );
        assert_eq!(all_operations(ResourceType::Topic) & (1 << 2), 0);
    }

    #[test]
    fn authorize_any_for_idempotent_producers() {
        let authz = Authorizer::new([], vec![allow_topic("p.", PatternType::Prefixed, Write)]);
        assert!(authz.authorize_any("User:alice", "h", Write, ResourceType::Topic));
        assert!(!authz.authorize_any("User:bob", "h", Write, ResourceType::Topic));
        let authz = Authorizer::new(
            [],
            vec![
                allow_topic("p.x", PatternType::Literal, Write),
                deny_topic("p.", PatternType::Prefixed, Write),
            ],
        );
        assert!(!authz.authorize_any("User:alice", "h", Write, ResourceType::Topic));
        let authz = Authorizer::new([], vec![allow_topic("p.x", PatternType::Literal, Read)]);
        assert!(!authz.authorize_any("User:alice", "h", Write, ResourceType::Topic));
    }

    #[test]
    fn create_acls_validation() {
        let good = allow_topic("t", PatternType::Literal, Read);
        assert_eq!(good.validate(), Ok(()));
        let cases = [
            AclBinding {
                resource_type: ResourceType::Any,
                ..good.clone()
            },
            AclBinding {
                resource_type: ResourceType::Unknown,
                ..good.clone()
            },
            AclBinding {
                pattern_type: PatternType::Match,
                ..good.clone()
            },
            AclBinding {
                pattern_type: PatternType::Any,
                ..good.clone()
            },
            AclBinding {
                pattern_type: PatternType::Unknown,
                ..good.clone()
            },
            AclBinding {
                operation: Any,
                ..good.clone()
            },
            AclBinding {
                permission: AclPermissionType::Any,
                ..good.clone()
            },
            AclBinding {
                resource_name: String::new(),
                ..good.clone()
            },
            AclBinding {
                principal: "alice".to_string(),
                ..good.clone()
            },
            AclBinding {
                principal: "User:".to_string(),
                ..good.clone()
            },
            AclBinding {
                resource_type: ResourceType::Cluster,
                resource_name: "other".to_string(),
                ..good.clone()
            },
        ];
        for bad in cases {
            let error = bad.validate().expect_err("must be refused");
            assert_eq!(error.code, 42, "{bad:?}");
        }
        let cluster = AclBinding {
            resource_type: ResourceType::Cluster,
            resource_name: CLUSTER_NAME.to_string(),
            ..good
        };
        assert_eq!(cluster.validate(), Ok(()));
    }

    #[test]
    fn filters_match_as_kafka_defines() {
        let literal = allow_topic("orders", PatternType::Literal, Read);
        let wildcard = allow_topic("*", PatternType::Literal, Read);
        let prefixed = allow_topic("ord", PatternType::Prefixed, Write);
        let group = acl(
            ResourceType::Group,
            "orders",
            PatternType::Literal,
            "User:bob",
            Read,
            AclPermissionType::Deny,
        );
        let all = [&literal, &wildcard, &prefixed, &group];
        let selected = |filter: &AclBindingFilter| -> Vec<&AclBinding> {
            all.iter().copied().filter(|b| filter.matches(b)).collect()
        };
        assert_eq!(selected(&AclBindingFilter::any()).len(), 4);
        let topics = AclBindingFilter {
            resource_type: ResourceType::Topic,
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&topics).len(), 3);
        // ANY pattern with a name: exact name equality, any pattern type.
        let named = AclBindingFilter {
            resource_name: Some("orders".to_string()),
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&named), vec![&literal, &group]);
        // LITERAL pattern with a name: exact match of both.
        let literal_filter = AclBindingFilter {
            resource_name: Some("ord".to_string()),
            pattern_type: PatternType::Literal,
            ..AclBindingFilter::any()
        };
        assert!(selected(&literal_filter).is_empty());
        let prefixed_filter = AclBindingFilter {
            pattern_type: PatternType::Prefixed,
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&prefixed_filter), vec![&prefixed]);
        // MATCH: what applies to topic "orders": the literal, the wildcard and the prefix.
        let matching = AclBindingFilter {
            resource_type: ResourceType::Topic,
            resource_name: Some("orders".to_string()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&matching), vec![&literal, &wildcard, &prefixed]);
        let matching_other = AclBindingFilter {
            resource_name: Some("x".to_string()),
            ..matching.clone()
        };
        assert_eq!(selected(&matching_other), vec![&wildcard]);
        // Entry fields.
        let bob = AclBindingFilter {
            principal: Some("User:bob".to_string()),
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&bob), vec![&group]);
        let denies = AclBindingFilter {
            permission: AclPermissionType::Deny,
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&denies), vec![&group]);
        let writes = AclBindingFilter {
            operation: Write,
            ..AclBindingFilter::any()
        };
        assert_eq!(selected(&writes), vec![&prefixed]);
        let host = AclBindingFilter {
            host: Some("10.0.0.1".to_string()),
            ..AclBindingFilter::any()
        };
        assert!(selected(&host).is_empty());
    }

    #[test]
    fn unknown_filters_are_refused() {
        let ok = AclBindingFilter::any();
        assert!(ok.validate().is_ok());
        for bad in [
            AclBindingFilter {
                resource_type: ResourceType::Unknown,
                ..ok.clone()
            },
            AclBindingFilter {
                pattern_type: PatternType::Unknown,
                ..ok.clone()
            },
            AclBindingFilter {
                operation: Unknown,
                ..ok.clone()
            },
            AclBindingFilter {
                permission: AclPermissionType::Unknown,
                ..ok.clone()
            },
        ] {
            assert_eq!(bad.validate().map_err(|e| e.code), Err(42));
        }
    }

    #[test]
    fn json_and_storage_key_round_trip() {
        let binding = allow_topic("a/b%c", PatternType::Prefixed, DescribeConfigs);
        let json = serde_json::to_string(&binding).expect("serializes");
        assert!(json.contains("\"DESCRIBE_CONFIGS\""), "{json}");
        assert!(json.contains("\"PREFIXED\""), "{json}");
        let back: AclBinding = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, binding);
        let key = binding.storage_key();
        assert!(!key.contains("a/b"), "names are encoded: {key}");
        assert_eq!(key, binding.clone().storage_key());
        let other = AclBinding {
            host: "h".to_string(),
            ..binding
        };
        assert_ne!(other.storage_key(), key);
    }
}
