//! TLS with rustls (ring), for the Kafka listeners, the HTTP API and the broker's own
//! connections to its peers.
//!
//! Certificates are reloaded when their files change: [`ReloadingTls::watch`] polls the
//! files' size and modification time and swaps in a freshly built configuration, so new
//! connections use the new certificate while open ones keep theirs. A file that does not
//! parse leaves the previous configuration in force (logged), so a half-written renewal
//! never takes a listener down.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_util::sync::CancellationToken;

/// How often the certificate files are checked for a change.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no {what} in PEM form")]
    Missing { path: PathBuf, what: &'static str },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(String),
}

/// The PEM files a TLS endpoint is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these (mTLS).
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: a client may also connect without a certificate (the HTTP
    /// API, where HTTP Basic is the other way in); one it presents must still verify.
    pub client_certificate_optional: bool,
}

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate of a PEM file, in order (leaf first for a chain).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::Missing {
        path: path.to_path_buf(),
        what: "private key",
    })
}

fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// A server configuration from the files, offering `alpn` protocols (empty for Kafka).
pub fn server_config(files: &TlsFiles, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let mut config = match &files.client_ca {
        Some(ca) => {
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(load_roots(ca)?, provider());
            if files.client_certificate_optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)?
        }
        None => builder.with_no_client_auth().with_single_cert(certs, key)?,
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// A client configuration trusting `ca`, presenting `identity` (cert, key) when given.
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(load_roots(ca)?);
    let config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Size and modification time of each file: what a renewal changes.
fn stamps(files: &TlsFiles) -> Vec<Option<(u64, SystemTime)>> {
    files
        .paths()
        .map(|p| {
            let meta = std::fs::metadata(p).ok()?;
            Some((meta.len(), meta.modified().ok()?))
        })
        .collect()
}

/// A server configuration that follows its files.
#[derive(Debug)]
pub struct ReloadingTls {
    files: TlsFiles,
    alpn: Vec<&'static [u8]>,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadingTls {
    /// Loads the files now; an error here is a start-up error.
    pub fn load(files: TlsFiles, alpn: &[&'static [u8]]) -> Result<Arc<Self>, TlsError> {
        let current = RwLock::new(server_config(&files, alpn)?);
        Ok(Arc::new(Self {
            files,
            alpn: alpn.to_vec(),
            current,
        }))
    }

    /// The configuration for a connection accepted now.
    pub fn current(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.read())
    }

    /// Rebuilds from the files; on failure the old configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = server_config(&self.files, &self.alpn)?;
        *self.current.write() = fresh;
        Ok(())
    }

    /// Polls the files until `shutdown`, reloading after each change.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        let mut seen = stamps(&self.files);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELOAD_POLL) => {}
            }
            let now = stamps(&self.files);
            if now == seen {
                continue;
            }
            seen = now;
            match self.reload() {
                Ok(()) => {
                    metrics::counter!(crate::metrics::TLS_RELOADS_TOTAL, "result" => "ok")
                        .increment(1);
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                }
                Err(error) => {
                    metrics::counter!(crate::metrics::TLS_RELOADS_TOTAL, "result" => "error")
                        .increment(1);
                    tracing::warn!(%error, "TLS files changed but do not load; keeping the previous certificate");
                }
            }
        }
    }
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` writes it
/// (RFC 2253: most specific RDN first, `,` between RDNs, `+` inside one, special
/// characters escaped), which is what Kafka's principal mapping rules match against.
pub fn subject_name(cert: &[u8]) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let rdns: Vec<String> = parsed
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let key = rfc2253_keyword(&attr.attr_type().to_id_string());
                    let value = attr.as_str().unwrap_or_default();
                    format!("{key}={}", escape_rfc2253(value))
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RFC 2253 §2.3's keywords (what Java prints); any other attribute by its dotted OID.
fn rfc2253_keyword(oid: &str) -> String {
    match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        other => other,
    }
    .to_string()
}

fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let edge = (i == 0 && (c == ' ' || c == '#')) || (i + 1 == value.len() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2253_escapes_what_java_escapes() {
        assert_eq!(escape_rfc2253("alice"), "alice");
        assert_eq!(escape_rfc2253("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_rfc2253(" lead"), "\\ lead");
        assert_eq!(escape_rfc2253("#x"), "\\#x");
        assert_eq!(rfc2253_keyword("2.5.4.3"), "CN");
        assert_eq!(
            rfc2253_keyword("1.2.840.113549.1.9.1"),
            "1.2.840.113549.1.9.1"
        );
    }

    #[test]
    fn missing_files_are_named_in_the_error() {
        let files = TlsFiles {
            cert: PathBuf::from("/nonexistent/cert.pem"),
            key: PathBuf::from("/nonexistent/key.pem"),
            client_ca: None,
            client_certificate_optional: false,
        };
        let error = server_config(&files, &[]).expect_err("no files");
        assert!(
            error.to_string().contains("/nonexistent/cert.pem"),
            "{error}"
        );
    }

    #[test]
    fn a_pem_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, b"not a pem").expect("write");
        assert!(matches!(load_certs(&path), Err(TlsError::Missing { .. })));
    }
}
