//! The client side of a connection, for every channel of a [`crate::Transport`]: TCP
//! (with TCP_NODELAY), then — when the transport has certificates — TLS, verifying the
//! server's certificate against the cluster CA and the name dialled, and presenting this
//! process's own.

use crate::coalesce::Coalesced;
use crate::net::{BoxStream, SharedNetwork};
use crate::tls::Security;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A connected stream: plain or TLS over the OS's TCP, or another network's
/// ([`crate::net`]).
pub enum ClientIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Other(BoxStream),
}

macro_rules! delegate_io {
    ($ty:ident) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $ty::Plain(s) => f.debug_tuple("Plain").field(s).finish(),
                    $ty::Tls(s) => f.debug_tuple("Tls").field(s).finish(),
                    $ty::Other(_) => f.write_str("Other"),
                }
            }
        }

        impl AsyncRead for $ty {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    $ty::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
                    $ty::Other(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
                }
            }
        }

        impl AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    $ty::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
                    $ty::Other(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => Pin::new(s).poll_flush(cx),
                    $ty::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
                    $ty::Other(s) => Pin::new(s.as_mut()).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $ty::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    $ty::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
                    $ty::Other(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
                }
            }

            fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $ty::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    $ty::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
                    $ty::Other(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $ty::Plain(s) => s.is_write_vectored(),
                    $ty::Tls(s) => s.is_write_vectored(),
                    $ty::Other(s) => s.is_write_vectored(),
                }
            }
        }
    };
}

delegate_io!(ClientIo);
pub(crate) use delegate_io;

/// Opens a connection to `host:port` the way `security` says, over the OS's TCP or,
/// when given, another network (plaintext only: [`crate::net`]).
pub async fn connect(security: &Security, network: Option<&SharedNetwork>, host: &str, port: u16) -> io::Result<ClientIo> {
    if let Some(net) = network {
        return match security {
            Security::Insecure => Ok(ClientIo::Other(net.connect(host, port).await?)),
            Security::Tls(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "TLS over a simulated network is not supported")),
        };
    }
    let tcp = TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port)).await?;
    tcp.set_nodelay(true)?;
    match security {
        Security::Insecure => Ok(ClientIo::Plain(tcp)),
        Security::Tls(m) => {
            let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
            let name = ServerName::try_from(bare).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
            let tls = tokio_rustls::TlsConnector::from(m.client_config()).connect(name, tcp).await?;
            Ok(ClientIo::Tls(Box::new(tls)))
        }
    }
}

/// The connector a tonic channel dials through.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) security: Security,
    pub(crate) network: Option<SharedNetwork>,
}

impl tower::Service<http::Uri> for Connector {
    type Response = TokioIo<Coalesced<ClientIo>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Coalesced<ClientIo>>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (security, network) = (self.security.clone(), self.network.clone());
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host")))?.to_owned();
            let port = uri.port_u16().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no port")))?;
            Ok(TokioIo::new(Coalesced::new(connect(&security, network.as_ref(), &host, port).await?)))
        })
    }
}
