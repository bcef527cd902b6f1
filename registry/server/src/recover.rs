//! `holdfast registry recover`: a registry that lost its majority for good, formed again
//! from one stopped survivor's data directory (`holdfast_raft::recover`), with every
//! shard's epoch raised past any the lost group can have served
//! (`holdfast_registry_state`'s recovery). The survivor's log, vote and snapshot are
//! read, never changed; the recovered voter starts on the new directory its
//! configuration names.

use std::path::Path;

use holdfast_raft::recover::{read_stopped, write_new_member};
use holdfast_raft::{Node, NodeId};
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
    let mut state = survivor.state.state().clone();
    let source = format!("registry node {}'s data ({}) up to entry {}", survivor.node_id, from.display(), survivor.last_log_id.index);
    let recovery = state.recover(gap, holdfast_raft::wall_clock_ms(), by, &source).map_err(|e| format!("cannot raise the epochs: {e}"))?;
    let node = Node::new(cfg.raft_addr.clone(), cfg.advertise_client_addr.clone().unwrap_or_else(|| cfg.client_addr.clone()));
    let disk = write_new_member(&cfg.data_dir, cfg.node_id, node, state.snapshot(), survivor.last_log_id, survivor.term).map_err(|e| e.to_string())?;
    Ok(Recovered {
        recovery,
        survivor: survivor.node_id,
        last_index: survivor.last_log_id.index,
        last_term: survivor.last_log_id.leader_id.term,
        replayed: survivor.replayed,
        lost_members: survivor.members.iter().map(|(id, n)| (*id, n.raft_addr.clone())).collect(),
        disk,
    })
}
