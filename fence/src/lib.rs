//! holdfast-fence: the resource-side fencing helper.
//!
//! holdfast does not guarantee mutual exclusion at your resource: a holder can pause
//! past its lease and wake up believing it still holds the lock. What makes it safe
//! is the resource checking the holder's fencing token: if it accepts a write only
//! when the write's token is **at least** the highest it has seen for that lock, and
//! does that check atomically with the write, then the writes it accepts are ordered
//! by token and no write of an old holder lands after a write of a newer one.
//! This crate is that check, ready to use.
//!
//! What lives here:
//! - [`FencedStore`], the contract every fenced store keeps, with [`LockId`] (which
//!   lock a token belongs to), [`Accepted`], [`Stored`] and [`FenceError`];
//! - [`RocksFence`], a durable store on RocksDB for resources that keep their state
//!   in it: the fence and the data go to disk in one synced write batch;
//! - [`MemoryFence`], the same rule for resources that live in one process
//!   (examples and tests only: it forgets everything when the process exits);
//! - the metrics `lock_fencing_rejections_total{resource}` and
//!   `lock_holder_overlap_seconds{ns}` ([`describe_metrics`]).
//!
//! What does not: talking to holdfast (the resource only needs the token the holder
//! hands it), and SQL. A relational resource needs no helper at all, only a `fence`
//! column and `WHERE fence <= :token`; `docs/fencing.md` shows the pattern with a
//! worked example. This crate is its own so RocksDB never reaches the gateway or the
//! client SDK through it.
//!
//! # Example: the zombie holder
//!
//! ```
//! use holdfast_fence::{FenceError, FencedStore, FencingToken, LockId, MemoryFence};
//!
//! let ledger = MemoryFence::new("ledger");
//! let settle = LockId::parse("payments/default/settle:2026-10-01").unwrap();
//!
//! // A holds token 33 and writes, then pauses past its lease.
//! ledger.write(&settle, FencingToken(33), b"batch-7", b"PAYING").unwrap();
//! // B acquires the lock with token 34 and writes.
//! ledger.write(&settle, FencingToken(34), b"batch-7", b"PAID by B").unwrap();
//! // A wakes up and writes with 33: rejected, nothing written.
//! let err = ledger.write(&settle, FencingToken(33), b"batch-7", b"PAID by A").unwrap_err();
//! assert!(matches!(err, FenceError::Stale { highest: FencingToken(34), .. }));
//! assert_eq!(ledger.read(b"batch-7").unwrap().unwrap().value, b"PAID by B");
//! ```

mod error;
mod lock_id;
mod memory;
mod record;
mod rocks;

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod test_recorder;

pub use error::FenceError;
pub use lock_id::LockId;
pub use memory::MemoryFence;
pub use rocks::{RocksFence, RocksFenceOptions};

pub use holdfast_core::FencingToken;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tracing::warn;

/// Name of the counter of rejected writes, labelled `resource`.
pub const REJECTIONS_METRIC: &str = holdfast_core::metric_names::FENCING_REJECTIONS;
/// Name of the histogram of holder overlaps, labelled `ns`.
pub const OVERLAP_METRIC: &str = holdfast_core::metric_names::HOLDER_OVERLAP;

/// Locks whose first-acceptance time this process keeps; past it, the record starts
/// over (an overlap on a forgotten lock goes unmeasured, never mismeasured).
const OVERLAP_KEPT: usize = 65_536;

/// For each (resource, lock): the highest token accepted and when this process first
/// accepted it. A write with an older token that arrives later is a holder acting after
/// its successor began: the overlap is the time since then. Process memory only: after a
/// restart the resource counts overlaps from the next new token on.
static FIRST_ACCEPTED: std::sync::Mutex<BTreeMap<(String, LockId), (FencingToken, Instant)>> = std::sync::Mutex::new(BTreeMap::new());

fn note_accepted(resource: &str, lock: &LockId, token: FencingToken) {
    let mut m = FIRST_ACCEPTED.lock().unwrap_or_else(|e| e.into_inner());
    let key = (resource.to_owned(), lock.clone());
    match m.get(&key) {
        Some((t, _)) if *t >= token => {}
        _ => {
            if m.len() >= OVERLAP_KEPT && !m.contains_key(&key) {
                m.clear();
            }
            m.insert(key, (token, Instant::now()));
        }
    }
}

/// How long ago `highest` was first accepted for `lock` here, if this process saw it.
fn overlap(resource: &str, lock: &LockId, highest: FencingToken) -> Option<Duration> {
    let m = FIRST_ACCEPTED.lock().unwrap_or_else(|e| e.into_inner());
    m.get(&(resource.to_owned(), lock.clone())).filter(|(t, _)| *t == highest).map(|(_, at)| at.elapsed())
}

