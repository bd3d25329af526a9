//! The Kafka TCP edge: accepting connections, reading size-prefixed frames, decoding
//! headers and bodies safely, and writing responses in request order.

pub(crate) mod connection;
pub(crate) mod dispatch;
pub mod frame;
mod legacy;
pub use frame::HeaderPrefix;
pub(crate) mod listener;
mod response;

pub use dispatch::SUPPORTED;
pub use listener::{run_listener, KafkaListener, PerAddress};

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
