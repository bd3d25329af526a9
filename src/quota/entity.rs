//! Who a client quota is for (KIP-546's entities) and which configured entity a
//! request's user and client id fall under (KIP-55 / KIP-257's precedence). Pure.

use std::collections::BTreeMap;

/// An entity type's name: a named user, client id or address, or `<default>`, which
/// stands for each one that has no entity of its own (each on its own, not together).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// From the wire, where a null name is the default entity.
    pub fn from_wire(name: Option<&str>) -> Self {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(name) => Some(name),
        }
    }
}

impl std::fmt::Display for EntityName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntityName::Default => f.write_str("<default>"),
            EntityName::Named(name) => f.write_str(name),
        }
    }
}

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// One quota entity: a user, a client id, both, or an address (never with the others).
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct QuotaEntity {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub user: Option<EntityName>,
    #[serde(rename = "client-id", skip_serializing_if = "Option::is_none", default)]
    pub client_id: Option<EntityName>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ip: Option<EntityName>,
}

/// A refused entity or value, in Kafka's words (INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuotaError(pub String);

impl QuotaEntity {
    pub fn user(name: EntityName) -> Self {
        Self {
            user: Some(name),
            ..Self::default()
        }
    }

    pub fn client_id(name: EntityName) -> Self {
        Self {
            client_id: Some(name),
            ..Self::default()
        }
    }

    /// Builds an entity from (type, name) pairs as AlterClientQuotas sends them,
    /// refusing what Kafka's `ClientQuotaControlManager.validateEntity` refuses.
    pub fn from_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Self, QuotaError> {
        let mut entity = QuotaEntity::default();
        let mut any = false;
        for (kind, name) in parts {
            any = true;
            let slot = match kind {
                USER => &mut entity.user,
                CLIENT_ID => &mut entity.client_id,
                IP => &mut entity.ip,
                other => {
                    return Err(QuotaError(format!(
                        "Unhandled client quota entity type: {other}"
                    )))
                }
            };
            if slot.is_some() {
                return Err(QuotaError(format!(
                    "Invalid client quota entity, duplicate entity entry {kind}"
                )));
            }
            if name == Some("") {
                return Err(QuotaError(format!("Empty {kind} not supported")));
            }
            *slot = Some(EntityName::from_wire(name));
        }
        if !any {
            return Err(QuotaError("Invalid empty client quota entity".into()));
        }
        if entity.ip.is_some() && (entity.user.is_some() || entity.client_id.is_some()) {
            return Err(QuotaError(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
                    .into(),
            ));
        }
        if let Some(EntityName::Named(ip)) = &entity.ip {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(QuotaError(format!(
                    "{ip} is not a valid IP or resolvable host."
                )));
            }
        }
        Ok(entity)
    }

    /// (type, name) pairs in Kafka's order, as DescribeClientQuotas answers them.
    pub fn parts(&self) -> Vec<(&'static str, &EntityName)> {
        let mut parts = Vec::with_capacity(2);
        if let Some(name) = &self.user {
            parts.push((USER, name));
        }
        if let Some(name) = &self.client_id {
            parts.push((CLIENT_ID, name));
        }
        if let Some(name) = &self.ip {
            parts.push((IP, name));
        }
        parts
    }

    /// The entity as one string for the metadata store (a JSON object: unambiguous
    /// whatever the names hold).
    pub fn storage_key(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_storage_key(key: &str) -> Option<Self> {
        serde_json::from_str(key).ok()
    }

    /// The config keys this kind of entity takes.
    pub fn kinds(&self) -> &'static [QuotaKind] {
        if self.ip.is_some() {
            &[QuotaKind::ConnectionCreationRate]
        } else {
            &[
                QuotaKind::ProducerByteRate,
                QuotaKind::ConsumerByteRate,
                QuotaKind::RequestPercentage,
                QuotaKind::ControllerMutationRate,
            ]
        }
    }
}

