//! The HTTP API's transport: plain TCP or TLS, one accept path for both.
//!
//! axum's `serve` accepts one connection at a time, so a TLS handshake done inside its
//! `accept` would let one slow client hold up every other. Here an accept task hands
//! each TCP connection to its own handshake task (bounded in time, as on the Kafka
//! listeners), and finished connections reach axum through a channel.
//! The client-certificate principal travels with the connection as its [`HttpPeer`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::security::principal::SslPrincipalMapper;
use crate::security::tls::ReloadingTls;
use crate::wire::ByteStream;

/// Connections accepted (and handshaken) but not yet taken by axum.
const READY_CONNECTIONS: usize = 64;

/// Who is at the other end of one connection.
#[derive(Debug, Clone)]
pub struct HttpPeer {
    pub addr: SocketAddr,
    /// The principal name its verified client certificate maps to.
    pub tls_user: Option<String>,
}

/// Connections ready to be served, in the shape `axum::serve` takes.
#[derive(Debug)]
pub struct HttpListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(Box<dyn ByteStream>, HttpPeer)>,
}

impl HttpListener {
    /// Accepts on `socket` until `shutdown`, with TLS when `tls` is given.
    pub fn start(
        socket: TcpListener,
        tls: Option<Arc<ReloadingTls>>,
        mapper: SslPrincipalMapper,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = socket.local_addr()?;
        let (sender, ready) = mpsc::channel(READY_CONNECTIONS);
        tokio::spawn(accept_loop(socket, tls, Arc::new(mapper), sender, shutdown));
        Ok(Self { local, ready })
    }
}

async fn accept_loop(
    socket: TcpListener,
    tls: Option<Arc<ReloadingTls>>,
    mapper: Arc<SslPrincipalMapper>,
    ready: mpsc::Sender<(Box<dyn ByteStream>, HttpPeer)>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = socket.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "HTTP API accept failed");
                tokio::time::sleep(crate::limits::ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let ready = ready.clone();
        let Some(tls) = tls.clone() else {
            let peer = HttpPeer {
                addr,
                tls_user: None,
            };
            if ready.send((Box::new(stream), peer)).await.is_err() {
                return;
            }
            continue;
        };
        let mapper = Arc::clone(&mapper);
        tokio::spawn(async move {
            let handshake =
                crate::server::listener::tls_handshake(&tls, stream, addr, &mapper, "HTTP");
            if let Some((stream, tls_user)) = handshake.await {
                let peer = HttpPeer { addr, tls_user };
                let _ = ready.send((Box::new(stream), peer)).await;
            }
        });
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = Box<dyn ByteStream>;
    type Addr = HttpPeer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop ended (shutdown): nothing more will come, and the
            // server's graceful shutdown is already under way.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(HttpPeer {
            addr: self.local,
            tls_user: None,
        })
    }
}

impl Connected<IncomingStream<'_, HttpListener>> for HttpPeer {
    fn connect_info(stream: IncomingStream<'_, HttpListener>) -> Self {
        stream.remote_addr().clone()
    }
}
