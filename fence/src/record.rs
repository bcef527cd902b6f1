//! The on-disk layout of [`crate::RocksFence`], in one place.
//!
//! One column family (the default), two key spaces told apart by a tag byte:
//!
//! | key                         | value                                        |
//! |-----------------------------|----------------------------------------------|
//! | `b'F'` + `ns/shard/name`    | fence: `[version = 1][token: u64 big-endian]` |
//! | `b'D'` + the resource's key | data: `[version = 1][token: u64 big-endian][value]` |
//!
//! Every value starts with a format version byte, so a later release can read these
//! records and a record from a later release is refused instead of misread.
//! One column family rather than two keeps a write to one memtable and lets tests
//! read the write-ahead log without column family ids.

use crate::{FenceError, LockId, Stored};
use holdfast_core::FencingToken;

const FENCE_TAG: u8 = b'F';
const DATA_TAG: u8 = b'D';

/// Current version of a fence record.
const FENCE_V1: u8 = 1;
/// Current version of a data record.
const DATA_V1: u8 = 1;

const TOKEN_BYTES: usize = 8;

pub(crate) fn fence_key(lock: &LockId) -> Vec<u8> {
    let id = lock.to_string();
    let mut key = Vec::with_capacity(1 + id.len());
    key.push(FENCE_TAG);
    key.extend_from_slice(id.as_bytes());
    key
}

pub(crate) fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(DATA_TAG);
    k.extend_from_slice(key);
    k
}

/// The resource's key of a stored data key, if `stored_key` is one.
#[cfg(test)]
pub(crate) fn strip_data_key(stored_key: &[u8]) -> Option<&[u8]> {
    stored_key.strip_prefix(&[DATA_TAG])
}

pub(crate) fn encode_fence(token: FencingToken) -> [u8; 1 + TOKEN_BYTES] {
    let mut out = [0u8; 1 + TOKEN_BYTES];
    out[0] = FENCE_V1;
    out[1..].copy_from_slice(&token.0.to_be_bytes());
    out
}

pub(crate) fn decode_fence(bytes: &[u8]) -> Result<FencingToken, FenceError> {
    const WHAT: &str = "fence";
    match bytes.split_first() {
        None => Err(FenceError::Corrupt { what: WHAT, detail: "empty".into() }),
        Some((&FENCE_V1, rest)) => read_token(WHAT, rest, true),
        Some((&version, _)) => Err(FenceError::UnknownVersion { what: WHAT, version }),
    }
}

pub(crate) fn encode_data(token: FencingToken, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + TOKEN_BYTES + value.len());
    out.push(DATA_V1);
    out.extend_from_slice(&token.0.to_be_bytes());
    out.extend_from_slice(value);
    out
}

pub(crate) fn decode_data(bytes: &[u8]) -> Result<Stored, FenceError> {
    const WHAT: &str = "data";
    match bytes.split_first() {
        None => Err(FenceError::Corrupt { what: WHAT, detail: "empty".into() }),
        Some((&DATA_V1, rest)) => {
            let token = read_token(WHAT, rest, false)?;
            Ok(Stored { value: rest[TOKEN_BYTES..].to_vec(), token })
        }
        Some((&version, _)) => Err(FenceError::UnknownVersion { what: WHAT, version }),
    }
}

/// Reads the big-endian token at the start of `rest`; `exact`: nothing may follow.
fn read_token(what: &'static str, rest: &[u8], exact: bool) -> Result<FencingToken, FenceError> {
    let bad_len = rest.len() < TOKEN_BYTES || (exact && rest.len() != TOKEN_BYTES);
    if bad_len {
        return Err(FenceError::Corrupt { what, detail: format!("{} bytes after the version byte, expected {TOKEN_BYTES}", rest.len()) });
    }
    let mut raw = [0u8; TOKEN_BYTES];
    raw.copy_from_slice(&rest[..TOKEN_BYTES]);
    Ok(FencingToken(u64::from_be_bytes(raw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_record_layout_is_stable() {
        // Pinned bytes: changing them breaks every store on disk.
        let bytes = encode_fence(FencingToken(0x0102_0304_0506_0708));
        assert_eq!(bytes, [1, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(decode_fence(&bytes).unwrap(), FencingToken(0x0102_0304_0506_0708));
    }

    #[test]
    fn data_record_round_trips() {
        let bytes = encode_data(FencingToken(34), b"PAID");
        assert_eq!(&bytes[..9], &[1, 0, 0, 0, 0, 0, 0, 0, 34]);
        let stored = decode_data(&bytes).unwrap();
        assert_eq!(stored, Stored { value: b"PAID".to_vec(), token: FencingToken(34) });
        let empty = decode_data(&encode_data(FencingToken(1), b"")).unwrap();
        assert!(empty.value.is_empty());
    }

    #[test]
    fn unknown_versions_and_bad_lengths_are_refused() {
        assert!(matches!(decode_fence(&[2, 0, 0, 0, 0, 0, 0, 0, 1]), Err(FenceError::UnknownVersion { version: 2, .. })));
        assert!(matches!(decode_data(&[9]), Err(FenceError::UnknownVersion { version: 9, .. })));
        assert!(matches!(decode_fence(&[]), Err(FenceError::Corrupt { .. })));
        assert!(matches!(decode_fence(&[1, 0, 0]), Err(FenceError::Corrupt { .. })));
        assert!(matches!(decode_fence(&[1, 0, 0, 0, 0, 0, 0, 0, 1, 0]), Err(FenceError::Corrupt { .. })));
        assert!(matches!(decode_data(&[1, 0, 0]), Err(FenceError::Corrupt { .. })));
    }

    #[test]
    fn fence_and_data_keys_never_collide() {
        let lock = LockId::parse("payments/default/settle").unwrap();
        let fk = fence_key(&lock);
        assert_eq!(fk, b"Fpayments/default/settle");
        // A resource key equal to the fence key's text still lands in the data space.
        assert_ne!(data_key(&fk[1..]), fk);
        assert_eq!(strip_data_key(&data_key(b"k")), Some(&b"k"[..]));
        assert_eq!(strip_data_key(&fk), None);
    }
}
