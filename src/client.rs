//! A minimal Kafka client: one connection to one broker, version negotiation through
//! ApiVersions, request/response framing. The admin CLI uses it against any broker
//! (it speaks only the public protocol, so it works against Apache Kafka too), and
//! brokers use it to reach each other ([`crate::cluster::peers`]). Whatever the other
//! side sends is untrusted: a response's memory grows only as its bytes arrive (up to
//! [`MAX_RESPONSE_BYTES`]), and it is decoded through
//! [`decode_untrusted`](crate::wire::decode_untrusted).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::security::sasl_client::{SaslClient, SaslLogin, Step};
use crate::wire::ByteStream;
use crate::wire::{decode_untrusted, DecodeError};

use crate::limits::{
    CLIENT_MAX_RESPONSE_BYTES as MAX_RESPONSE_BYTES, CLIENT_TIMEOUT as TIMEOUT, READ_CHUNK_BYTES,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{address}: {source}")]
    Io {
        address: String,
        source: std::io::Error,
    },
    #[error("{0} did not answer in time")]
    Timeout(String),
    #[error("{address}: {message}")]
    Protocol { address: String, message: String },
    /// The response's size prefix is negative or above [`MAX_RESPONSE_BYTES`]; nothing
    /// of its body was read.
    #[error("{address}: response size {size} outside 0..={max}")]
    ResponseSize {
        address: String,
        size: i32,
        max: usize,
    },
    /// The connection ended before the whole response arrived.
    #[error("{address}: response cut short after {received} of {size} bytes")]
    Truncated {
        address: String,
        size: usize,
        received: usize,
    },
    /// The response's bytes are not a valid answer to the request sent.
    #[error(
        "{address}: undecodable {:?} v{} response: {}",
        .source.api,
        .source.version,
        .source.reason
    )]
    Decode {
        address: String,
        source: DecodeError,
    },
    #[error("{address} does not support {key:?} in a version tern speaks")]
    Unsupported { address: String, key: ApiKey },
    /// The TLS handshake failed (an untrusted certificate, a name mismatch, ...).
    #[error("{address}: TLS: {message}")]
    Tls { address: String, message: String },
    /// The SASL exchange failed: refused credentials, or a server that could not prove
    /// it holds them.
    #[error("{address}: SASL authentication failed: {message}")]
    Authentication { address: String, message: String },
}

/// How a connection is secured: what a Kafka client's `security.protocol`, `ssl.*` and
/// `sasl.*` settings say. The default is PLAINTEXT.
#[derive(Debug, Clone, Default)]
pub struct ClientSecurity {
    /// TLS with this configuration: the server's certificate checked against its trust
    /// anchors and the address's host, a client certificate presented if it has one.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL (SaslHandshake, then SaslAuthenticate) after ApiVersions.
    pub sasl: Option<SaslLogin>,
}

#[derive(Debug)]
pub struct Client {
    stream: Box<dyn ByteStream>,
    address: String,
    client_id: &'static str,
    correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
    /// How it connected, for [`Client::sibling`].
    security: ClientSecurity,
}

impl Client {
    /// Connects as `client_id` over PLAINTEXT and learns the broker's API versions.
    pub async fn connect(address: &str, client_id: &'static str) -> Result<Self, ClientError> {
        Self::connect_with(address, client_id, &ClientSecurity::default()).await
    }

    /// Connects as `client_id` with `security` (TLS, then ApiVersions, then SASL), as a
    /// Kafka client does.
    pub async fn connect_with(
        address: &str,
        client_id: &'static str,
        security: &ClientSecurity,
    ) -> Result<Self, ClientError> {
        let io = |source| ClientError::Io {
            address: address.to_string(),
            source,
        };
        let tcp = tokio::time::timeout(TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| ClientError::Timeout(address.to_string()))?
            .map_err(io)?;
        tcp.set_nodelay(true).map_err(io)?;
        let stream: Box<dyn ByteStream> = match &security.tls {
            None => Box::new(tcp),
            Some(config) => Box::new(tls_connect(address, tcp, config).await?),
        };
        let mut client = Self {
            stream,
            address: address.to_string(),
            client_id,
            correlation_id: 0,
            versions: HashMap::new(),
            security: security.clone(),
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(client_id))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response: ApiVersionsResponse = client.send_at(request, 3).await?;
        if response.error_code != 0 {
            return Err(client.protocol(format!(
                "refused ApiVersions (error {})",
                response.error_code
            )));
        }
        client.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        if let Some(login) = &security.sasl {
            client.authenticate(login).await?;
        }
        Ok(client)
    }

