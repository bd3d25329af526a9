//! The Kafka listeners and their security from the options: which listeners bind where and
//! what they advertise, TLS files, principal mapping, SASL mechanisms, how this broker logs
//! in to its peers, and how the HTTP API is secured.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::args::{defaults, ServeArgs};
use super::error::ConfigError;
use crate::http::HttpSecurity;
use crate::security::listener::{
    parse_endpoints, Endpoint, ListenerConfig, ListenerError, SecurityProtocol,
};
use crate::security::principal::SslPrincipalMapper;
use crate::security::sasl_client::SaslLogin;
use crate::security::session::{Mechanism, SaslPolicy};
use crate::security::tls::TlsFiles;
use crate::security::SecurityConfig;

/// `--listeners` (or one PLAINTEXT listener on `--listen`), each with its advertised
/// address from `--advertised-listeners` (or `--advertise` for a lone listener).
pub(super) fn listener_configs(
    a: &ServeArgs,
    listen: SocketAddr,
) -> Result<Vec<ListenerConfig>, ConfigError> {
    let invalid = |name: &'static str| {
        move |e: ListenerError| ConfigError::Invalid {
            name,
            reason: e.to_string(),
        }
    };
    let declared = match a.listeners.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(list) => parse_endpoints(list).map_err(invalid("listeners"))?,
        None => vec![Endpoint {
            protocol: SecurityProtocol::Plaintext,
            host: listen.ip().to_string(),
            port: listen.port(),
        }],
    };
    if declared.is_empty() {
        return Err(ConfigError::Invalid {
            name: "listeners",
            reason: "no listener declared".into(),
        });
    }
    let advertised = match a.advertised_listeners.as_deref() {
        Some(list) if !list.trim().is_empty() => {
            parse_endpoints(list).map_err(invalid("advertised_listeners"))?
        }
        _ => Vec::new(),
    };
    if let Some(extra) = advertised
        .iter()
        .find(|e| !declared.iter().any(|d| d.protocol == e.protocol))
    {
        return Err(ConfigError::Invalid {
            name: "advertised_listeners",
            reason: format!("{extra} names no listener of --listeners"),
        });
    }
    declared
        .iter()
        .map(|d| {
            let bind = d.bind_address().map_err(invalid("listeners"))?;
            let told = advertised.iter().find(|e| e.protocol == d.protocol);
            let (host, port) = match told {
                Some(e) => (e.host.clone(), i32::from(e.port)),
                None if d.host.is_empty() => (bind.ip().to_string(), i32::from(d.port)),
                None => (d.host.clone(), i32::from(d.port)),
            };
            Ok(ListenerConfig {
                protocol: d.protocol,
                bind,
                advertised_host: host,
                advertised_port: port,
            })
        })
        .collect()
}

pub(super) fn inter_broker_listener(
    named: Option<&str>,
    listeners: &[ListenerConfig],
) -> Result<SecurityProtocol, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "inter_broker_listener",
        reason,
    };
    match named.filter(|s| !s.is_empty()) {
        Some(name) => {
            let protocol: SecurityProtocol = name
                .parse()
                .map_err(|e: ListenerError| invalid(e.to_string()))?;
            if !listeners.iter().any(|l| l.protocol == protocol) {
                return Err(invalid(format!("{protocol} is not among --listeners")));
            }
            Ok(protocol)
        }
        None => Ok(listeners
            .iter()
            .map(|l| l.protocol)
            .find(|p| *p == SecurityProtocol::Plaintext)
            .or_else(|| {
                listeners
                    .iter()
                    .map(|l| l.protocol)
                    .find(|p| !p.uses_sasl())
            })
            .unwrap_or(listeners[0].protocol)),
    }
}

