//! The entries of a cell's Raft log. Every state change of a cell is one of these.
//!
//! Time never enters the state machine except as data the leader put in an entry:
//! `at_unix_ms` is the leader's wall clock, for display and audit only, and decisions
//! that depend on time (expiry, max hold, lock-delay, wait timeouts) arrive as
//! explicit commands the leader committed after measuring on its monotonic clock.

use holdfast_core::{Epoch, FencingToken, LockName, Mode, NamespaceConfig, RequestId, SessionId, ShardKey};
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
    /// The leader's wait timer for this request ran out.
    CancelWait { session: SessionId, request_id: RequestId },
    /// The leader's max-hold timer for this hold ran out.
    EndHold { shard: ShardKey, name: LockName, token: FencingToken },
    /// The leader's lock-delay timer for this lock ran out, whichever delay it is in.
    /// What leaders wrote before [`Command::EndLockDelay`]; still applied as it was,
    /// never proposed now: a copy of it committed late could cut the lock's next delay
    /// short.
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
    /// The leader's timer for lock-delay number `delay` of this lock ran out (the
    /// number the lock was given when the delay began; 0 for a delay begun before
    /// numbers existed). A lift of any other delay changes nothing: a timer whose
    /// first proposal's outcome was unknown is proposed again, and both copies may
    /// commit, the second after the lock's next delay began.
    EndLockDelay { shard: ShardKey, name: LockName, delay: u64 },
}

impl Command {
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
            Command::Release { .. } => "release",
            Command::CancelWait { .. } => "cancel_wait",
            Command::EndHold { .. } => "end_hold",
            Command::LiftLockDelay { .. } | Command::EndLockDelay { .. } => "lift_lock_delay",
            Command::BreakLock { .. } => "break_lock",
            Command::ReserveTokens { .. } => "reserve_tokens",
        }
    }
}
