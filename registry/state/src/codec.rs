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
/// 2: snapshots carry the access state (grants, tokens, audit log) after the rest.
/// 3: and the namespaces' automatic failover after that.
/// Log entries and apply results are unchanged from 1 but for new variants appended
/// to their enums, which version 1 records never hold.
pub const FORMAT_VERSION: u16 = 3;

pub use holdfast_core::codec::CodecError;
use holdfast_core::codec::{decode_versioned, encode_versioned, version_of};

type Versioned3 = (RegistryState, crate::access::Access, std::collections::BTreeMap<holdfast_core::NamespaceName, crate::failover::FailoverPolicy>);

impl RegistryState {
    /// A snapshot of the whole state; [`RegistryState::restore`] gives back an equal state.
    pub fn snapshot(&self) -> Vec<u8> {
        encode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, &(self, &self.access, &self.auto_failover))
    }

    /// Reads a snapshot of this version or of an older one (what it did not carry yet:
    /// none).
    pub fn restore(bytes: &[u8]) -> Result<RegistryState, CodecError> {
        const WHAT: &str = "registry snapshot";
        match version_of(SNAPSHOT_MAGIC, WHAT, bytes)? {
            1 => decode_versioned(SNAPSHOT_MAGIC, 1, WHAT, bytes),
            2 => {
                let (mut state, access): (RegistryState, crate::access::Access) = decode_versioned(SNAPSHOT_MAGIC, 2, WHAT, bytes)?;
                state.access = access;
                Ok(state)
            }
            _ => {
                let (mut state, access, auto_failover): Versioned3 = decode_versioned(SNAPSHOT_MAGIC, FORMAT_VERSION, WHAT, bytes)?;
                state.access = access;
                state.auto_failover = auto_failover;
                Ok(state)
            }
        }
    }
}

/// Entries and apply results: written at version 1 (their format did not change), read
/// at 1.
const RECORD_VERSION: u16 = 1;

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(ENTRY_MAGIC, RECORD_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        decode_versioned(ENTRY_MAGIC, RECORD_VERSION, "registry log entry", bytes)
    }
}

impl Applied {
    pub fn encode(&self) -> Vec<u8> {
        encode_versioned(APPLIED_MAGIC, RECORD_VERSION, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Applied, CodecError> {
        decode_versioned(APPLIED_MAGIC, RECORD_VERSION, "registry apply result", bytes)
    }
}