impl std::fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .parts()
            .into_iter()
            .map(|(kind, name)| format!("{kind}={name}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// A quota config key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaKind {
    ProducerByteRate,
    ConsumerByteRate,
    RequestPercentage,
    ControllerMutationRate,
    ConnectionCreationRate,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 5] = [
        QuotaKind::ProducerByteRate,
        QuotaKind::ConsumerByteRate,
        QuotaKind::RequestPercentage,
        QuotaKind::ControllerMutationRate,
        QuotaKind::ConnectionCreationRate,
    ];

    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::ProducerByteRate => "producer_byte_rate",
            QuotaKind::ConsumerByteRate => "consumer_byte_rate",
            QuotaKind::RequestPercentage => "request_percentage",
            QuotaKind::ControllerMutationRate => "controller_mutation_rate",
            QuotaKind::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.key() == key)
    }

    /// Whether the value must be whole (Kafka's LONG and INT quota configs).
    fn integral(self) -> Option<(f64, &'static str)> {
        match self {
            QuotaKind::ProducerByteRate | QuotaKind::ConsumerByteRate => {
                Some((i64::MAX as f64, "a LONG"))
            }
            QuotaKind::ConnectionCreationRate => Some((i32::MAX as f64, "an INT")),
            QuotaKind::RequestPercentage | QuotaKind::ControllerMutationRate => None,
        }
    }
}

/// Checks one value set on `entity`, as Kafka's `validateQuotaKeyValue` does.
pub fn validate_value(
    entity: &QuotaEntity,
    key: &str,
    value: f64,
) -> Result<QuotaKind, QuotaError> {
    let kind = QuotaKind::from_key(key)
        .filter(|kind| entity.kinds().contains(kind))
        .ok_or_else(|| QuotaError(format!("Invalid configuration key {key}")))?;
    if value.is_nan() || value <= 0.0 {
        return Err(QuotaError(format!("Quota {key} must be greater than 0")));
    }
    if let Some((max, type_name)) = kind.integral() {
        if value > max {
            return Err(QuotaError(format!(
                "Proposed value for {key} is too large for {type_name}."
            )));
        }
        if (value % 1.0).abs() > 1e-6 {
            return Err(QuotaError(format!("{key} cannot be a fractional value.")));
        }
    }
    Ok(kind)
}

/// The quotas in force, by entity: what `MetadataStore::client_quotas` holds, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaTable {
    entities: BTreeMap<QuotaEntity, BTreeMap<QuotaKind, f64>>,
}

/// The rate a quota counts against: the matched entity with its default parts
/// replaced by the request's own user and client id and its absent parts empty, as
/// Kafka's metric tags name it. `<default>` client ids each get their own bucket;
/// a user's quota is shared by all of that user's client ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    pub user: String,
    pub client_id: String,
}

