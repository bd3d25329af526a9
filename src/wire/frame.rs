//! Frame-level parsing: the fixed request-header prefix, the full request header, body
//! decoding under the allocation guard, and response framing.

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::chunked::ChunkedBuf;

/// The first 8 bytes of every request, readable before knowing the header version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

impl HeaderPrefix {
    pub fn parse(frame: &[u8]) -> Option<Self> {
        if frame.len() < 8 {
            return None;
        }
        Some(Self {
            api_key: i16::from_be_bytes([frame[0], frame[1]]),
            api_version: i16::from_be_bytes([frame[2], frame[3]]),
            correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        })
    }
}

/// Why a request could not be decoded; the connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("malformed {api:?} v{version} request: {reason}")]
pub struct DecodeError {
    pub api: ApiKey,
    pub version: i16,
    pub reason: String,
}

/// Decodes a value from untrusted bytes: under the allocation guard and catching any
/// panic inside the decoder, so that a hostile body costs only its connection.
pub fn decode_untrusted<T: Decodable>(
    api: ApiKey,
    buf: &mut Bytes,
    version: i16,
) -> Result<T, DecodeError> {
    if crate::alloc::live_reservations() >= crate::limits::GUARDED_ALLOCATION_HIGH_WATER {
        metrics::counter!(crate::metrics::DECODES_REFUSED_TOTAL).increment(1);
        return Err(DecodeError {
            api,
            version,
            reason: "broker busy: too many large decodes in flight".into(),
        });
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::alloc::decoding(|| T::decode(buf, version))
    }));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(DecodeError {
            api,
            version,
            reason: error.to_string(),
        }),
        Err(_) => Err(DecodeError {
            api,
            version,
            reason: "decoder panicked".into(),
        }),
    }
}

/// Splits a frame into its decoded header and the body bytes that follow it.
pub fn split_header(
    api: ApiKey,
    version: i16,
    frame: Bytes,
) -> Result<(RequestHeader, Bytes), DecodeError> {
    let mut buf = frame;
    let header_version = api.request_header_version(version);
    let header = decode_untrusted::<RequestHeader>(api, &mut buf, header_version)?;
    Ok((header, buf))
}

/// Encodes a whole response frame (size prefix, header, body) as chunks; the record
/// sets in `shared` are referenced rather than copied (see `server::response`).
pub fn encode_response<R: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &R,
    shared: Vec<Bytes>,
) -> Result<Vec<Bytes>, String> {
    // ApiVersions always answers with header v0 so that any client can read it.
    let header_version = if api == ApiKey::ApiVersions {
        0
    } else {
        api.response_header_version(version)
    };
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header
        .compute_size(header_version)
        .map_err(|e| e.to_string())?
        + response.compute_size(version).map_err(|e| e.to_string())?;
    let size = i32::try_from(size).map_err(|_| "response larger than 2 GiB".to_string())?;
    let mut out = ChunkedBuf::new(shared);
    out.put_i32(size);
    header
        .encode(&mut out, header_version)
        .map_err(|e| e.to_string())?;
    response
        .encode(&mut out, version)
        .map_err(|e| e.to_string())?;
    if out.len() != size as usize + 4 {
        return Err(format!("encoded {} bytes, computed {size}", out.len() - 4));
    }
    Ok(out.into_chunks())
}
