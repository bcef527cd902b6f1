//! Persisted and replicated formats. Every encoding starts with a magic and a
//! version, so the next release can read what this one wrote (STYLE.md #13).

use crate::command::Entry;
use crate::outcome::Applied;
use crate::state::RegistryState;

const SNAPSHOT_MAGIC: &[u8; 4] = b"HFRS";
const ENTRY_MAGIC: &[u8; 4] = b"HFRE";
const APPLIED_MAGIC: &[u8; 4] = b"HFRA";
/// Bump on any change to the serialized types; keep a reader for the old one.
pub const FORMAT_VERSION: u16 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("not a holdfast {what}: bad magic")]
    BadMagic { what: &'static str },
    #[error("{what} format version {found} is newer than this build reads ({FORMAT_VERSION})")]
    UnknownVersion { what: &'static str, found: u16 },
    #[error("corrupt {what}: {source}")]
    Corrupt { what: &'static str, source: bincode::Error },
}

fn encode<T: serde::Serialize>(magic: &[u8; 4], v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bincode::serialize_into(&mut out, v).expect("in-memory serialization cannot fail");
    out
}

fn decode<T: serde::de::DeserializeOwned>(magic: &[u8; 4], what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    if bytes.len() < 6 || &bytes[..4] != magic {
        return Err(CodecError::BadMagic { what });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(CodecError::UnknownVersion { what, found: version });
    }
    bincode::deserialize(&bytes[6..]).map_err(|source| CodecError::Corrupt { what, source })
}

impl RegistryState {
    /// A snapshot of the whole state; [`RegistryState::restore`] gives back an equal state.
    pub fn snapshot(&self) -> Vec<u8> {
        encode(SNAPSHOT_MAGIC, self)
    }

    pub fn restore(bytes: &[u8]) -> Result<RegistryState, CodecError> {
        decode(SNAPSHOT_MAGIC, "registry snapshot", bytes)
    }
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        encode(ENTRY_MAGIC, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        decode(ENTRY_MAGIC, "registry log entry", bytes)
    }
}

impl Applied {
    pub fn encode(&self) -> Vec<u8> {
        encode(APPLIED_MAGIC, self)
    }

    pub fn decode(bytes: &[u8]) -> Result<Applied, CodecError> {
        decode(APPLIED_MAGIC, "registry apply result", bytes)
    }
}