impl QuotaTable {
    /// From the store's entries (storage key → config key → value); entries that do
    /// not parse are skipped (and logged), never fatal.
    pub fn from_stored(stored: &BTreeMap<String, BTreeMap<String, String>>) -> Self {
        let mut entities = BTreeMap::new();
        for (key, values) in stored {
            let Some(entity) = QuotaEntity::from_storage_key(key) else {
                tracing::warn!(
                    key,
                    "skipping a stored client quota entity that does not parse"
                );
                continue;
            };
            let values: BTreeMap<QuotaKind, f64> = values
                .iter()
                .filter_map(|(k, v)| Some((QuotaKind::from_key(k)?, v.parse().ok()?)))
                .collect();
            if !values.is_empty() {
                entities.insert(entity, values);
            }
        }
        Self { entities }
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    /// Every entity and its values.
    pub fn entities(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<QuotaKind, f64>)> {
        self.entities.iter()
    }

    fn value(
        &self,
        user: Option<&EntityName>,
        client_id: Option<&EntityName>,
        kind: QuotaKind,
    ) -> Option<f64> {
        let entity = QuotaEntity {
            user: user.cloned(),
            client_id: client_id.cloned(),
            ip: None,
        };
        self.entities.get(&entity)?.get(&kind).copied()
    }

    /// The quota of `kind` for a request of `user` (the principal's name) and
    /// `client_id`, and the bucket it counts against: the first entity of Kafka's
    /// order that sets `kind` (`/config/users/<user>/clients/<client-id>`, then
    /// `<user>/clients/<default>`, `<user>`, `<default>/clients/<client-id>`,
    /// `<default>/clients/<default>`, `<default>`, `/config/clients/<client-id>`,
    /// `/config/clients/<default>`).
    pub fn resolve(&self, kind: QuotaKind, user: &str, client_id: &str) -> Option<(f64, Bucket)> {
        /// Which of the request's names the bucket keeps.
        enum Keeps {
            Both,
            User,
            ClientId,
        }
        let named_user = EntityName::Named(user.to_string());
        let named_client = EntityName::Named(client_id.to_string());
        let default = EntityName::Default;
        let order = [
            (Some(&named_user), Some(&named_client), Keeps::Both),
            (Some(&named_user), Some(&default), Keeps::Both),
            (Some(&named_user), None, Keeps::User),
            (Some(&default), Some(&named_client), Keeps::Both),
            (Some(&default), Some(&default), Keeps::Both),
            (Some(&default), None, Keeps::User),
            (None, Some(&named_client), Keeps::ClientId),
            (None, Some(&default), Keeps::ClientId),
        ];
        let (quota, keeps) = order
            .into_iter()
            .find_map(|(u, c, keeps)| Some((self.value(u, c, kind)?, keeps)))?;
        let (user, client_id) = match keeps {
            Keeps::Both => (user, client_id),
            Keeps::User => (user, ""),
            Keeps::ClientId => ("", client_id),
        };
        Some((
            quota,
            Bucket {
                user: user.to_string(),
                client_id: client_id.to_string(),
            },
        ))
    }

    /// The `connection_creation_rate` for connections from `ip`: its own, else the
    /// `<default>` address's.
    pub fn connection_rate(&self, ip: std::net::IpAddr) -> Option<f64> {
        let named = QuotaEntity {
            ip: Some(EntityName::Named(ip.to_string())),
            ..QuotaEntity::default()
        };
        let default = QuotaEntity {
            ip: Some(EntityName::Default),
            ..QuotaEntity::default()
        };
        [named, default].iter().find_map(|entity| {
            self.entities
                .get(entity)?
                .get(&QuotaKind::ConnectionCreationRate)
                .copied()
        })
    }
}

/// A DescribeClientQuotas filter (Kafka's `ClientQuotasImage.describe`): entity types
/// matched exactly (a name, or `None` for `<default>`) or only required present, and
/// with `strict`, no other types.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaFilter {
    exact: Vec<(&'static str, Option<String>)>,
    present: Vec<&'static str>,
    strict: bool,
}

/// A refused filter: Kafka answers UNSUPPORTED_VERSION for an unknown entity type and
/// INVALID_REQUEST for the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    UnknownType(String),
    Invalid(String),
}

/// DescribeClientQuotas match types.
pub const MATCH_EXACT: i8 = 0;
pub const MATCH_DEFAULT: i8 = 1;
pub const MATCH_SPECIFIED: i8 = 2;

