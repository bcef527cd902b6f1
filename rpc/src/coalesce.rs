//! Coalesced writes on a client connection: one HTTP/2 request goes out in one
//! segment (one TLS record, one syscall, one wake-up of the peer) instead of one per
//! frame.
//!
//! hyper queues a request's HEADERS when the call is made and its DATA when the body
//! is polled, and the HTTP/2 connection runs as a task of its own. On a multi-threaded
//! runtime that task often wakes on the other worker between the two, and flushes the
//! HEADERS alone: every unary call then costs its peer two reads and two wake-ups
//! (measured on a cell leader: four writes per Raft write to each follower, where two
//! would do; docs/benchmarks.md, "Where one client's write goes").
//!
//! [`Coalesced`] keeps what the connection writes in a buffer (up to [`LIMIT`] bytes)
//! and, at the first flush of a batch, yields once to the scheduler before writing it
//! out, so that frames queued by the caller's task meanwhile leave in the same write.
//! HTTP/2 always flushes after it writes, so nothing stays in the buffer: the cost is
//! one more poll of the connection's task per batch, no timer and no added wait when
//! nothing else is ready to run.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held before they are written without waiting for the flush (one
/// HTTP/2 frame of the default size, plus its neighbours).
pub const LIMIT: usize = 32 * 1024;

/// A stream whose writes are gathered until a flush, then written out together after
/// one yield (see the module doc).
#[derive(Debug)]
pub struct Coalesced<T> {
    io: T,
    buf: Vec<u8>,
    /// The current batch's flush has yielded once already.
    yielded: bool,
}

impl<T> Coalesced<T> {
    pub fn new(io: T) -> Self {
        Coalesced { io, buf: Vec::new(), yielded: false }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes the whole buffer out (Pending while the socket is full).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut written = 0;
        let result = loop {
            if written == self.buf.len() {
                break Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.buf[written..]) {
                Poll::Ready(Ok(0)) => break Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                Poll::Pending => break Poll::Pending,
            }
        };
        self.buf.drain(..written);
        result
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.buf.len() + total > LIMIT {
            // Full: what is held goes first, and a large write goes straight through.
            std::task::ready!(this.poll_drain(cx))?;
            if total > LIMIT {
                return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
            }
        }
        for b in bufs {
            this.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.buf.is_empty() {
            if !this.yielded {
                // Once per batch: let the tasks already woken (the caller queueing its
                // request's body) run before the batch leaves.
                this.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            std::task::ready!(this.poll_drain(cx))?;
        }
        this.yielded = false;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes before a flush leave together, in order, and only at the flush.
    #[tokio::test]
    async fn writes_leave_together_at_the_flush() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesced::new(a);
        w.write_all(b"head").await.unwrap();
        w.write_all(b"-body").await.unwrap();
        let mut got = [0u8; 16];
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), b.read(&mut got)).await;
        assert!(early.is_err(), "bytes left before the flush");
        w.flush().await.unwrap();
        let n = b.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"head-body", "one read sees both writes");
    }

    /// The first flush of a batch yields once, writing nothing; what is written before
    /// the task is polled again leaves with the batch, in one write.
    #[tokio::test]
    async fn the_first_flush_yields_and_later_writes_join_the_batch() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesced::new(a);
        w.write_all(b"HEADERS").await.unwrap();
        let woken = std::sync::Arc::new(Woken::default());
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut w).poll_flush(&mut cx).is_pending(), "the first flush must yield");
        assert!(woken.0.load(std::sync::atomic::Ordering::SeqCst), "a yielding flush wakes its task, or the batch would stay");
        // The caller's task queues the body meanwhile.
        w.write_all(b"DATA").await.unwrap();
        assert!(Pin::new(&mut w).poll_flush(&mut cx).is_ready(), "the second flush writes");
        let mut got = [0u8; 32];
        let n = b.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"HEADERSDATA", "both left in one write");
    }

    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A write larger than the buffer goes through after what was held, in order.
    #[tokio::test]
    async fn a_large_write_follows_what_was_held() {
        let (a, mut b) = tokio::io::duplex(4 << 20);
        let mut w = Coalesced::new(a);
        w.write_all(b"small").await.unwrap();
        let big = vec![7u8; 2 * LIMIT];
        w.write_all(&big).await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(&got[..5], b"small");
        assert_eq!(&got[5..], &big[..]);
    }
}
