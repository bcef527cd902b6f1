//! Leader duties: while this node leads, it owns the lease clock and commits the
//! decisions the clock makes (expiries, checkpoints, max holds, lock-delays, wait
//! timeouts). When leadership goes, the clock goes with it; the next leader builds its
//! own from the replicated state (rule 4).

use crate::cell::Cell;
use holdfast_cell_state::Command;
use holdfast_rpc::CancellationToken;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{info, warn};

/// The loop wakes at least this often to notice a lost leadership.
const TICK: Duration = Duration::from_millis(50);

/// Runs until `shutdown` fires.
pub async fn run(cell: Arc<Cell>, checkpoint_interval: Duration, shutdown: CancellationToken) {
    // `await_leadership` returns once everything earlier leaders committed is applied,
    // so the term is built from the state they left.
    while let Some(term) = cell.group.await_leadership(&shutdown).await {
        begin(&cell, term, checkpoint_interval);
        info!(node_id = cell.group.node_id(), term, "leader duties started: session countdowns resumed");
        tokio::select! {
            () = duties(&cell, term, checkpoint_interval, &shutdown) => {}
            // Deposed: the term ends now, not at the duties' next tick, and with it every
            // call still waiting in its queues.
            () = cell.group.deposed(term) => {}
        }
        // Efficiency locks held in this leader's memory are gone with it
        // (docs/semantics.md): the next leader starts with none.
        cell.hooks.end_term(term);
        info!(node_id = cell.group.node_id(), term, "leader duties stopped");
    }
}

/// Builds this leader's term from the applied state (rule 4): its clock, its volatile
/// table of efficiency namespaces (no locks, every session), an empty ownership lease.
fn begin(cell: &Cell, term: u64, checkpoint_interval: Duration) {
    cell.group.state().read(|m| {
        cell.hooks.begin_term(term, m.state(), checkpoint_interval, cell.ownership_margin);
        // Every timer restarts here: the simulation's bound on a waiter's stay counts
        // from this moment (drills/sim/src/stamps.rs).
        tracing::debug!(node_id = cell.group.node_id(), "timers restarted");
    });
}

async fn duties(cell: &Arc<Cell>, term: u64, checkpoint_interval: Duration, shutdown: &CancellationToken) {
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let Some(leader) = cell.group.leader_in_term(term) else { return };
        let planned = cell.hooks.door_in(term, |t| {
            let now = Instant::now();
            // The checkpoint first: the sessions it lists are marked from now, and the
            // sooner it lands the shorter a racing renewal waits.
            let clock = t.clock();
            let mut commands: Vec<Command> = clock.checkpoint(now).into_iter().collect();
            commands.extend(clock.due(now));
            (commands, clock.forget_through(now), clock.next_wakeup())
        });
        let (mut commands, forget, next) = match planned {
            Ok(p) => p,
            Err(_) => {
                // A snapshot replaced the state under us: rebuild from it.
                begin(cell, term, checkpoint_interval);
                continue;
            }
        };
        // Acquires past the retry window are forgotten (read outside the term: the state
        // is never read under it).
        if let Some(through) = forget.filter(|r| cell.group.state().read(|m| m.state().forgettable(*r))) {
            commands.push(Command::ForgetRequests { through });
        }
        for cmd in commands {
            let kind = cmd.kind();
            // Timers that can grant (a lifted lock-delay, an ended hold, an expiry or a
            // cancelled wait can hand a lock to the next waiter) wait while the
            // ownership lease is not held; the clock proposes them again shortly.
            if cell.may_propose(&cmd).is_err() {
                continue;
            }
            let expiring_ns = match &cmd {
                Command::ExpireSession { session } => cell.group.state().read(|m| m.state().session(*session).map(|v| v.home.ns)),
                _ => None,
            };
            if let Command::Checkpoint { sessions } = &cmd {
                metrics::gauge!(holdfast_core::metric_names::CHECKPOINT_SESSIONS).set(sessions.len() as f64);
            }
            let failed = matches!(cmd, Command::Checkpoint { .. }).then(|| cmd.clone());
            match cell.submit(leader, cmd).await {
                Ok(Ok(_)) => {
                    if let Some(ns) = expiring_ns {
                        crate::metrics::session_expired(&ns);
                    }
                }
                // A refusal here means the state moved on (the session already ended):
                // nothing to do.
                Ok(Err(e)) => tracing::debug!(kind, error = %e, "timer command refused"),
                Err(s) => {
                    warn!(kind, error = %s.message(), "timer command not committed; the clock proposes it again");
                    if let Some(cp) = &failed {
                        let _ = cell.hooks.door_in(term, |t| t.clock().checkpoint_not_committed(cp));
                    }
                    break;
                }
            }
        }
        let sleep = next.saturating_duration_since(Instant::now()).min(TICK);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}
