//! AlterUserScramCredentials (key 51, v0): upsert or delete users' SCRAM credentials.
//! The client salts the password itself; the broker derives the stored and server keys
//! from the salted password and keeps only those (Kafka's `ScramControlManager`), in the
//! metadata store, so every broker of a cluster accepts the user at once.
//!
//! Validation follows Kafka: a user named twice in one request (in either list) gets
//! DUPLICATE_RESOURCE, an empty name or too few/many iterations UNACCEPTABLE_CREDENTIAL,
//! an unknown mechanism UNSUPPORTED_SASL_MECHANISM, deleting what does not exist
//! RESOURCE_NOT_FOUND. Each user's result is independent.
//!
//! With an authorizer the request needs ALTER on the cluster; without it every named
//! user, once and sorted, answers CLUSTER_AUTHORIZATION_FAILED (Kafka's
//! `AlterUserScramCredentialsRequest.getErrorResponse`).

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;

use crate::api::context::RequestContext;
use crate::api::str_bytes;
use crate::security::acl::AclOperation;
use crate::security::credentials::{ScramCredential, ScramMechanism, StoredScramCredential};

/// One validated change.
#[derive(Debug)]
enum Change {
    Delete(ScramMechanism),
    Upsert(ScramMechanism, StoredScramCredential),
}