    /// SaslHandshake with the login's mechanism, then SaslAuthenticate until the
    /// exchange ends.
    async fn authenticate(&mut self, login: &SaslLogin) -> Result<(), ClientError> {
        let failed = |address: &str, message: String| ClientError::Authentication {
            address: address.to_string(),
            message,
        };
        let mechanism = login.mechanism.name();
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        let version = self.version_for(ApiKey::SaslHandshake, 1)?;
        let answer: SaslHandshakeResponse = self.send_at(handshake, version).await?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(failed(
                &self.address,
                format!(
                    "{mechanism} is not offered (offered: {})",
                    offered.join(", ")
                ),
            ));
        }
        let version = self.version_for(ApiKey::SaslAuthenticate, 2)?;
        let mut exchange = SaslClient::new(login.clone());
        let mut token = exchange.first();
        loop {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let answer: SaslAuthenticateResponse = self.send_at(request, version).await?;
            if answer.error_code != 0 {
                let message = answer.error_message.map(|m| m.to_string());
                return Err(failed(
                    &self.address,
                    message.unwrap_or_else(|| format!("error {}", answer.error_code)),
                ));
            }
            match exchange.next(&answer.auth_bytes) {
                Ok(Step::Send(next)) => token = next,
                Ok(Step::Done) => return Ok(()),
                Err(error) => return Err(failed(&self.address, error.to_string())),
            }
        }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// A connection to another broker (a partition's leader, a group's coordinator)
    /// made the same way as this one.
    pub async fn sibling(&self, address: &str) -> Result<Client, ClientError> {
        Self::connect_with(address, self.client_id, &self.security).await
    }

    fn protocol(&self, message: impl Into<String>) -> ClientError {
        ClientError::Protocol {
            address: self.address.clone(),
            message: message.into(),
        }
    }

    /// The highest version both sides speak, up to `preferred`.
    pub fn version_for(&self, key: ApiKey, preferred: i16) -> Result<i16, ClientError> {
        let unsupported = || ClientError::Unsupported {
            address: self.address.clone(),
            key,
        };
        let (min, max) = self
            .versions
            .get(&(key as i16))
            .copied()
            .ok_or_else(unsupported)?;
        let ours = key.valid_versions();
        let version = preferred.min(max).min(ours.max);
        if version < min || version < ours.min {
            return Err(unsupported());
        }
        Ok(version)
    }

    /// Sends `request` at the best common version up to `preferred`.
    pub async fn send<R>(
        &mut self,
        request: R,
        preferred: i16,
    ) -> Result<(i16, R::Response), ClientError>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        let key = ApiKey::try_from(R::KEY).map_err(|_| self.protocol("unknown api key"))?;
        let version = self.version_for(key, preferred)?;
        let response = self.send_at(request, version).await?;
        Ok((version, response))
    }

    async fn send_at<R>(&mut self, request: R, version: i16) -> Result<R::Response, ClientError>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(self.client_id)));
        let mut out = BytesMut::new();
        out.put_i32(0);
        header
            .encode(&mut out, R::header_version(version))
            .and_then(|()| request.encode(&mut out, version))
            .map_err(|e| self.protocol(format!("encoding {:?} v{version}: {e}", R::KEY)))?;
        let size = i32::try_from(out.len() - 4).map_err(|_| self.protocol("request too large"))?;
        out[..4].copy_from_slice(&size.to_be_bytes());
        let api = ApiKey::try_from(R::KEY).map_err(|_| self.protocol("unknown api key"))?;
        let mut body = tokio::time::timeout(TIMEOUT, self.exchange(&out))
            .await
            .map_err(|_| ClientError::Timeout(self.address.clone()))??;
        // ApiVersions answers with header v0 whatever the request version.
        let header_version = if api == ApiKey::ApiVersions {
            0
        } else {
            R::Response::header_version(version)
        };
        let header: ResponseHeader = decode_untrusted(api, &mut body, header_version)
            .map_err(|source| self.decode(source))?;
        if header.correlation_id != self.correlation_id {
            return Err(self.protocol(format!(
                "response for correlation id {} while waiting for {}",
                header.correlation_id, self.correlation_id
            )));
        }
        let response: R::Response =
            decode_untrusted(api, &mut body, version).map_err(|source| self.decode(source))?;
        if body.has_remaining() {
            tracing::debug!(left = body.remaining(), "response had trailing bytes");
        }
        Ok(response)
    }

    fn decode(&self, source: DecodeError) -> ClientError {
        ClientError::Decode {
            address: self.address.clone(),
            source,
        }
    }

    /// Writes one framed request and reads one framed response (its body).
    async fn exchange(&mut self, request: &[u8]) -> Result<Bytes, ClientError> {
        let io = |source| ClientError::Io {
            address: self.address.clone(),
            source,
        };
        self.stream.write_all(request).await.map_err(io)?;
        // TLS buffers what it encrypts: the request leaves only on flush.
        self.stream.flush().await.map_err(io)?;
        let size = self.stream.read_i32().await.map_err(io)?;
        let claimed = usize::try_from(size)
            .ok()
            .filter(|&s| s <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| ClientError::ResponseSize {
                address: self.address.clone(),
                size,
                max: MAX_RESPONSE_BYTES,
            })?;
        let body = read_body(&mut self.stream, claimed)
            .await
            .map_err(|error| match error {
                BodyError::Io(source) => ClientError::Io {
                    address: self.address.clone(),
                    source,
                },
                BodyError::Truncated { received } => ClientError::Truncated {
                    address: self.address.clone(),
                    size: claimed,
                    received,
                },
            })?;
        Ok(Bytes::from(body))
    }
}

