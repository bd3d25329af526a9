//! Authentication mechanisms as pure code: SASL/PLAIN (RFC 4616) and SASL/SCRAM-SHA-256/512
//! (RFC 5802, RFC 7677), server side, checked against salted SCRAM credentials.
//! Nothing here does I/O, reads a clock or knows the Kafka wire format: the SaslHandshake and
//! SaslAuthenticate handlers feed client tokens in and send the returned tokens back.
//!
//! - `scram`: the mechanisms, the stored credential and the SCRAM server state machine.
//! - `scram_messages`: the strict parser of the two client messages.
//! - `plain`: PLAIN, verified against the same SCRAM credentials (no second password store).
//! - `sasl_client`: the client side of PLAIN and SCRAM, for tern's own connections.
//! - `credentials`: the JSON form of a stored credential and the DescribeUserScramCredentials view.
//! - `acl`: the ACL model (bindings, filters, validation) and the authorizer's decisions.
//! - `access`: the broker's configured authorizer, swapped whole when the ACLs change.

pub mod scram;
pub mod scram_messages;
pub mod plain;
pub mod sasl_client;
pub mod credentials;
pub mod acl;
pub mod access;

pub mod listener;
pub mod principal;
pub mod session;
pub mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use self::principal::SslPrincipalMapper;
use self::sasl_client::SaslLogin;
use self::session::SaslPolicy;
use self::tls::TlsFiles;

/// TLS, principals and SASL, for every listener.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// Certificate, key and (mTLS) client CA; required when a listener uses TLS.
    pub tls: Option<TlsFiles>,
    /// Trust anchors for a peer's TLS listener.
    pub peer_ca: Option<PathBuf>,
    /// Who this broker logs in to its peers as, when the inter-broker listener is SASL.
    pub inter_broker_login: Option<SaslLogin>,
    pub principal_mapper: SslPrincipalMapper,
    pub sasl: Arc<SaslPolicy>,
    pub failed_authentication_delay: Duration,
}