type Refusal = (ResponseError, &'static str);

pub async fn handle(
    ctx: &RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    if !ctx.authorize_cluster(AclOperation::Alter) {
        return refused(&request);
    }
    let store = &ctx.services.store;
    let exists = |user: &str, m: ScramMechanism| store.scram_credential(user, m).is_some();
    let mut results = Vec::new();
    for (user, change) in plan(&request, exists) {
        let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(user.clone()));
        let outcome = match change {
            Ok(Change::Delete(m)) => store.set_scram_credential(&user, m, None).await,
            Ok(Change::Upsert(m, credential)) => {
                store.set_scram_credential(&user, m, Some(credential)).await
            }
            Err((code, message)) => {
                results.push(
                    result
                        .with_error_code(code.code())
                        .with_error_message(Some(str_bytes(message))),
                );
                continue;
            }
        };
        results.push(match outcome {
            Ok(()) => {
                tracing::info!(user, peer = %ctx.peer, "SCRAM credential altered");
                result
            }
            Err(error) => result
                .with_error_code(ResponseError::UnknownServerError.code())
                .with_error_message(Some(str_bytes(error.to_string()))),
        });
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// The answer to a request without ALTER on the cluster: each user named in either
/// list once, in name order.
fn refused(request: &AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let error = ResponseError::ClusterAuthorizationFailed;
    let users: std::collections::BTreeSet<&str> = request
        .deletions
        .iter()
        .map(|d| d.name.as_str())
        .chain(request.upsertions.iter().map(|u| u.name.as_str()))
        .collect();
    let results = users
        .into_iter()
        .map(|user| {
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes(user))
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(error.to_string())))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Each named user's validated change, or why it is refused.
fn plan(
    request: &AlterUserScramCredentialsRequest,
    exists: impl Fn(&str, ScramMechanism) -> bool,
) -> BTreeMap<String, Result<Change, Refusal>> {
    let mut out: BTreeMap<String, Result<Change, Refusal>> = BTreeMap::new();
    let duplicate = |out: &mut BTreeMap<_, _>, user: &str| {
        if out.contains_key(user) {
            out.insert(
                user.to_string(),
                Err((
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                )),
            );
            true
        } else {
            false
        }
    };
    for deletion in &request.deletions {
        let user = deletion.name.as_str();
        if duplicate(&mut out, user) {
            continue;
        }
        let change = mechanism(user, deletion.mechanism).and_then(|m| {
            if exists(user, m) {
                Ok(Change::Delete(m))
            } else {
                Err((
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist",
                ))
            }
        });
        out.insert(user.to_string(), change);
    }
    for upsertion in &request.upsertions {
        let user = upsertion.name.as_str();
        if duplicate(&mut out, user) {
            continue;
        }
        let change = mechanism(user, upsertion.mechanism).and_then(|m| {
            let iterations = upsertion.iterations;
            if iterations < ScramMechanism::ITERATIONS_MIN as i32 {
                return Err((ResponseError::UnacceptableCredential, "Too few iterations"));
            }
            if iterations > ScramMechanism::ITERATIONS_MAX as i32 {
                return Err((ResponseError::UnacceptableCredential, "Too many iterations"));
            }
            ScramCredential::from_salted_password(
                m,
                &upsertion.salt,
                &upsertion.salted_password,
                iterations as u32,
            )
            .map(|c| Change::Upsert(m, StoredScramCredential::from(&c)))
            .map_err(|_| (ResponseError::UnacceptableCredential, "Invalid salt"))
        });
        out.insert(user.to_string(), change);
    }
    out
}

fn mechanism(user: &str, kafka_type: i8) -> Result<ScramMechanism, Refusal> {
    if user.is_empty() {
        return Err((
            ResponseError::UnacceptableCredential,
            "Username must not be empty",
        ));
    }
    ScramMechanism::from_kafka_type(kafka_type).ok_or((
        ResponseError::UnsupportedSaslMechanism,
        "Unknown SCRAM mechanism",
    ))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };

    use super::*;

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        ScramCredentialUpsertion::default()
            .with_name(str_bytes(name))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(bytes::Bytes::from_static(b"salt"))
            .with_salted_password(bytes::Bytes::from(vec![7u8; 64]))
    }

    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(str_bytes(name))
            .with_mechanism(mechanism)
    }

    fn code(plan: &BTreeMap<String, Result<Change, Refusal>>, user: &str) -> i16 {
        match &plan[user] {
            Ok(_) => 0,
            Err((code, _)) => code.code(),
        }
    }

    #[test]
    fn each_user_is_validated_as_kafka_does() {
        let request = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![
                delete("gone", 1),
                delete("kept", 2),
                delete("twice", 1),
            ])
            .with_upsertions(vec![
                upsert("alice", 2, 8192),
                upsert("few", 1, 4095),
                upsert("many", 1, 16385),
                upsert("", 1, 8192),
                upsert("odd", 3, 8192),
                upsert("twice", 1, 8192),
            ]);
        let plan = plan(&request, |user, _| user == "kept");
        assert_eq!(code(&plan, "alice"), 0);
        assert!(matches!(
            plan["alice"],
            Ok(Change::Upsert(ScramMechanism::ScramSha512, _))
        ));
        assert_eq!(code(&plan, "kept"), 0);
        assert_eq!(code(&plan, "gone"), ResponseError::ResourceNotFound.code());
        assert_eq!(
            code(&plan, "few"),
            ResponseError::UnacceptableCredential.code()
        );
        assert_eq!(
            code(&plan, "many"),
            ResponseError::UnacceptableCredential.code()
        );
        assert_eq!(
            code(&plan, ""),
            ResponseError::UnacceptableCredential.code()
        );
        assert_eq!(
            code(&plan, "odd"),
            ResponseError::UnsupportedSaslMechanism.code()
        );
        assert_eq!(
            code(&plan, "twice"),
            ResponseError::DuplicateResource.code()
        );
    }

    /// What the broker stores is what SCRAM derives from the salted password: a client
    /// that salts "pencil" itself can then log in with it.
    #[test]
    fn the_stored_credential_verifies_the_password_the_client_salted() {
        let mechanism = ScramMechanism::ScramSha256;
        let salted = mechanism.hi(b"pencil", b"NaCl-NaCl", 4096);
        let mut up = upsert("user", 1, 4096);
        up.salt = bytes::Bytes::from_static(b"NaCl-NaCl");
        up.salted_password = salted.into();
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]);
        let Ok(Change::Upsert(_, stored)) =
            plan(&request, |_, _| false).remove("user").expect("user")
        else {
            panic!("not an upsert");
        };
        let credential = ScramCredential::try_from(stored).expect("valid");
        assert!(credential.verify_password("pencil"));
        assert!(!credential.verify_password("pencil!"));
    }
}
