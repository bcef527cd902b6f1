//! Errors of the fencing helper.

use crate::LockId;
use holdfast_core::FencingToken;

/// Why a fenced store refused or failed a call.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The presented token is lower than the highest this resource has seen for the
    /// lock: a newer holder has written. The caller has lost the lock and must stop;
    /// nothing was written.
    #[error(
        "stale fencing token for lock {lock}: presented {presented}, but {highest} was already \
         seen; this holder has lost the lock"
    )]
    Stale { lock: LockId, presented: FencingToken, highest: FencingToken },

    /// RocksDB failed. For a write, the outcome is **unknown**, not "not written":
    /// a synced write that fails may still be on disk. Retrying with the same token
    /// and the same mutations is safe, since an equal token is accepted and putting
    /// the same value twice changes nothing.
    #[error("storage error during {op}: {source}")]
    Storage {
        op: &'static str,
        #[source]
        source: rocksdb::Error,
    },

    /// A record on disk carries a format version this release does not know: it was
    /// written by a newer release. Nothing is guessed; upgrade this process.
    #[error("{what} record has format version {version}, which this release cannot read")]
    UnknownVersion { what: &'static str, version: u8 },

    /// A record on disk is malformed.
    #[error("corrupt {what} record: {detail}")]
    Corrupt { what: &'static str, detail: String },

    /// The store was opened with settings that cannot work.
    #[error("invalid fence store configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
}

impl FenceError {
    /// May the same call be made again, with the same token, and succeed?
    /// A stale token never becomes current again, so `Stale` is final.
    pub fn is_retryable(&self) -> bool {
        matches!(self, FenceError::Storage { .. })
    }

    /// Is this the rejection of a stale token (the holder lost the lock)?
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}
