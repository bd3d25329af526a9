//! SASL/PLAIN (RFC 4616), server side, as Kafka's `PlainSaslServer`: one message
//! `[authzid] NUL authcid NUL passwd`, checked against the user's SCRAM credential, so that
//! PLAIN and SCRAM share one credential store and the broker never keeps a password.
//! Pure: no I/O; the caller looks the credential up. PLAIN sends the password in clear, so
//! the wiring should offer it only on TLS listeners.

use super::credentials::ScramCredential;
use crate::limits::SASL_MESSAGE_BYTES_MAX;

/// Why a PLAIN authentication failed; the connection is closed after answering
/// SASL_AUTHENTICATION_FAILED with [`PlainError::client_message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    #[error("PLAIN message of {len} bytes exceeds the {max}-byte limit")]
    TooLong { len: usize, max: usize },
    #[error("PLAIN message is not UTF-8")]
    NotUtf8,
    #[error("PLAIN message has {tokens} NUL-separated tokens, not 3")]
    TokenCount { tokens: usize },
    #[error("PLAIN user name is empty")]
    EmptyUser,
    #[error("PLAIN password is empty")]
    EmptyPassword,
    /// An unknown user or a wrong password: one variant, so that neither the log line's
    /// shape nor the client's message tells them apart.
    #[error("PLAIN credentials of user {user:?} are invalid")]
    InvalidCredentials { user: String },
    #[error("PLAIN authorization id {authzid:?} differs from the user {user:?}")]
    AuthorizationIdMismatch { authzid: String, user: String },
}

impl PlainError {
    /// The error message SaslAuthenticate carries to the client: Kafka's `PlainSaslServer`
    /// throws `SaslAuthenticationException`s, whose text the client sees, with these words.
    pub fn client_message(&self) -> String {
        match self {
            PlainError::TooLong { .. } | PlainError::NotUtf8 => "Invalid SASL/PLAIN response".to_string(),
            PlainError::TokenCount { tokens } => format!("Invalid SASL/PLAIN response: expected 3 tokens, got {tokens}"),
            PlainError::EmptyUser => "Authentication failed: username not specified".to_string(),
            PlainError::EmptyPassword => "Authentication failed: password not specified".to_string(),
            PlainError::InvalidCredentials { .. } => "Authentication failed: Invalid username or password".to_string(),
            PlainError::AuthorizationIdMismatch { .. } => {
                "Authentication failed: Client requested an authorization id that is different from username".to_string()
            }
        }
    }
}

/// Authenticates one PLAIN message and returns the user name. `lookup` is asked for a SCRAM
/// credential of the user (either mechanism: the password is re-derived with that
/// credential's salt and iterations and its stored key compared in constant time).
///
/// Checks in Kafka's order: the shape, an empty user or password, the password, then that
/// the authorization id, if any, names the user itself.
pub fn authenticate(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Option<ScramCredential>,
) -> Result<String, PlainError> {
    let [authzid, user, password] = split_message(message)?;
    if user.is_empty() {
        return Err(PlainError::EmptyUser);
    }
    if password.is_empty() {
        return Err(PlainError::EmptyPassword);
    }
    let verified = lookup(user).is_some_and(|credential| credential.verify_password(password));
    if !verified {
        return Err(PlainError::InvalidCredentials {
            user: user.to_string(),
        });
    }
    if !authzid.is_empty() && authzid != user {
        return Err(PlainError::AuthorizationIdMismatch {
            authzid: authzid.to_string(),
            user: user.to_string(),
        });
    }
    Ok(user.to_string())
}

