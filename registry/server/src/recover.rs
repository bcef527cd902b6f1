//! `holdfast registry recover` and `holdfast snapshot restore`: a registry that lost its
//! majority for good, formed again from one stopped survivor's data directory
//! (`holdfast_raft::recover`) or from a snapshot file (`holdfast_raft::snapshot_file`), with every
//! shard's epoch raised past any the lost group can have served
//! (`holdfast_registry_state`'s recovery). The survivor's log, vote and snapshot are
//! read, never changed; the recovered voter starts on the new directory its
//! configuration names.

use std::path::Path;

use holdfast_raft::recover::{read_stopped, write_new_member};
use holdfast_raft::snapshot_file::{self, GroupKind};
use holdfast_raft::types::LogId;
use holdfast_raft::{Node, NodeId, ReplicatedState};
use holdfast_registry_state::RegistryState;
pub use holdfast_registry_state::{Recovery, RECOVERY_EPOCH_GAP};

use crate::machine::{Hooks, RegistryMachine};
use crate::RegistryConfig;

/// What a recovery read and wrote.
#[derive(Debug)]
pub struct Recovered {
    pub recovery: Recovery,
    /// The node whose directory was read, and the last entry it held.
    pub survivor: NodeId,
    pub last_index: u64,
    pub last_term: u64,
    /// Entries applied on top of its snapshot.
    pub replayed: u64,
    /// The voters of the lost group, as the survivor last knew them (id, Raft address).
    pub lost_members: Vec<(NodeId, String)>,
    /// The disk identity of the new member's directory.
    pub disk: u64,
}

/// The voters of the registry the stopped node's directory `from` belonged to, but
/// itself (id, Raft address): whom to ask whether that registry still has a leader.
pub fn lost_members(from: &Path) -> Result<Vec<(NodeId, String)>, String> {
    let survivor = read_stopped(from, RegistryMachine::new(Hooks::new())).map_err(|e| e.to_string())?;
    Ok(survivor.members.iter().filter(|(id, _)| **id != survivor.node_id).map(|(id, n)| (*id, n.raft_addr.clone())).collect())
}

/// Reads the stopped registry node's directory `from`, raises every epoch by `gap`
/// (audited as done by `by`), and writes the result as a new registry of one voter on
/// `cfg`'s data directory, reached at `cfg`'s addresses.
pub fn recover_from_survivor(from: &Path, cfg: &RegistryConfig, gap: u32, by: &str) -> Result<Recovered, String> {
    let survivor = read_stopped(from, RegistryMachine::new(Hooks::new())).map_err(|e| e.to_string())?;
    let source = format!("registry node {}'s data ({}) up to entry {}", survivor.node_id, from.display(), survivor.last_log_id.index);
    let lost_members = survivor.members.iter().map(|(id, n)| (*id, n.raft_addr.clone())).collect();
    let state = survivor.state.state().clone();
    let (recovery, disk) = raise_and_write(state, survivor.last_log_id, survivor.term, &source, cfg, gap, by)?;
    Ok(Recovered {
        recovery,
        survivor: survivor.node_id,
        last_index: survivor.last_log_id.index,
        last_term: survivor.last_log_id.leader_id.term,
        replayed: survivor.replayed,
        lost_members,
        disk,
    })
}

/// As [`recover_from_survivor`], from a snapshot file `file` (read whole and checked
/// before anything is written): a registry of one voter holding the snapshot's state,
/// every epoch raised by `gap`.
pub fn restore_from_snapshot(file: &Path, cfg: &RegistryConfig, gap: u32, by: &str) -> Result<Recovered, String> {
    let (header, bytes) = snapshot_file::read(file).map_err(|e| e.to_string())?;
    if header.kind != GroupKind::Registry {
        return Err(format!("{}: a snapshot of {} {:?}, not of the registry", file.display(), header.kind, header.group));
    }
    let mut machine = RegistryMachine::new(Hooks::new());
    machine.restore(&bytes).map_err(|e| format!("{}: its state does not read as a registry's: {e}", file.display()))?;
    let source = format!("the snapshot {} (entry {} of term {}, taken by {})", file.display(), header.last_index, header.last_term, header.taken_by);
    let (recovery, disk) = raise_and_write(machine.state().clone(), header.last_log_id(), header.term, &source, cfg, gap, by)?;
    Ok(Recovered {
        recovery,
        survivor: header.leader,
        last_index: header.last_index,
        last_term: header.last_term,
        replayed: 0,
        lost_members: header.members.iter().map(|(id, m)| (*id, m.raft.clone())).collect(),
        disk,
    })
}

/// Raises every epoch of `state` by `gap` (from `source`, as `by`) and writes it as the
/// whole state of a new registry of one voter on `cfg`'s data directory; returns what
/// was raised and the new directory's disk identity.
fn raise_and_write(
    mut state: RegistryState,
    last_log_id: LogId,
    term: u64,
    source: &str,
    cfg: &RegistryConfig,
    gap: u32,
    by: &str,
) -> Result<(Recovery, u64), String> {
    let recovery = state.recover(gap, holdfast_raft::wall_clock_ms(), by, source).map_err(|e| format!("cannot raise the epochs: {e}"))?;
    let node = Node::new(cfg.raft_addr.clone(), cfg.advertise_client_addr.clone().unwrap_or_else(|| cfg.client_addr.clone()));
    let disk = write_new_member(&cfg.data_dir, cfg.node_id, node, state.snapshot(), last_log_id, term).map_err(|e| e.to_string())?;
    Ok((recovery, disk))
}
