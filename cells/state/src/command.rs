//! The entries of a cell's Raft log. Every state change of a cell is one of these.
//!
//! Time never enters the state machine except as data the leader put in an entry:
//! `at_unix_ms` is the leader's wall clock, for display and audit only, and decisions
//! that depend on time (expiry, max hold, lock-delay, wait timeouts) arrive as
//! explicit commands the leader committed after measuring on its monotonic clock.

use holdfast_core::{Epoch, FencingToken, LockName, Mode, NamespaceConfig, RequestId, Revision, SessionId, ShardKey};
use serde::{Deserialize, Serialize};

/// One log entry: a command plus the leader's wall clock when it proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Leader's wall clock (Unix ms). Shown to humans; never compared for a decision.
    pub at_unix_ms: u64,
    pub cmd: Command,
}

impl Entry {
    pub fn new(at_unix_ms: u64, cmd: Command) -> Entry {
        Entry { at_unix_ms, cmd }
    }
}

/// What an entry asks the lock table to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    // ---- placement and configuration (from the registry, via the cell leader)
    /// Serve this namespace with this config. Ignored unless `config.version` is
    /// higher than the one already applied.
    ApplyConfig { config: NamespaceConfig },
    /// Start serving a shard at `epoch`. `delayed_locks` are the locks that had holders
    /// at the source: they start in lock-delay.
    AdoptShard { shard: ShardKey, epoch: Epoch, delayed_locks: Vec<LockName> },
    /// Stop serving a shard: every hold ends with `MOVED`, every waiter leaves. Reports
    /// the highest token issued and the locks that had holders.
    SealShard { shard: ShardKey, epoch: Epoch },

    // ---- sessions
    /// `session` is chosen by the leader (random, non-zero) so that ids are not reused
    /// even by a cell rebuilt from nothing; a duplicate is refused.
    CreateSession { shard: ShardKey, session: SessionId, ttl_ms: u64, label: String },
    /// The client closed its session: holds end with `RELEASED`.
    CloseSession { session: SessionId },
    /// The leader saw the session's countdown run out: holds end with `EXPIRED`.
    ExpireSession { session: SessionId },
    /// Sessions that did not renew during the last interval, with the TTL they had
    /// left. A new leader starts their countdowns from these values.
    Checkpoint { sessions: Vec<(SessionId, u64)> },
    /// A checkpointed session renewed: its countdown is full again.
    ClearCheckpoint { session: SessionId },

    // ---- locks
    /// Take a lock, or queue for it when `wait` is set. Idempotent on
    /// `(session, request_id)`.
    Acquire {
        shard: ShardKey,
        /// The epoch the caller believes in; `None` skips the check.
        epoch: Option<Epoch>,
        name: LockName,
        session: SessionId,
        mode: Mode,
        request_id: RequestId,
        value: Vec<u8>,
        wait: bool,
    },
    /// Release one hold by its token. The next waiters are granted in the same apply.
    Release { shard: ShardKey, name: LockName, token: FencingToken },
    /// The leader's wait timer for this request ran out, whichever wait it is in.
    /// Proposed now only for a wait the leader has no record of when it was queued
    /// (restored from an older snapshot); else [`Command::EndWait`].
    CancelWait { session: SessionId, request_id: RequestId },
    /// The leader's max-hold timer for this hold ran out.
    EndHold { shard: ShardKey, name: LockName, token: FencingToken },
    /// The leader's lock-delay timer for this lock ran out, whichever delay it is in.
    /// Proposed now only for a delay the leader has no record of how it began
    /// (restored from an older snapshot); else [`Command::EndLockDelayAt`], since a
    /// copy of this one committed late could cut the lock's next delay short.
    LiftLockDelay { shard: ShardKey, name: LockName },
    /// Admin: end every hold of a lock, audited.
    BreakLock { shard: ShardKey, name: LockName, by: String, reason: String },

    // ---- new variants go last: entries written before them decode unchanged
    /// `CreateSession` by an authenticated caller: the session is bound to `owner`, and
    /// only `owner` may renew, use or close it (the cell checks, docs/security.md).
    CreateOwnedSession { shard: ShardKey, session: SessionId, ttl_ms: u64, label: String, owner: String },
    /// Sets aside the shard's next `count` sequence numbers for the leader's volatile
    /// table of an efficiency namespace (`volatile.rs`): it grants them from memory, so
    /// no token it hands out is ever handed out again, by it or by a later leader.
    ReserveTokens { shard: ShardKey, epoch: Epoch, count: u64 },
    /// Written only by builds 9d247b7 to d1ee6f2 of main, whose delay numbers came
    /// from a counter that two replicas restored from different snapshots could
    /// disagree on. Applied as [`Command::LiftLockDelay`] (whichever delay runs), the
    /// same on every replica; never proposed now.
    EndLockDelay { shard: ShardKey, name: LockName, delay: u64 },
    /// The leader's lock-delay timer for this lock ran out: for the delay `begun`
    /// names (the token of the hold whose end began it, or the epoch's floor token for
    /// the delay an adoption began). A lift of any other delay changes nothing: a timer
    /// whose first proposal's outcome was unknown is proposed again, and both copies
    /// may commit, the second after the lock's next delay began.
    EndLockDelayAt { shard: ShardKey, name: LockName, begun: FencingToken },
    /// The leader's wait timer for the wait this request queued at revision `queued`
    /// ran out. A timeout of any other wait changes nothing: a late copy must not end
    /// the wait of a retry that queued the same request id again.
    EndWait { session: SessionId, request_id: RequestId, queued: Revision },
    /// Release one hold by its token, on behalf of `session`: applied only if that
    /// session holds the token when the entry is applied, so a release checked against
    /// the state at proposal time can never end a hold granted in between (a token is
    /// predictable; the holder of the next one is someone else). `SessionId(0)` names
    /// no session: it releases nothing that is held, and answers a repeated release.
    ReleaseHeld { shard: ShardKey, name: LockName, token: FencingToken, session: SessionId },
    /// The leader's retry window passed for every acquire whose hold ended at or
    /// before revision `through`: their records are forgotten, and a request id of one
    /// of them is a new request from now on.
    ForgetRequests { through: Revision },
}

