//! The async runtime openraft runs on: tokio, exactly as openraft's own
//! `TokioRuntime`, except for the one thing openraft draws at random — election
//! timeouts and the first phase of its tick — which comes from
//! [`holdfast_rpc::entropy`]: the OS-seeded generator in a server, the seed on a
//! thread the deterministic simulation runs (docs/simulation.md).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend};
use openraft_rt_tokio::TokioRuntime;

/// tokio, with holdfast's randomness.
#[derive(Debug)]
pub struct Runtime(TokioRuntime);

/// openraft's random draws, from [`holdfast_rpc::entropy`].
#[derive(Debug, Default)]
pub struct EntropyRng;

impl rand_core::TryRng for EntropyRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(holdfast_rpc::entropy::random_u64() as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(holdfast_rpc::entropy::random_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            chunk.copy_from_slice(&holdfast_rpc::entropy::random_u64().to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}

type Tokio = TokioRuntime;

impl AsyncRuntime for Runtime {
    type JoinError = <Tokio as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as AsyncRuntime>::Sleep;
    type Instant = <Tokio as AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <Tokio as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = EntropyRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        Tokio::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        Tokio::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        EntropyRng
    }

    type Mpsc = <Tokio as AsyncRuntime>::Mpsc;
    type Watch = <Tokio as AsyncRuntime>::Watch;
    type Oneshot = <Tokio as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        Runtime(Tokio::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }

    async fn spawn_blocking<F, T>(f: F) -> Result<T, std::io::Error>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        tokio::task::spawn_blocking(f).await.map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::Rng;

    #[test]
    fn openraft_draws_from_the_seeded_thread() {
        holdfast_rpc::entropy::seed_this_thread(Some(3));
        let a: Vec<u64> = (0..3).map(|_| Runtime::thread_rng().next_u64()).collect();
        holdfast_rpc::entropy::seed_this_thread(Some(3));
        let b: Vec<u64> = (0..3).map(|_| Runtime::thread_rng().next_u64()).collect();
        holdfast_rpc::entropy::seed_this_thread(None);
        assert_eq!(a, b);
    }
}
