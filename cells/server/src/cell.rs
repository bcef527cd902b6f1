//! `Cell`: what every handler of a cell server shares — its Raft [`Group`] (leader
//! proof, proposals, linearizable reads, the lease check), the applied lock table, the
//! hooks — and the lock-table side of those calls: encoding commands and decoding
//! what the table answered.

use crate::machine::{CellMachine, Hooks};
use holdfast_cell_state::{Applied, CellError, CellState, Command, Entry, NamespaceStats, Outcome, SessionView, RESERVE_BLOCK, RESERVE_LOW_WATER};
use holdfast_core::{ErrorCode, FencingToken, NamespaceName, RequestId, SessionId, ShardKey};
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_raft::Group;
pub use holdfast_raft::{wall_clock_ms, Leader};
use holdfast_rpc::status::status;
use holdfast_rpc::{Budget, CallContext, Tasks, Upstream};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::Status;

/// The shared core of a cell server.
#[derive(Debug)]
pub struct Cell {
    pub(crate) group: Group<CellMachine>,
    pub(crate) hooks: Arc<Hooks>,
    /// The margin of the leader's ownership lease when the cell follows the registry
    /// (each term starts an empty lease with it); `None` in admin mode (no registry
    /// configured: nothing gates grants).
    pub(crate) ownership_margin: Option<Duration>,
    /// The node's tasks: per-call work (renewal and watch streams) runs under the
    /// node's shutdown.
    pub(crate) tasks: Tasks,
    /// The registry, where a break-lock is written to the durable audit log before it
    /// happens; `None` in admin mode (the shard's own break records only).
    pub(crate) audit: Option<Upstream>,
    /// One token reservation for the volatile table at a time (`Cell::reserve`).
    pub(crate) reserving: tokio::sync::Mutex<()>,
}

impl Cell {
    /// `Ok(Leader)` if this node leads its cell, else `NOT_LEADER` carrying the
    /// leader's client address (when known) in `holdfast-leader` metadata.
    pub fn assume_leader(&self) -> Result<Leader, Status> {
        self.group.assume_leader()
    }

    /// Commits `cmd` and returns what the lock table answered. A Raft failure is a
    /// `Status`: `NOT_LEADER`, or `UNAVAILABLE` when the outcome is unknown (the caller
    /// retries with the same request id and gets the real outcome).
    pub async fn propose(&self, leader: Leader, cmd: Command) -> Result<Result<Outcome, CellError>, Status> {
        let entry = Entry::new(wall_clock_ms(), cmd);
        let answer = self.group.propose(leader, entry.encode()).await?;
        let applied = Applied::decode(&answer).map_err(|e| status(ErrorCode::Unavailable, format!("cannot decode the apply result: {e}")))?;
        Ok(applied.result)
    }

    /// Runs `f` on a lock table that includes every write committed before this call.
    pub async fn read<T>(&self, f: impl FnOnce(&CellState) -> T) -> Result<T, Status> {
        self.group.read(|m| f(m.state())).await
    }

    /// Whether the locks of `shard` live in the leader's memory: its namespace's intent
    /// is efficiency (docs/semantics.md).
    pub fn in_memory(&self, shard: &ShardKey) -> bool {
        self.group.state().read(|m| m.state().served_from_memory(&shard.ns))
    }

    /// Per-namespace stats for the lock gauges: the log's table, plus on the leader
    /// its volatile table, where efficiency namespaces hold their locks.
    pub fn lock_stats(&self) -> BTreeMap<NamespaceName, NamespaceStats> {
        let mut stats = self.group.state().read(|m| m.state().namespace_stats());
        for (ns, st) in self.hooks.read_volatile(CellState::namespace_stats).unwrap_or_default() {
            stats.entry(ns).or_default().merge(st);
        }
        stats
    }

    /// The sessions homed in `shard`, each counting its holds and waits in both tables.
    pub async fn list_sessions(&self, shard: &ShardKey) -> Result<Vec<SessionView>, Status> {
        let mut sessions = self.read(|st| st.list_sessions(shard)).await?;
        self.hooks.read_volatile(|v| {
            for s in &mut sessions {
                if let Some(m) = v.session(s.session) {
                    s.holds += m.holds;
                    s.waits += m.waits;
                }
            }
        });
        Ok(sessions)
    }

    /// [`Cell::read`] on the table that holds `shard`'s locks: the replicated one, or
    /// for an efficiency namespace the leader's volatile table, read while this node
    /// holds its leader lease.
    pub async fn read_locks<T>(&self, shard: &ShardKey, f: impl FnOnce(&CellState) -> T) -> Result<T, Status> {
        if !self.in_memory(shard) {
            return self.read(f).await;
        }
        self.lease_check().await?;
        self.hooks.door(|t| f(t.volatile()))
    }

