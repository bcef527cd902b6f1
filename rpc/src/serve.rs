//! The server side of the wire edge: one accept loop for every listener (gRPC and
//! HTTP alike), which sets TCP_NODELAY, survives accept errors (a full file table
//! pauses accepting instead of ending the server) and tells handlers who called
//! ([`Peer`], in the request extensions).

use futures_util::stream::{self, Stream, StreamExt};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

/// The router every gRPC server of holdfast serves (see `Transport::grpc_server`).
pub type GrpcRouter = tonic::transport::server::Router;

/// Who is on the other end of a connection, as the transport established it. Found in
/// every gRPC request's extensions and as axum's `ConnectInfo<Peer>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The remote socket address.
    pub addr: SocketAddr,
}

/// One accepted connection.
#[derive(Debug)]
pub struct Conn {
    io: TcpStream,
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

async fn accept_one(listener: &TcpListener) -> Conn {
    loop {
        match listener.accept().await {
            Ok((io, addr)) => {
                // Nagle's algorithm delays small RPC frames by up to 40 ms.
                if let Err(e) = io.set_nodelay(true) {
                    warn!(peer = %addr, error = %e, "cannot set TCP_NODELAY");
                }
                return Conn { io, peer: Peer { addr } };
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted) => {}
            Err(e) => {
                warn!(error = %e, "accept failed; pausing before the next accept");
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
        }
    }
}

/// The connections `listener` accepts; never ends and never yields an error.
pub fn incoming(listener: TcpListener) -> Incoming {
    let s = stream::unfold(listener, |l| async move {
        let c = accept_one(&l).await;
        Some((Ok(c), l))
    });
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
        Ok(Peer { addr: self.local })
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, HttpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, HttpListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

pub(crate) async fn http(router: axum::Router, listener: TcpListener, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> io::Result<()> {
    let local = listener.local_addr()?;
    let l = HttpListener { incoming: incoming(listener), local };
    axum::serve(l, router.into_make_service_with_connect_info::<Peer>()).with_graceful_shutdown(shutdown).await
}
