//! Authentication APIs: the SASL exchange (SaslHandshake, SaslAuthenticate), which runs
//! against the connection's `security::session::SaslSession`, and the SCRAM credential
//! admin APIs (Describe/AlterUserScramCredentials) over the metadata store.

pub mod alter_user_scram_credentials;
pub mod describe_user_scram_credentials;
pub mod sasl_authenticate;
pub mod sasl_handshake;

use crate::cluster::MetadataStore;
use crate::security::credentials::{ScramCredential, ScramMechanism};

/// A response, and whether the connection closes once it is written (a refused
/// handshake, a failed authentication).
#[derive(Debug)]
pub struct Closing<R> {
    pub response: R,
    pub close: Option<String>,
}

/// A user's credential for SASL: of `mechanism`, or for PLAIN (`None`) whichever SCRAM
/// credential the user has, the stronger first.
pub fn credential_lookup(
    store: &dyn MetadataStore,
    user: &str,
    mechanism: Option<ScramMechanism>,
) -> Option<ScramCredential> {
    let candidates = match mechanism {
        Some(m) => vec![m],
        None => vec![ScramMechanism::ScramSha512, ScramMechanism::ScramSha256],
    };
    candidates.into_iter().find_map(|m| {
        let stored = store.scram_credential(user, m)?;
        match ScramCredential::try_from(stored) {
            Ok(credential) => Some(credential),
            Err(error) => {
                tracing::warn!(user, mechanism = %m, %error, "ignoring an unreadable stored SCRAM credential");
                None
            }
        }
    })
}
