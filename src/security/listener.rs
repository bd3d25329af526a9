//! Listener declarations as Kafka writes them: `PROTOCOL://HOST:PORT[,…]`, where the
//! protocol names both the listener and its security (`PLAINTEXT`, `SSL`,
//! `SASL_PLAINTEXT`, `SASL_SSL`). Kafka allows custom listener names mapped to protocols
//! (`listener.security.protocol.map`); tern names each listener by its protocol, so a
//! broker has at most one listener per protocol and `--inter-broker-listener` and
//! `--advertised-listeners` refer to them by that name.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// What a listener's connections must do before their requests are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerError {
    #[error("{0:?} is not PROTOCOL://HOST:PORT")]
    Shape(String),
    #[error("unknown security protocol {0:?} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")]
    Protocol(String),
    #[error("{0:?}: the port is not a number from 0 to 65535")]
    Port(String),
    #[error("{0:?}: the host does not resolve to an address")]
    Host(String),
    #[error("two listeners use {0}: each protocol may be declared once")]
    Duplicate(SecurityProtocol),
}

impl FromStr for SecurityProtocol {
    type Err = ListenerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| ListenerError::Protocol(s.to_string()))
    }
}

/// One `PROTOCOL://HOST:PORT` with its host left as written (an advertised name need
/// not resolve here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub protocol: SecurityProtocol,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.protocol, self.host, self.port)
    }
}

impl FromStr for Endpoint {
    type Err = ListenerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shape = || ListenerError::Shape(s.to_string());
        let (protocol, address) = s.trim().split_once("://").ok_or_else(shape)?;
        let (host, port) = address.rsplit_once(':').ok_or_else(shape)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port
            .parse::<u16>()
            .map_err(|_| ListenerError::Port(s.to_string()))?;
        Ok(Endpoint {
            protocol: protocol.parse()?,
            host: host.to_string(),
            port,
        })
    }
}

impl Endpoint {
    /// The address to bind: an empty host means every interface, as in Kafka.
    pub fn bind_address(&self) -> Result<SocketAddr, ListenerError> {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        (host, self.port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| ListenerError::Host(self.to_string()))
    }
}

/// A comma-separated list, each protocol at most once.
pub fn parse_endpoints(list: &str) -> Result<Vec<Endpoint>, ListenerError> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let endpoint: Endpoint = item.parse()?;
        if endpoints.iter().any(|e| e.protocol == endpoint.protocol) {
            return Err(ListenerError::Duplicate(endpoint.protocol));
        }
        endpoints.push(endpoint);
    }
    Ok(endpoints)
}

/// One Kafka listener: where it binds, what it tells clients, what it demands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    pub advertised_host: String,
    /// 0 until the listener is bound to an ephemeral port, then that port.
    pub advertised_port: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_parse_as_kafka_writes_them() {
        let parsed =
            parse_endpoints("SASL_SSL://127.0.0.1:9093, PLAINTEXT://localhost:9092,ssl://:0")
                .expect("valid");
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed[0].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(parsed[0].port, 9093);
        assert_eq!(parsed[1].host, "localhost");
        assert_eq!(parsed[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(
            parsed[2].bind_address().expect("any"),
            "0.0.0.0:0".parse().expect("addr")
        );
        assert_eq!(parsed[0].to_string(), "SASL_SSL://127.0.0.1:9093");
        let v6: Endpoint = "PLAINTEXT://[::1]:9092".parse().expect("v6");
        assert_eq!(v6.bind_address().expect("v6").to_string(), "[::1]:9092");
    }

    #[test]
    fn bad_listeners_are_refused_with_the_reason() {
        assert!(matches!(
            parse_endpoints("127.0.0.1:9092"),
            Err(ListenerError::Shape(_))
        ));
        assert!(matches!(
            parse_endpoints("TLS://h:1"),
            Err(ListenerError::Protocol(_))
        ));
        assert!(matches!(
            parse_endpoints("SSL://h:99999"),
            Err(ListenerError::Port(_))
        ));
        assert_eq!(
            parse_endpoints("SSL://a:1,SSL://b:2"),
            Err(ListenerError::Duplicate(SecurityProtocol::Ssl))
        );
        for protocol in SecurityProtocol::ALL {
            assert_eq!(protocol.name().parse::<SecurityProtocol>(), Ok(protocol));
        }
        assert!(SecurityProtocol::SaslSsl.uses_tls() && SecurityProtocol::SaslSsl.uses_sasl());
        assert!(!SecurityProtocol::Plaintext.uses_tls() && !SecurityProtocol::Ssl.uses_sasl());
    }
}
