//! One client connection: a reader task turns the byte stream into frames; this task
//! runs up to `max_in_flight_requests` of them concurrently and writes the responses
//! strictly in request order (a slow acks=all produce never lets a later fetch answer
//! first). Oversized or malformed frames close the connection. A request over its
//! client quota mutes the connection: no later request runs until its throttle passes.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::dispatch;
use crate::api::context::{ConnectionSecurity, Services};
use crate::api::table::Reply;
use crate::wire::{FrameError, FrameReader};

/// A frame read from the socket, with its share of the broker-wide request memory
/// (`queued_max_request_bytes`), held until its reply is complete.
type Frame = (Bytes, std::time::Instant, OwnedSemaphorePermit);

/// The most a connection may read next: on a SASL listener before authentication, what
/// is left of its `sasl_max_receive_bytes`; `None` when that budget is spent.
fn frame_limit(security: &ConnectionSecurity, max_request: u32, pre_auth_left: u32) -> Option<u32> {
    let authenticating = security
        .sasl
        .as_ref()
        .is_some_and(|sasl| sasl.lock().authenticated().is_none());
    if !authenticating {
        return Some(max_request);
    }
    pre_auth_left
        .checked_sub(4)
        .map(|left| left.min(max_request))
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

/// Runs `request`, keeping `permit` (its bytes of request memory) until its reply is
/// complete, second stage included: a parked JoinGroup or an acks=all produce holds its
/// share until it answers.
async fn holding(
    permit: OwnedSemaphorePermit,
    request: impl std::future::Future<Output = Reply>,
) -> Reply {
    match request.await {
        Reply::Later(completion) => Reply::Later(Box::pin(async move {
            let reply = completion.await;
            drop(permit);
            reply
        })),
        done => done,
    }
}

/// Serves a plain TCP connection (its halves split without a lock).
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    security: Arc<ConnectionSecurity>,
    services: Arc<Services>,
    shutdown: CancellationToken,
) {
    let (read_half, write_half) = stream.into_split();
    serve_connection(read_half, write_half, peer, security, services, shutdown).await;
}

/// Serves a connection over any stream (TLS).
pub async fn serve_stream<S>(
    stream: S,
    peer: SocketAddr,
    security: Arc<ConnectionSecurity>,
    services: Arc<Services>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    serve_connection(read_half, write_half, peer, security, services, shutdown).await;
}

async fn serve_connection<R, W>(
    read_half: R,
    mut write_half: W,
    peer: SocketAddr,
    security: Arc<ConnectionSecurity>,
    services: Arc<Services>,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send,
{
    metrics::counter!(crate::metrics::CONNECTIONS_ACCEPTED_TOTAL).increment(1);
    metrics::gauge!(crate::metrics::CONNECTIONS).increment(1.0);
    let max_in_flight = services.server.max_in_flight_requests;
    let max_request_bytes = services.server.max_request_bytes;
    let (frames_tx, mut frames_rx) = mpsc::channel::<Frame>(max_in_flight);
    let reader_stop = shutdown.clone();
    let memory = Arc::clone(&services.request_memory);
    let reader_security = Arc::clone(&security);
    let mut pre_auth_left = services.server.sasl_max_receive_bytes;
    let reader = tokio::spawn(async move {
        let mut reader = FrameReader::new(read_half);
        loop {
            let Some(limit) = frame_limit(&reader_security, max_request_bytes, pre_auth_left)
            else {
                tracing::info!(%peer, "closing connection: sent sasl_max_receive_bytes without authenticating");
                break;
            };
            let next = async {
                let Some(size) = reader.read_size(limit).await? else {
                    return Ok(None);
                };
                // Wait for room in the broker-wide request memory before reading the
                // body: a flood of big requests is slowed here, never held in memory.
                let permit = Arc::clone(&memory)
                    .acquire_many_owned(size.max(1) as u32)
                    .await
                    .map_err(|_| std::io::Error::other("shutting down"))?;
                let body = reader.read_body(size).await?;
                Ok::<_, FrameError>(Some((body, permit)))
            };
            let frame = tokio::select! {
                _ = reader_stop.cancelled() => break,
                frame = next => frame,
            };
            match frame {
                Ok(Some((frame, permit))) => {
                    pre_auth_left = pre_auth_left.saturating_sub(frame.len() as u32 + 4);
                    if frames_tx
                        .send((frame, std::time::Instant::now(), permit))
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
        // A request over its client quota muted the connection: nothing more runs
        // until the throttle time has passed (replies already due still go out).
        let muted = security.mute.remaining();
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
                    Reply::FrameThenClose(chunks, reason) => {
                        let _ = write_chunks(&mut write_half, chunks).await;
                        tracing::info!(%peer, %reason, "closing connection");
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
            () = tokio::time::sleep(muted.unwrap_or_default()), if muted.is_some() && executing.is_none() => {}
            frame = frames_rx.recv(), if reading && muted.is_none() && executing.is_none() && in_flight.len() < max_in_flight => {
                match frame {
                    Some((frame, received, permit)) => {
                        let request = dispatch::handle_frame(Arc::clone(&services), peer, Arc::clone(&security), frame, received);
                        executing = Some(Box::pin(holding(permit, request)));
                    }
                    None => reading = false,
                }
            }
            else => break,
        }
    }
    reader.abort();
    let _ = write_half.shutdown().await;
    metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
}
