//! DescribeUserScramCredentials (key 50, v0): which SCRAM mechanisms each user has and
//! with how many iterations, never a salt or key. As Kafka: a null user list describes
//! everyone; a named user without credentials gets RESOURCE_NOT_FOUND, a name asked
//! twice DUPLICATE_RESOURCE. With an authorizer the request needs DESCRIBE on the
//! cluster; without it the top-level code and one result per named user (with no user
//! name, as Kafka's `getErrorResponse`) answer CLUSTER_AUTHORIZATION_FAILED.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;

use crate::api::context::RequestContext;
use crate::api::str_bytes;
use crate::cluster::UserCredentials;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !ctx.authorize_cluster(AclOperation::Describe) {
        let error = ResponseError::ClusterAuthorizationFailed;
        let message = Some(str_bytes(error.to_string()));
        let results = request
            .users
            .iter()
            .flatten()
            .map(|_| {
                DescribeUserScramCredentialsResult::default()
                    .with_error_code(error.code())
                    .with_error_message(message.clone())
            })
            .collect();
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(error.code())
            .with_error_message(message)
            .with_results(results);
    }
    let users = ctx.services.store.scram_credentials();
    let asked: Option<Vec<String>> = request
        .users
        .map(|names| names.into_iter().map(|u| u.name.to_string()).collect());
    DescribeUserScramCredentialsResponse::default().with_results(describe(&users, asked))
}

fn describe(
    users: &UserCredentials,
    asked: Option<Vec<String>>,
) -> Vec<DescribeUserScramCredentialsResult> {
    let result =
        |user: &str| DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
    let infos =
        |of_user: &BTreeMap<String, crate::security::credentials::StoredScramCredential>| {
            of_user
                .values()
                .map(|c| {
                    CredentialInfo::default()
                        .with_mechanism(c.mechanism.kafka_type())
                        .with_iterations(c.iterations as i32)
                })
                .collect()
        };
    let Some(asked) = asked else {
        return users
            .iter()
            .map(|(user, of_user)| result(user).with_credential_infos(infos(of_user)))
            .collect();
    };
    let mut seen = BTreeMap::<&str, usize>::new();
    for name in &asked {
        *seen.entry(name).or_default() += 1;
    }
    let mut out = Vec::new();
    for (name, count) in seen {
        out.push(if count > 1 {
            result(name)
                .with_error_code(ResponseError::DuplicateResource.code())
                .with_error_message(Some(str_bytes(
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )))
        } else {
            match users.get(name) {
                Some(of_user) => result(name).with_credential_infos(infos(of_user)),
                None => result(name)
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(Some(str_bytes(
                        "Attempt to describe a user credential that does not exist",
                    ))),
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::credentials::{ScramCredential, ScramMechanism, StoredScramCredential};

    fn users() -> UserCredentials {
        let credential = ScramCredential::new(ScramMechanism::ScramSha512, "pw", b"salt", 8192)
            .expect("credential");
        let mut of_alice = BTreeMap::new();
        of_alice.insert(
            "SCRAM-SHA-512".to_string(),
            StoredScramCredential::from(&credential),
        );
        BTreeMap::from([("alice".to_string(), of_alice)])
    }

    #[test]
    fn everyone_or_the_named_users_with_kafkas_errors() {
        let all = describe(&users(), None);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].credential_infos[0].mechanism, 2);
        assert_eq!(all[0].credential_infos[0].iterations, 8192);
        let named = describe(
            &users(),
            Some(vec![
                "bob".into(),
                "alice".into(),
                "carol".into(),
                "carol".into(),
            ]),
        );
        let code = |user: &str| {
            named
                .iter()
                .find(|r| r.user.as_str() == user)
                .map(|r| r.error_code)
        };
        assert_eq!(code("alice"), Some(0));
        assert_eq!(code("bob"), Some(ResponseError::ResourceNotFound.code()));
        assert_eq!(code("carol"), Some(ResponseError::DuplicateResource.code()));
        assert_eq!(named.len(), 3);
    }
}
