//! The network under the wire edge: the operating system's TCP, or another network a
//! caller supplies — the deterministic simulation (`drills/sim`, docs/simulation.md)
//! runs real servers and clients over a simulated one this way.
//!
//! Everything above this seam is the same code either way: the channels, the HTTP/2
//! options, the accept loop, the [`crate::Peer`] a handler sees. A simulated network
//! carries plaintext only: TLS is exercised by every test on the OS network, and a
//! simulation has no adversary on its wires.

use futures_util::future::BoxFuture;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// A connected byte stream of another network.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A boxed [`Stream`].
pub type BoxStream = Box<dyn Stream>;

/// Another network's way to open connections (see [`crate::Transport::over`]).
pub trait Network: Send + Sync + 'static {
    /// Opens a connection to `host:port` (the host as dialled: a name or an IP).
    fn connect(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<BoxStream>>;
}

/// Another network's accepted connections.
pub trait Accept: Send + 'static {
    /// The next connection and its remote address.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, SocketAddr)>>;
}

/// What a server listens on: an OS TCP listener (what every binary binds), or another
/// network's.
pub enum Listener {
    Tcp(TcpListener),
    Other { local: SocketAddr, accept: Box<dyn Accept> },
}

impl Listener {
    /// Another network's listener, bound at `local`.
    pub fn other(local: SocketAddr, accept: impl Accept) -> Listener {
        Listener::Other { local, accept: Box::new(accept) }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Other { local, .. } => Ok(*local),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Listener {
        Listener::Tcp(l)
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listener::Tcp(l) => f.debug_tuple("Tcp").field(l).finish(),
            Listener::Other { local, .. } => f.debug_struct("Other").field("local", local).finish_non_exhaustive(),
        }
    }
}

/// A shared [`Network`].
pub type SharedNetwork = Arc<dyn Network>;
