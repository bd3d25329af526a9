//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, as Kafka's
//! `ScramSaslServer`: the two-step exchange that checks a client's proof against the salted
//! credential a broker stores instead of a password (`credentials`). Pure: no I/O, no clock;
//! the caller supplies the server nonce and looks the user's credential up.
//!
//! Exchange (`n,,` means "no channel binding, no authorization id"):
//! ```text
//! client-first  n,,n=user,r=<client nonce>
//! server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
//! client-final  c=biws,r=<client nonce><server nonce>,p=<base64 proof>
//! server-final  v=<base64 server signature>
//! ```

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;

pub use super::credentials::{ScramCredential, ScramMechanism};
use super::scram_messages::{parse_client_final, parse_client_first, valid_nonce, MessageError};
use crate::limits::SASL_MESSAGE_BYTES_MAX;

/// Why a SCRAM exchange failed. Every variant ends the exchange; the connection must then be
/// closed after answering SASL_AUTHENTICATION_FAILED. The `Display` text is for the broker's
/// log; what the client may see is [`ScramError::client_message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("SCRAM message of {len} bytes exceeds the {max}-byte limit")]
    TooLong { len: usize, max: usize },
    #[error("SCRAM message is not UTF-8")]
    NotUtf8,
    #[error("malformed SCRAM {part}")]
    Malformed { part: &'static str },
    #[error("{part} is not valid base64")]
    BadBase64 { part: &'static str },
    /// `p=` (the client wants channel binding) or `y` (it could, and thinks we cannot): only
    /// `n` is accepted, as in Kafka, which offers no `-PLUS` mechanism.
    #[error("SCRAM channel binding is not supported (gs2 flag {flag:?})")]
    ChannelBindingNotSupported { flag: String },
    /// RFC 5802: an `m=` attribute "MUST cause authentication failure" (Kafka ignores it).
    #[error("SCRAM mandatory extension (m=) is not supported")]
    MandatoryExtension,
    /// `tokenauth=true`: the user name is a delegation token id, which tern does not issue.
    #[error("SCRAM delegation-token authentication is not supported")]
    DelegationTokenNotSupported,
    #[error("SCRAM authorization id {authzid:?} differs from the user {user:?}")]
    AuthorizationIdMismatch { authzid: String, user: String },
    #[error("no {mechanism} credential for user {user:?}")]
    UnknownUser {
        mechanism: ScramMechanism,
        user: String,
    },
    #[error("credential for user {user:?} is for {actual}, not {expected}")]
    CredentialMechanismMismatch {
        user: String,
        expected: ScramMechanism,
        actual: ScramMechanism,
    },
    #[error("the server nonce is empty or not printable ASCII without ','")]
    InvalidServerNonce,
    #[error("SCRAM channel binding in the final message does not match the gs2 header")]
    ChannelBindingMismatch,
    #[error("SCRAM nonce in the final message is not the one the server sent")]
    NonceMismatch,
    #[error("SCRAM client proof is invalid (wrong password)")]
    InvalidProof,
    #[error("unexpected SCRAM {message} in state {state}")]
    UnexpectedMessage {
        message: &'static str,
        state: &'static str,
    },
}

impl From<MessageError> for ScramError {
    fn from(error: MessageError) -> Self {
        match error {
            MessageError::Malformed { part } => Self::Malformed { part },
            MessageError::BadBase64 { part } => Self::BadBase64 { part },
            MessageError::ChannelBindingNotSupported { flag } => {
                Self::ChannelBindingNotSupported { flag }
            }
            MessageError::MandatoryExtension => Self::MandatoryExtension,
        }
    }
}

impl ScramError {
    /// The error message SaslAuthenticate may carry to the client. As Kafka's
    /// `SaslServerAuthenticator`: only the authorization-id mismatch is spelled out (Kafka
    /// throws it as `SaslAuthenticationException`); everything else gets one generic sentence,
    /// so that a client cannot tell an unknown user from a wrong password.
    pub fn client_message(&self, mechanism: ScramMechanism) -> String {
        match self {
            ScramError::AuthorizationIdMismatch { .. } => {
                "Authentication failed: Client requested an authorization id that is different from username".to_string()
            }
            _ => format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"),
        }
    }
}

/// What a successful exchange proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramOutcome {
    /// The server-final message (`v=<base64 ServerSignature>`) to send back.
    pub server_final: Vec<u8>,
    /// The authenticated user name, unescaped: the principal's name.
    pub user: String,
}

