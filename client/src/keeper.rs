//! [`SessionKeeper`]: a session that re-creates itself after its shard moves.

use crate::error::{Error, LossReason};
use crate::session::{Session, SessionOptions};
use crate::Client;
use tracing::{info, warn};

/// A session that re-creates itself after its shard moves (docs/design.md, "Ownership"): when
/// the session is lost with [`LossReason::Moved`], the keeper creates a new one with
/// the same options (through a gateway, it lands in the shard's new cell) and publishes
/// it. Locks never carry over: they ended with `MOVED` and must be acquired again. Any
/// other loss ends the keeper: an expired session's worker must stop, and whether to
/// start again is the caller's decision.
#[derive(Debug)]
pub struct SessionKeeper {
    current: tokio::sync::watch::Receiver<Option<Session>>,
    task: tokio::task::JoinHandle<()>,
}

impl SessionKeeper {
    /// Creates the first session, then keeps one.
    pub async fn start(client: Client, opts: SessionOptions) -> Result<SessionKeeper, Error> {
        let first = client.create_session(opts.clone()).await?;
        let (tx, current) = tokio::sync::watch::channel(Some(first.clone()));
        let task = tokio::spawn(async move {
            let mut session = first;
            loop {
                let reason = session.lost().await;
                if reason != LossReason::Moved {
                    let _ = tx.send(None);
                    return;
                }
                info!(old = %session.id(), shard = %session.shard(), "session's shard moved; creating a new session");
                let mut backoff = holdfast_rpc::Backoff::new(client.config().retry);
                session = loop {
                    match client.create_session(opts.clone()).await {
                        Ok(s) => break s,
                        Err(e) if e.is_retryable() => tokio::time::sleep(backoff.next_delay()).await,
                        Err(e) => {
                            warn!(error = %e, "could not create a session after the move; the keeper stops");
                            let _ = tx.send(None);
                            return;
                        }
                    }
                };
                if tx.send(Some(session.clone())).is_err() {
                    return;
                }
            }
        });
        Ok(SessionKeeper { current, task })
    }

    /// The live session, or `None` once the keeper stopped.
    pub fn current(&self) -> Option<Session> {
        self.current.borrow().clone()
    }

    /// Waits until the keeper publishes a different session (or stops).
    pub async fn changed(&mut self) -> Option<Session> {
        let _ = self.current.changed().await;
        self.current()
    }
}

impl Drop for SessionKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
