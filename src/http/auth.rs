//! Who calls the HTTP API, and what they may do: the same users and ACLs as the Kafka
//! listeners.
//!
//! A caller proves who it is with HTTP Basic credentials (a user of the SCRAM store,
//! checked exactly as SASL/PLAIN checks them) or with a client certificate on the HTTPS
//! listener (mapped by `ssl.principal.mapping.rules`, as on an SSL listener). Basic wins
//! when both are present. A caller with neither is `User:ANONYMOUS`, as a PLAINTEXT Kafka
//! client is, unless `--http-auth required`.
//!
//! Answers follow HTTP's split: 401 (with `WWW-Authenticate`) when credentials are
//! missing or wrong, or when an anonymous caller is refused by the ACLs (authenticating
//! might help); 403 when an authenticated caller lacks the permission.
//!
//! Checking a password costs a PBKDF2 derivation (4096+ iterations), too much for every
//! request of a client that sends Basic credentials each time; [`VerifiedPasswords`]
//! remembers passwords already verified against the credential they matched.

use crate::metrics::AuthFailure;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use super::error::ApiError;
use super::listener::HttpPeer;
use super::state::{group_of, HttpApi};
use crate::api::context::Principal;
use crate::cluster::TopicSpec;
use crate::replication::TopicReplicas;
use crate::security::access::AccessControl;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};

/// The `listener` label of the HTTP API's authentication metrics.
pub const LISTENER: &str = "HTTP";

/// The caller of one HTTP request, as the ACLs name it.
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Principal,
    /// `Type:name`, what ACLs match.
    principal_name: String,
    /// The client's IP address, what an ACL's host matches.
    host: String,
}

impl Caller {
    fn new(principal: Principal, peer: SocketAddr) -> Self {
        Self {
            principal_name: principal.kafka_name(),
            principal,
            host: peer.ip().to_string(),
        }
    }

    fn authenticated(&self) -> bool {
        !matches!(self.principal, Principal::Anonymous)
    }

    /// Whether the caller may perform `operation` on the resource (always, without an
    /// authorizer).
    pub fn may(
        &self,
        access: &AccessControl,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        access.authorizer().is_none_or(|authorizer| {
            authorizer.authorize(
                &self.principal_name,
                &self.host,
                operation,
                resource_type,
                name,
            )
        })
    }

    /// `Ok` when the caller may perform `operation` on `name`, else the refusal: 401
    /// for an anonymous caller, 403 for an authenticated one. `what` names the resource
    /// in the message (never a topic name the caller could not learn otherwise).
    pub fn require(
        &self,
        access: &AccessControl,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
        what: &str,
    ) -> Result<(), ApiError> {
        if self.may(access, operation, resource_type, name) {
            return Ok(());
        }
        Err(self.refusal(what))
    }

    /// `require` on the cluster.
    pub fn may_on_cluster(&self, access: &AccessControl, operation: AclOperation) -> bool {
        self.may(access, operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// The answer to a call the ACLs refuse.
    pub fn refusal(&self, what: &str) -> ApiError {
        match self.authenticated() {
            true => ApiError::forbidden(format!(
                "{} is not authorized to access {what}",
                self.principal_name
            )),
            false => ApiError::unauthorized(format!(
                "not authorized to access {what} without credentials"
            )),
        }
    }
}

/// What an `Authorization` header says.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    None,
    Basic {
        user: String,
        password: String,
    },
    /// Present but not Basic, or not decodable.
    Malformed,
}

fn credentials(headers: &HeaderMap) -> Credentials {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Credentials::None;
    };
    let Some((scheme, encoded)) = value.to_str().ok().and_then(|v| v.trim().split_once(' ')) else {
        return Credentials::Malformed;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Credentials::Malformed;
    }
    let decoded = BASE64
        .decode(encoded.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok());
    match decoded.as_deref().and_then(|text| text.split_once(':')) {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Credentials::Basic {
            user: user.to_string(),
            password: password.to_string(),
        },
        _ => Credentials::Malformed,
    }
}