/// The TLS handshake to `address`, whose host the server's certificate must name.
async fn tls_connect(
    address: &str,
    tcp: TcpStream,
    config: &Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ClientError> {
    let tls_error = |message: String| ClientError::Tls {
        address: address.to_string(),
        message,
    };
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| tls_error(format!("{host:?} is not a host name or IP address")))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    tokio::time::timeout(TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| ClientError::Timeout(address.to_string()))?
        .map_err(|e| tls_error(e.to_string()))
}

#[derive(Debug)]
enum BodyError {
    Io(std::io::Error),
    Truncated { received: usize },
}

/// Reads exactly `size` bytes in steps of at most [`READ_CHUNK_BYTES`]. The buffer
/// doubles as bytes arrive (capped at `size`), so a peer that claims a large response
/// and sends little costs what it sent, and a real one costs at most twice its size
/// in copies, not one reallocation per step.
async fn read_body<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::with_capacity(size.min(READ_CHUNK_BYTES));
    while body.len() < size {
        let want = (size - body.len()).min(READ_CHUNK_BYTES);
        if body.capacity() - body.len() < want {
            let target = (body.capacity() * 2).max(body.len() + want).min(size);
            body.reserve_exact(target - body.len());
        }
        let read = (&mut *reader)
            .take(want as u64)
            .read_buf(&mut body)
            .await
            .map_err(BodyError::Io)?;
        if read == 0 {
            return Err(BodyError::Truncated {
                received: body.len(),
            });
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    use super::*;

    /// What the fake peer sends after reading the client's first request, given that
    /// request's correlation id: chunks written one by one, then the connection closes.
    type Answer = Box<dyn FnOnce(i32) -> Vec<Vec<u8>> + Send>;

    /// A fake broker speaking just enough Kafka: it accepts one connection, reads one
    /// framed request (the client's ApiVersions), writes `answer`'s chunks and closes.
    /// It runs on a thread of its own, so that its allocations are not the client's.
    fn fake_peer(answer: Answer) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?.to_string();
        std::thread::spawn(move || -> std::io::Result<()> {
            let (mut stream, _) = listener.accept()?;
            let mut size = [0u8; 4];
            stream.read_exact(&mut size)?;
            let size = usize::try_from(i32::from_be_bytes(size)).unwrap_or(0);
            let mut request = vec![0u8; size.min(1 << 16)];
            stream.read_exact(&mut request)?;
            let correlation_id = crate::wire::HeaderPrefix::parse(&request)
                .map(|p| p.correlation_id)
                .unwrap_or(-1);
            for chunk in answer(correlation_id) {
                stream.write_all(&chunk)?;
                stream.flush()?;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(())
        });
        Ok(address)
    }

    /// An ApiVersions v3 response body (header v0 included), as a broker sends it.
    fn api_versions_body(correlation_id: i32) -> Vec<u8> {
        let response = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::ApiVersions as i16)
                .with_max_version(3),
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_max_version(12),
        ]);
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut out, 0)
            .and_then(|()| response.encode(&mut out, 3))
            .expect("encoding a valid response");
        out.to_vec()
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let size = i32::try_from(body.len()).expect("test frames are small");
        [&size.to_be_bytes()[..], body].concat()
    }

    #[tokio::test]
    async fn a_large_response_arriving_in_pieces_is_read_whole_into_no_more_than_its_size(
    ) -> Result<(), Box<dyn std::error::Error>> {
        // A valid answer padded with 3 MiB of trailing bytes (tolerated), written in
        // 100 KiB pieces: the control for the hostile cases below.
        let address = fake_peer(Box::new(|correlation_id| {
            let mut body = api_versions_body(correlation_id);
            body.resize(body.len() + (3 << 20), 0);
            framed(&body)
                .chunks(100 << 10)
                .map(<[u8]>::to_vec)
                .collect()
        }))?;
        crate::alloc::take_largest_allocation();
        let client = Client::connect(&address, "tern-test").await?;
        let largest = crate::alloc::take_largest_allocation();
        assert_eq!(client.version_for(ApiKey::Metadata, 12)?, 12);
        assert!(client.version_for(ApiKey::Produce, 9).is_err());
        let body_size = api_versions_body(0).len() + (3 << 20);
        assert!(
            (3 << 20..=body_size).contains(&largest),
            "the body buffer grew to its size and no further: {largest} for {body_size}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_peer_claiming_64_mib_and_sending_10_bytes_costs_no_64_mib_allocation(
    ) -> std::io::Result<()> {
        let claimed = i32::try_from(MAX_RESPONSE_BYTES).expect("64 MiB fits in an i32");
        let address = fake_peer(Box::new(move |_| {
            vec![claimed.to_be_bytes().to_vec(), vec![7u8; 10]]
        }))?;
        crate::alloc::take_largest_allocation();
        let outcome = Client::connect(&address, "tern-test").await;
        let largest = crate::alloc::take_largest_allocation();
        assert!(
            matches!(
                outcome,
                Err(ClientError::Truncated { size, received: 10, .. }) if size == MAX_RESPONSE_BYTES
            ),
            "{outcome:?}"
        );
        assert_eq!(
            largest, 0,
            "an allocation of {largest} bytes for 10 that arrived"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_response_size_out_of_bounds_is_refused_before_reading_its_body(
    ) -> std::io::Result<()> {
        let too_large = i32::try_from(MAX_RESPONSE_BYTES + 1).expect("fits in an i32");
        for size in [too_large, -1, i32::MIN] {
            let address = fake_peer(Box::new(move |_| {
                vec![size.to_be_bytes().to_vec(), vec![0u8; 64]]
            }))?;
            let outcome = Client::connect(&address, "tern-test").await;
            assert!(
                matches!(outcome, Err(ClientError::ResponseSize { size: s, .. }) if s == size),
                "{size}: {outcome:?}"
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_hostile_response_body_is_refused_with_a_typed_error() -> std::io::Result<()> {
        // ApiVersions v3 after a valid header: error code 0, then a compact array that
        // claims 2^31 - 2 entries (unsigned varint of N + 1) and ends there.
        let hostile = |correlation_id: i32| {
            let mut body = correlation_id.to_be_bytes().to_vec();
            body.extend_from_slice(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0x07]);
            vec![framed(&body)]
        };
        // A header that is not even whole.
        let short = |_| vec![framed(&[0, 0])];
        // A correct answer to some other request.
        let stray = |correlation_id: i32| vec![framed(&api_versions_body(correlation_id + 1))];
        let answers: [(&str, Answer); 3] = [
            ("hostile array length", Box::new(hostile)),
            ("short header", Box::new(short)),
            ("stray correlation id", Box::new(stray)),
        ];
        for (what, answer) in answers {
            let address = fake_peer(answer)?;
            let outcome = Client::connect(&address, "tern-test").await;
            match (what, &outcome) {
                ("stray correlation id", Err(ClientError::Protocol { .. })) => {}
                (_, Err(ClientError::Decode { source, .. })) if what != "stray correlation id" => {
                    assert_eq!(source.api, ApiKey::ApiVersions, "{what}");
                }
                _ => panic!("{what}: {outcome:?}"),
            }
        }
        Ok(())
    }
}