impl QuotaFilter {
    /// From the request's components: (entity type, match type, match).
    pub fn new<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<Self, FilterError> {
        let invalid = |m: String| Err(FilterError::Invalid(m));
        let mut filter = QuotaFilter {
            strict,
            ..QuotaFilter::default()
        };
        for (kind, match_type, name) in components {
            if kind.is_empty() {
                return invalid("Invalid empty entity type.".into());
            }
            let seen =
                filter.exact.iter().any(|(k, _)| *k == kind) || filter.present.contains(&kind);
            if seen {
                return invalid(format!(
                    "Entity type {kind} cannot appear more than once in the filter."
                ));
            }
            let kind = match kind {
                USER => USER,
                CLIENT_ID => CLIENT_ID,
                IP => IP,
                other => {
                    return Err(FilterError::UnknownType(format!(
                        "Unsupported entity type {other}"
                    )))
                }
            };
            match (match_type, name) {
                (MATCH_EXACT, Some(name)) => filter.exact.push((kind, Some(name.to_string()))),
                (MATCH_EXACT, None) => {
                    return invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    )
                }
                (MATCH_DEFAULT, None) => filter.exact.push((kind, None)),
                (MATCH_DEFAULT, Some(_)) => {
                    return invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                            .into(),
                    )
                }
                (MATCH_SPECIFIED, None) => filter.present.push(kind),
                (MATCH_SPECIFIED, Some(_)) => return invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ),
                (other, _) => return invalid(format!("Unknown match type {other}")),
            }
        }
        let mentions = |kind: &str| {
            filter.exact.iter().any(|(k, _)| *k == kind) || filter.present.contains(&kind)
        };
        if mentions(IP) && (mentions(USER) || mentions(CLIENT_ID)) {
            return invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component."
                    .into(),
            );
        }
        Ok(filter)
    }

    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        let parts = entity.parts();
        let name_of = |kind: &str| parts.iter().find(|(k, _)| *k == kind).map(|(_, n)| *n);
        if self.strict && parts.len() != self.exact.len() + self.present.len() {
            return false;
        }
        self.exact
            .iter()
            .all(|(kind, want)| name_of(kind).is_some_and(|name| name.to_wire() == want.as_deref()))
            && self.present.iter().all(|kind| name_of(kind).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(QuotaEntity, &str, f64)]) -> QuotaTable {
        let mut stored: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (entity, key, value) in entries {
            stored
                .entry(entity.storage_key())
                .or_default()
                .insert(key.to_string(), value.to_string());
        }
        QuotaTable::from_stored(&stored)
    }

    fn named(name: &str) -> EntityName {
        EntityName::Named(name.into())
    }

    fn both(user: EntityName, client: EntityName) -> QuotaEntity {
        QuotaEntity {
            user: Some(user),
            client_id: Some(client),
            ip: None,
        }
    }

    #[test]
    fn the_most_specific_entity_that_sets_the_kind_wins_in_kafkas_order() {
        let produce = "producer_byte_rate";
        let t = table(&[
            (QuotaEntity::client_id(EntityName::Default), produce, 8.0),
            (QuotaEntity::client_id(named("c")), produce, 7.0),
            (QuotaEntity::user(EntityName::Default), produce, 6.0),
            (both(EntityName::Default, EntityName::Default), produce, 5.0),
            (both(EntityName::Default, named("c")), produce, 4.0),
            (QuotaEntity::user(named("u")), produce, 3.0),
            (both(named("u"), EntityName::Default), produce, 2.0),
            (both(named("u"), named("c")), produce, 1.0),
        ]);
        let k = QuotaKind::ProducerByteRate;
        assert_eq!(t.resolve(k, "u", "c").map(|r| r.0), Some(1.0));
        assert_eq!(t.resolve(k, "u", "other").map(|r| r.0), Some(2.0));
        assert_eq!(t.resolve(k, "v", "c").map(|r| r.0), Some(4.0));
        assert_eq!(t.resolve(k, "v", "other").map(|r| r.0), Some(5.0));
        assert_eq!(t.resolve(QuotaKind::ConsumerByteRate, "u", "c"), None);
    }

    #[test]
    fn a_user_quota_is_shared_by_its_clients_and_a_default_client_quota_is_not() {
        let t = table(&[
            (QuotaEntity::user(named("u")), "consumer_byte_rate", 10.0),
            (
                QuotaEntity::client_id(EntityName::Default),
                "producer_byte_rate",
                20.0,
            ),
        ]);
        let (_, a) = t
            .resolve(QuotaKind::ConsumerByteRate, "u", "a")
            .expect("valid in the test");
        let (_, b) = t
            .resolve(QuotaKind::ConsumerByteRate, "u", "b")
            .expect("valid in the test");
        assert_eq!(a, b);
        assert_eq!(a.client_id, "");
        let (_, a) = t
            .resolve(QuotaKind::ProducerByteRate, "u", "a")
            .expect("valid in the test");
        let (_, b) = t
            .resolve(QuotaKind::ProducerByteRate, "u", "b")
            .expect("valid in the test");
        assert_ne!(a, b);
        assert_eq!(a.user, "");
    }

    #[test]
    fn entities_are_checked_as_kafka_checks_them() {
        let err = |parts: &[(&str, Option<&str>)]| {
            QuotaEntity::from_parts(parts.iter().copied())
                .expect_err("refused")
                .0
        };
        assert_eq!(err(&[]), "Invalid empty client quota entity");
        assert_eq!(
            err(&[("group", Some("g"))]),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(
            err(&[("user", Some("a")), ("user", Some("b"))]),
            "Invalid client quota entity, duplicate entity entry user"
        );
        assert_eq!(err(&[("user", Some(""))]), "Empty user not supported");
        assert!(
            err(&[("ip", None), ("user", None)]).starts_with("Invalid quota entity combination")
        );
        assert_eq!(
            err(&[("ip", Some("x y"))]),
            "x y is not a valid IP or resolvable host."
        );
        let entity = QuotaEntity::from_parts([("client-id", Some("c")), ("user", None)])
            .expect("valid in the test");
        assert_eq!(entity, both(EntityName::Default, named("c")));
        assert_eq!(
            QuotaEntity::from_storage_key(&entity.storage_key()),
            Some(entity)
        );
    }

    #[test]
    fn values_are_checked_as_kafka_checks_them() {
        let user = QuotaEntity::user(named("u"));
        let ip = QuotaEntity {
            ip: Some(EntityName::Default),
            ..QuotaEntity::default()
        };
        let err =
            |e: &QuotaEntity, k: &str, v: f64| validate_value(e, k, v).expect_err("refused").0;
        assert_eq!(err(&user, "nope", 1.0), "Invalid configuration key nope");
        assert_eq!(
            err(&user, "connection_creation_rate", 1.0),
            "Invalid configuration key connection_creation_rate"
        );
        assert_eq!(
            err(&ip, "producer_byte_rate", 1.0),
            "Invalid configuration key producer_byte_rate"
        );
        assert_eq!(
            err(&user, "producer_byte_rate", 0.0),
            "Quota producer_byte_rate must be greater than 0"
        );
        assert_eq!(
            err(&user, "producer_byte_rate", 1.5),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(
            err(&ip, "connection_creation_rate", 3e9),
            "Proposed value for connection_creation_rate is too large for an INT."
        );
        assert!(validate_value(&user, "request_percentage", 12.5).is_ok());
    }

    #[test]
    fn filters_match_as_kafkas_describe_does() {
        let alice = QuotaEntity::user(named("alice"));
        let alice_c = both(named("alice"), named("c"));
        let default_user = QuotaEntity::user(EntityName::Default);
        let f = |c: &[(&str, i8, Option<&str>)], strict| {
            QuotaFilter::new(c.iter().copied(), strict).expect("valid in the test")
        };
        let exact = f(&[("user", MATCH_EXACT, Some("alice"))], false);
        assert!(exact.matches(&alice) && exact.matches(&alice_c) && !exact.matches(&default_user));
        let strict = f(&[("user", MATCH_EXACT, Some("alice"))], true);
        assert!(strict.matches(&alice) && !strict.matches(&alice_c));
        let default = f(&[("user", MATCH_DEFAULT, None)], false);
        assert!(default.matches(&default_user) && !default.matches(&alice));
        let specified = f(&[("client-id", MATCH_SPECIFIED, None)], false);
        assert!(specified.matches(&alice_c) && !specified.matches(&alice));
        assert!(f(&[], false).matches(&alice));
        assert!(!f(&[], true).matches(&alice));
        let err = |c: &[(&str, i8, Option<&str>)]| {
            QuotaFilter::new(c.iter().copied(), false).expect_err("refused")
        };
        assert_eq!(
            err(&[("group", 0, Some("g"))]),
            FilterError::UnknownType("Unsupported entity type group".into())
        );
        assert!(matches!(err(&[("user", 0, None)]), FilterError::Invalid(_)));
        assert!(matches!(
            err(&[("user", 2, None), ("user", 1, None)]),
            FilterError::Invalid(_)
        ));
        assert!(matches!(
            err(&[("ip", 2, None), ("user", 1, None)]),
            FilterError::Invalid(_)
        ));
        assert!(matches!(err(&[("user", 7, None)]), FilterError::Invalid(_)));
    }

    #[test]
    fn an_address_has_its_own_connection_rate_or_the_default_one() {
        let ip = |name: EntityName| QuotaEntity {
            ip: Some(name),
            ..QuotaEntity::default()
        };
        let t = table(&[
            (ip(EntityName::Default), "connection_creation_rate", 5.0),
            (ip(named("127.0.0.2")), "connection_creation_rate", 1.0),
        ]);
        assert_eq!(
            t.connection_rate("127.0.0.2".parse().expect("valid in the test")),
            Some(1.0)
        );
        assert_eq!(
            t.connection_rate("127.0.0.3".parse().expect("valid in the test")),
            Some(5.0)
        );
    }
}