/// Registers the description of this crate's metrics with the installed recorder.
///
/// Call it once after installing the recorder (a Prometheus exporter refuses
/// metrics without a description). [`RocksFence::open`] and [`MemoryFence::new`]
/// call it too, so a store opened after the recorder was installed needs nothing more.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        OVERLAP_METRIC,
        metrics::Unit::Seconds,
        "At a fenced resource, by namespace: a write with an older token arrived this long after \
         the first write of a newer one (two holders acted at once)."
    );
    metrics::describe_counter!(
        REJECTIONS_METRIC,
        metrics::Unit::Count,
        "Writes rejected by a fenced resource because their fencing token was lower than \
         the highest token the resource had seen for the lock."
    );
}

/// One change to the resource's data, applied only if the token is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation<'a> {
    /// Set `key` to `value`.
    Put { key: &'a [u8], value: &'a [u8] },
    /// Remove `key` (removing an absent key is not an error).
    Delete { key: &'a [u8] },
}

/// A write the store accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The token the write was made with; the lock's fence is now at least this.
    pub token: FencingToken,
    /// The highest token seen for the lock before this write (`None`: the first).
    pub previous: Option<FencingToken>,
}

impl Accepted {
    /// Did this write raise the lock's fence, that is, is it the first write this
    /// resource has seen from this holder? From now on every older holder is fenced.
    pub fn raised(&self) -> bool {
        self.previous.is_none_or(|p| self.token > p)
    }
}

/// A value as stored, with the token of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub value: Vec<u8>,
    /// The token the value was written with: who wrote it, for audits.
    pub token: FencingToken,
}

/// A store that accepts a write only if its fencing token is at least the highest
/// token it has seen for the write's lock.
///
/// The invariant every implementation keeps: for each lock, checking the token,
/// applying the mutations and raising the lock's fence to the token happen as one
/// atomic step, so two writers can never both pass the check against the same old
/// fence and land out of order. Hence the writes accepted under a lock are ordered
/// by token, and once a write with token `t` is accepted, no write with a token
/// below `t` is ever accepted for that lock again (also across a restart, for a
/// durable store).
///
/// An **equal** token is accepted: the same holder writes many times under one
/// token. Two holders never share a token in exclusive mode (holdfast grants each
/// hold its own). Shared holders have distinct tokens too, so a fenced resource
/// written by shared holders accepts only the newest of them: use exclusive mode for
/// writers.
///
/// A data key must be written under one lock only; the store does not check this,
/// and a key written under two locks is ordered by neither.
pub trait FencedStore: Send + Sync {
    /// The resource's name: the `resource` label of `lock_fencing_rejections_total`.
    fn resource(&self) -> &str;

    /// Applies `mutations` if `token` is at least the highest token seen for `lock`,
    /// and raises the lock's fence to `token`; all of it or none of it.
    ///
    /// A lower token gets [`FenceError::Stale`], changes nothing and is counted in
    /// `lock_fencing_rejections_total`. The holder must stop: it has lost the lock.
    /// An empty `mutations` only raises the fence (see [`FencedStore::claim`]).
    fn apply(&self, lock: &LockId, token: FencingToken, mutations: &[Mutation<'_>]) -> Result<Accepted, FenceError>;

    /// The highest token accepted for `lock`, if any write under it was.
    fn highest(&self, lock: &LockId) -> Result<Option<FencingToken>, FenceError>;

    /// The value stored at `key`, with the token that wrote it.
    fn read(&self, key: &[u8]) -> Result<Option<Stored>, FenceError>;

    /// Sets `key` to `value` under `lock` with `token`: [`FencedStore::apply`] with
    /// one put.
    fn write(&self, lock: &LockId, token: FencingToken, key: &[u8], value: &[u8]) -> Result<Accepted, FenceError> {
        self.apply(lock, token, &[Mutation::Put { key, value }])
    }

    /// Raises `lock`'s fence to `token` without writing data. A new holder can call
    /// it right after acquiring, to fence out every older holder before its first
    /// real write.
    fn claim(&self, lock: &LockId, token: FencingToken) -> Result<Accepted, FenceError> {
        self.apply(lock, token, &[])
    }
}

/// The fencing rule, the one place it is decided: `presented` passes if it is at
/// least `highest`. Callers hold whatever makes check and write atomic.
/// A rejection is counted and logged here, so every store counts the same way.
pub(crate) fn admit(resource: &str, lock: &LockId, presented: FencingToken, highest: Option<FencingToken>) -> Result<Accepted, FenceError> {
    match highest {
        Some(highest) if presented < highest => {
            metrics::counter!(REJECTIONS_METRIC, "resource" => resource.to_owned()).increment(1);
            if let Some(d) = overlap(resource, lock, highest) {
                metrics::histogram!(OVERLAP_METRIC, "ns" => lock.shard().ns.to_string()).record(d.as_secs_f64());
            }
            // WARN: expected under fencing, but it means a holder outlived its lease.
            warn!(
                resource,
                lock = %lock,
                presented = presented.0,
                highest = highest.0,
                "stale fencing token rejected"
            );
            Err(FenceError::Stale { lock: lock.clone(), presented, highest })
        }
        _ => {
            note_accepted(resource, lock, presented);
            Ok(Accepted { token: presented, previous: highest })
        }
    }
}
