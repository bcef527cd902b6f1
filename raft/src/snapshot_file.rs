//! The snapshot file (`holdfast snapshot save`): one group's whole applied state at a
//! known Raft index, as its leader read it, in a file an operator keeps off the
//! cluster and restores from (docs/runbooks/disaster-recovery.md).
//!
//! Layout, version 1 (integers little-endian):
//!
//! ```text
//! "HOLDFAST-SNAPSHOT\n"  18 bytes, the magic
//! format version         u32 (FORMAT_VERSION)
//! header length          u32 (at most MAX_HEADER_BYTES)
//! header                 JSON (`Header`): the group, the Raft index and term, who took it
//! state                  `Header::state_bytes` bytes, the application's own snapshot
//! checksum               32 bytes: SHA-256 of everything before it
//! ```
//!
//! A reader checks the magic, refuses a version above its own before reading on, and
//! checks the length and the checksum before it gives anything back: a truncated,
//! corrupt or newer file is refused before a restore writes anything. The header is
//! JSON so that `holdfast snapshot inspect` and a person with `head -c` can read it.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring::digest::{Context, SHA256, SHA256_OUTPUT_LEN};
use serde::{Deserialize, Serialize};

use crate::types::{LeaderId, LogId, NodeId};

/// The first bytes of every snapshot file.
pub const MAGIC: &[u8; 18] = b"HOLDFAST-SNAPSHOT\n";
/// The format this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// A header longer than this is not one this code wrote.
pub const MAX_HEADER_BYTES: u32 = 1 << 20;
/// The largest state a file may carry (the states are held in memory whole).
pub const MAX_STATE_BYTES: u64 = 1 << 32;
/// The pieces a file is streamed in.
pub const CHUNK_BYTES: usize = 1 << 20;

/// How a snapshot file names the registry's group (a cell's is the cell's name).
pub const REGISTRY_GROUP: &str = "registry";

/// Which kind of group a snapshot is of: restoring one kind's state as the other's is
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    Registry,
    Cell,
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupKind::Registry => "registry",
            GroupKind::Cell => "cell",
        })
    }
}

/// A member of the group when the snapshot was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberAddrs {
    pub raft: String,
    pub client: String,
}

/// What a snapshot file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub kind: GroupKind,
    /// "registry", or the cell's name.
    pub group: String,
    /// The leader that served it, and its term then.
    pub leader: NodeId,
    pub term: u64,
    /// The last entry the state includes: its index, its term and the node that led it.
    pub last_index: u64,
    pub last_term: u64,
    pub last_leader: NodeId,
    /// The voters and learners as of that entry.
    pub members: BTreeMap<NodeId, MemberAddrs>,
    pub taken_at_unix_ms: u64,
    /// Who asked for it (the caller's identity, as the audit log names it).
    pub taken_by: String,
    /// The version of holdfast that wrote it.
    pub holdfast_version: String,
    pub state_bytes: u64,
}

impl Header {
    /// The id of the last entry the state includes.
    pub fn last_log_id(&self) -> LogId {
        LogId::new(LeaderId { term: self.last_term, node_id: self.last_leader }, self.last_index)
    }
}

/// Why a file is not a snapshot this build can use. Nothing is written anywhere when a
/// read fails.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: not a holdfast snapshot (its first bytes are not the snapshot magic)")]
    NotASnapshot { path: PathBuf },
    #[error("{path}: snapshot format {found} is newer than this holdfast reads ({FORMAT_VERSION}); use the holdfast that wrote it, or a newer one")]
    NewerFormat { path: PathBuf, found: u32 },
    #[error("{path}: truncated: {why}")]
    Truncated { path: PathBuf, why: String },
    #[error("{path}: corrupt: {why}")]
    Corrupt { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The bytes before the state: magic, version, header length, header.
pub fn encode_head(header: &Header) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("a header serializes");
    let mut head = Vec::with_capacity(MAGIC.len() + 8 + json.len());
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&(json.len() as u32).to_le_bytes());
    head.extend_from_slice(&json);
    head
}

/// The whole file for `header` and `state`, in the pieces it is streamed in: the head,
/// the state in pieces of at most [`CHUNK_BYTES`], then the checksum. Each piece is
/// copied out of `state` only when it is reached. `header.state_bytes` must be
/// `state.len()`.
pub fn pieces(header: &Header, state: Arc<Vec<u8>>) -> Pieces {
    debug_assert_eq!(header.state_bytes, state.len() as u64);
    Pieces { head: Some(encode_head(header)), state, at: 0, sum: Some(Checksum::default()) }
}

