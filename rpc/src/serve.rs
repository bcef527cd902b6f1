//! The server side of the wire edge: one accept loop for every listener (gRPC and
//! HTTP alike), which sets TCP_NODELAY, survives accept errors (a full file table
//! pauses accepting instead of ending the server), performs the TLS handshake when the
//! transport has certificates (concurrently, bounded in number and time), and tells
//! handlers who called ([`Peer`], in the request extensions).

use crate::connect::delegate_io;
use crate::net::{Accept, BoxStream, Listener};
use crate::tls::{Identity, Security};
use futures_util::stream::{self, Stream, StreamExt};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, warn};

/// Longest a TLS handshake may take: a peer that opens a connection and says nothing
/// holds a slot no longer than this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest HTTP request body any holdfast HTTP port reads (the API's bodies are a few
/// hundred bytes: a lock value is at most 1 KiB). A longer one is refused unread.
pub const MAX_HTTP_BODY_BYTES: usize = 64 * 1024;

/// Handshakes in flight at once per listener; more connections wait to be accepted.
const MAX_HANDSHAKES: usize = 256;

/// The router every gRPC server of holdfast serves (see `Transport::grpc_server`).
pub type GrpcRouter = tonic::transport::server::Router<tower::layer::util::Stack<crate::trace::ServerSpans, tower::layer::util::Identity>>;
/// The gRPC server builder every listener starts from ([`crate::Transport::grpc_server`]).
pub type GrpcServer = tonic::transport::Server<tower::layer::util::Stack<crate::trace::ServerSpans, tower::layer::util::Identity>>;

/// Who is on the other end of a connection, as the transport established it. Found in
/// every gRPC request's extensions and as axum's `ConnectInfo<Peer>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The remote socket address.
    pub addr: SocketAddr,
    /// The identity its client certificate proves; `None` without TLS or without a
    /// client certificate (an HTTP port accepts those: probes, bearer tokens).
    pub identity: Option<Identity>,
    /// The connection came over TLS.
    pub tls: bool,
}

/// The stream under one accepted connection.
pub enum ServerIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// Another network's ([`crate::net`]), plaintext.
    Other(BoxStream),
}

delegate_io!(ServerIo);

/// One accepted connection.
#[derive(Debug)]
pub struct Conn {
    io: ServerIo,
    peer: Peer,
}

impl Conn {
    pub fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

/// The accepted connections of a listener, as a stream.
pub struct Incoming {
    inner: Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Incoming")
    }
}

/// How long accepting pauses after an error that is not the connection's own (out of
/// file descriptors, out of memory): retrying at once would spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

async fn accept_one(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((io, addr)) => {
                // Nagle's algorithm delays small RPC frames by up to 40 ms.
                if let Err(e) = io.set_nodelay(true) {
                    warn!(peer = %addr, error = %e, "cannot set TCP_NODELAY");
                }
                return (io, addr);
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted) => {}
            Err(e) => {
                warn!(error = %e, "accept failed; pausing before the next accept");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

/// Another network's connections, as they are accepted (plaintext: [`crate::net`]).
fn incoming_other(accept: Box<dyn Accept>) -> Incoming {
    let s = stream::unfold(accept, |mut a| async move {
        loop {
            match a.accept().await {
                Ok((io, addr)) => return Some((Ok(Conn { io: ServerIo::Other(io), peer: Peer { addr, identity: None, tls: false } }), a)),
                Err(e) => {
                    debug!(error = %e, "accept failed; pausing before the next accept");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            }
        }
    });
    Incoming { inner: Box::pin(s) }
}

/// The connections `listener` accepts, after their TLS handshake when `security` has
/// certificates (a client certificate required if `client_cert_required`); never ends
/// and never yields an error: a failed handshake is the peer's problem, logged.
///
/// Another network's listener ([`crate::net`]) serves plaintext only: with
/// certificates it accepts nothing, and says so.
pub fn incoming(listener: Listener, security: &Security, client_cert_required: bool) -> Incoming {
    let listener = match (listener, security) {
        (Listener::Tcp(l), _) => l,
        (Listener::Other { accept, .. }, Security::Insecure) => return incoming_other(accept),
        (Listener::Other { local, .. }, Security::Tls(_)) => {
            tracing::error!(%local, "TLS over a simulated network is not supported; this listener accepts nothing");
            return Incoming { inner: Box::pin(stream::pending()) };
        }
    };
    let material = match security {
        Security::Insecure => {
            let s = stream::unfold(listener, |l| async move {
                let (io, addr) = accept_one(&l).await;
                Some((Ok(Conn { io: ServerIo::Plain(io), peer: Peer { addr, identity: None, tls: false } }), l))
            });
            return Incoming { inner: Box::pin(s) };
        }
        Security::Tls(m) => m.clone(),
    };
    let (tx, rx) = mpsc::channel::<Conn>(64);
    // Ends when the server drops its `Incoming` (it stopped).
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        loop {
            let (io, addr) = tokio::select! {
                c = accept_one(&listener) => c,
                _ = tx.closed() => return,
            };
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let (tx, config) = (tx.clone(), material.server_config(client_cert_required));
            tokio::spawn(async move {
                let _slot = slot;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_rustls::TlsAcceptor::from(config).accept(io)).await {
                    Ok(Ok(tls)) => {
                        let identity = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| Identity::of_certificate(c));
                        let _ = tx.send(Conn { io: ServerIo::Tls(Box::new(tls)), peer: Peer { addr, identity, tls: true } }).await;
                    }
                    Ok(Err(e)) => debug!(peer = %addr, error = %e, "TLS handshake refused"),
                    Err(_) => debug!(peer = %addr, "TLS handshake not done in time"),
                }
            });
        }
    });
    let s = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (Ok(c), rx)) });
    Incoming { inner: Box::pin(s) }
}

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// An [`Incoming`] as axum's listener.
struct HttpListener {
    incoming: Incoming,
    local: SocketAddr,
}

impl axum::serve::Listener for HttpListener {
    type Io = Conn;
    type Addr = Peer;

    async fn accept(&mut self) -> (Conn, Peer) {
        loop {
            match self.incoming.next().await {
                Some(Ok(c)) => {
                    let p = c.peer.clone();
                    return (c, p);
                }
                // `incoming` yields neither errors nor an end; stay put if it ever did.
                Some(Err(_)) => continue,
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        Ok(Peer { addr: self.local, identity: None, tls: false })
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, HttpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, HttpListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

pub(crate) async fn http(
    router: axum::Router,
    listener: Listener,
    security: &Security,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    // HTTP ports take callers without a client certificate: health probes, and the
    // gateway's API callers who present a bearer token instead.
    let l = HttpListener { incoming: incoming(listener, security, false), local };
    let router = router.layer(axum::extract::DefaultBodyLimit::max(MAX_HTTP_BODY_BYTES));
    axum::serve(l, router.into_make_service_with_connect_info::<Peer>()).with_graceful_shutdown(shutdown).await
}
