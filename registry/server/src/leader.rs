//! Leader duties: while this node leads, it keeps the ownership leases it grants and
//! completes transfers that are ready — an unplanned move once the source's lease is
//! known to have run out on this leader's clock, and any move whose source has sealed
//! (a `ReportSealed` whose caller went away between the seal and the completion). It
//! also begins the moves of automatic failover, for the namespaces that opted in
//! (`holdfast_registry_state`'s `failover.rs`): the shards of a cell that stopped
//! renewing, once their lease has run out. When leadership goes, the leases go with
//! it; the next leader starts its own, waiting one full lease before it trusts that
//! any cell's lease has ended.

use crate::leases::OwnershipLeases;
use crate::registry::Registry;
use holdfast_core::{CellId, Epoch, ShardKey};
use holdfast_registry_state::{AutoMove, Command, ShardState};
use holdfast_rpc::CancellationToken;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// The loop wakes at least this often.
const TICK: Duration = Duration::from_millis(50);
/// The most automatic-failover moves begun in one round (one round per renewal
/// period): a lost region's thousands of shards go in waves, not one burst of writes.
const AUTO_FAILOVER_WAVE: usize = 200;
/// Completions proposed at once.
const COMPLETE_IN_FLIGHT: usize = 64;
/// Who the audit log says began an automatic failover's move.
const AUTO_FAILOVER_BY: &str = "registry:auto-failover";

/// Timing of the ownership leases.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTimings {
    /// How long a renewal lets a cell serve its shards.
    pub lease: Duration,
    /// How often cells renew.
    pub renew: Duration,
    /// Extra wait after a lease's end before its shard moves (clock-rate differences):
    /// the configured grace plus 0.1 % of the lease.
    pub grace: Duration,
}

impl LeaseTimings {
    /// From the configured lease, renewal period and fixed grace.
    pub fn new(lease: Duration, renew: Duration, grace: Duration) -> LeaseTimings {
        LeaseTimings { lease, renew, grace: grace + holdfast_core::clock_rate_allowance(lease) }
    }

    /// How long a cell's leader term is remembered without renewals in it: long
    /// enough that a live cell leader renews several times within it.
    pub fn fence_window(&self) -> Duration {
        self.renew * 3
    }
}

/// Runs until `shutdown` fires.
pub async fn run(reg: Arc<Registry>, timings: LeaseTimings, shutdown: CancellationToken) {
    // `await_leadership` returns once everything earlier leaders committed is applied,
    // so renewals are answered from the state they left.
    while let Some(term) = reg.group.await_leadership(&shutdown).await {
        // Measured after the election, so the inherited lease ends no earlier than
        // any lease a predecessor granted.
        let elected = Instant::now();
        *reg.hooks.leases.lock().expect("leases lock") = Some(OwnershipLeases::on_election(elected, timings));
        info!(
            node_id = reg.group.node_id(),
            term,
            lease_ms = timings.lease.as_millis() as u64,
            "registry leader duties started; unplanned moves wait one full lease"
        );
        duties(&reg, term, &shutdown).await;
        *reg.hooks.leases.lock().expect("leases lock") = None;
        info!(node_id = reg.group.node_id(), term, "registry leader duties stopped");
    }
}

/// A move ready to complete, and why.
struct Ready {
    shard: ShardKey,
    epoch: Epoch,
    from: CellId,
    to: CellId,
    sealed: bool,
}

/// The moves that may complete now. Under the leases lock, so no renewal can list a
/// shard between this check and the state it read.
fn ready_moves(reg: &Registry) -> Vec<Ready> {
    let guard = reg.hooks.leases.lock().expect("leases lock");
    let Some(leases) = guard.as_ref() else { return vec![] };
    let now = Instant::now();
    reg.group.state().read(|m| {
        m.state()
            .list_shards()
            .filter_map(|(k, r)| match &r.state {
                ShardState::Moving(mv) if mv.seal.is_some() => {
                    Some(Ready { shard: k.clone(), epoch: r.epoch, from: r.cell.clone(), to: mv.to_cell.clone(), sealed: true })
                }
                ShardState::Moving(mv) if !mv.planned && leases.expired(now, k) => {
                    Some(Ready { shard: k.clone(), epoch: r.epoch, from: r.cell.clone(), to: mv.to_cell.clone(), sealed: false })
                }
                _ => None,
            })
            .collect()
    })
}