impl Command {
    /// The leader's lift of a lock's delay: named by how it began
    /// ([`crate::CellState::delay_begun`]), or, for a delay without a record, the
    /// older form that ends whichever runs.
    pub fn lift_lock_delay(shard: ShardKey, name: LockName, begun: Option<FencingToken>) -> Command {
        match begun {
            Some(begun) => Command::EndLockDelayAt { shard, name, begun },
            None => Command::LiftLockDelay { shard, name },
        }
    }

    /// The leader's timeout of a wait: named by when it was queued
    /// ([`crate::CellState::queued_at`]), or, for a wait without a record, the older
    /// form that ends whichever wait the request is in.
    pub fn time_out_wait(session: SessionId, request_id: RequestId, queued: Option<Revision>) -> Command {
        match queued {
            Some(queued) => Command::EndWait { session, request_id, queued },
            None => Command::CancelWait { session, request_id },
        }
    }

    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::ApplyConfig { .. } => "apply_config",
            Command::AdoptShard { .. } => "adopt_shard",
            Command::SealShard { .. } => "seal_shard",
            Command::CreateSession { .. } | Command::CreateOwnedSession { .. } => "create_session",
            Command::CloseSession { .. } => "close_session",
            Command::ExpireSession { .. } => "expire_session",
            Command::Checkpoint { .. } => "checkpoint",
            Command::ClearCheckpoint { .. } => "clear_checkpoint",
            Command::Acquire { .. } => "acquire",
            Command::Release { .. } | Command::ReleaseHeld { .. } => "release",
            Command::CancelWait { .. } | Command::EndWait { .. } => "cancel_wait",
            Command::EndHold { .. } => "end_hold",
            Command::LiftLockDelay { .. } | Command::EndLockDelay { .. } | Command::EndLockDelayAt { .. } => "lift_lock_delay",
            Command::BreakLock { .. } => "break_lock",
            Command::ReserveTokens { .. } => "reserve_tokens",
            Command::ForgetRequests { .. } => "forget_requests",
        }
    }
}
