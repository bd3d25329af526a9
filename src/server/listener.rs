//! The accept loop: one task per connection, bounded by `max_connections`.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection;
use crate::api::context::Services;

/// Accepts connections until `shutdown`; each connection runs on `tasks`.
pub async fn run_listener(
    listener: TcpListener,
    services: Arc<Services>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(services.server.max_connections));
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = Arc::clone(&limit).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let services = Arc::clone(&services);
                let shutdown = shutdown.clone();
                tasks.spawn(async move {
                    connection::serve(stream, peer, services, shutdown).await;
                    drop(permit);
                });
            }
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(crate::config::limits::ACCEPT_BACKOFF).await;
            }
        }
    }
}