/// The three NUL-separated tokens of a bounded, UTF-8 message.
fn split_message(message: &[u8]) -> Result<[&str; 3], PlainError> {
    if message.len() > SASL_MESSAGE_BYTES_MAX {
        return Err(PlainError::TooLong {
            len: message.len(),
            max: SASL_MESSAGE_BYTES_MAX,
        });
    }
    let text = std::str::from_utf8(message).map_err(|_| PlainError::NotUtf8)?;
    let mut tokens = text.split('\0');
    match (tokens.next(), tokens.next(), tokens.next(), tokens.next()) {
        (Some(authzid), Some(user), Some(password), None) => Ok([authzid, user, password]),
        _ => Err(PlainError::TokenCount {
            tokens: text.split('\0').count(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::credentials::ScramMechanism;

    fn alice(mechanism: ScramMechanism) -> ScramCredential {
        ScramCredential::new(mechanism, "alice-sëcret", b"alice's salt", 4096).expect("credential")
    }

    fn only_alice(user: &str) -> Option<ScramCredential> {
        (user == "alice").then(|| alice(ScramMechanism::ScramSha256))
    }

    #[test]
    fn right_password_authenticates_against_either_mechanism() {
        for mechanism in ScramMechanism::ALL {
            let result = authenticate("\0alice\0alice-sëcret".as_bytes(), |_| {
                Some(alice(mechanism))
            });
            assert_eq!(result, Ok("alice".to_string()), "{mechanism}");
        }
    }

    #[test]
    fn lookup_is_asked_for_the_authcid() {
        let mut asked = String::new();
        let _ = authenticate(b"\0alice\0pw", |user| {
            asked = user.to_string();
            None
        });
        assert_eq!(asked, "alice");
    }

    #[test]
    fn authzid_equal_to_the_user_is_accepted() {
        assert_eq!(
            authenticate("alice\0alice\0alice-sëcret".as_bytes(), only_alice),
            Ok("alice".to_string())
        );
    }

    #[test]
    fn authzid_of_another_user_is_refused() {
        let result = authenticate("admin\0alice\0alice-sëcret".as_bytes(), only_alice);
        let err = result.expect_err("authzid mismatch");
        assert_eq!(
            err,
            PlainError::AuthorizationIdMismatch {
                authzid: "admin".into(),
                user: "alice".into()
            }
        );
        assert!(err.client_message().contains("authorization id"));
    }

    #[test]
    fn wrong_password_is_refused() {
        let result = authenticate(b"\0alice\0alice-secret", only_alice);
        assert_eq!(
            result,
            Err(PlainError::InvalidCredentials {
                user: "alice".into()
            })
        );
    }

    #[test]
    fn unknown_user_gets_the_same_message_as_a_wrong_password() {
        let unknown = authenticate(b"\0bob\0alice-secret", only_alice).expect_err("unknown");
        let wrong = authenticate(b"\0alice\0alice-secret", only_alice).expect_err("wrong");
        assert_eq!(unknown.client_message(), wrong.client_message());
        assert_eq!(
            unknown.client_message(),
            "Authentication failed: Invalid username or password"
        );
    }

    #[test]
    fn empty_user_or_password_is_refused_before_the_lookup() {
        let no_lookup = |_: &str| -> Option<ScramCredential> { panic!("no lookup expected") };
        assert_eq!(
            authenticate(b"\0\0pw", no_lookup),
            Err(PlainError::EmptyUser)
        );
        assert_eq!(
            authenticate(b"\0alice\0", no_lookup),
            Err(PlainError::EmptyPassword)
        );
        assert_eq!(authenticate(b"\0\0", no_lookup), Err(PlainError::EmptyUser));
    }

    #[test]
    fn wrong_token_counts_are_refused_with_kafkas_message() {
        let no_lookup = |_: &str| -> Option<ScramCredential> { panic!("no lookup expected") };
        for (message, tokens) in [
            (&b""[..], 1),
            (b"alice", 1),
            (b"\0alice", 2),
            (b"\0alice\0pw\0", 4),
            (b"a\0b\0c\0d\0e", 5),
        ] {
            let err = authenticate(message, no_lookup).expect_err("token count");
            assert_eq!(err, PlainError::TokenCount { tokens }, "{message:?}");
            assert_eq!(
                err.client_message(),
                format!("Invalid SASL/PLAIN response: expected 3 tokens, got {tokens}")
            );
        }
    }

    #[test]
    fn non_utf8_is_refused() {
        assert_eq!(
            authenticate(b"\0alice\0\xff\xfe", only_alice),
            Err(PlainError::NotUtf8)
        );
    }

    #[test]
    fn oversized_message_is_refused() {
        let mut message = b"\0alice\0".to_vec();
        message.resize(SASL_MESSAGE_BYTES_MAX + 1, b'x');
        let no_lookup = |_: &str| -> Option<ScramCredential> { panic!("no lookup expected") };
        assert_eq!(
            authenticate(&message, no_lookup),
            Err(PlainError::TooLong {
                len: SASL_MESSAGE_BYTES_MAX + 1,
                max: SASL_MESSAGE_BYTES_MAX
            })
        );
    }

    #[test]
    fn rfc4616_lengths_of_255_octets_are_accepted() {
        let user = "u".repeat(255);
        let password = "p".repeat(255);
        let credential =
            ScramCredential::new(ScramMechanism::ScramSha512, &password, b"salt", 4096)
                .expect("credential");
        let message = format!("{user}\0{user}\0{password}");
        assert_eq!(
            authenticate(message.as_bytes(), |_| Some(credential)),
            Ok(user)
        );
    }

    #[test]
    fn password_is_compared_exactly() {
        // No normalisation: Kafka's clients send the UTF-8 bytes as typed.
        for near in ["alice-sëcret ", "Alice-sëcret", "alice-se\u{308}cret"] {
            let message = format!("\0alice\0{near}");
            assert!(
                authenticate(message.as_bytes(), only_alice).is_err(),
                "{near:?}"
            );
        }
    }
}
