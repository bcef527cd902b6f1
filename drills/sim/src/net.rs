//! The wire edge over turmoil's simulated TCP: a [`Network`] that dials it and an
//! [`Accept`] that serves it, so the cell's servers, its Raft network and the SDK run
//! their own tonic code over simulated wires.

use futures_util::future::BoxFuture;
use holdfast_rpc::net::{Accept, BoxStream, Listener, Network};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// Dials turmoil's network.
pub struct SimNetwork;

impl Network for SimNetwork {
    fn connect(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<BoxStream>> {
        let host = host.to_owned();
        Box::pin(async move {
            let addr = match host.parse::<IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, port),
                Err(_) => SocketAddr::new(turmoil::lookup(host.as_str()), port),
            };
            let s = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(s) as BoxStream)
        })
    }
}

struct SimAccept(turmoil::net::TcpListener);

impl Accept for SimAccept {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, SocketAddr)>> {
        Box::pin(async move {
            let (s, addr) = self.0.accept().await?;
            Ok((Box::new(s) as BoxStream, addr))
        })
    }
}

/// Binds `port` on the current simulated host, `host`; the listener says it is at
/// the host's simulated IP (what the node advertises to its peers).
pub async fn listen(host: &str, port: u16) -> io::Result<Listener> {
    let l = turmoil::net::TcpListener::bind((IpAddr::from([0, 0, 0, 0]), port)).await?;
    Ok(Listener::other(SocketAddr::new(turmoil::lookup(host), port), SimAccept(l)))
}