pub(super) fn security_config(
    a: &ServeArgs,
    listeners: &[ListenerConfig],
) -> Result<SecurityConfig, ConfigError> {
    let path = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
    let tls = match (path(&a.tls_cert), path(&a.tls_key)) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: path(&a.tls_client_ca),
            client_certificate_optional: false,
        }),
        (None, None) => None,
        _ => {
            return Err(ConfigError::Invalid {
                name: "tls_cert",
                reason: "--tls-cert and --tls-key go together".into(),
            })
        }
    };
    if tls.is_none() {
        if let Some(l) = listeners.iter().find(|l| l.protocol.uses_tls()) {
            return Err(ConfigError::Invalid {
                name: "listeners",
                reason: format!("the {} listener needs --tls-cert and --tls-key", l.protocol),
            });
        }
    }
    let rules = a
        .ssl_principal_mapping_rules
        .clone()
        .unwrap_or_else(defaults::ssl_principal_mapping_rules);
    let principal_mapper = SslPrincipalMapper::parse(&rules).map_err(|e| ConfigError::Invalid {
        name: "ssl_principal_mapping_rules",
        reason: e.to_string(),
    })?;
    let names = a
        .sasl_mechanisms
        .clone()
        .unwrap_or_else(defaults::sasl_mechanisms);
    let mut mechanisms = Vec::new();
    for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mechanism = Mechanism::from_name(name).ok_or_else(|| ConfigError::Invalid {
            name: "sasl_mechanisms",
            reason: format!("unknown mechanism {name:?} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() && listeners.iter().any(|l| l.protocol.uses_sasl()) {
        return Err(ConfigError::Invalid {
            name: "sasl_mechanisms",
            reason: "a SASL listener needs at least one mechanism".into(),
        });
    }
    let reauth = a
        .connections_max_reauth_ms
        .unwrap_or_else(defaults::connections_max_reauth_ms);
    if reauth < 0 {
        return Err(ConfigError::Invalid {
            name: "connections_max_reauth_ms",
            reason: format!("{reauth} is negative"),
        });
    }
    Ok(SecurityConfig {
        peer_ca: path(&a.tls_peer_ca).or_else(|| path(&a.tls_client_ca)),
        inter_broker_login: None,
        tls,
        principal_mapper,
        sasl: Arc::new(SaslPolicy {
            mechanisms,
            session_lifetime_ms: (reauth > 0).then_some(reauth),
        }),
        failed_authentication_delay: Duration::from_millis(
            a.connection_failed_authentication_delay_ms
                .unwrap_or_else(defaults::connection_failed_authentication_delay_ms),
        ),
    })
}

/// How this broker logs in to its peers: nothing on a PLAINTEXT or SSL inter-broker
/// listener (SSL presents the broker's own certificate), the `--inter-broker-sasl-*`
/// user on a SASL one. A TLS inter-broker listener needs trust anchors for the peers.
pub(super) fn inter_broker_login(
    a: &ServeArgs,
    protocol: SecurityProtocol,
    security: &SecurityConfig,
) -> Result<Option<SaslLogin>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "inter_broker_listener",
        reason,
    };
    if protocol.uses_tls() && security.peer_ca.is_none() {
        return Err(invalid(format!(
            "{protocol}: brokers verify each other's certificates; give --tls-peer-ca (or --tls-client-ca)"
        )));
    }
    if !protocol.uses_sasl() {
        return Ok(None);
    }
    let name = a
        .inter_broker_sasl_mechanism
        .clone()
        .unwrap_or_else(defaults::inter_broker_sasl_mechanism);
    let mechanism = Mechanism::from_name(name.trim())
        .filter(|m| security.sasl.mechanisms.contains(m))
        .ok_or_else(|| ConfigError::Invalid {
            name: "inter_broker_sasl_mechanism",
            reason: format!("{name:?} is not one of --sasl-mechanisms"),
        })?;
    let user = a
        .inter_broker_sasl_username
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "{protocol}: brokers log in to each other; give --inter-broker-sasl-username and --inter-broker-sasl-password-file"
            ))
        })?;
    let file = a
        .inter_broker_sasl_password_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "{protocol}: --inter-broker-sasl-password-file is needed"
            ))
        })?;
    let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
        path: file.clone(),
        source,
    })?;
    let password = text.lines().next().unwrap_or_default().to_string();
    if password.is_empty() {
        return Err(ConfigError::Invalid {
            name: "inter_broker_sasl_password_file",
            reason: format!("{}: the first line (the password) is empty", file.display()),
        });
    }
    Ok(Some(SaslLogin {
        mechanism,
        user,
        password,
    }))
}

/// `--http-tls` and `--http-auth` (`optional` | `required`). Without `--http-auth`,
/// credentials are required exactly when an authorizer is on: an anonymous caller would
/// otherwise run as `User:ANONYMOUS`, and where that principal is a super user (a common
/// way to keep a loopback admin listener open) the whole HTTP API would be open.
pub(super) fn http_security(
    a: &ServeArgs,
    security: &SecurityConfig,
    authorizer_on: bool,
) -> Result<HttpSecurity, ConfigError> {
    let tls = a.http_tls.unwrap_or_else(defaults::http_tls);
    if tls && security.tls.is_none() {
        return Err(ConfigError::Invalid {
            name: "http_tls",
            reason: "--http-tls needs --tls-cert and --tls-key".into(),
        });
    }
    let require_auth = match a.http_auth.as_deref().unwrap_or("").trim() {
        "" => authorizer_on,
        "optional" => false,
        "required" => true,
        other => {
            return Err(ConfigError::Invalid {
                name: "http_auth",
                reason: format!("'{other}' is not one of optional, required"),
            })
        }
    };
    Ok(HttpSecurity { tls, require_auth })
}

pub(super) fn split_host_port(address: &str) -> Result<(String, i32), ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "advertise",
        reason,
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid(format!("'{address}' is not HOST:PORT")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(format!("'{port}' is not a port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), i32::from(port)))
}
