//! The client side of SASL/PLAIN and SASL/SCRAM, for tern's own connections: a broker
//! reaching a peer's SASL inter-broker listener, the admin CLI reaching a SASL listener.
//! Pure: tokens in, tokens out; `crate::client` carries them in SaslAuthenticate.
//!
//! The server is not trusted either: its SCRAM messages are parsed strictly, its nonce
//! must extend ours, its iteration count must be one a broker may store (a hostile
//! server cannot make us spin on PBKDF2), and its final signature must prove that it
//! holds our credential.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;

use super::credentials::ScramMechanism;
use super::scram_messages::encode_saslname;
use super::session::Mechanism;

/// Who to log in as, with what.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslLogin {
    pub mechanism: Mechanism,
    pub user: String,
    pub password: String,
}

/// Never prints the password.
impl fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism.name())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslClientError {
    #[error("the server's SCRAM {part} message is malformed")]
    Malformed { part: &'static str },
    #[error("the server's SCRAM nonce does not extend ours")]
    Nonce,
    #[error("the server asks for {0} SCRAM iterations, outside what a broker may store")]
    Iterations(u32),
    #[error("the server refused the SCRAM exchange: {0}")]
    ServerError(String),
    #[error("the server's SCRAM signature is wrong: it does not hold this user's credential")]
    ServerSignature,
    #[error("the server sent a token after the exchange ended")]
    Finished,
}

/// What to do after a server token.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this token next.
    Send(Vec<u8>),
    /// Authenticated (and, for SCRAM, the server proved itself).
    Done,
}

/// One client exchange.
#[derive(Debug)]
pub struct SaslClient {
    login: SaslLogin,
    state: State,
}

#[derive(Debug)]
enum State {
    Start,
    /// PLAIN sent: the server's (empty) answer ends it.
    PlainSent,
    /// SCRAM client-first sent.
    FirstSent {
        nonce: String,
        bare: String,
    },
    /// SCRAM client-final sent: the server's signature to expect.
    FinalSent {
        server_signature: Vec<u8>,
    },
    Done,
}

impl SaslClient {
    pub fn new(login: SaslLogin) -> Self {
        Self {
            login,
            state: State::Start,
        }
    }

    /// The first token, with a fresh random nonce for SCRAM.
    pub fn first(&mut self) -> Vec<u8> {
        let nonce = BASE64.encode(rand::random::<[u8; 24]>());
        self.first_with_nonce(nonce)
    }

    fn first_with_nonce(&mut self, nonce: String) -> Vec<u8> {
        match self.login.mechanism {
            Mechanism::Plain => {
                self.state = State::PlainSent;
                format!("\0{}\0{}", self.login.user, self.login.password).into_bytes()
            }
            Mechanism::Scram(_) => {
                let bare = format!("n={},r={nonce}", encode_saslname(&self.login.user));
                let message = format!("n,,{bare}").into_bytes();
                self.state = State::FirstSent { nonce, bare };
                message
            }
        }
    }

    /// The next step after the server's token `token`.
    pub fn next(&mut self, token: &[u8]) -> Result<Step, SaslClientError> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::PlainSent => Ok(Step::Done),
            State::FirstSent { nonce, bare } => {
                let Mechanism::Scram(mechanism) = self.login.mechanism else {
                    return Err(SaslClientError::Finished);
                };
                let (message, server_signature) =
                    client_final(mechanism, &self.login.password, &nonce, &bare, token)?;
                self.state = State::FinalSent { server_signature };
                Ok(Step::Send(message))
            }
            State::FinalSent { server_signature } => {
                verify_server_final(token, &server_signature)?;
                Ok(Step::Done)
            }
            State::Start | State::Done => Err(SaslClientError::Finished),
        }
    }
}

/// The client-final message answering `server_first`, and the server signature its
/// server-final must carry (RFC 5802 §3).
fn client_final(
    mechanism: ScramMechanism,
    password: &str,
    nonce: &str,
    bare: &str,
    server_first: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), SaslClientError> {
    let malformed = SaslClientError::Malformed { part: "first" };
    let server_first = std::str::from_utf8(server_first).map_err(|_| malformed.clone())?;
    if let Some(error) = server_first.strip_prefix("e=") {
        return Err(SaslClientError::ServerError(error.to_string()));
    }
    let mut attributes = server_first.split(',');
    let mut attribute = |key: &str| {
        attributes
            .next()
            .and_then(|a| a.strip_prefix(key))
            .ok_or_else(|| malformed.clone())
    };
    let combined_nonce = attribute("r=")?;
    let salt = BASE64
        .decode(attribute("s=")?)
        .map_err(|_| SaslClientError::Malformed { part: "first" })?;
    let iterations: u32 = attribute("i=")?
        .parse()
        .map_err(|_| SaslClientError::Malformed { part: "first" })?;
    if combined_nonce.len() <= nonce.len() || !combined_nonce.starts_with(nonce) {
        return Err(SaslClientError::Nonce);
    }
    if !(ScramMechanism::ITERATIONS_MIN..=ScramMechanism::ITERATIONS_MAX).contains(&iterations) {
        return Err(SaslClientError::Iterations(iterations));
    }
    let without_proof = format!("c=biws,r={combined_nonce}");
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let salted = mechanism.hi(password.as_bytes(), &salt, iterations);
    let client_key = mechanism.hmac(&salted, b"Client Key");
    let stored_key = mechanism.hash(&client_key);
    let client_signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&client_signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let server_key = mechanism.hmac(&salted, b"Server Key");
    let server_signature = mechanism.hmac(&server_key, auth_message.as_bytes());
    let message = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
    Ok((message, server_signature))
}

