//! Kafka's framing, below every user of it: the request-header prefix, header and body
//! decoding under the allocation guard, response framing into chunks that reference
//! record sets instead of copying them, and the byte-stream type both the broker's
//! listeners and its clients (peers, the CLI) speak over. A leaf: it imports nothing of
//! tern's but `limits` and the allocation guard.

mod chunked;
pub mod fields;
mod frame;
mod reader;

pub use self::chunked::SHARE_MIN_BYTES;
pub use self::frame::{decode_untrusted, encode_response, split_header, DecodeError, HeaderPrefix};
pub use self::reader::{FrameError, FrameReader};

/// A connection's bytes: TCP, or TLS over TCP, behind one type.
pub trait ByteStream:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> ByteStream for T {}

impl std::fmt::Debug for dyn ByteStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ByteStream")
    }
}
