//! Leader duties: while this node leads, it owns the lease clock and commits the
//! decisions the clock makes (expiries, checkpoints, max holds, lock-delays, wait
//! timeouts). When leadership goes, the clock goes with it; the next leader builds its
//! own from the replicated state (rule 4).

use crate::cell::Cell;
use crate::clock::LeaseClock;
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
    // so the clock is built from the state they left.
    while let Some(term) = cell.group.await_leadership(&shutdown).await {
        install_clock(&cell, checkpoint_interval);
        info!(node_id = cell.group.node_id(), term, "leader duties started: session countdowns resumed");
        duties(&cell, term, checkpoint_interval, &shutdown).await;
        // Efficiency locks held in this leader's memory are gone with it
        // (docs/semantics.md): the next leader starts with none.
        cell.hooks.drop_volatile();
        *cell.hooks.clock.lock().expect("clock lock") = None;
        info!(node_id = cell.group.node_id(), term, "leader duties stopped");
    }
}

/// Builds this leader's clock from the applied state (rule 4), and its volatile table
/// of efficiency namespaces (no locks, every session). Done under the state's read
/// lock, which every apply holds for writing, so no entry falls between the state they
/// were built from and the first `on_applied` they see.
fn install_clock(cell: &Cell, checkpoint_interval: Duration) {
    cell.group.state().read(|m| {
        *cell.hooks.volatile.lock().expect("volatile lock") = Some(m.state().volatile());
        let mut clock = cell.hooks.clock.lock().expect("clock lock");
        let arrivals = cell.hooks.arrivals.lock().expect("arrivals lock");
        *clock = Some(LeaseClock::on_election(Instant::now(), m.state(), checkpoint_interval, &arrivals));
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
        let (commands, next) = {
            let mut guard = cell.hooks.clock.lock().expect("clock lock");
            let clock = match guard.as_mut() {
                Some(c) => c,
                None => {
                    // A snapshot replaced the state under us: rebuild from it.
                    drop(guard);
                    install_clock(cell, checkpoint_interval);
                    continue;
                }
            };
            let now = Instant::now();
            // The checkpoint first: the sessions it lists are marked from now, and the
            // sooner it lands the shorter a racing renewal waits.
            let mut commands: Vec<Command> = clock.checkpoint(now).into_iter().collect();
            commands.extend(clock.due(now));
            (commands, clock.next_wakeup())
        };
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
                    if let (Some(cp), Some(clock)) = (&failed, cell.hooks.clock.lock().expect("clock lock").as_mut()) {
                        clock.checkpoint_not_committed(cp);
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
