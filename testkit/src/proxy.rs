//! A TCP proxy a test can cut: the network between a cell and the registry. While cut,
//! it holds new connections without answering (packets dropped, not refused) and
//! stalls the open ones, as a partition does.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<watch::Sender<bool>>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let c = cut.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let cut_rx = c.subscribe();
                tokio::spawn(pipe(inbound, target, cut_rx));
            }
        });
        Proxy { addr, cut }
    }

    pub fn cut(&self, on: bool) {
        self.cut.send_replace(on);
    }
}

async fn pipe(inbound: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    // A cut link answers nothing: wait until it heals before even connecting.
    if cut.wait_for(|c| !*c).await.is_err() {
        return;
    }
    let Ok(outbound) = TcpStream::connect(target).await else { return };
    let (mut ri, mut wi) = inbound.into_split();
    let (mut ro, mut wo) = outbound.into_split();
    let c1 = cut.clone();
    let up = tokio::spawn(async move { copy(&mut ri, &mut wo, c1).await });
    let down = tokio::spawn(async move { copy(&mut ro, &mut wi, cut).await });
    let _ = tokio::join!(up, down);
}

/// Copies bytes while the link is up; while it is cut, bytes are held, not delivered.
/// A connection that was open across a cut is closed when the cut ends (its peer saw
/// silence, as after a partition with a TCP timeout).
async fn copy(from: &mut (impl AsyncReadExt + Unpin + Send), to: &mut (impl AsyncWriteExt + Unpin + Send), mut cut: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut watcher = cut.clone();
    loop {
        tokio::select! {
            n = from.read(&mut buf) => {
                let Ok(n) = n else { return };
                if n == 0 { return; }
                let is_cut = *cut.borrow();
                if is_cut {
                    // Dropped on the floor; the connection dies when the cut heals.
                    drop(cut.wait_for(|c| !*c).await);
                    return;
                }
                if to.write_all(&buf[..n]).await.is_err() { return; }
            }
            _ = async { drop(watcher.wait_for(|c| *c).await) } => {
                drop(cut.wait_for(|c| !*c).await);
                return;
            }
        }
    }
}