    /// The table that holds `shard`'s locks, as applied now (no leader check): for
    /// checks made before a command is applied, and for catching up a Watch.
    pub fn locks_now<T>(&self, shard: &ShardKey, f: impl FnOnce(&CellState) -> T) -> Option<T> {
        if self.in_memory(shard) {
            return self.hooks.read_volatile(f);
        }
        Some(self.group.state().read(|m| f(m.state())))
    }

    /// Applies a lock command where its lock lives: proposed to the log, or, for an
    /// efficiency namespace, applied to the leader's volatile table with no log write
    /// (after the same checks: this node holds its leader lease, and the table has
    /// tokens reserved). Same answers as [`Cell::propose`].
    pub async fn submit(&self, leader: Leader, cmd: Command) -> Result<Result<Outcome, CellError>, Status> {
        let Some(shard) = self.volatile_target(&cmd) else { return self.propose(leader, cmd).await };
        let leader = self.lease_check().await?;
        self.reserve(leader, &shard).await?;
        self.hooks.apply_volatile(&Entry::new(wall_clock_ms(), cmd)).map(|a| a.result).ok_or_else(volatile_not_built)
    }

    /// The shard whose volatile table `cmd` goes to; `None`: it goes to the log.
    fn volatile_target(&self, cmd: &Command) -> Option<ShardKey> {
        match cmd {
            Command::Acquire { shard, .. }
            | Command::EndHold { shard, .. }
            | Command::LiftLockDelay { shard, .. }
            | Command::EndLockDelay { shard, .. }
            | Command::EndLockDelayAt { shard, .. }
            | Command::BreakLock { shard, .. } => self.in_memory(shard).then(|| shard.clone()),
            // A hold the log granted (before this namespace was served from memory) is
            // released through the log.
            Command::Release { shard, name, token } | Command::ReleaseHeld { shard, name, token, .. } => {
                let logged = self.group.state().read(|m| m.state().holder_session(shard, name, *token)).is_some();
                (!logged && self.in_memory(shard)).then(|| shard.clone())
            }
            Command::CancelWait { session, request_id } | Command::EndWait { session, request_id, .. } => {
                self.hooks.read_volatile(|t| t.waiting_shard(*session, request_id).cloned()).flatten()
            }
            _ => None,
        }
    }

    /// Keeps the volatile table's reserved tokens of `shard` above the low-water mark:
    /// one `ReserveTokens` write per `RESERVE_BLOCK` grants, one at a time.
    async fn reserve(&self, leader: Leader, shard: &ShardKey) -> Result<(), Status> {
        let low = || self.hooks.read_volatile(|t| t.headroom(shard)).flatten().filter(|(_, left)| *left < RESERVE_LOW_WATER);
        if low().is_none() {
            return Ok(());
        }
        let _one = self.reserving.lock().await;
        // Checked again: the reservation this call waited behind may have been enough.
        let Some((epoch, _)) = low() else { return Ok(()) };
        match self.propose(leader, Command::ReserveTokens { shard: shard.clone(), epoch, count: RESERVE_BLOCK }).await? {
            Ok(Outcome::Reserved { epoch, from, through }) => {
                // Not taken if the shard moved meanwhile: the table then answers NOT_OWNER.
                self.hooks.take_reservation(shard, epoch, from, through);
                Ok(())
            }
            Ok(other) => Err(status(ErrorCode::Unavailable, format!("internal: unexpected outcome {other:?}"))),
            Err(e) => Err(cell_status(&e)),
        }
    }

    /// How long this leader's ownership lease has left: zero on a follower, before the
    /// first renewal and once it ran out; `None` on a cell run without a registry. The
    /// clock a registry outage runs against (the status page, a gauge).
    pub fn ownership_lease_left(&self) -> Option<Duration> {
        self.ownership_margin?;
        Some(self.hooks.door(|t| t.ownership().map(|o| o.remaining(tokio::time::Instant::now()))).ok().flatten().unwrap_or_default())
    }

    /// Asked before proposing anything that can grant or end a hold in `shard`: does
    /// this leader hold the registry's ownership lease for the epoch it serves?
    pub fn may_grant(&self, shard: &ShardKey) -> Result<(), Status> {
        if self.ownership_margin.is_none() {
            return Ok(());
        }
        let Some(epoch) = self.group.state().read(|m| m.state().served_epoch(shard)) else {
            // Listed by the registry but not served: being adopted, or sealed and
            // draining away. Either is a moment away from a clear answer.
            if let Some(r) = self.hooks.door(|t| t.unserved(shard))? {
                return Err(status(r.code, r.message));
            }
            // Unknown or sealed here: the lock table answers with the precise error.
            return Ok(());
        };
        self.hooks.door(|t| t.may_grant(Instant::now(), shard, epoch))?.map_err(|r| status(r.code, r.message))
    }

