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
/// 3: snapshots carry the numbers of the running lock-delays after the owners.
pub const FORMAT_VERSION: u16 = 3;
const RECORD_VERSION: u16 = 1;

pub use holdfast_core::codec::CodecError;
use holdfast_core::codec::{decode_versioned, encode_versioned, version_of};
use holdfast_core::{LockName, SessionId, ShardKey};
use std::collections::BTreeMap;

impl CellState {
    /// A snapshot of the whole state; [`CellState::restore`] gives back an equal state.
    pub fn snapshot(&self) -> Vec<u8> {
        encode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, &(self, &self.owners, (&self.delays, self.delays_begun)))
    }

    /// Reads a snapshot of this version, of version 2 (no delay numbers: its delayed
    /// locks are in delay 0) or of version 1 (no owners either).
    pub fn restore(bytes: &[u8]) -> Result<CellState, CodecError> {
        const WHAT: &str = "cell snapshot";
        match version_of(SNAPSHOT_MAGIC, WHAT, bytes)? {
            1 => decode_versioned(SNAPSHOT_MAGIC, 1, WHAT, bytes),
            2 => {
                let (mut state, owners): (CellState, BTreeMap<SessionId, String>) = decode_versioned(SNAPSHOT_MAGIC, 2, WHAT, bytes)?;
                state.owners = owners;
                Ok(state)
            }
            _ => {
                type Delays = (BTreeMap<(ShardKey, LockName), u64>, u64);
                let (mut state, owners, (delays, begun)): (CellState, BTreeMap<SessionId, String>, Delays) =
                    decode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, WHAT, bytes)?;
                state.owners = owners;
                state.delays = delays;
                state.delays_begun = begun;
                Ok(state)
            }
        }
    }
}

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
