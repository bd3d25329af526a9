//! A minimal Kafka client: one connection to one broker, version negotiation through
//! ApiVersions, request/response framing. The admin CLI uses it against any broker
//! (it speaks only the public protocol, so it works against Apache Kafka too), and
//! brokers use it to reach each other ([`crate::cluster::peers`]).

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response accepted.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Bound on connecting and on one request/response exchange.
const TIMEOUT: Duration = Duration::from_secs(30);

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
    #[error("{address} does not support {key:?} in a version tern speaks")]
    Unsupported { address: String, key: ApiKey },
}

#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    address: String,
    client_id: &'static str,
    correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl Client {
    /// Connects as `client_id` and learns the broker's API versions.
    pub async fn connect(address: &str, client_id: &'static str) -> Result<Self, ClientError> {
        let io = |source| ClientError::Io {
            address: address.to_string(),
            source,
        };
        let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| ClientError::Timeout(address.to_string()))?
            .map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let mut client = Self {
            stream,
            address: address.to_string(),
            client_id,
            correlation_id: 0,
            versions: HashMap::new(),
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
        Ok(client)
    }

    pub fn address(&self) -> &str {
        &self.address
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
        let body = tokio::time::timeout(TIMEOUT, self.exchange(&out))
            .await
            .map_err(|_| ClientError::Timeout(self.address.clone()))?;
        let mut body = body.map_err(|source| ClientError::Io {
            address: self.address.clone(),
            source,
        })?;
        // ApiVersions answers with header v0 whatever the request version.
        let header_version = if R::KEY == ApiKey::ApiVersions as i16 {
            0
        } else {
            R::Response::header_version(version)
        };
        let header = crate::alloc::decoding(|| ResponseHeader::decode(&mut body, header_version))
            .map_err(|e| self.protocol(format!("decoding a response header: {e}")))?;
        if header.correlation_id != self.correlation_id {
            return Err(self.protocol(format!(
                "response for correlation id {} while waiting for {}",
                header.correlation_id, self.correlation_id
            )));
        }
        let response =
            crate::alloc::decoding(|| R::Response::decode(&mut body, version)).map_err(|e| {
                self.protocol(format!("decoding {:?} v{version} response: {e}", R::KEY))
            })?;
        if body.has_remaining() {
            tracing::debug!(left = body.remaining(), "response had trailing bytes");
        }
        Ok(response)
    }

    /// Writes one framed request and reads one framed response (its body).
    async fn exchange(&mut self, request: &[u8]) -> std::io::Result<Bytes> {
        self.stream.write_all(request).await?;
        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("response size {size} out of bounds"),
                )
            })?;
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).await?;
        Ok(Bytes::from(body))
    }
}
