//! The framing of every persisted and replicated record: a 4-byte magic, a
//! little-endian `u16` format version, then the bincode body (docs/development.md, rule 13). The
//! magics and versions belong to the crates that own the records; only the framing
//! lives here, so a snapshot, a log entry and an apply result are read the same way
//! everywhere.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A record that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("not a holdfast {what}: bad magic")]
    BadMagic { what: &'static str },
    #[error("{what} format version {found} is newer than this build reads ({reads})")]
    UnknownVersion { what: &'static str, found: u16, reads: u16 },
    #[error("corrupt {what}: {source}")]
    Corrupt { what: &'static str, source: bincode::Error },
}

/// `magic`, `version`, then `v` in bincode.
pub fn encode_versioned<T: Serialize>(magic: &[u8; 4], version: u16, v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    bincode::serialize_into(&mut out, v).expect("in-memory serialization cannot fail");
    out
}

/// The format version of a record with `magic` (for a reader of several versions).
pub fn version_of(magic: &[u8; 4], what: &'static str, bytes: &[u8]) -> Result<u16, CodecError> {
    if bytes.len() < 6 || &bytes[..4] != magic {
        return Err(CodecError::BadMagic { what });
    }
    Ok(u16::from_le_bytes([bytes[4], bytes[5]]))
}

/// Reads what [`encode_versioned`] wrote with the same `magic` and `version`. `what`
/// names the record in errors ("cell snapshot").
pub fn decode_versioned<T: DeserializeOwned>(magic: &[u8; 4], version: u16, what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    if bytes.len() < 6 || &bytes[..4] != magic {
        return Err(CodecError::BadMagic { what });
    }
    let found = u16::from_le_bytes([bytes[4], bytes[5]]);
    if found != version {
        return Err(CodecError::UnknownVersion { what, found, reads: version });
    }
    bincode::deserialize(&bytes[6..]).map_err(|source| CodecError::Corrupt { what, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_framing_is_magic_then_version_then_bincode() {
        let bytes = encode_versioned(b"HFXX", 1, &(7u32, "a".to_owned()));
        assert_eq!(&bytes[..6], b"HFXX\x01\x00");
        assert_eq!(&bytes[6..], bincode::serialize(&(7u32, "a".to_owned())).unwrap().as_slice());
        let back: (u32, String) = decode_versioned(b"HFXX", 1, "test record", &bytes).unwrap();
        assert_eq!(back, (7, "a".to_owned()));
    }

    #[test]
    fn wrong_magic_newer_version_and_truncation_are_refused() {
        let bytes = encode_versioned(b"HFXX", 2, &1u64);
        assert!(matches!(decode_versioned::<u64>(b"HFYY", 2, "r", &bytes), Err(CodecError::BadMagic { .. })));
        assert!(matches!(decode_versioned::<u64>(b"HFXX", 1, "r", &bytes), Err(CodecError::UnknownVersion { found: 2, reads: 1, .. })));
        assert!(matches!(decode_versioned::<u64>(b"HFXX", 2, "r", &bytes[..7]), Err(CodecError::Corrupt { .. })));
        assert!(matches!(decode_versioned::<u64>(b"HFXX", 2, "r", b"HF"), Err(CodecError::BadMagic { .. })));
    }
}