    /// The door a grant leaves by: committed in term `term`, it is answered only while
    /// that term lasts and its ownership lease still covers the token's epoch (issue
    /// #42, hole 2: a commit that stalled past the lease must not hand out a token the
    /// shard's next owner may already have superseded). `UNAVAILABLE` otherwise: the
    /// retry with the same request id is answered by whoever serves the shard then.
    pub fn answer_grant(&self, term: u64, shard: &ShardKey, token: FencingToken) -> Result<(), Status> {
        let covered = self.hooks.door_in(term, |t| t.covers(Instant::now(), shard, token.epoch()))?;
        if !covered {
            return Err(status(
                ErrorCode::Unavailable,
                format!("token {} was granted after this cell's ownership lease of {shard} ended; retry with the same request_id", token.0),
            ));
        }
        Ok(())
    }

    /// The ownership gate for any command that can hand a lock to someone: an acquire,
    /// a release, an ended hold, a lifted lock-delay, a break, and anything that takes
    /// a session with holds or waits out of the queues (close, expiry, a cancelled
    /// wait: the next waiter may then be granted). Every such command passes here
    /// before it is proposed (docs/guarantees.md: every granting path is gated).
    pub fn may_propose(&self, cmd: &Command) -> Result<(), Status> {
        let shard = match cmd {
            Command::Acquire { shard, .. }
            | Command::Release { shard, .. }
            | Command::ReleaseHeld { shard, .. }
            | Command::EndHold { shard, .. }
            | Command::LiftLockDelay { shard, .. }
            | Command::EndLockDelay { shard, .. }
            | Command::EndLockDelayAt { shard, .. }
            | Command::BreakLock { shard, .. } => shard.clone(),
            Command::CloseSession { session } | Command::ExpireSession { session } | Command::CancelWait { session, .. } | Command::EndWait { session, .. } => {
                let busy = |t: &CellState| t.session(*session).filter(|v| v.holds + v.waits > 0).map(|v| v.home);
                match self.group.state().read(|m| busy(m.state())).or_else(|| self.hooks.read_volatile(busy).flatten()) {
                    Some(home) => home,
                    // Nothing held or queued, in the log or in memory: taking it away
                    // grants nothing.
                    None => return Ok(()),
                }
            }
            _ => return Ok(()),
        };
        self.may_grant(&shard)
    }

    /// A session is used only by the identity that created it (docs/security.md):
    /// `PERMISSION_DENIED` for anyone else. Sessions created by an unauthenticated
    /// caller (an `--insecure` cell) are bound to nobody. A session's owner never
    /// changes, so checking before proposing cannot race.
    pub fn check_session_owner(&self, ctx: &CallContext, session: SessionId) -> Result<(), Status> {
        let owner = self.group.state().read(|m| m.state().session(session).and_then(|v| v.owner));
        match (owner, ctx.principal()) {
            (Some(owner), Some(caller)) if owner == caller => Ok(()),
            (Some(owner), caller) => Err(status(
                ErrorCode::PermissionDenied,
                format!("session {session} belongs to {owner}; {} may not use it", caller.unwrap_or_else(|| ctx.identity())),
            )),
            (None, _) => Ok(()),
        }
    }

    /// Refuses an acquire the state machine would refuse for the session's cap on holds
    /// and waits, without writing a Raft entry for it: a session at its cap that keeps
    /// asking costs a read, not a log entry.
    pub fn check_session_room(&self, session: SessionId, request_id: &RequestId) -> Result<(), Status> {
        if self.group.state().read(|m| m.state().over_session_cap(session, request_id)) {
            return Err(cell_status(&CellError::session_full(session)));
        }
        Ok(())
    }

    /// Writes `action` on `detail` to the registry's audit log, as done by the caller
    /// of `ctx`; `UNAVAILABLE` when it cannot (the action must then not happen). In
    /// admin mode, no registry: nothing to write.
    pub async fn audit(&self, ctx: &CallContext, action: &str, detail: String) -> Result<(), Status> {
        let Some(registry) = &self.audit else { return Ok(()) };
        let req = rpb::AppendAuditRequest { action: action.to_owned(), detail };
        let budget = Budget::per_attempt(ctx.budget(registry.transport().options().request_timeout()));
        registry
            .call(budget, |ch| {
                let r = ctx.request(req.clone());
                async move { RegistryServiceClient::new(ch).append_audit(r).await }
            })
            .await
            .map(|_| ())
            .map_err(|e| status(ErrorCode::Unavailable, format!("the registry's audit log cannot be written ({e}); nothing was done")))
    }

    /// Rule 1 of the session rules: succeeds only while this leader holds openraft's
    /// leader lease (a quorum acknowledged it within the lease). No network round.
    pub async fn lease_check(&self) -> Result<Leader, Status> {
        self.group.lease_check().await
    }
}

/// Between an election and the leader building its volatile table, or after it
/// stopped leading: the caller retries and finds the leader.
fn volatile_not_built() -> Status {
    status(ErrorCode::Unavailable, "this node is not serving efficiency locks from memory (not leading, or just elected); retry")
}

/// The one mapping of lock-table refusals to gRPC statuses.
pub fn cell_status(e: &CellError) -> Status {
    status(e.code(), e.to_string())
}