fn verify_server_final(token: &[u8], expected: &[u8]) -> Result<(), SaslClientError> {
    let malformed = || SaslClientError::Malformed { part: "final" };
    let text = std::str::from_utf8(token).map_err(|_| malformed())?;
    if let Some(error) = text.strip_prefix("e=") {
        return Err(SaslClientError::ServerError(error.to_string()));
    }
    let encoded = text
        .split(',')
        .next()
        .and_then(|v| v.strip_prefix("v="))
        .ok_or_else(malformed)?;
    let signature = BASE64.decode(encoded).map_err(|_| malformed())?;
    if bool::from(signature.ct_eq(expected)) {
        Ok(())
    } else {
        Err(SaslClientError::ServerSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::credentials::ScramCredential;
    use crate::security::scram::{ScramOutcome, ScramServer};

    fn login(mechanism: Mechanism, password: &str) -> SaslLogin {
        SaslLogin {
            mechanism,
            user: "user".into(),
            password: password.into(),
        }
    }

    /// RFC 7677 §3's SCRAM-SHA-256 example, from the client's side.
    #[test]
    fn rfc7677_client_messages_reproduce_byte_for_byte() {
        let mut client = SaslClient::new(login(
            Mechanism::Scram(ScramMechanism::ScramSha256),
            "pencil",
        ));
        let first = client.first_with_nonce("rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let Step::Send(last) = client.next(server_first).expect("client-final") else {
            panic!("a client-final was due");
        };
        assert_eq!(
            String::from_utf8(last).expect("UTF-8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        assert_eq!(client.next(server_final), Ok(Step::Done));
        assert_eq!(client.next(b"more"), Err(SaslClientError::Finished));
    }

    /// Our client against our server, both mechanisms; a wrong password fails on the
    /// server, a server without the credential fails on the client.
    #[test]
    fn client_and_server_agree_and_each_catches_a_wrong_secret() {
        for mechanism in [ScramMechanism::ScramSha256, ScramMechanism::ScramSha512] {
            let stored = ScramCredential::generate(mechanism, "right", 4096).expect("credential");
            let run = |password: &str| -> (Result<ScramOutcome, _>, SaslClient) {
                let mut client = SaslClient::new(login(Mechanism::Scram(mechanism), password));
                let mut server = ScramServer::with_random_nonce(mechanism);
                let server_first = server
                    .client_first(&client.first(), |_| Some(stored.clone()))
                    .expect("server-first");
                let Ok(Step::Send(last)) = client.next(&server_first) else {
                    panic!("a client-final was due");
                };
                (server.client_final(&last), client)
            };
            let (outcome, mut client) = run("right");
            let outcome = outcome.expect("authenticated");
            assert_eq!(client.next(&outcome.server_final), Ok(Step::Done));
            let (outcome, _) = run("wrong");
            assert!(outcome.is_err(), "{mechanism}: a wrong password passed");
            // A server signing with another credential is caught.
            let (outcome, mut client) = run("right");
            let mut forged = outcome.expect("authenticated").server_final;
            let last = forged.len() - 2;
            forged[last] ^= 1;
            assert!(
                client.next(&forged).is_err(),
                "{mechanism}: forged signature passed"
            );
        }
    }

    #[test]
    fn hostile_server_first_messages_are_refused() {
        let fresh = || {
            let mut client =
                SaslClient::new(login(Mechanism::Scram(ScramMechanism::ScramSha512), "pw"));
            client.first_with_nonce("abc".into());
            client
        };
        let cases: [(&[u8], SaslClientError); 5] = [
            (b"r=xyz123,s=c2FsdA==,i=4096", SaslClientError::Nonce),
            (b"r=abc,s=c2FsdA==,i=4096", SaslClientError::Nonce),
            (
                b"r=abcdef,s=c2FsdA==,i=100000000",
                SaslClientError::Iterations(100_000_000),
            ),
            (
                b"r=abcdef,s=***,i=4096",
                SaslClientError::Malformed { part: "first" },
            ),
            (
                b"e=unknown-user",
                SaslClientError::ServerError("unknown-user".into()),
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(fresh().next(message), Err(expected));
        }
    }

    #[test]
    fn plain_sends_one_token_and_never_prints_the_password() {
        let mut client = SaslClient::new(login(Mechanism::Plain, "secret"));
        assert_eq!(client.first(), b"\0user\0secret");
        assert_eq!(client.next(b""), Ok(Step::Done));
        assert!(!format!("{:?}", login(Mechanism::Plain, "secret")).contains("secret"));
    }
}
