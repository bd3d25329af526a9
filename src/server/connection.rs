//! One client connection: a reader task turns the byte stream into frames; this task
//! runs up to `max_in_flight_requests` of them concurrently and writes the responses
//! strictly in request order (a slow acks=all produce never lets a later fetch answer
//! first). Oversized or malformed frames close the connection.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::dispatch::{self, Reply};
use crate::api::context::Services;

use crate::config::limits::READ_CHUNK_BYTES;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("frame size {size} outside 0..={max}")]
    BadSize { size: i32, max: u32 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one size-prefixed frame; `Ok(None)` on a clean end of stream.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: u32,
) -> Result<Option<Bytes>, FrameError> {
    let size = match reader.read_i32().await {
        Ok(size) => size,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if size < 0 || size as u32 > max {
        return Err(FrameError::BadSize { size, max });
    }
    let size = size as usize;
    let mut frame = BytesMut::with_capacity(size.min(READ_CHUNK_BYTES));
    while frame.len() < size {
        let want = (size - frame.len()).min(READ_CHUNK_BYTES);
        frame.reserve(want);
        let n = (&mut *reader)
            .take(want as u64)
            .read_buf(&mut frame)
            .await?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    Ok(Some(frame.freeze()))
}

/// Writes every chunk, several per `writev`, handling partial writes.
async fn write_chunks<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    chunks: Vec<Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut queue: std::collections::VecDeque<Bytes> =
        chunks.into_iter().filter(|c| !c.is_empty()).collect();
    while !queue.is_empty() {
        let slices: Vec<std::io::IoSlice<'_>> = queue
            .iter()
            .take(64)
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(front) = queue.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                queue.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
    Ok(())
}

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    services: Arc<Services>,
    shutdown: CancellationToken,
) {
    metrics::counter!(crate::metrics::CONNECTIONS_ACCEPTED_TOTAL).increment(1);
    metrics::gauge!(crate::metrics::CONNECTIONS).increment(1.0);
    serve_connection(stream, peer, services, shutdown).await;
    metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    services: Arc<Services>,
    shutdown: CancellationToken,
) {
    let (read_half, mut write_half) = stream.into_split();
    let max_in_flight = services.server.max_in_flight_requests;
    let max_request_bytes = services.server.max_request_bytes;
    let (frames_tx, mut frames_rx) = mpsc::channel::<(Bytes, std::time::Instant)>(max_in_flight);
    let reader_stop = shutdown.clone();
    let reader = tokio::spawn(async move {
        let mut reader = BufReader::with_capacity(64 * 1024, read_half);
        loop {
            let frame = tokio::select! {
                _ = reader_stop.cancelled() => break,
                frame = read_frame(&mut reader, max_request_bytes) => frame,
            };
            match frame {
                Ok(Some(frame)) => {
                    if frames_tx
                        .send((frame, std::time::Instant::now()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%peer, %error, "closing connection");
                    break;
                }
            }
        }
    });

    // Requests are *executed* one at a time, in arrival order, as Kafka does (an
    // OffsetFetch must see the OffsetCommit before it; pipelined produces append in
    // order). A request may leave a second stage (acks=all waiting for its fsync);
    // those overlap, and their replies still leave in request order.
    let mut in_flight: FuturesOrdered<BoxFuture<'static, Reply>> = FuturesOrdered::new();
    let mut executing: Option<BoxFuture<'static, Reply>> = None;
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            Some(reply) = in_flight.next(), if !in_flight.is_empty() => {
                match reply {
                    Reply::Frame(chunks) => {
                        if let Err(error) = write_chunks(&mut write_half, chunks).await {
                            tracing::debug!(%peer, %error, "write failed");
                            break;
                        }
                    }
                    Reply::None | Reply::Later(_) => {}
                    Reply::Close(reason) => {
                        tracing::info!(%peer, %reason, "closing connection after a bad request");
                        break;
                    }
                }
            }
            reply = async {
                match executing.as_mut() {
                    Some(request) => request.await,
                    None => std::future::pending().await,
                }
            }, if executing.is_some() => {
                executing = None;
                in_flight.push_back(match reply {
                    Reply::Later(completion) => completion,
                    done => Box::pin(std::future::ready(done)),
                });
            }
            frame = frames_rx.recv(), if reading && executing.is_none() && in_flight.len() < max_in_flight => {
                match frame {
                    Some((frame, received)) => {
                        executing = Some(Box::pin(dispatch::handle_frame(Arc::clone(&services), peer, frame, received)));
                    }
                    None => reading = false,
                }
            }
            else => break,
        }
    }
    reader.abort();
    let _ = write_half.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversized_and_negative_frames_are_refused_before_reading_them() {
        let mut huge: &[u8] = &[0x7f, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut huge, 1024).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut negative: &[u8] = &[0xff, 0xff, 0xff, 0xfe];
        assert!(matches!(
            read_frame(&mut negative, 1024).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut ok: &[u8] = &[0, 0, 0, 3, 1, 2, 3, 9];
        assert_eq!(
            read_frame(&mut ok, 1024).await.ok().flatten().as_deref(),
            Some(&[1u8, 2, 3][..])
        );
        let mut truncated: &[u8] = &[0, 0, 0, 5, 1];
        assert!(read_frame(&mut truncated, 1024).await.is_err());
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, 1024).await, Ok(None)));
    }
}
