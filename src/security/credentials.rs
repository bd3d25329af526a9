//! What a broker stores for SCRAM users: the mechanisms, the salted credential (never a
//! password), its JSON form for the metadata store, and the DescribeUserScramCredentials
//! view (mechanism and iterations only). Pure: no store access here.
//!
//! JSON form of one credential (one per user and mechanism; the user is the store's key):
//! ```text
//! {"mechanism":"SCRAM-SHA-256","salt":"W22ZaJ0SNY7soEsUEjb6gQ==",
//!  "stored_key":"<base64, 32 bytes>","server_key":"<base64, 32 bytes>","iterations":4096}
//! ```

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// A SCRAM mechanism: which hash the HMACs and PBKDF2 use.
///
/// Serialised as its SASL name (`"SCRAM-SHA-256"`), the string SaslHandshake carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScramMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl ScramMechanism {
    /// Both mechanisms, in Kafka's order (its `ScramMechanism.values()`).
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::ScramSha256, ScramMechanism::ScramSha512];

    /// Kafka's minimum iteration count for both mechanisms (`ScramMechanism.minIterations`);
    /// RFC 7677 asks for at least 4096 as well.
    pub const ITERATIONS_MIN: u32 = 4096;

    /// Kafka's maximum (`ScramMechanism.maxIterations`, enforced by AlterUserScramCredentials).
    /// Why a maximum: every PLAIN login and every credential creation runs PBKDF2 this many
    /// times on a broker thread.
    pub const ITERATIONS_MAX: u32 = 16384;

    /// The SASL mechanism name, as in SaslHandshake and `sasl.enabled.mechanisms`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::ScramSha256 => "SCRAM-SHA-256",
            ScramMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism a SASL name denotes; names are case-sensitive, as in Kafka.
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The `Mechanism` int8 of DescribeUserScramCredentials and AlterUserScramCredentials
    /// (Kafka's `ScramMechanism.type()`: 1 = SHA-256, 2 = SHA-512; 0 is "unknown").
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::ScramSha256 => 1,
            ScramMechanism::ScramSha512 => 2,
        }
    }

    /// The mechanism of a wire `Mechanism` int8, if it names one.
    pub fn from_kafka_type(value: i8) -> Option<ScramMechanism> {
        Self::ALL.into_iter().find(|m| m.kafka_type() == value)
    }

    /// The length in bytes of this mechanism's digest, hence of every key and proof.
    pub fn digest_bytes(self) -> usize {
        match self {
            ScramMechanism::ScramSha256 => 32,
            ScramMechanism::ScramSha512 => 64,
        }
    }

    /// `HMAC(key, data)` (RFC 5802 §2.2). HMAC accepts a key of any length.
    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::ScramSha256 => {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::ScramSha512 => {
                let mut mac =
                    Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes a key of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `H(data)` (RFC 5802 §2.2).
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, iterations)` (RFC 5802 §2.2), which is PBKDF2-HMAC with a
    /// digest-long output: the salted password.
    pub fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.digest_bytes()];
        match self {
            ScramMechanism::ScramSha256 => {
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out)
            }
            ScramMechanism::ScramSha512 => {
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out)
            }
        }
        out
    }
}

impl std::fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a credential could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("{mechanism} needs between {min} and {max} iterations, got {iterations}", min = ScramMechanism::ITERATIONS_MIN, max = ScramMechanism::ITERATIONS_MAX)]
    IterationsOutOfRange {
        mechanism: ScramMechanism,
        iterations: u32,
    },
    #[error("a SCRAM salt must be 1 to {max} bytes, got {len}", max = SALT_BYTES_MAX)]
    SaltLength { len: usize },
    #[error("a SCRAM password must not be empty")]
    EmptyPassword,
    #[error("{field} of a {mechanism} credential must be {expected} bytes, got {actual}")]
    KeyLength {
        mechanism: ScramMechanism,
        field: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("{field} is not valid base64")]
    BadBase64 { field: &'static str },
    #[error("stored SCRAM credential is not valid JSON of the expected shape: {0}")]
    BadJson(String),
}

/// The largest salt a credential may carry, in bytes. Why: the salt is echoed, base64'd, in
/// every server-first message, which must stay far below any client's token limit. Kafka's
/// own salts are about 26 bytes; ours are [`SALT_BYTES_GENERATED`].
pub const SALT_BYTES_MAX: usize = 1024;

/// The length of the salts [`ScramCredential::generate`] draws.
pub const SALT_BYTES_GENERATED: usize = 32;

/// What a broker stores for one user and one mechanism (RFC 5802 §3): enough to check a
/// client's proof and to prove itself, never the password nor the salted password (either
/// would let a reader log in as the user).
///
/// Invariant, kept by every constructor: `iterations` in
/// [`ScramMechanism::ITERATIONS_MIN`]`..=`[`ScramMechanism::ITERATIONS_MAX`], a salt of 1 to
/// [`SALT_BYTES_MAX`] bytes, both keys exactly `mechanism.digest_bytes()` long.
#[derive(Clone)]
pub struct ScramCredential {
    mechanism: ScramMechanism,
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
    iterations: u32,
}

impl ScramCredential {
    /// Derives the credential of `password` (its UTF-8 bytes, not SASLprep'd, as Kafka's
    /// `ScramFormatter.normalize`) with `salt` and `iterations`.
    pub fn new(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, CredentialError> {
        if password.is_empty() {
            return Err(CredentialError::EmptyPassword);
        }
        check_salt_and_iterations(mechanism, salt, iterations)?;
        let salted = mechanism.hi(password.as_bytes(), salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// [`ScramCredential::new`] with a fresh random salt of [`SALT_BYTES_GENERATED`] bytes.
    pub fn generate(
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, CredentialError> {
        let salt: [u8; SALT_BYTES_GENERATED] = rand::random();
        Self::new(mechanism, password, &salt, iterations)
    }

    /// The credential of an already salted password: what AlterUserScramCredentials sends
    /// (a Kafka client salts the password itself, so the broker never sees it).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, CredentialError> {
        check_salt_and_iterations(mechanism, salt, iterations)?;
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        let stored_key = mechanism.hash(&client_key);
        let server_key = mechanism.hmac(salted_password, b"Server Key");
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            stored_key,
            server_key,
            iterations,
        })
    }

    /// A credential from its stored parts (the metadata store's form), validated.
    pub fn from_parts(
        mechanism: ScramMechanism,
        salt: Vec<u8>,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
        iterations: u32,
    ) -> Result<ScramCredential, CredentialError> {
        check_salt_and_iterations(mechanism, &salt, iterations)?;
        check_key_length(mechanism, "stored_key", &stored_key)?;
        check_key_length(mechanism, "server_key", &server_key)?;
        Ok(ScramCredential {
            mechanism,
            salt,
            stored_key,
            server_key,
            iterations,
        })
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    pub fn salt(&self) -> &[u8] {
        &self.salt
    }

    /// `H(HMAC(SaltedPassword, "Client Key"))`: what a client's proof is checked against.
    pub fn stored_key(&self) -> &[u8] {
        &self.stored_key
    }

    /// `HMAC(SaltedPassword, "Server Key")`: what the server signs its final message with.
    pub fn server_key(&self) -> &[u8] {
        &self.server_key
    }

    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    /// Whether `password` is the one this credential was derived from: re-derives the stored
    /// key with this credential's salt and iterations and compares in constant time. This is
    /// how PLAIN checks a password against the SCRAM store.
    pub fn verify_password(&self, password: &str) -> bool {
        let salted = self
            .mechanism
            .hi(password.as_bytes(), &self.salt, self.iterations);
        let client_key = self.mechanism.hmac(&salted, b"Client Key");
        let stored_key = self.mechanism.hash(&client_key);
        bool::from(stored_key.ct_eq(&self.stored_key))
    }
}

/// Never prints the keys: a stored key lets a reader impersonate the broker to a client
/// (server key) and is half of what an offline attack on the password needs.
impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("salt_bytes", &self.salt.len())
            .field("iterations", &self.iterations)
            .field("keys", &"<redacted>")
            .finish()
    }
}

fn check_salt_and_iterations(
    mechanism: ScramMechanism,
    salt: &[u8],
    iterations: u32,
) -> Result<(), CredentialError> {
    if !(ScramMechanism::ITERATIONS_MIN..=ScramMechanism::ITERATIONS_MAX).contains(&iterations) {
        return Err(CredentialError::IterationsOutOfRange {
            mechanism,
            iterations,
        });
    }
    if salt.is_empty() || salt.len() > SALT_BYTES_MAX {
        return Err(CredentialError::SaltLength { len: salt.len() });
    }
    Ok(())
}

fn check_key_length(
    mechanism: ScramMechanism,
    field: &'static str,
    key: &[u8],
) -> Result<(), CredentialError> {
    let expected = mechanism.digest_bytes();
    if key.len() != expected {
        return Err(CredentialError::KeyLength {
            mechanism,
            field,
            expected,
            actual: key.len(),
        });
    }
    Ok(())
}

/// A credential as the metadata store keeps it: the keys and salt in standard base64 so the
/// value stays readable JSON. Unknown fields are ignored, so a later version may add some.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredScramCredential {
    pub mechanism: ScramMechanism,
    pub salt: String,
    pub stored_key: String,
    pub server_key: String,
    pub iterations: u32,
}

impl From<&ScramCredential> for StoredScramCredential {
    fn from(credential: &ScramCredential) -> StoredScramCredential {
        StoredScramCredential {
            mechanism: credential.mechanism,
            salt: BASE64.encode(&credential.salt),
            stored_key: BASE64.encode(&credential.stored_key),
            server_key: BASE64.encode(&credential.server_key),
            iterations: credential.iterations,
        }
    }
}

impl TryFrom<StoredScramCredential> for ScramCredential {
    type Error = CredentialError;

    /// Validates as every constructor does: a corrupt or hand-edited store value becomes an
    /// error, never a credential that could make the exchange misbehave.
    fn try_from(stored: StoredScramCredential) -> Result<ScramCredential, CredentialError> {
        let decode = |value: &str, field: &'static str| {
            BASE64
                .decode(value)
                .map_err(|_| CredentialError::BadBase64 { field })
        };
        ScramCredential::from_parts(
            stored.mechanism,
            decode(&stored.salt, "salt")?,
            decode(&stored.stored_key, "stored_key")?,
            decode(&stored.server_key, "server_key")?,
            stored.iterations,
        )
    }
}

/// The JSON bytes the metadata store keeps for `credential`.
pub fn to_json(credential: &ScramCredential) -> Vec<u8> {
    serde_json::to_vec(&StoredScramCredential::from(credential))
        .expect("a struct of strings and an integer serialises")
}

/// The credential of stored JSON bytes, validated.
pub fn from_json(bytes: &[u8]) -> Result<ScramCredential, CredentialError> {
    let stored: StoredScramCredential =
        serde_json::from_slice(bytes).map_err(|e| CredentialError::BadJson(e.to_string()))?;
    ScramCredential::try_from(stored)
}

/// What DescribeUserScramCredentials reveals of a credential (its `CredentialInfo`): the
/// mechanism and the iteration count, never the salt or keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramCredentialInfo {
    pub mechanism: ScramMechanism,
    pub iterations: u32,
}

impl ScramCredential {
    /// This credential's DescribeUserScramCredentials view.
    pub fn info(&self) -> ScramCredentialInfo {
        ScramCredentialInfo {
            mechanism: self.mechanism,
            iterations: self.iterations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(mechanism: ScramMechanism, password: &str) -> ScramCredential {
        ScramCredential::new(mechanism, password, b"a fixed salt for tests", 4096)
            .expect("credential")
    }

    /// The RFC 7677 credential, whose keys are fixed by the RFC's example.
    fn rfc_credential() -> ScramCredential {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("RFC salt");
        ScramCredential::new(ScramMechanism::ScramSha256, "pencil", &salt, 4096)
            .expect("credential")
    }

    /// `Hi` written out from RFC 5802 §2.2, independent of the pbkdf2 crate.
    fn hi_by_hand(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Vec<u8> {
        let mut u = mechanism.hmac(password, &[salt, &[0, 0, 0, 1]].concat());
        let mut result = u.clone();
        for _ in 1..iterations {
            u = mechanism.hmac(password, &u);
            result.iter_mut().zip(&u).for_each(|(r, x)| *r ^= x);
        }
        result
    }

    #[test]
    fn credential_matches_one_built_from_the_salted_password() {
        let salt = b"salt";
        let salted = hi_by_hand(ScramMechanism::ScramSha512, b"pw", salt, 4096);
        let a = ScramCredential::new(ScramMechanism::ScramSha512, "pw", salt, 4096).expect("new");
        let b =
            ScramCredential::from_salted_password(ScramMechanism::ScramSha512, salt, &salted, 4096)
                .expect("salted");
        assert_eq!(a.stored_key(), b.stored_key());
        assert_eq!(a.server_key(), b.server_key());
        assert_eq!(a.stored_key().len(), 64);
    }

    #[test]
    fn credential_iterations_are_bounded_as_in_kafka() {
        for mechanism in ScramMechanism::ALL {
            let too_few = ScramCredential::new(mechanism, "pw", b"salt", 4095).map(|_| ());
            assert_eq!(
                too_few,
                Err(CredentialError::IterationsOutOfRange {
                    mechanism,
                    iterations: 4095
                })
            );
            let too_many = ScramCredential::new(mechanism, "pw", b"salt", 16385).map(|_| ());
            assert_eq!(
                too_many,
                Err(CredentialError::IterationsOutOfRange {
                    mechanism,
                    iterations: 16385
                })
            );
        }
    }

    #[test]
    fn credential_refuses_empty_password_and_bad_salts() {
        let m = ScramMechanism::ScramSha256;
        assert_eq!(
            ScramCredential::new(m, "", b"salt", 4096).map(|_| ()),
            Err(CredentialError::EmptyPassword)
        );
        assert_eq!(
            ScramCredential::new(m, "pw", b"", 4096).map(|_| ()),
            Err(CredentialError::SaltLength { len: 0 })
        );
        let long = vec![1u8; SALT_BYTES_MAX + 1];
        assert_eq!(
            ScramCredential::new(m, "pw", &long, 4096).map(|_| ()),
            Err(CredentialError::SaltLength {
                len: SALT_BYTES_MAX + 1
            })
        );
    }

    #[test]
    fn credential_from_parts_checks_key_lengths() {
        let good = credential(ScramMechanism::ScramSha256, "pw");
        let result = ScramCredential::from_parts(
            ScramMechanism::ScramSha512,
            good.salt().to_vec(),
            good.stored_key().to_vec(),
            good.server_key().to_vec(),
            4096,
        );
        assert!(matches!(
            result,
            Err(CredentialError::KeyLength {
                field: "stored_key",
                expected: 64,
                actual: 32,
                ..
            })
        ));
    }

    #[test]
    fn generated_credentials_get_distinct_salts_and_verify() {
        let a = ScramCredential::generate(ScramMechanism::ScramSha256, "pw", 4096).expect("a");
        let b = ScramCredential::generate(ScramMechanism::ScramSha256, "pw", 4096).expect("b");
        assert_ne!(a.salt(), b.salt());
        assert_ne!(a.stored_key(), b.stored_key());
        assert!(a.verify_password("pw") && b.verify_password("pw"));
        assert!(!a.verify_password("pW"));
    }

    #[test]
    fn credential_debug_hides_the_keys() {
        let stored = rfc_credential();
        let shown = format!("{stored:?}");
        assert!(
            shown.contains("redacted") && shown.contains("4096"),
            "{shown}"
        );
        assert!(
            !shown.contains(&format!("{:?}", stored.stored_key())),
            "{shown}"
        );
    }

    #[test]
    fn mechanism_names_and_kafka_types_round_trip() {
        for mechanism in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(mechanism.name()), Some(mechanism));
            assert_eq!(
                ScramMechanism::from_kafka_type(mechanism.kafka_type()),
                Some(mechanism)
            );
        }
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_name("PLAIN"), None);
        assert_eq!(ScramMechanism::from_kafka_type(0), None);
        assert_eq!(ScramMechanism::ScramSha512.kafka_type(), 2);
    }

    #[test]
    fn pbkdf2_matches_hi_written_out() {
        for mechanism in ScramMechanism::ALL {
            let by_crate = mechanism.hi(b"pencil", b"salt", 4096);
            assert_eq!(
                by_crate,
                hi_by_hand(mechanism, b"pencil", b"salt", 4096),
                "{mechanism}"
            );
            assert_eq!(by_crate.len(), mechanism.digest_bytes());
        }
    }

    #[test]
    fn json_round_trip_keeps_the_credential() {
        for mechanism in ScramMechanism::ALL {
            let original = credential(mechanism, "pw");
            let json = to_json(&original);
            let back = from_json(&json).expect("from_json");
            assert_eq!(
                StoredScramCredential::from(&back),
                StoredScramCredential::from(&original)
            );
            assert!(back.verify_password("pw"));
            assert!(!back.verify_password("px"));
        }
    }

    #[test]
    fn json_form_names_every_field() {
        let json: serde_json::Value =
            serde_json::from_slice(&to_json(&rfc_credential())).expect("json");
        assert_eq!(json["mechanism"], "SCRAM-SHA-256");
        assert_eq!(json["salt"], "W22ZaJ0SNY7soEsUEjb6gQ==");
        assert_eq!(json["iterations"], 4096);
        let stored_key = BASE64
            .decode(json["stored_key"].as_str().expect("stored_key"))
            .expect("base64");
        assert_eq!(stored_key, rfc_credential().stored_key());
        assert_eq!(json.as_object().map(|o| o.len()), Some(5));
    }

    #[test]
    fn json_with_unknown_fields_still_loads() {
        let mut json: serde_json::Value =
            serde_json::from_slice(&to_json(&rfc_credential())).expect("json");
        json["added_later"] = serde_json::json!(true);
        let back = from_json(json.to_string().as_bytes()).expect("from_json");
        assert!(back.verify_password("pencil"));
    }

    #[test]
    fn corrupt_json_is_refused() {
        let good: serde_json::Value =
            serde_json::from_slice(&to_json(&rfc_credential())).expect("json");
        let edit = |field: &str, value: serde_json::Value| {
            let mut json = good.clone();
            json[field] = value;
            from_json(json.to_string().as_bytes()).map(|_| ())
        };
        assert_eq!(
            edit("salt", "not base64!".into()),
            Err(CredentialError::BadBase64 { field: "salt" })
        );
        assert_eq!(
            edit("stored_key", "%%".into()),
            Err(CredentialError::BadBase64 {
                field: "stored_key"
            })
        );
        assert!(matches!(
            edit("server_key", "AAEC".into()),
            Err(CredentialError::KeyLength {
                field: "server_key",
                ..
            })
        ));
        assert!(matches!(
            edit("iterations", 1.into()),
            Err(CredentialError::IterationsOutOfRange { .. })
        ));
        assert!(matches!(
            edit("mechanism", "SCRAM-SHA-1".into()),
            Err(CredentialError::BadJson(_))
        ));
        assert!(matches!(
            edit("iterations", (-1).into()),
            Err(CredentialError::BadJson(_))
        ));
        assert!(matches!(from_json(b"{"), Err(CredentialError::BadJson(_))));
        assert!(matches!(from_json(b"{}"), Err(CredentialError::BadJson(_))));
    }

    #[test]
    fn describe_view_has_only_mechanism_and_iterations() {
        let credential = ScramCredential::new(ScramMechanism::ScramSha512, "pw", b"salt", 8192)
            .expect("credential");
        let info = credential.info();
        assert_eq!(
            info,
            ScramCredentialInfo {
                mechanism: ScramMechanism::ScramSha512,
                iterations: 8192
            }
        );
        assert_eq!(
            serde_json::to_string(&info).expect("json"),
            r#"{"mechanism":"SCRAM-SHA-512","iterations":8192}"#
        );
        assert_eq!(info.mechanism.kafka_type(), 2);
    }
}
