//! HTTP Basic passwords already checked, so that a client sending its credentials on
//! every call costs one SASL/PLAIN check per password change, not per call.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use sha2::Sha256;

/// Verified passwords remembered at most; the table is emptied when full.
const VERIFIED_PASSWORDS_MAX: usize = 4096;

/// Passwords already checked, by user: a keyed hash of the password (never the
/// password) and the stored key of the credential it matched, so that a changed or
/// removed credential is checked afresh.
#[derive(Debug)]
pub struct VerifiedPasswords {
    /// A per-process HMAC key: the table holds nothing usable outside this process.
    key: [u8; 32],
    verified: Mutex<HashMap<String, Verified>>,
}

/// One user's remembered password: its keyed hash, and the stored key it matched.
type Verified = ([u8; 32], Vec<u8>);

impl Default for VerifiedPasswords {
    fn default() -> Self {
        Self {
            key: rand::random(),
            verified: Mutex::new(HashMap::new()),
        }
    }
}

impl VerifiedPasswords {
    fn digest(&self, password: &str) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Whether `password` is `user`'s, against the credential `lookup` finds now.
    pub(super) fn check(
        &self,
        user: &str,
        password: &str,
        lookup: impl Fn(&str) -> Option<crate::security::credentials::ScramCredential>,
    ) -> bool {
        let Some(credential) = lookup(user) else {
            return false;
        };
        let digest = self.digest(password);
        let remembered = self.verified.lock().get(user).is_some_and(|(d, stored)| {
            *d == digest && stored.as_slice() == credential.stored_key()
        });
        if remembered {
            return true;
        }
        // SASL/PLAIN's own check, so that both ways in accept exactly the same passwords.
        let message = format!("\0{user}\0{password}");
        let ok =
            crate::security::plain::authenticate(message.as_bytes(), |_| Some(credential.clone()))
                .is_ok();
        if ok {
            let mut verified = self.verified.lock();
            if verified.len() >= VERIFIED_PASSWORDS_MAX {
                verified.clear();
            }
            verified.insert(user.to_string(), (digest, credential.stored_key().to_vec()));
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::credentials::{ScramCredential, ScramMechanism};

    #[test]
    fn a_verified_password_is_remembered_until_the_credential_changes() {
        let passwords = VerifiedPasswords::default();
        let first = ScramCredential::generate(ScramMechanism::ScramSha256, "secret", 4096)
            .expect("credential");
        let current = Mutex::new(Some(first));
        let lookup = |_: &str| current.lock().clone();
        assert!(!passwords.check("alice", "wrong", lookup));
        assert!(passwords.verified.lock().is_empty());
        assert!(passwords.check("alice", "secret", lookup));
        assert_eq!(passwords.verified.lock().len(), 1);
        assert!(passwords.check("alice", "secret", lookup));
        assert!(!passwords.check("alice", "wrong", lookup));
        // A new password: the remembered one no longer matches the stored key.
        *current.lock() = Some(
            ScramCredential::generate(ScramMechanism::ScramSha256, "renewed", 4096)
                .expect("credential"),
        );
        assert!(!passwords.check("alice", "secret", lookup));
        assert!(passwords.check("alice", "renewed", lookup));
        // A removed user is refused whatever was remembered.
        *current.lock() = None;
        assert!(!passwords.check("alice", "renewed", lookup));
    }
}
