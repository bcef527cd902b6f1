//! [`Tasks`]: the background work of one server, under its shutdown. Every task has a
//! name, sees one stop signal, and is waited for — within a deadline — when the server
//! stops; a task still running at the deadline is named in the log and aborted.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, warn};

/// The tasks of one server. Cheap to clone; clones share the tasks.
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    stop: CancellationToken,
    tracker: TaskTracker,
    running: Arc<Mutex<BTreeMap<u64, (&'static str, AbortHandle)>>>,
    next: Arc<AtomicU64>,
}

impl Tasks {
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Fires when the server starts stopping.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Runs `fut` as task `name` until it ends or the server stops (then it is
    /// dropped at its next await).
    pub fn spawn(&self, name: &'static str, fut: impl Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        self.spawn_graceful(name, async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = fut => {}
            }
        });
    }

    /// Runs `fut` as task `name`; it must end by itself once [`Tasks::stop_token`]
    /// fires (a server draining its calls). The shutdown waits for it.
    pub fn spawn_graceful(&self, name: &'static str, fut: impl Future<Output = ()> + Send + 'static) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let running = self.running.clone();
        let mut table = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let handle = self.tracker.spawn(async move {
            fut.await;
            running.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            debug!(task = name, "task ended");
        });
        let abort = handle.abort_handle();
        table.insert(id, (name, abort));
        drop(table);
        // A panic is a bug: say which task had it.
        tokio::spawn(async move {
            if let Err(e) = handle.await {
                if e.is_panic() {
                    error!(task = name, "task panicked");
                }
            }
        });
    }

    /// The names of the tasks still running.
    pub fn running(&self) -> Vec<&'static str> {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).values().map(|(n, _)| *n).collect()
    }

    /// Signals stop and waits up to `deadline` for every task; aborts the rest and
    /// returns their names.
    pub async fn shutdown(&self, deadline: Duration) -> Vec<&'static str> {
        self.stop.cancel();
        self.tracker.close();
        if tokio::time::timeout(deadline, self.tracker.wait()).await.is_ok() {
            return Vec::new();
        }
        let left: Vec<(&'static str, AbortHandle)> = self.running.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for (name, abort) in &left {
            warn!(task = name, ?deadline, "task did not stop by the shutdown deadline; aborting it");
            abort.abort();
        }
        left.into_iter().map(|(n, _)| n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_stop_with_the_server_and_stragglers_are_named() {
        let tasks = Tasks::new();
        tasks.spawn("ticker", async {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let stop = tasks.stop_token();
        tasks.spawn_graceful("drainer", async move { stop.cancelled().await });
        tasks.spawn_graceful("stubborn", std::future::pending());
        let mut names = tasks.running();
        names.sort();
        assert_eq!(names, ["drainer", "stubborn", "ticker"]);
        assert_eq!(tasks.shutdown(Duration::from_millis(200)).await, ["stubborn"]);
    }
}
