//! Persisted and replicated formats. Every encoding starts with a magic and a
//! version, so the next release can read what this one wrote (docs/development.md, rule 13). The
//! framing is `holdfast_core::codec`'s; the magics and the version are this crate's.

use crate::command::Entry;
use crate::outcome::Applied;
use crate::state::CellState;

const SNAPSHOT_MAGIC: &[u8; 4] = b"HFCS";
const ENTRY_MAGIC: &[u8; 4] = b"HFCE";
const APPLIED_MAGIC: &[u8; 4] = b"HFCA";
/// Bump on any change to the serialized types; keep a reader for the old one.
/// 2: snapshots carry the sessions' owners after the rest. Log entries and apply
/// results are unchanged from 1 but for a variant appended to `Command`, which
/// version 1 entries never hold: they are still written and read as version 1. The
/// same holds for `Command::ReserveTokens` and `Outcome::Reserved`, appended later,
/// and for `Command::EndLockDelay`.
/// 3: snapshots carry the numbers of the running lock-delays after the owners
///    (builds 9d247b7 to d1ee6f2 of main only).
/// 4: snapshots carry, after the owners, how each running lock-delay began and when
///    each waiting request was queued (`Command::EndLockDelayAt`, `Command::EndWait`;
///    appended to `Command` like the variants above).
/// 5: snapshots carry, after those, the revision at which each finished acquire ended
///    (`Command::ForgetRequests`; `Command::ReleaseHeld` and `Outcome::Forgotten` are
///    appended like the variants above).
pub const FORMAT_VERSION: u16 = 5;
const RECORD_VERSION: u16 = 1;

pub use holdfast_core::codec::CodecError;
use holdfast_core::codec::{decode_versioned, encode_versioned, version_of};
use holdfast_core::{FencingToken, LockName, RequestId, Revision, SessionId, ShardKey};
use std::collections::BTreeMap;

impl CellState {
    /// A snapshot of the whole state; [`CellState::restore`] gives back an equal state.
    pub fn snapshot(&self) -> Vec<u8> {
        encode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, &(self, &self.owners, (&self.delays, &self.queued_at), &self.ended_at))
    }

    /// Reads a snapshot of this version, of version 4 (no record of when finished
    /// acquires ended: the first `ForgetRequests` forgets them), of version 3 or 2 (no record of how delays
    /// began or when waits were queued: any lift or timeout ends them; version 3's
    /// delay numbers came from a counter replicas could disagree on, so they are
    /// dropped) or of version 1 (no owners either).
    pub fn restore(bytes: &[u8]) -> Result<CellState, CodecError> {
        const WHAT: &str = "cell snapshot";
        match version_of(SNAPSHOT_MAGIC, WHAT, bytes)? {
            1 => decode_versioned(SNAPSHOT_MAGIC, 1, WHAT, bytes),
            2 => {
                let (mut state, owners): (CellState, Owners) = decode_versioned(SNAPSHOT_MAGIC, 2, WHAT, bytes)?;
                state.owners = owners;
                Ok(state)
            }
            3 => {
                type Numbered = (BTreeMap<(ShardKey, LockName), u64>, u64);
                let (mut state, owners, _): (CellState, Owners, Numbered) = decode_versioned(SNAPSHOT_MAGIC, 3, WHAT, bytes)?;
                state.owners = owners;
                Ok(state)
            }
            4 => {
                let (mut state, owners, (delays, queued_at)): (CellState, Owners, Records) = decode_versioned(SNAPSHOT_MAGIC, 4, WHAT, bytes)?;
                state.owners = owners;
                state.delays = delays;
                state.queued_at = queued_at;
                Ok(state)
            }
            _ => {
                type Ended = BTreeMap<(SessionId, RequestId), Revision>;
                let (mut state, owners, (delays, queued_at), ended_at): (CellState, Owners, Records, Ended) =
                    decode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, WHAT, bytes)?;
                state.owners = owners;
                state.delays = delays;
                state.queued_at = queued_at;
                state.ended_at = ended_at;
                Ok(state)
            }
        }
    }
}

type Owners = BTreeMap<SessionId, String>;
type Records = (BTreeMap<(ShardKey, LockName), FencingToken>, BTreeMap<(SessionId, RequestId), Revision>);

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(ENTRY_MAGIC, RECORD_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        decode_versioned(ENTRY_MAGIC, RECORD_VERSION, "cell log entry", bytes)
    }
}

impl Applied {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(APPLIED_MAGIC, RECORD_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Applied, CodecError> {
        decode_versioned(APPLIED_MAGIC, RECORD_VERSION, "cell apply result", bytes)
    }
}