/// See [`pieces`].
#[derive(Debug)]
pub struct Pieces {
    head: Option<Vec<u8>>,
    state: Arc<Vec<u8>>,
    at: usize,
    /// Taken when the checksum is given out.
    sum: Option<Checksum>,
}

impl Iterator for Pieces {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let sum = self.sum.as_mut()?;
        let piece = if let Some(head) = self.head.take() {
            head
        } else if self.at < self.state.len() {
            let end = (self.at + CHUNK_BYTES).min(self.state.len());
            let piece = self.state[self.at..end].to_vec();
            self.at = end;
            piece
        } else {
            return self.sum.take().map(|s| s.finish().to_vec());
        };
        sum.update(&piece);
        Some(piece)
    }
}

/// A running SHA-256 of what a file holds so far.
#[derive(Clone)]
pub struct Checksum(Context);

impl Default for Checksum {
    fn default() -> Self {
        Checksum(Context::new(&SHA256))
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Checksum(sha256)")
    }
}

impl Checksum {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> [u8; SHA256_OUTPUT_LEN] {
        let mut out = [0; SHA256_OUTPUT_LEN];
        out.copy_from_slice(self.0.finish().as_ref());
        out
    }
}

/// Writes a whole snapshot file to `w`: the same bytes the server streams.
pub fn write(w: &mut impl Write, header: &Header, state: Arc<Vec<u8>>) -> io::Result<()> {
    for piece in pieces(header, state) {
        w.write_all(&piece)?;
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes, or says the file ended early.
fn fill(r: &mut impl Read, buf: &mut [u8], path: &Path, what: &str) -> Result<(), FileError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => FileError::Truncated { path: path.to_owned(), why: format!("it ends inside the {what}") },
        _ => FileError::Io { path: path.to_owned(), source: e },
    })
}

/// Reads and checks the head (magic, version, header); returns the header and the
/// checksum of the head.
fn read_head(r: &mut impl Read, path: &Path) -> Result<(Header, Checksum), FileError> {
    let mut magic = [0u8; MAGIC.len()];
    match r.read_exact(&mut magic) {
        Ok(()) if &magic == MAGIC => {}
        Ok(()) => return Err(FileError::NotASnapshot { path: path.to_owned() }),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FileError::NotASnapshot { path: path.to_owned() }),
        Err(e) => return Err(FileError::Io { path: path.to_owned(), source: e }),
    }
    let mut word = [0u8; 4];
    fill(r, &mut word, path, "format version")?;
    let version = u32::from_le_bytes(word);
    if version > FORMAT_VERSION {
        return Err(FileError::NewerFormat { path: path.to_owned(), found: version });
    }
    if version == 0 {
        return Err(FileError::Corrupt { path: path.to_owned(), why: "format version 0".into() });
    }
    let mut len = [0u8; 4];
    fill(r, &mut len, path, "header length")?;
    let header_len = u32::from_le_bytes(len);
    if header_len > MAX_HEADER_BYTES {
        return Err(FileError::Corrupt { path: path.to_owned(), why: format!("a header of {header_len} bytes (at most {MAX_HEADER_BYTES})") });
    }
    let mut json = vec![0u8; header_len as usize];
    fill(r, &mut json, path, "header")?;
    let mut sum = Checksum::default();
    for part in [&magic[..], &word[..], &len[..], &json[..]] {
        sum.update(part);
    }
    let header: Header =
        serde_json::from_slice(&json).map_err(|e| FileError::Corrupt { path: path.to_owned(), why: format!("its header does not read: {e}") })?;
    if header.state_bytes > MAX_STATE_BYTES {
        return Err(FileError::Corrupt { path: path.to_owned(), why: format!("a state of {} bytes (at most {MAX_STATE_BYTES})", header.state_bytes) });
    }
    Ok((header, sum))
}