/// The middleware that names the caller of every request (a [`Caller`] extension) or
/// answers 401.
pub async fn authenticate(
    State(api): State<Arc<HttpApi>>,
    ConnectInfo(peer): ConnectInfo<HttpPeer>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let principal = match credentials(request.headers()) {
        Credentials::Basic { user, password } => {
            let store = &*api.services.store;
            let lookup = |u: &str| crate::api::security::credential_lookup(store, u, None);
            if !api.verified.check(&user, &password, lookup) {
                return failed(&peer, Some(&user), AuthFailure::Credentials);
            }
            metrics::counter!(crate::metrics::SASL_AUTHENTICATIONS_TOTAL, "mechanism" => "HTTP-BASIC")
                .increment(1);
            Principal::User(user)
        }
        Credentials::Malformed => return failed(&peer, None, AuthFailure::Malformed),
        Credentials::None => match &peer.tls_user {
            Some(user) => Principal::User(user.clone()),
            None if api.require_auth && request.uri().path() != "/openapi.json" => {
                return ApiError::unauthorized("credentials required").into_response()
            }
            None => Principal::Anonymous,
        },
    };
    request
        .extensions_mut()
        .insert(Caller::new(principal, peer.addr));
    next.run(request).await
}

fn failed(peer: &HttpPeer, user: Option<&str>, reason: AuthFailure) -> Response {
    crate::metrics::authentication_failed(LISTENER, reason);
    tracing::info!(peer = %peer.addr, user, reason = reason.label(), "HTTP API authentication failed");
    ApiError::unauthorized("invalid credentials").into_response()
}

impl ApiError {
    pub(super) fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::UNAUTHORIZED,
            message: message.into(),
            field: None,
            transient: false,
        }
    }

    pub(super) fn forbidden(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::FORBIDDEN,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
}

impl HttpApi {
    /// The topic with id `id`, for a caller who wants to perform `operation` on it.
    /// With an authorizer, a caller refused on the topic gets the same answer whether
    /// it exists or not (Kafka's rule: who may not DESCRIBE a topic cannot learn that it
    /// exists); only a caller who may DESCRIBE the cluster is told 404.
    pub(super) async fn topic_for(
        &self,
        caller: &Caller,
        id: i64,
        operation: AclOperation,
    ) -> Result<(TopicSpec, Arc<TopicReplicas>), ApiError> {
        let access = &self.services.access;
        let what = || format!("topic_id {id}");
        match self.topic(id).await {
            Ok((spec, replicas)) => {
                caller.require(access, operation, ResourceType::Topic, &spec.name, &what())?;
                Ok((spec, replicas))
            }
            Err(e)
                if e.code == StatusCode::NOT_FOUND
                    && !caller.may_on_cluster(access, AclOperation::Describe) =>
            {
                Err(caller.refusal(&what()))
            }
            Err(e) => Err(e),
        }
    }

    /// The consumer group of `consumer_id`, if the caller may READ it (as JoinGroup and
    /// OffsetCommit require of a Kafka consumer).
    pub(super) fn group_for(&self, caller: &Caller, consumer_id: i64) -> Result<String, ApiError> {
        let group = group_of(consumer_id);
        let what = format!("consumer_id {consumer_id}");
        caller.require(
            &self.services.access,
            AclOperation::Read,
            ResourceType::Group,
            &group,
            &what,
        )?;
        Ok(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().expect("header"));
        headers
    }

    #[test]
    fn basic_credentials_are_read_and_anything_else_is_malformed() {
        assert_eq!(credentials(&HeaderMap::new()), Credentials::None);
        // RFC 7617's example: Aladdin / open sesame.
        assert_eq!(
            credentials(&basic("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")),
            Credentials::Basic {
                user: "Aladdin".into(),
                password: "open sesame".into()
            }
        );
        let colon_in_password = format!("basic {}", BASE64.encode("u:a:b"));
        assert_eq!(
            credentials(&basic(&colon_in_password)),
            Credentials::Basic {
                user: "u".into(),
                password: "a:b".into()
            }
        );
        for bad in [
            "Bearer abc".to_string(),
            "Basic !!!".to_string(),
            "Basic".to_string(),
            format!("Basic {}", BASE64.encode("nocolon")),
            format!("Basic {}", BASE64.encode(":password")),
            format!("Basic {}", BASE64.encode("user:")),
        ] {
            assert_eq!(credentials(&basic(&bad)), Credentials::Malformed, "{bad}");
        }
    }
}
