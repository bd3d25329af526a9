//! One connection's SASL state, as Kafka's `SaslServerAuthenticator` keeps it: which
//! requests may be served now, the SaslHandshake and SaslAuthenticate steps, the
//! authenticated user and when that authentication expires (KIP-368).
//!
//! Pure: the clock is passed in, credentials come through a lookup closure, and the
//! caller turns the outcomes into responses and closes the connection when told to.

use kafka_protocol::messages::ApiKey;

use super::credentials::{ScramCredential, ScramMechanism};
use super::plain;
use super::scram::ScramServer;

/// A SASL mechanism a listener may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Plain,
        Mechanism::Scram(ScramMechanism::ScramSha256),
        Mechanism::Scram(ScramMechanism::ScramSha512),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    /// Names are case-sensitive, as in Kafka.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// What the listener's configuration allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslPolicy {
    pub mechanisms: Vec<Mechanism>,
    /// `connections.max.reauth.ms`: an authentication is good for this long, and the
    /// client must re-authenticate on the same connection before it runs out. `None`
    /// (Kafka's 0): forever, and a second SaslHandshake is refused.
    pub session_lifetime_ms: Option<i64>,
}

/// Whether a request may be served in the connection's current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Serve,
    /// Close the connection without answering: Kafka's `InvalidRequestException` for a
    /// request before authentication, or an expired session (KIP-368).
    Close(String),
}

/// Why a SaslHandshake is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// UNSUPPORTED_SASL_MECHANISM, with the enabled list; then the connection closes.
    #[error("SASL mechanism {0:?} is not enabled")]
    Unsupported(String),
    /// ILLEGAL_SASL_STATE; then the connection closes.
    #[error("{0}")]
    IllegalState(&'static str),
}

/// The result of one SaslAuthenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthStep {
    /// Send this token back and wait for the next one (SCRAM's server-first).
    Continue(Vec<u8>),
    /// Authenticated: send this token (SCRAM's server-final, empty for PLAIN) and the
    /// session lifetime (0 when it does not expire).
    Done {
        token: Vec<u8>,
        user: String,
        session_lifetime_ms: i64,
    },
    /// SASL_AUTHENTICATION_FAILED with `client_message`; then the connection closes
    /// (after a short delay). `log` is for the broker's log: it names the user, never a
    /// password.
    Failed { client_message: String, log: String },
    /// ILLEGAL_SASL_STATE: a SaslAuthenticate with no handshake before it; then close.
    IllegalState(&'static str),
}

/// How the tokens after a handshake travel (Kafka's `enableKafkaSaslAuthenticateHeaders`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFraming {
    /// SaslHandshake v1+: each token inside a SaslAuthenticate request.
    Requests,
    /// SaslHandshake v0: each token as a bare size-prefixed frame without a request
    /// header, answered the same way. librdkafka 2.0.2 (Debian's kcat) sees SASL support
    /// only when v0 is advertised (then it speaks v1), so v0 is served, as Kafka does.
    Raw,
}

/// The authentication a connection holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
    pub mechanism: Mechanism,
    /// When the session ends (ms since the epoch), if it does.
    pub expires_at_ms: Option<i64>,
}

#[derive(Debug)]
enum Exchange {
    Plain,
    Scram(Box<ScramServer>),
}

#[derive(Debug)]
enum Phase {
    /// Waiting for a SaslHandshake (first, or a re-authentication's).
    Handshake,
    /// A mechanism was chosen; SaslAuthenticate tokens are expected.
    Token(Mechanism, Exchange),
    /// An exchange failed; nothing more is served.
    Failed,
}

/// One connection's SASL state.
#[derive(Debug)]
pub struct SaslSession {
    policy: std::sync::Arc<SaslPolicy>,
    phase: Phase,
    /// How the current exchange's tokens travel (set by the handshake).
    framing: TokenFraming,
    authenticated: Option<Authenticated>,
}

impl SaslSession {
    pub fn new(policy: std::sync::Arc<SaslPolicy>) -> Self {
        Self {
            policy,
            phase: Phase::Handshake,
            framing: TokenFraming::Requests,
            authenticated: None,
        }
    }

    /// Whether the next frame is a bare SASL token (after a SaslHandshake v0), not a
    /// request.
    pub fn awaits_raw_token(&self) -> bool {
        matches!(self.phase, Phase::Token(..)) && self.framing == TokenFraming::Raw
    }

    pub fn authenticated(&self) -> Option<&Authenticated> {
        self.authenticated.as_ref()
    }