/// Reads the state (into `keep`, if given) and the checksum after the head, and checks
/// both: the length, the checksum, nothing after it.
fn read_rest(r: &mut impl Read, path: &Path, header: &Header, mut sum: Checksum, mut keep: Option<&mut Vec<u8>>) -> Result<(), FileError> {
    let mut left = header.state_bytes;
    let mut buf = vec![0u8; CHUNK_BYTES.min(left as usize).max(1)];
    while left > 0 {
        let n = (left as usize).min(buf.len());
        fill(r, &mut buf[..n], path, &format!("state ({} of {} bytes read)", header.state_bytes - left, header.state_bytes))?;
        sum.update(&buf[..n]);
        if let Some(k) = keep.as_deref_mut() {
            k.extend_from_slice(&buf[..n]);
        }
        left -= n as u64;
    }
    let mut stored = [0u8; SHA256_OUTPUT_LEN];
    fill(r, &mut stored, path, "checksum")?;
    if sum.finish() != stored {
        return Err(FileError::Corrupt { path: path.to_owned(), why: "the checksum does not match its contents".into() });
    }
    let mut extra = [0u8; 1];
    match r.read(&mut extra) {
        Ok(0) => Ok(()),
        Ok(_) => Err(FileError::Corrupt { path: path.to_owned(), why: "bytes follow its checksum".into() }),
        Err(e) => Err(FileError::Io { path: path.to_owned(), source: e }),
    }
}

fn open(path: &Path) -> Result<io::BufReader<std::fs::File>, FileError> {
    let f = std::fs::File::open(path).map_err(|e| FileError::Io { path: path.to_owned(), source: e })?;
    Ok(io::BufReader::with_capacity(CHUNK_BYTES, f))
}

/// Checks the whole file at `path` (reading it once, in pieces: memory stays bounded)
/// and returns its header.
pub fn verify(path: &Path) -> Result<Header, FileError> {
    let mut r = open(path)?;
    let (header, sum) = read_head(&mut r, path)?;
    read_rest(&mut r, path, &header, sum, None)?;
    Ok(header)
}

/// The header of the file at `path`, read alone (its state and checksum are not
/// checked: [`verify`] or [`read`] do that).
pub fn header(path: &Path) -> Result<Header, FileError> {
    read_head(&mut open(path)?, path).map(|(h, _)| h)
}

/// Reads the file at `path` whole: its header and its state, both checked.
pub fn read(path: &Path) -> Result<(Header, Vec<u8>), FileError> {
    let mut r = open(path)?;
    let (header, sum) = read_head(&mut r, path)?;
    let mut state = Vec::with_capacity(header.state_bytes.min(CHUNK_BYTES as u64 * 64) as usize);
    read_rest(&mut r, path, &header, sum, Some(&mut state))?;
    Ok((header, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(state: &[u8]) -> Header {
        Header {
            kind: GroupKind::Registry,
            group: "registry".into(),
            leader: 2,
            term: 7,
            last_index: 41,
            last_term: 7,
            last_leader: 2,
            members: BTreeMap::from([(2, MemberAddrs { raft: "r:1".into(), client: "c:1".into() })]),
            taken_at_unix_ms: 1,
            taken_by: "user:root".into(),
            holdfast_version: "0.1.0".into(),
            state_bytes: state.len() as u64,
        }
    }

    fn file(dir: &Path, state: &[u8]) -> (PathBuf, Vec<u8>) {
        let mut bytes = Vec::new();
        write(&mut bytes, &header(state), Arc::new(state.to_vec())).unwrap();
        let path = dir.join("s.snap");
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    #[test]
    fn a_written_file_reads_back_whole_across_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let state: Vec<u8> = (0..(CHUNK_BYTES * 2 + 17)).map(|i| (i % 251) as u8).collect();
        let (path, _) = file(dir.path(), &state);
        assert_eq!(verify(&path).unwrap(), header(&state));
        let (h, s) = read(&path).unwrap();
        assert_eq!((h.last_log_id().index, s), (41, state));
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = file(dir.path(), b"the registry's state");
        for cut in 0..bytes.len() {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = read(&path).unwrap_err();
            assert!(matches!(e, FileError::Truncated { .. } | FileError::NotASnapshot { .. }), "cut at {cut}: {e}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x20;
            std::fs::write(&path, &bad).unwrap();
            assert!(read(&path).is_err(), "a flipped byte at {at} was not noticed");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        assert!(matches!(read(&path).unwrap_err(), FileError::Corrupt { .. }));
    }

    #[test]
    fn a_newer_format_is_refused_by_its_version_before_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes) = file(dir.path(), b"state");
        bytes[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        // A newer writer may change everything after the version: cut it off.
        bytes.truncate(MAGIC.len() + 4);
        std::fs::write(&path, &bytes).unwrap();
        let e = verify(&path).unwrap_err();
        assert!(matches!(e, FileError::NewerFormat { found, .. } if found == FORMAT_VERSION + 1), "{e}");
        assert!(e.to_string().contains("newer"), "{e}");
    }
}
