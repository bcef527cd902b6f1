//! Persisted and replicated formats. Every encoding starts with a magic and a
//! version, so the next release can read what this one wrote (docs/development.md, rule 13). The
//! framing is `holdfast_core::codec`'s; the magics and the version are this crate's.

use crate::command::Entry;
use crate::outcome::Applied;
use crate::state::RegistryState;

const SNAPSHOT_MAGIC: &[u8; 4] = b"HFRS";
const ENTRY_MAGIC: &[u8; 4] = b"HFRE";
const APPLIED_MAGIC: &[u8; 4] = b"HFRA";
/// Bump on any change to the serialized types; keep a reader for the old one.
pub const FORMAT_VERSION: u16 = 1;

pub use holdfast_core::codec::CodecError;
use holdfast_core::codec::{decode_versioned, encode_versioned};

impl RegistryState {
    /// A snapshot of the whole state; [`RegistryState::restore`] gives back an equal state.
    pub fn snapshot(&self) -> Vec<u8> {
        encode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, self)
    }

    pub fn restore(bytes: &[u8]) -> Result<RegistryState, CodecError> {
        decode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, "registry snapshot", bytes)
    }
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(ENTRY_MAGIC, FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        decode_versioned(ENTRY_MAGIC, FORMAT_VERSION, "registry log entry", bytes)
    }
}

impl Applied {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(APPLIED_MAGIC, FORMAT_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Applied, CodecError> {
        decode_versioned(APPLIED_MAGIC, FORMAT_VERSION, "registry apply result", bytes)
    }
}
