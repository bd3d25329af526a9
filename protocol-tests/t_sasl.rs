//! SaslHandshake and SaslAuthenticate on a PLAINTEXT listener (ILLEGAL_SASL_STATE, the
//! connection stays usable, as in Kafka), and the SCRAM credential APIs: upsert,
//! describe (mechanism and iterations only), delete, with Kafka's per-user errors.

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, ApiKey, DescribeUserScramCredentialsRequest,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};

use crate::ops::*;

#[test]
fn sasl_requests_on_a_plaintext_listener_are_illegal_but_harmless() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::SaslHandshake, 0, 1) {
        let resp = c.call(
            v,
            &SaslHandshakeRequest::default().with_mechanism(sb("PLAIN")),
        );
        assert_code!(resp.error_code, ILLEGAL_SASL_STATE, "SaslHandshake v{v}");
    }
    for v in ctx.versions_req(ApiKey::SaslAuthenticate, 0, 2) {
        let resp = c.call(
            v,
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"\0u\0p")),
        );
        assert_code!(resp.error_code, ILLEGAL_SASL_STATE, "SaslAuthenticate v{v}");
    }
    // The connection still serves ordinary requests.
    let resp = c.call(1, &metadata_req(1, Some(&[]), false));
    assert!(resp.topics.is_empty());
}

fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(sb(name))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(bytes::Bytes::from_static(b"protocol-test-salt"))
        .with_salted_password(bytes::Bytes::from(vec![9u8; 64]))
}

fn describe(
    c: &mut crate::client::Client,
    users: Option<&[&str]>,
) -> kafka_protocol::messages::DescribeUserScramCredentialsResponse {
    let users = users.map(|names| {
        names
            .iter()
            .map(|n| UserName::default().with_name(sb(n)))
            .collect()
    });
    c.call(
        0,
        &DescribeUserScramCredentialsRequest::default().with_users(users),
    )
}

#[test]
fn scram_credentials_are_upserted_described_and_deleted() {
    let ctx = Ctx::new();
    if !ctx.supports(ApiKey::AlterUserScramCredentials, 0) {
        return;
    }
    let mut c = ctx.client();
    let user = "protocol-test-alice";
    let resp = c.call(
        0,
        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            upsert(user, 2, 8192),
            upsert("protocol-test-few", 1, 100),
        ]),
    );
    let code = |name: &str| {
        resp.results
            .iter()
            .find(|r| r.user.as_str() == name)
            .map(|r| r.error_code)
            .unwrap_or_else(|| panic!("no result for {name}"))
    };
    assert_code!(code(user), NONE, "upsert");
    assert_code!(
        code("protocol-test-few"),
        UNACCEPTABLE_CREDENTIAL,
        "too few iterations"
    );

    // Kafka applies credential changes asynchronously; tern's are visible at once, and
    // a broker of either kind shows them within a few seconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let described = loop {
        let d = describe(&mut c, Some(&[user, "protocol-test-nobody"]));
        if d.results
            .iter()
            .any(|r| r.user.as_str() == user && r.error_code == 0)
            || std::time::Instant::now() > deadline
        {
            break d;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_code!(described.error_code, NONE, "describe");
    let alice = described
        .results
        .iter()
        .find(|r| r.user.as_str() == user)
        .expect("alice described");
    assert_code!(alice.error_code, NONE, "describe alice");
    assert_eq!(alice.credential_infos.len(), 1);
    assert_eq!(alice.credential_infos[0].mechanism, 2);
    assert_eq!(alice.credential_infos[0].iterations, 8192);
    let nobody = described
        .results
        .iter()
        .find(|r| r.user.as_str() == "protocol-test-nobody")
        .expect("nobody described");
    assert_code!(
        nobody.error_code,
        RESOURCE_NOT_FOUND,
        "describe an unknown user"
    );
    let all = describe(&mut c, None);
    assert!(all.results.iter().any(|r| r.user.as_str() == user));

    let delete = |mechanism: i8| {
        AlterUserScramCredentialsRequest::default().with_deletions(vec![
            ScramCredentialDeletion::default()
                .with_name(sb(user))
                .with_mechanism(mechanism),
        ])
    };
    let resp = c.call(0, &delete(1));
    assert_code!(
        resp.results[0].error_code,
        RESOURCE_NOT_FOUND,
        "delete a mechanism alice lacks"
    );
    let resp = c.call(0, &delete(2));
    assert_code!(resp.results[0].error_code, NONE, "delete");
}

/// Kafka's rule on a SASL listener: before authentication only ApiVersions and the SASL
/// exchange are served. Every other advertised API, each at its lowest version on a
/// fresh connection, gets the connection closed without an answer: nothing succeeds
/// and no topic name leaks. (The body is zeros: at the lowest versions that decodes as
/// empty strings and arrays, so the refusal is the gate's, not the decoder's; the same
/// frames on the PLAINTEXT listener are answered, which the loop checks for Metadata.)
#[test]
fn before_authentication_every_other_advertised_api_is_closed_unanswered() {
    use crate::client::{api_name, Client, Outcome};
    use std::time::Duration;
    if std::env::var("TERN_PROTOCOL_TARGET").is_ok() {
        return; // needs its own listeners
    }
    let sasl_port = crate::broker::free_port();
    let listeners =
        format!("PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}");
    let ctx = Ctx::with_args(&["--listeners", &listeners]);
    ctx.topic("before-auth-secret", 1, &[]);
    let exempt = [
        ApiKey::ApiVersions,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ]
    .map(|k| k as i16);
    let zeros = [0u8; 64];
    let mut refused = 0;
    for (&key, &(min, _)) in &ctx.apis {
        if exempt.contains(&key) {
            continue;
        }
        let mut c = Client::connect(&format!("127.0.0.1:{sasl_port}"));
        c.send_raw(key, min, &zeros);
        match c.wait_outcome(Duration::from_secs(5)) {
            Outcome::Closed => refused += 1,
            other => panic!(
                "{} v{min} before authentication was not closed unanswered: {other:?}",
                api_name(key)
            ),
        }
    }
    assert!(refused >= 30, "only {refused} APIs advertised besides SASL");
    let mut plain = ctx.client();
    plain.send_raw(ApiKey::Metadata as i16, 0, &zeros);
    assert!(
        matches!(
            plain.wait_outcome(Duration::from_secs(5)),
            Outcome::Frame(_)
        ),
        "the zero-bodied Metadata v0 is answered on PLAINTEXT"
    );
}