/// Completes the moves that are ready, up to [`COMPLETE_IN_FLIGHT`] proposals at once
/// (a lost region's thousand unplanned moves become ready together: one commit at a
/// time made them wait about ten seconds for the last).
async fn complete_ready(reg: &Arc<Registry>, leader: crate::registry::Leader) {
    let mut ready = ready_moves(reg).into_iter();
    let mut proposed = tokio::task::JoinSet::new();
    let mut failed = false;
    loop {
        while !failed && proposed.len() < COMPLETE_IN_FLIGHT {
            let Some(r) = ready.next() else { break };
            let reg = reg.clone();
            proposed.spawn(async move {
                let cmd = Command::CompleteMove { shard: r.shard.clone(), epoch: r.epoch };
                (reg.propose(leader, cmd).await, r)
            });
        }
        let Some(done) = proposed.join_next().await else { return };
        let Ok((answer, ready)) = done else { continue };
        match answer {
            Ok(Ok(_)) => {
                if !ready.sealed {
                    metrics::counter!(holdfast_core::metric_names::OWNERSHIP_LEASE_LAPSES, "cell" => ready.from.to_string()).increment(1);
                }
                info!(
                    shard = %ready.shard,
                    from = %ready.from,
                    cell = %ready.to,
                    epoch = ready.epoch.0 + 1,
                    reason = if ready.sealed { "source sealed" } else { "source lease ran out" },
                    "shard transferred"
                )
            }
            // The state moved on (aborted, or completed by ReportSealed).
            Ok(Err(e)) => debug!(shard = %ready.shard, error = %e, "completion refused"),
            Err(s) => {
                // Not committed (leadership lost, say): propose no more this round; the
                // next round reads the state again.
                warn!(shard = %ready.shard, error = %s.message(), "completion not committed; trying again");
                failed = true;
            }
        }
    }
}

/// The moves automatic failover would begin now. Under the leases lock, like
/// [`ready_moves`]: a shard judged lapsed here was listed by no renewal since.
fn auto_failover_moves(reg: &Registry) -> Vec<AutoMove> {
    let guard = reg.hooks.leases.lock().expect("leases lock");
    let Some(leases) = guard.as_ref() else { return vec![] };
    let now = Instant::now();
    let renewing = leases.renewing(now);
    reg.group.state().read(|m| m.state().auto_failover_moves(|k| leases.expired(now, k), &renewing, AUTO_FAILOVER_WAVE))
}

/// Begins automatic failover's moves; they complete with the other ready moves, their
/// source's lease having run out already.
async fn begin_auto_failover(reg: &Arc<Registry>, leader: crate::registry::Leader) {
    for m in auto_failover_moves(reg) {
        let cmd = Command::BeginMove { shard: m.shard.clone(), to_cell: m.to_cell.clone(), planned: false };
        match reg.propose(leader, Command::Audited { by: AUTO_FAILOVER_BY.to_owned(), cmd: Box::new(cmd) }).await {
            Ok(Ok(_)) => {
                metrics::counter!(holdfast_core::metric_names::AUTO_FAILOVER_MOVES, "cell" => m.from_cell.to_string()).increment(1);
                info!(shard = %m.shard, from = %m.from_cell, to = %m.to_cell, "automatic failover: the source's lease ran out; move begun");
            }
            // The state moved on (a move began meanwhile).
            Ok(Err(e)) => debug!(shard = %m.shard, error = %e, "automatic failover's move refused"),
            Err(s) => {
                warn!(shard = %m.shard, error = %s.message(), "automatic failover's move not committed; trying again");
                return;
            }
        }
    }
}

async fn duties(reg: &Arc<Registry>, term: u64, shutdown: &CancellationToken) {
    let mut next_auto = Instant::now();
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let Some(leader) = reg.group.leader_in_term(term) else { return };
        if Instant::now() >= next_auto {
            begin_auto_failover(reg, leader).await;
            let renew = reg.hooks.leases.lock().expect("leases lock").as_ref().map_or(Duration::from_secs(1), |l| l.renew());
            next_auto = Instant::now() + renew;
        }
        complete_ready(reg, leader).await;
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}
