//! A tiny blocking raw Kafka-protocol client: framing, request/response headers,
//! correlation-id checking, and strict decoding (the whole response body must be
//! consumed by the decoder for the version we asked for).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

pub const CLIENT_ID: &str = "tern-protocol-tests";

/// Default read timeout of a client socket. Long-poll tests raise it explicitly.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// Largest response frame the client accepts (a sanity bound, not a protocol limit).
const MAX_RESPONSE: i32 = 256 * 1024 * 1024;

pub fn api_name(api_key: i16) -> String {
    match ApiKey::try_from(api_key) {
        Ok(k) => format!("{k:?}"),
        Err(_) => format!("ApiKey({api_key})"),
    }
}

/// Request header version for (api_key, version); 1 for keys the library does not know.
pub fn request_header_version(api_key: i16, version: i16) -> i16 {
    match ApiKey::try_from(api_key) {
        Ok(k) => k.request_header_version(version),
        Err(_) => 1,
    }
}

/// Response header version; ApiVersions responses always use header v0 (KIP-511).
pub fn response_header_version(api_key: i16, version: i16) -> i16 {
    if api_key == ApiKey::ApiVersions as i16 {
        return 0;
    }
    match ApiKey::try_from(api_key) {
        Ok(k) => k.response_header_version(version),
        Err(_) => 0,
    }
}

/// True when (api_key, version) uses the flexible (KIP-482) encoding.
pub fn is_flexible(api_key: i16, version: i16) -> bool {
    request_header_version(api_key, version) >= 2
}

/// Encodes a request header in the header version matching (api_key, version).
pub fn encode_header(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Vec<u8> {
    let hv = request_header_version(api_key, version);
    let header = RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(|s| StrBytes::from_string(s.to_string())));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, hv).expect("encode request header");
    buf.to_vec()
}

/// 4-byte big-endian size prefix + payload.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a request body at `version`, panicking with a readable message on failure.
pub fn encode_body<R: Encodable>(req: &R, what: &str, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    if let Err(e) = req.encode(&mut buf, version) {
        panic!("test bug: cannot encode {what} v{version}: {e}");
    }
    buf.to_vec()
}

/// Result of waiting for a response on a connection.
#[derive(Debug)]
pub enum Outcome {
    /// A complete response frame (payload without the size prefix).
    Frame(Vec<u8>),
    /// The peer closed (EOF or reset), possibly mid-frame.
    Closed,
    /// Nothing (complete) arrived before the deadline.
    Timeout,
}

#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    next_correlation: i32,
}

impl Client {
    pub fn try_connect(addr: &str) -> io::Result<Client> {
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::other(format!("cannot resolve {addr}")))?;
        let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(DEFAULT_TIMEOUT))?;
        stream.set_write_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(Client {
            stream,
            next_correlation: 1,
        })
    }

    pub fn connect(addr: &str) -> Client {
        match Client::try_connect(addr) {
            Ok(c) => c,
            Err(e) => panic!("cannot connect to broker at {addr}: {e}"),
        }
    }

    pub fn set_read_timeout(&self, d: Duration) {
        self.stream
            .set_read_timeout(Some(d))
            .expect("set_read_timeout");
    }

    pub fn next_correlation_id(&mut self) -> i32 {
        let c = self.next_correlation;
        // Distinctive, non-sequential ids catch brokers that echo a counter instead.
        self.next_correlation =
            self.next_correlation.wrapping_mul(7).wrapping_add(13) & 0x3fff_ffff;
        c
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Sends `body` under a correct header; returns the correlation id used.
    pub fn send_raw(&mut self, api_key: i16, version: i16, body: &[u8]) -> i32 {
        let corr = self.next_correlation_id();
        let mut payload = encode_header(api_key, version, corr, Some(CLIENT_ID));
        payload.extend_from_slice(body);
        if let Err(e) = self.write_all(&frame(&payload)) {
            panic!(
                "writing {} v{version} request failed: {e}",
                api_name(api_key)
            );
        }
        corr
    }

    pub fn send<R: Request>(&mut self, version: i16, req: &R) -> i32 {
        let body = encode_body(req, &api_name(R::KEY), version);
        self.send_raw(R::KEY, version, &body)
    }

    /// Reads one response frame; errors on EOF / timeout.
    pub fn read_frame(&mut self) -> io::Result<Vec<u8>> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        if !(0..=MAX_RESPONSE).contains(&size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad response size prefix {size}"),
            ));
        }
        let mut buf = vec![0u8; size as usize];
        self.stream.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// Waits up to `timeout` for a full response frame or for the connection to close.
    pub fn wait_outcome(&mut self, timeout: Duration) -> Outcome {
        wait_outcome(&mut self.stream, timeout)
    }

    /// Reads a response frame and checks the header (version for api/version, correlation id).
    /// Returns the body bytes after the header.
    pub fn recv_body(&mut self, api_key: i16, version: i16, corr: i32) -> Bytes {
        let frame = match self.read_frame() {
            Ok(f) => f,
            Err(e) => panic!(
                "no response to {} v{version} (correlation id {corr}): {e} (connection closed or timed out)",
                api_name(api_key)
            ),
        };
        let mut buf = Bytes::from(frame);
        let hv = response_header_version(api_key, version);
        let header = match ResponseHeader::decode(&mut buf, hv) {
            Ok(h) => h,
            Err(e) => panic!(
                "{} v{version}: cannot decode response header v{hv}: {e}",
                api_name(api_key)
            ),
        };
        assert_eq!(
            header.correlation_id,
            corr,
            "{} v{version}: response correlation id mismatch",
            api_name(api_key)
        );
        buf
    }

    /// Reads and strictly decodes the response to a request sent with `corr`.
    pub fn recv<T: Decodable>(&mut self, api_key: i16, version: i16, corr: i32) -> T {
        let mut buf = self.recv_body(api_key, version, corr);
        let total = buf.len();
        let resp = match T::decode(&mut buf, version) {
            Ok(r) => r,
            Err(e) => panic!(
                "{} v{version}: cannot decode response body ({total} bytes): {e}",
                api_name(api_key)
            ),
        };
        assert_eq!(
            buf.remaining(),
            0,
            "{} v{version}: {} trailing bytes after the response body (wrong version encoding?)",
            api_name(api_key),
            buf.remaining()
        );
        resp
    }

    /// Sends a request and returns its decoded response.
    pub fn call<R: Request>(&mut self, version: i16, req: &R) -> R::Response {
        let corr = self.send(version, req);
        self.recv::<R::Response>(R::KEY, version, corr)
    }
}

/// Waits until a full frame arrives, the peer closes, or `timeout` passes.
pub fn wait_outcome(stream: &mut TcpStream, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if buf.len() >= 4 {
            let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if !(0..=MAX_RESPONSE).contains(&size) {
                // Garbage from the broker: treat as a frame so the caller can report it.
                return Outcome::Frame(buf);
            }
            if buf.len() >= 4 + size as usize {
                return Outcome::Frame(buf[4..4 + size as usize].to_vec());
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Outcome::Timeout;
        }
        let left = (deadline - now).max(Duration::from_millis(1));
        if stream.set_read_timeout(Some(left)).is_err() {
            return Outcome::Closed;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Outcome::Closed,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                return Outcome::Timeout
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Outcome::Closed, // reset etc.
        }
    }
}

/// Reads the correlation id out of a response frame payload (first 4 bytes of any header).
pub fn frame_correlation_id(payload: &[u8]) -> Option<i32> {
    if payload.len() < 4 {
        return None;
    }
    Some(i32::from_be_bytes([
        payload[0], payload[1], payload[2], payload[3],
    ]))
}