/// Server-side state of one SCRAM exchange on one connection. Each step consumes its state:
/// a message out of order, a second client-first, or any message after a failure is refused.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    server_nonce: String,
    state: State,
}

#[derive(Debug)]
enum State {
    ReceiveClientFirst,
    ReceiveClientFinal(Box<Exchange>),
    Complete { user: String },
    Failed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::ReceiveClientFirst => "receive-client-first",
            State::ReceiveClientFinal(_) => "receive-client-final",
            State::Complete { .. } => "complete",
            State::Failed => "failed",
        }
    }
}

/// What the final step needs from the first.
#[derive(Debug)]
struct Exchange {
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramServer {
    /// A server for one exchange. `nonce_source` yields the server's part of the nonce; it
    /// must be fresh and unpredictable per exchange (see [`random_nonce`]); tests pass a
    /// fixed one to reproduce the RFC example. It is called once, here.
    pub fn new(mechanism: ScramMechanism, nonce_source: impl FnOnce() -> String) -> ScramServer {
        ScramServer {
            mechanism,
            server_nonce: nonce_source(),
            state: State::ReceiveClientFirst,
        }
    }

    /// [`ScramServer::new`] with a [`random_nonce`].
    pub fn with_random_nonce(mechanism: ScramMechanism) -> ScramServer {
        Self::new(mechanism, random_nonce)
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Whether the client-first message was taken and the client-final one is due.
    pub fn awaits_final(&self) -> bool {
        matches!(self.state, State::ReceiveClientFinal(_))
    }

    /// The user this exchange authenticated, once it is complete.
    pub fn authenticated_user(&self) -> Option<&str> {
        match &self.state {
            State::Complete { user } => Some(user),
            _ => None,
        }
    }

    /// Takes the client-first message and returns the server-first message. `lookup` is asked
    /// for the credential of the (unescaped) user name for this mechanism; `None` fails the
    /// exchange here, as Kafka does.
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, State::ReceiveClientFirst) {
            return Err(self.unexpected("client-first message"));
        }
        match self.first_step(message, lookup) {
            Ok(exchange) => {
                let server_first = exchange.server_first.clone().into_bytes();
                self.state = State::ReceiveClientFinal(Box::new(exchange));
                Ok(server_first)
            }
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }

    /// Takes the client-final message, checks the nonce, the channel binding and the proof,
    /// and returns the server-final message and the authenticated user.
    pub fn client_final(&mut self, message: &[u8]) -> Result<ScramOutcome, ScramError> {
        let exchange = match std::mem::replace(&mut self.state, State::Failed) {
            State::ReceiveClientFinal(exchange) => exchange,
            other => {
                self.state = other;
                return Err(self.unexpected("client-final message"));
            }
        };
        let outcome = self.final_step(&exchange, message)?;
        self.state = State::Complete {
            user: outcome.user.clone(),
        };
        Ok(outcome)
    }

    /// A message the current state does not expect ends the exchange, as in Kafka (whose
    /// `IllegalSaslStateException` moves its server to FAILED): a client that replays a
    /// client-first, or talks after completion, is not one to keep talking to.
    fn unexpected(&mut self, message: &'static str) -> ScramError {
        let state = self.state.name();
        self.state = State::Failed;
        ScramError::UnexpectedMessage { message, state }
    }

    fn first_step(
        &self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Exchange, ScramError> {
        let first = parse_client_first(bounded_utf8(message)?)?;
        if first.token_auth {
            return Err(ScramError::DelegationTokenNotSupported);
        }
        if let Some(authzid) = &first.authzid {
            if *authzid != first.user {
                return Err(ScramError::AuthorizationIdMismatch {
                    authzid: authzid.clone(),
                    user: first.user,
                });
            }
        }
        if !valid_nonce(&self.server_nonce) {
            return Err(ScramError::InvalidServerNonce);
        }
        let credential = self.credential_for(&first.user, lookup)?;
        let nonce = format!("{}{}", first.client_nonce, self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(credential.salt()),
            credential.iterations()
        );
        Ok(Exchange {
            user: first.user,
            credential,
            gs2_header: first.gs2_header.to_string(),
            client_first_bare: first.bare.to_string(),
            server_first,
            nonce,
        })
    }

    fn credential_for(
        &self,
        user: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<ScramCredential, ScramError> {
        let credential = lookup(user).ok_or_else(|| ScramError::UnknownUser {
            mechanism: self.mechanism,
            user: user.to_string(),
        })?;
        if credential.mechanism() != self.mechanism {
            return Err(ScramError::CredentialMechanismMismatch {
                user: user.to_string(),
                expected: self.mechanism,
                actual: credential.mechanism(),
            });
        }
        Ok(credential)
    }

    fn final_step(&self, exchange: &Exchange, message: &[u8]) -> Result<ScramOutcome, ScramError> {
        let last = parse_client_final(bounded_utf8(message)?)?;
        if last.channel_binding != exchange.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBindingMismatch);
        }
        if last.nonce != exchange.nonce {
            return Err(ScramError::NonceMismatch);
        }
        let auth_message = format!(
            "{},{},{}",
            exchange.client_first_bare, exchange.server_first, last.without_proof
        )
        .into_bytes();
        verify_proof(&exchange.credential, &auth_message, &last.proof)?;
        let server_signature = self
            .mechanism
            .hmac(exchange.credential.server_key(), &auth_message);
        let server_final = format!("v={}", BASE64.encode(server_signature)).into_bytes();
        Ok(ScramOutcome {
            server_final,
            user: exchange.user.clone(),
        })
    }
}

/// RFC 5802 §3: `ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage)`, then
/// `H(ClientKey)` must equal `StoredKey`, compared in constant time.
fn verify_proof(
    credential: &ScramCredential,
    auth_message: &[u8],
    proof: &[u8],
) -> Result<(), ScramError> {
    let mechanism = credential.mechanism();
    if proof.len() != mechanism.digest_bytes() {
        return Err(ScramError::InvalidProof);
    }
    let client_signature = mechanism.hmac(credential.stored_key(), auth_message);
    let client_key: Vec<u8> = proof
        .iter()
        .zip(&client_signature)
        .map(|(p, s)| p ^ s)
        .collect();
    let computed_stored_key = mechanism.hash(&client_key);
    if bool::from(computed_stored_key.ct_eq(credential.stored_key())) {
        Ok(())
    } else {
        Err(ScramError::InvalidProof)
    }
}

/// The message as UTF-8, refusing oversized input before looking at it.
fn bounded_utf8(message: &[u8]) -> Result<&str, ScramError> {
    if message.len() > SASL_MESSAGE_BYTES_MAX {
        return Err(ScramError::TooLong {
            len: message.len(),
            max: SASL_MESSAGE_BYTES_MAX,
        });
    }
    std::str::from_utf8(message).map_err(|_| ScramError::NotUtf8)
}

/// A fresh server nonce: 24 bytes from the thread's CSPRNG (ChaCha, seeded from the OS),
/// base64 without padding, hence printable and free of ','.
pub fn random_nonce() -> String {
    let bytes: [u8; 24] = rand::random();
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3's example: user "user", password "pencil".
    const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_credential() -> ScramCredential {
        let salt = BASE64.decode(RFC_SALT).expect("RFC salt");
        ScramCredential::new(ScramMechanism::ScramSha256, "pencil", &salt, 4096)
            .expect("credential")
    }

    fn rfc_server() -> ScramServer {
        ScramServer::new(ScramMechanism::ScramSha256, || RFC_SERVER_NONCE.to_string())
    }

    /// A server that has answered the RFC client-first.
    fn rfc_server_after_first() -> ScramServer {
        let mut server = rfc_server();
        server
            .client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()))
            .expect("client-first");
        server
    }

    /// A SCRAM client computed from RFC 5802 §3's formulas, with its own `Hi` loop (not the
    /// pbkdf2 crate the server uses), so the two implementations check each other.
    struct TestClient {
        mechanism: ScramMechanism,
        password: String,
        gs2_header: String,
        client_first_bare: String,
    }

    impl TestClient {
        fn new(
            mechanism: ScramMechanism,
            gs2_header: &str,
            saslname: &str,
            password: &str,
            nonce: &str,
        ) -> TestClient {
            TestClient {
                mechanism,
                password: password.to_string(),
                gs2_header: gs2_header.to_string(),
                client_first_bare: format!("n={saslname},r={nonce}"),
            }
        }

        fn client_first(&self) -> Vec<u8> {
            format!("{}{}", self.gs2_header, self.client_first_bare).into_bytes()
        }

        fn hi(&self, salt: &[u8], iterations: u32) -> Vec<u8> {
            let password = self.password.as_bytes();
            let mut u = self
                .mechanism
                .hmac(password, &[salt, &[0, 0, 0, 1]].concat());
            let mut result = u.clone();
            for _ in 1..iterations {
                u = self.mechanism.hmac(password, &u);
                result.iter_mut().zip(&u).for_each(|(r, x)| *r ^= x);
            }
            result
        }

        /// The client-final message for `server_first`, and the server signature to expect.
        fn client_final(&self, server_first: &[u8]) -> (Vec<u8>, Vec<u8>) {
            let server_first = std::str::from_utf8(server_first).expect("server-first is UTF-8");
            let mut parts = server_first.split(',');
            let nonce = parts.next().and_then(|p| p.strip_prefix("r=")).expect("r=");
            let salt = BASE64
                .decode(parts.next().and_then(|p| p.strip_prefix("s=")).expect("s="))
                .expect("salt");
            let iterations: u32 = parts
                .next()
                .and_then(|p| p.strip_prefix("i="))
                .expect("i=")
                .parse()
                .expect("i");
            let without_proof = format!("c={},r={nonce}", BASE64.encode(&self.gs2_header));
            let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
            let salted = self.hi(&salt, iterations);
            let client_key = self.mechanism.hmac(&salted, b"Client Key");
            let stored_key = self.mechanism.hash(&client_key);
            let signature = self.mechanism.hmac(&stored_key, auth_message.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(k, s)| k ^ s)
                .collect();
            let server_key = self.mechanism.hmac(&salted, b"Server Key");
            let server_signature = self.mechanism.hmac(&server_key, auth_message.as_bytes());
            let message = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
            (
                message,
                format!("v={}", BASE64.encode(server_signature)).into_bytes(),
            )
        }
    }

    fn credential(mechanism: ScramMechanism, password: &str) -> ScramCredential {
        ScramCredential::new(mechanism, password, b"a fixed salt for tests", 4096)
            .expect("credential")
    }

    /// Runs a full exchange of `client` against a server holding `stored` for every user.
    fn exchange(client: &TestClient, stored: &ScramCredential) -> Result<ScramOutcome, ScramError> {
        let mut server = ScramServer::with_random_nonce(client.mechanism);
        let server_first = server.client_first(&client.client_first(), |_| Some(stored.clone()))?;
        let (client_final, _) = client.client_final(&server_first);
        server.client_final(&client_final)
    }

    #[test]
    fn rfc7677_example_reproduces_byte_for_byte() {
        let mut server = rfc_server();
        let server_first = server
            .client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()))
            .expect("first");
        assert_eq!(std::str::from_utf8(&server_first), Ok(RFC_SERVER_FIRST));
        let outcome = server
            .client_final(RFC_CLIENT_FINAL.as_bytes())
            .expect("final");
        assert_eq!(
            std::str::from_utf8(&outcome.server_final),
            Ok(RFC_SERVER_FINAL)
        );
        assert_eq!(outcome.user, "user");
        assert_eq!(server.authenticated_user(), Some("user"));
    }

    #[test]
    fn rfc7677_test_client_computes_the_rfc_proof() {
        // Guards the test client itself: fed the RFC's server-first it must produce the RFC's
        // client-final and expect the RFC's server signature.
        let client = TestClient::new(
            ScramMechanism::ScramSha256,
            "n,,",
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(client.client_first(), RFC_CLIENT_FIRST.as_bytes());
        let (client_final, server_final) = client.client_final(RFC_SERVER_FIRST.as_bytes());
        assert_eq!(client_final, RFC_CLIENT_FINAL.as_bytes());
        assert_eq!(server_final, RFC_SERVER_FINAL.as_bytes());
    }

    #[test]
    fn sha512_round_trip_against_a_first_principles_client() {
        let stored = credential(ScramMechanism::ScramSha512, "s3cret-Passwörd");
        let client = TestClient::new(
            ScramMechanism::ScramSha512,
            "n,,",
            "alice",
            "s3cret-Passwörd",
            "fyko+d2lbbFgONRv9qkxdawL",
        );
        let mut server = ScramServer::with_random_nonce(ScramMechanism::ScramSha512);
        let server_first = server
            .client_first(&client.client_first(), |_| Some(stored.clone()))
            .expect("first");
        let (client_final, expected_server_final) = client.client_final(&server_first);
        let outcome = server.client_final(&client_final).expect("final");
        assert_eq!(outcome.server_final, expected_server_final);
        assert_eq!(outcome.user, "alice");
        assert_eq!(
            outcome.server_final.len(),
            "v=".len() + 88,
            "a SHA-512 signature is 64 bytes"
        );
    }

    /// A SHA-512 transcript computed outside this crate: by kafka-python 3.0's `ScramClient`
    /// (Python's hashlib PBKDF2 and HMAC) for user "kafka-user", password "pässword-512",
    /// salt "tern-test-salt-512", 4096 iterations, with the nonces fixed.
    #[test]
    fn sha512_exchange_matches_an_independent_client_transcript() {
        let client_first = "n,,n=kafka-user,r=3b6c0e0c9b7a4d2f8e1a5c7d9f0b2e4a";
        let server_first =
            "r=3b6c0e0c9b7a4d2f8e1a5c7d9f0b2e4aSv3rN0nce-Xy_z,s=dGVybi10ZXN0LXNhbHQtNTEy,i=4096";
        let client_final = "c=biws,r=3b6c0e0c9b7a4d2f8e1a5c7d9f0b2e4aSv3rN0nce-Xy_z,\
            p=pwboTb2YInKc0hbtAlK4hXK63ifoKkbam5/VYmAvJoZ1DAcsvGmAHHa0EF2b83woRVs67ILj2qq6Pnin7S4iAQ==";
        let server_final =
            "v=XFMQ9hp8z63PUhXAfau6czDQYZ71rrRMTws5J3/SIudw0YZZQpvR6pPnTWW9tv7Gju7n3vIT/MEnww3gTbW5Dg==";
        let mechanism = ScramMechanism::ScramSha512;
        let stored = ScramCredential::new(mechanism, "pässword-512", b"tern-test-salt-512", 4096)
            .expect("credential");
        let mut server = ScramServer::new(mechanism, || "Sv3rN0nce-Xy_z".to_string());
        let first = server
            .client_first(client_first.as_bytes(), |_| Some(stored.clone()))
            .expect("first");
        assert_eq!(std::str::from_utf8(&first), Ok(server_first));
        let outcome = server.client_final(client_final.as_bytes()).expect("final");
        assert_eq!(std::str::from_utf8(&outcome.server_final), Ok(server_final));
        assert_eq!(outcome.user, "kafka-user");
    }

    #[test]
    fn server_nonce_extends_the_client_nonce() {
        let mut server = ScramServer::with_random_nonce(ScramMechanism::ScramSha256);
        let stored = credential(ScramMechanism::ScramSha256, "pw");
        let server_first = server
            .client_first(b"n,,n=bob,r=clientnonce", |_| Some(stored.clone()))
            .expect("first");
        let nonce = std::str::from_utf8(&server_first)
            .expect("utf8")
            .split(',')
            .next()
            .expect("r=")
            .to_string();
        assert!(nonce.starts_with("r=clientnonce"), "{nonce}");
        assert!(
            nonce.len() > "r=clientnonce".len() + 20,
            "the server adds its own random part: {nonce}"
        );
    }

    #[test]
    fn random_nonces_differ_and_are_valid() {
        let (a, b) = (random_nonce(), random_nonce());
        assert_ne!(a, b);
        assert!(valid_nonce(&a) && valid_nonce(&b));
    }

    #[test]
    fn escaped_user_name_is_unescaped_and_authzid_equal_to_it_is_accepted() {
        let stored = credential(ScramMechanism::ScramSha256, "pw");
        let client = TestClient::new(
            ScramMechanism::ScramSha256,
            "n,a=a=3Db=2Cc,",
            "a=3Db=2Cc",
            "pw",
            "nonce1",
        );
        let mut seen = String::new();
        let mut server = ScramServer::with_random_nonce(ScramMechanism::ScramSha256);
        let server_first = server
            .client_first(&client.client_first(), |user| {
                seen = user.to_string();
                Some(stored.clone())
            })
            .expect("first");
        let (client_final, _) = client.client_final(&server_first);
        let outcome = server.client_final(&client_final).expect("final");
        assert_eq!(seen, "a=b,c");
        assert_eq!(outcome.user, "a=b,c");
    }

    #[test]
    fn wrong_password_fails_with_invalid_proof_and_ends_the_exchange() {
        let stored = credential(ScramMechanism::ScramSha256, "right");
        let client = TestClient::new(ScramMechanism::ScramSha256, "n,,", "user", "wrong", "abc");
        let mut server = ScramServer::with_random_nonce(ScramMechanism::ScramSha256);
        let server_first = server
            .client_first(&client.client_first(), |_| Some(stored.clone()))
            .expect("first");
        let (client_final, _) = client.client_final(&server_first);
        assert_eq!(
            server.client_final(&client_final),
            Err(ScramError::InvalidProof)
        );
        assert_eq!(server.authenticated_user(), None);
        let again = server.client_final(&client_final);
        assert_eq!(
            again,
            Err(ScramError::UnexpectedMessage {
                message: "client-final message",
                state: "failed"
            })
        );
    }

    #[test]
    fn wrong_password_and_unknown_user_look_the_same_to_the_client() {
        let m = ScramMechanism::ScramSha256;
        let unknown = ScramError::UnknownUser {
            mechanism: m,
            user: "x".into(),
        };
        assert_eq!(
            unknown.client_message(m),
            ScramError::InvalidProof.client_message(m)
        );
        assert!(
            !unknown.client_message(m).contains('x'),
            "the user name is not echoed"
        );
    }

    #[test]
    fn tampered_nonce_is_refused() {
        let mut server = rfc_server_after_first();
        let tampered = RFC_CLIENT_FINAL.replace("k0,p=", "k1,p=");
        assert_eq!(
            server.client_final(tampered.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn nonce_that_only_ends_with_the_server_nonce_is_refused() {
        // Kafka only checks `endsWith(serverNonce)`; RFC 5802 wants the whole nonce echoed.
        let mut server = rfc_server_after_first();
        let tampered = RFC_CLIENT_FINAL.replace("r=rOprNG", "r=XOprNG");
        assert_eq!(
            server.client_final(tampered.as_bytes()),
            Err(ScramError::NonceMismatch)
        );
    }

    #[test]
    fn tampered_proof_is_refused() {
        let mut server = rfc_server_after_first();
        let tampered = RFC_CLIENT_FINAL.replace("p=dHzb", "p=dHza");
        assert_eq!(
            server.client_final(tampered.as_bytes()),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn proof_of_the_wrong_length_is_refused() {
        let mut server = rfc_server_after_first();
        let short = RFC_CLIENT_FINAL.replace(
            "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            "p=dHzbZapW",
        );
        assert_eq!(
            server.client_final(short.as_bytes()),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn bad_base64_proof_is_refused() {
        let mut server = rfc_server_after_first();
        let bad = RFC_CLIENT_FINAL.replace("p=dHzb", "p=d!zb");
        assert_eq!(
            server.client_final(bad.as_bytes()),
            Err(ScramError::BadBase64 { part: "proof" })
        );
    }

    #[test]
    fn bad_base64_channel_binding_is_refused() {
        let mut server = rfc_server_after_first();
        let bad = RFC_CLIENT_FINAL.replace("c=biws", "c=biw");
        assert_eq!(
            server.client_final(bad.as_bytes()),
            Err(ScramError::BadBase64 {
                part: "channel binding"
            })
        );
    }

    #[test]
    fn channel_binding_request_is_refused() {
        let mut server = rfc_server();
        let result = server.client_first(b"p=tls-unique,,n=user,r=abc", |_| Some(rfc_credential()));
        assert_eq!(
            result,
            Err(ScramError::ChannelBindingNotSupported {
                flag: "p=tls-unique".into()
            })
        );
        let mut server = rfc_server();
        let result = server.client_first(b"y,,n=user,r=abc", |_| Some(rfc_credential()));
        assert_eq!(
            result,
            Err(ScramError::ChannelBindingNotSupported { flag: "y".into() })
        );
    }

    #[test]
    fn channel_binding_other_than_the_gs2_header_is_refused() {
        let mut server = rfc_server_after_first();
        // "eSws" is base64("y,,"), not the "n,," the client-first carried.
        let wrong = RFC_CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(
            server.client_final(wrong.as_bytes()),
            Err(ScramError::ChannelBindingMismatch)
        );
    }

    #[test]
    fn authzid_other_than_the_user_is_refused_with_kafkas_message() {
        let mut server = rfc_server();
        let result = server.client_first(b"n,a=admin,n=user,r=abc", |_| Some(rfc_credential()));
        let err = result.expect_err("authzid mismatch");
        assert_eq!(
            err,
            ScramError::AuthorizationIdMismatch {
                authzid: "admin".into(),
                user: "user".into()
            }
        );
        assert_eq!(
            err.client_message(ScramMechanism::ScramSha256),
            "Authentication failed: Client requested an authorization id that is different from username"
        );
    }

    #[test]
    fn a_second_client_first_is_refused() {
        let mut server = rfc_server_after_first();
        let again = server.client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()));
        assert_eq!(
            again,
            Err(ScramError::UnexpectedMessage {
                message: "client-first message",
                state: "receive-client-final"
            })
        );
        // The replay ended the exchange: even the right client-final is now refused.
        let last = server.client_final(RFC_CLIENT_FINAL.as_bytes());
        assert_eq!(
            last,
            Err(ScramError::UnexpectedMessage {
                message: "client-final message",
                state: "failed"
            })
        );
    }

    #[test]
    fn a_completed_exchange_refuses_further_messages() {
        let mut server = rfc_server_after_first();
        server
            .client_final(RFC_CLIENT_FINAL.as_bytes())
            .expect("final");
        assert_eq!(
            server.client_final(RFC_CLIENT_FINAL.as_bytes()),
            Err(ScramError::UnexpectedMessage {
                message: "client-final message",
                state: "complete"
            })
        );
        assert_eq!(server.authenticated_user(), None, "the exchange failed");
        assert!(server
            .client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()))
            .is_err());
    }

    #[test]
    fn client_final_before_client_first_is_refused() {
        let mut server = rfc_server();
        assert_eq!(
            server.client_final(RFC_CLIENT_FINAL.as_bytes()),
            Err(ScramError::UnexpectedMessage {
                message: "client-final message",
                state: "receive-client-first"
            })
        );
    }

    #[test]
    fn a_failed_client_first_ends_the_exchange() {
        let mut server = rfc_server();
        assert!(server
            .client_first(b"garbage", |_| Some(rfc_credential()))
            .is_err());
        let retry = server.client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()));
        assert_eq!(
            retry,
            Err(ScramError::UnexpectedMessage {
                message: "client-first message",
                state: "failed"
            })
        );
    }

    #[test]
    fn oversized_messages_are_refused_before_parsing() {
        let huge = format!("n,,n=user,r={}", "x".repeat(SASL_MESSAGE_BYTES_MAX));
        let mut server = rfc_server();
        let result = server.client_first(huge.as_bytes(), |_| {
            panic!("no lookup for an oversized message")
        });
        assert_eq!(
            result,
            Err(ScramError::TooLong {
                len: huge.len(),
                max: SASL_MESSAGE_BYTES_MAX
            })
        );

        let mut server = rfc_server_after_first();
        let huge_final = format!("{RFC_CLIENT_FINAL}{}", "A".repeat(SASL_MESSAGE_BYTES_MAX));
        assert!(matches!(
            server.client_final(huge_final.as_bytes()),
            Err(ScramError::TooLong { .. })
        ));
    }

    #[test]
    fn a_message_at_the_limit_is_parsed() {
        let nonce = "x".repeat(SASL_MESSAGE_BYTES_MAX - "n,,n=user,r=".len());
        let message = format!("n,,n=user,r={nonce}");
        assert_eq!(message.len(), SASL_MESSAGE_BYTES_MAX);
        assert!(rfc_server()
            .client_first(message.as_bytes(), |_| Some(rfc_credential()))
            .is_ok());
    }

    #[test]
    fn unknown_user_fails_at_client_first() {
        let mut server = rfc_server();
        let result = server.client_first(RFC_CLIENT_FIRST.as_bytes(), |_| None);
        assert_eq!(
            result,
            Err(ScramError::UnknownUser {
                mechanism: ScramMechanism::ScramSha256,
                user: "user".into()
            })
        );
    }

    #[test]
    fn credential_of_the_other_mechanism_is_refused() {
        let mut server = ScramServer::with_random_nonce(ScramMechanism::ScramSha512);
        let result = server.client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()));
        assert!(
            matches!(result, Err(ScramError::CredentialMechanismMismatch { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn delegation_token_extension_is_refused() {
        let mut server = rfc_server();
        let result = server.client_first(b"n,,n=tokenid,r=abc,tokenauth=true", |_| {
            Some(rfc_credential())
        });
        assert_eq!(result, Err(ScramError::DelegationTokenNotSupported));
        let mut server = rfc_server();
        let result = server.client_first(b"n,,n=tokenid,r=abc,tokenauth=TRUE", |_| {
            Some(rfc_credential())
        });
        assert_eq!(
            result,
            Err(ScramError::DelegationTokenNotSupported),
            "Boolean.parseBoolean ignores case"
        );
    }

    #[test]
    fn unknown_extensions_are_ignored_but_signed() {
        // Kafka ignores extensions it does not know; the proof still covers them because the
        // AuthMessage is built from the client's own bytes.
        let stored = credential(ScramMechanism::ScramSha256, "pw");
        let mut client = TestClient::new(ScramMechanism::ScramSha256, "n,,", "user", "pw", "abc");
        client
            .client_first_bare
            .push_str(",tokenauth=false,traceid=42");
        assert_eq!(
            exchange(&client, &stored).map(|o| o.user),
            Ok("user".to_string())
        );
    }

    #[test]
    fn mandatory_extension_is_refused() {
        let mut server = rfc_server();
        let result = server.client_first(b"n,,m=ext,n=user,r=abc", |_| Some(rfc_credential()));
        assert_eq!(result, Err(ScramError::MandatoryExtension));
    }

    #[test]
    fn invalid_server_nonce_fails_cleanly() {
        let mut server = ScramServer::new(ScramMechanism::ScramSha256, || "has,comma".to_string());
        let result = server.client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()));
        assert_eq!(result, Err(ScramError::InvalidServerNonce));
        let mut server = ScramServer::new(ScramMechanism::ScramSha256, String::new);
        assert!(server
            .client_first(RFC_CLIENT_FIRST.as_bytes(), |_| Some(rfc_credential()))
            .is_err());
    }

    #[test]
    fn every_truncation_of_a_client_final_is_refused() {
        for len in 0..RFC_CLIENT_FINAL.len() {
            let mut server = rfc_server_after_first();
            let result = server.client_final(&RFC_CLIENT_FINAL.as_bytes()[..len]);
            assert!(result.is_err(), "prefix of {len} bytes was accepted");
        }
    }

    #[test]
    fn every_single_byte_change_of_a_client_final_is_refused() {
        for i in 0..RFC_CLIENT_FINAL.len() {
            for byte in [0u8, b',', b'=', b'A', 0xff] {
                let mut message = RFC_CLIENT_FINAL.as_bytes().to_vec();
                if message[i] == byte {
                    continue;
                }
                message[i] = byte;
                let mut server = rfc_server_after_first();
                assert!(
                    server.client_final(&message).is_err(),
                    "changed byte {i} to {byte:#x} and was accepted"
                );
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // Deterministic pseudo-random inputs of every length up to 300, through both steps,
        // drawn from the bytes the parser cares about.
        let alphabet = b"n,=a2C3Dr=pcm\x00\xc3";
        let mut x: u32 = 0x1234_5678;
        for len in 0..300 {
            let message: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    alphabet[x as usize % alphabet.len()]
                })
                .collect();
            let mut server = rfc_server();
            let first = server.client_first(&message, |_| Some(rfc_credential()));
            let mut after_first = rfc_server_after_first();
            let last = after_first.client_final(&message);
            assert!(
                last.is_err(),
                "random bytes {message:?} passed as a client-final"
            );
            if first.is_ok() {
                assert!(
                    message.starts_with(b"n,"),
                    "accepted a client-first without gs2 header: {message:?}"
                );
            }
        }
    }
}