    /// Kafka serves ApiVersions and the SASL exchange before authentication, and nothing
    /// else; after it, everything until the session expires.
    pub fn admit(&self, key: ApiKey, now_ms: i64) -> Admission {
        if matches!(self.phase, Phase::Failed) {
            return Admission::Close("authentication failed".into());
        }
        match key {
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
                return Admission::Serve
            }
            _ => {}
        }
        match &self.authenticated {
            None => Admission::Close(format!(
                "unexpected {key:?} request before SASL authentication"
            )),
            Some(auth) if auth.expires_at_ms.is_some_and(|end| now_ms >= end) => {
                Admission::Close(format!(
                    "SASL session of {:?} expired without re-authentication",
                    auth.user
                ))
            }
            Some(_) => Admission::Serve,
        }
    }

    /// The mechanisms to list in a SaslHandshake response.
    pub fn enabled_mechanisms(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.policy.mechanisms.iter().map(|m| m.name())
    }

    /// A SaslHandshake v1+ (tokens in SaslAuthenticate requests).
    pub fn handshake(&mut self, requested: &str) -> Result<Mechanism, HandshakeError> {
        self.handshake_framed(requested, TokenFraming::Requests)
    }

    /// A SaslHandshake of either version; after a v0 one (`TokenFraming::Raw`) the
    /// connection reads bare tokens until the exchange ends, and it cannot re-authenticate
    /// that way (KIP-368 needs SaslAuthenticate).
    pub fn handshake_framed(
        &mut self,
        requested: &str,
        framing: TokenFraming,
    ) -> Result<Mechanism, HandshakeError> {
        if !matches!(self.phase, Phase::Handshake) {
            self.phase = Phase::Failed;
            return Err(HandshakeError::IllegalState(
                "SaslHandshake in the middle of an authentication",
            ));
        }
        if let Some(auth) = &self.authenticated {
            // KIP-368 re-authenticates through SaslAuthenticate only.
            if framing == TokenFraming::Raw {
                self.phase = Phase::Failed;
                return Err(HandshakeError::IllegalState(
                    "re-authentication needs SaslHandshake v1 or later",
                ));
            }
            if self.policy.session_lifetime_ms.is_none() {
                self.phase = Phase::Failed;
                return Err(HandshakeError::IllegalState(
                    "re-authentication is not enabled (connections.max.reauth.ms is 0)",
                ));
            }
            // KIP-368: a re-authentication must use the mechanism of the first one.
            if auth.mechanism.name() != requested {
                self.phase = Phase::Failed;
                return Err(HandshakeError::Unsupported(requested.to_string()));
            }
        }
        let Some(mechanism) =
            Mechanism::from_name(requested).filter(|m| self.policy.mechanisms.contains(m))
        else {
            self.phase = Phase::Failed;
            return Err(HandshakeError::Unsupported(requested.to_string()));
        };
        let exchange = match mechanism {
            Mechanism::Plain => Exchange::Plain,
            Mechanism::Scram(m) => Exchange::Scram(Box::new(ScramServer::with_random_nonce(m))),
        };
        self.phase = Phase::Token(mechanism, exchange);
        self.framing = framing;
        Ok(mechanism)
    }

    /// One SaslAuthenticate token. `lookup` finds a user's credential of a mechanism
    /// (PLAIN asks for either SCRAM one).
    pub fn authenticate(
        &mut self,
        token: &[u8],
        lookup: impl Fn(&str, Option<ScramMechanism>) -> Option<ScramCredential>,
        now_ms: i64,
    ) -> AuthStep {
        let (mechanism, exchange) = match std::mem::replace(&mut self.phase, Phase::Failed) {
            Phase::Token(mechanism, exchange) => (mechanism, exchange),
            Phase::Handshake | Phase::Failed => {
                return AuthStep::IllegalState("SaslAuthenticate without a SaslHandshake")
            }
        };
        let outcome = match exchange {
            Exchange::Plain => plain::authenticate(token, |user| lookup(user, None))
                .map(|user| (user, Vec::new()))
                .map_err(|e| (e.client_message(), e.to_string())),
            Exchange::Scram(mut server) => {
                let scram = server.mechanism();
                if !server.awaits_final() {
                    return match server.client_first(token, |user| lookup(user, Some(scram))) {
                        Ok(server_first) => {
                            self.phase = Phase::Token(mechanism, Exchange::Scram(server));
                            AuthStep::Continue(server_first)
                        }
                        Err(e) => AuthStep::Failed {
                            client_message: e.client_message(scram),
                            log: e.to_string(),
                        },
                    };
                }
                server
                    .client_final(token)
                    .map(|outcome| (outcome.user, outcome.server_final))
                    .map_err(|e| (e.client_message(scram), e.to_string()))
            }
        };
        match outcome {
            Ok((user, token)) => self.complete(mechanism, user, token, now_ms),
            Err((client_message, log)) => AuthStep::Failed {
                client_message,
                log,
            },
        }
    }

    fn complete(
        &mut self,
        mechanism: Mechanism,
        user: String,
        token: Vec<u8>,
        now_ms: i64,
    ) -> AuthStep {
        if let Some(previous) = &self.authenticated {
            // KIP-368: re-authentication may not change who the connection is.
            if previous.user != user {
                return AuthStep::Failed {
                    client_message: "Cannot change principals during re-authentication".to_string(),
                    log: format!(
                        "re-authentication as {user:?} on a connection of {:?}",
                        previous.user
                    ),
                };
            }
        }
        let lifetime = self.policy.session_lifetime_ms;
        self.authenticated = Some(Authenticated {
            user: user.clone(),
            mechanism,
            expires_at_ms: lifetime.map(|ms| now_ms.saturating_add(ms)),
        });
        self.phase = Phase::Handshake;
        AuthStep::Done {
            token,
            user,
            session_lifetime_ms: lifetime.unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const ITERATIONS: u32 = 4096;

    fn policy(lifetime: Option<i64>) -> Arc<SaslPolicy> {
        Arc::new(SaslPolicy {
            mechanisms: Mechanism::ALL.to_vec(),
            session_lifetime_ms: lifetime,
        })
    }

    fn alice(mechanism: ScramMechanism) -> ScramCredential {
        ScramCredential::new(mechanism, "secret", b"salt-of-alice", ITERATIONS).expect("credential")
    }

    fn lookup(user: &str, mechanism: Option<ScramMechanism>) -> Option<ScramCredential> {
        (user == "alice").then(|| alice(mechanism.unwrap_or(ScramMechanism::ScramSha256)))
    }

    #[test]
    fn before_authentication_only_apiversions_and_sasl_are_served() {
        let session = SaslSession::new(policy(None));
        assert_eq!(session.admit(ApiKey::ApiVersions, 0), Admission::Serve);
        assert_eq!(session.admit(ApiKey::SaslHandshake, 0), Admission::Serve);
        for key in [ApiKey::Metadata, ApiKey::Produce, ApiKey::CreateTopics] {
            assert!(
                matches!(session.admit(key, 0), Admission::Close(_)),
                "{key:?}"
            );
        }
    }

    #[test]
    fn a_v0_handshake_takes_raw_tokens_until_the_exchange_ends() {
        let mut session = SaslSession::new(policy(Some(60_000)));
        assert!(!session.awaits_raw_token());
        session
            .handshake_framed("SCRAM-SHA-256", TokenFraming::Raw)
            .expect("v0 handshake");
        assert!(session.awaits_raw_token());
        let first = session.authenticate(b"n,,n=alice,r=client-nonce", lookup, 0);
        assert!(matches!(first, AuthStep::Continue(_)), "{first:?}");
        assert!(session.awaits_raw_token(), "the client-final is raw too");
        // A wrong proof fails the exchange; nothing raw is expected after it.
        let wrong = session.authenticate(b"c=biws,r=client-nonce,p=AAAA", lookup, 0);
        assert!(matches!(wrong, AuthStep::Failed { .. }), "{wrong:?}");
        assert!(!session.awaits_raw_token());

        let mut session = SaslSession::new(policy(Some(60_000)));
        session
            .handshake_framed("PLAIN", TokenFraming::Raw)
            .expect("v0 handshake");
        let done = session.authenticate(b"\0alice\0secret", lookup, 0);
        assert!(matches!(done, AuthStep::Done { .. }), "{done:?}");
        // Requests follow, not tokens; re-authentication must use v1.
        assert!(!session.awaits_raw_token());
        assert_eq!(session.admit(ApiKey::Produce, 1), Admission::Serve);
        assert!(matches!(
            session.handshake_framed("PLAIN", TokenFraming::Raw),
            Err(HandshakeError::IllegalState(_))
        ));
    }

    #[test]
    fn plain_authenticates_and_then_everything_is_served() {
        let mut session = SaslSession::new(policy(None));
        assert_eq!(session.handshake("PLAIN"), Ok(Mechanism::Plain));
        let step = session.authenticate(b"\0alice\0secret", lookup, 1000);
        assert_eq!(
            step,
            AuthStep::Done {
                token: Vec::new(),
                user: "alice".into(),
                session_lifetime_ms: 0
            }
        );
        assert_eq!(session.admit(ApiKey::Produce, i64::MAX), Admission::Serve);
        // Without re-authentication enabled, a second handshake is illegal.
        assert!(matches!(
            session.handshake("PLAIN"),
            Err(HandshakeError::IllegalState(_))
        ));
        assert!(matches!(
            session.admit(ApiKey::Produce, 0),
            Admission::Close(_)
        ));
    }

    #[test]
    fn a_wrong_password_fails_and_closes_everything_after() {
        let mut session = SaslSession::new(policy(None));
        session.handshake("PLAIN").expect("plain");
        let step = session.authenticate(b"\0alice\0wrong", lookup, 0);
        let AuthStep::Failed {
            client_message,
            log,
        } = step
        else {
            panic!("{step:?}");
        };
        assert!(client_message.contains("Invalid username or password"));
        assert!(
            !log.contains("wrong"),
            "the password must not be logged: {log}"
        );
        assert!(matches!(
            session.admit(ApiKey::ApiVersions, 0),
            Admission::Close(_)
        ));
    }

    #[test]
    fn unknown_and_disabled_mechanisms_are_refused() {
        let mut session = SaslSession::new(Arc::new(SaslPolicy {
            mechanisms: vec![Mechanism::Scram(ScramMechanism::ScramSha512)],
            session_lifetime_ms: None,
        }));
        assert_eq!(
            session.handshake("PLAIN"),
            Err(HandshakeError::Unsupported("PLAIN".into()))
        );
        let mut session = SaslSession::new(policy(None));
        assert!(matches!(
            session.handshake("GSSAPI"),
            Err(HandshakeError::Unsupported(_))
        ));
        let mut session = SaslSession::new(policy(None));
        assert!(matches!(
            session.authenticate(b"x", lookup, 0),
            AuthStep::IllegalState(_)
        ));
    }

    /// A full SCRAM-SHA-512 exchange through the session, with the client side computed
    /// here from RFC 5802's formulas.
    #[test]
    fn scram_takes_two_tokens_and_expires_with_the_session() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mechanism = ScramMechanism::ScramSha512;
        let mut session = SaslSession::new(policy(Some(60_000)));
        session.handshake("SCRAM-SHA-512").expect("scram");
        let first_bare = "n=alice,r=clientnonce";
        let step = session.authenticate(format!("n,,{first_bare}").as_bytes(), lookup, 1_000);
        let AuthStep::Continue(server_first) = step else {
            panic!("{step:?}");
        };
        let server_first = String::from_utf8(server_first).expect("utf8");
        let nonce = server_first
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .expect("nonce");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{first_bare},{server_first},{without_proof}");
        let salted = mechanism.hi(b"secret", b"salt-of-alice", ITERATIONS);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        let signature = mechanism.hmac(&mechanism.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let last = format!("{without_proof},p={}", b64.encode(proof));
        let step = session.authenticate(last.as_bytes(), lookup, 1_000);
        let AuthStep::Done {
            user,
            session_lifetime_ms,
            token,
        } = step
        else {
            panic!("{step:?}");
        };
        assert_eq!(user, "alice");
        assert_eq!(session_lifetime_ms, 60_000);
        assert!(token.starts_with(b"v="));
        assert_eq!(session.admit(ApiKey::Fetch, 60_999), Admission::Serve);
        assert!(matches!(
            session.admit(ApiKey::Fetch, 61_000),
            Admission::Close(_)
        ));
        // Re-authentication is allowed, with the same mechanism only.
        assert!(matches!(
            SaslSession {
                policy: policy(Some(1)),
                phase: Phase::Handshake,
                framing: TokenFraming::Requests,
                authenticated: session.authenticated.clone(),
            }
            .handshake("PLAIN"),
            Err(HandshakeError::Unsupported(_))
        ));
        assert!(session.handshake("SCRAM-SHA-512").is_ok());
    }

    #[test]
    fn reauthentication_cannot_change_the_user() {
        let mut session = SaslSession::new(policy(Some(1000)));
        session.handshake("PLAIN").expect("plain");
        session.authenticate(b"\0alice\0secret", lookup, 0);
        session.handshake("PLAIN").expect("reauth");
        let bob = |user: &str, _: Option<ScramMechanism>| {
            (user == "bob").then(|| alice(ScramMechanism::ScramSha256))
        };
        let step = session.authenticate(b"\0bob\0secret", bob, 10);
        assert!(matches!(step, AuthStep::Failed { .. }), "{step:?}");
    }
}
