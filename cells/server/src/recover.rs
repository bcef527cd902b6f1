//! `holdfast cell recover` and `holdfast snapshot restore` of a cell's snapshot: a cell
//! that lost its majority for good, formed again as a new group of one member from a
//! stopped survivor's data directory (`holdfast_raft::recover`) or from a snapshot
//! file (`holdfast_raft::snapshot_file`).
//!
//! **No token is issued twice.** The copy is older than what the lost cell did: its
//! majority may have granted at the copy's epochs after the copy's last entry (a
//! survivor that missed entries, a snapshot taken hours ago). So before it is written,
//! every shard of the copy is **sealed**: the recovered cell grants at none of the
//! epochs it had. Its renewals then report none of them served, which the registry
//! reads as a lost epoch: it commits `Restarted`, the shard at its next epoch — above
//! every epoch the registry ever gave this cell, so above every token the lost cell
//! can have issued — and the cell adopts that (docs/registry.md, "The cell side"). A seal
//! ends the holds and the sessions homed in the shard, as a move does: their clients
//! see `MOVED` or `SESSION_EXPIRED` and start again. A cell without a registry (admin
//! mode) stays sealed until an operator adopts each shard at a larger epoch.

use std::path::Path;

use holdfast_cell_state::{CellState, Command, Entry};
use holdfast_raft::recover::{read_stopped, write_new_member};
use holdfast_raft::snapshot_file::{self, GroupKind};
use holdfast_raft::types::LogId;
use holdfast_raft::{Node, NodeId};

use crate::machine::{CellMachine, Hooks};
use crate::CellConfig;

/// What a cell recovery read and wrote.
#[derive(Debug)]
pub struct CellRecovered {
    /// The node whose directory was read (or that served the snapshot), and the last
    /// entry in the copy.
    pub source_node: NodeId,
    pub last_index: u64,
    pub last_term: u64,
    /// The shards sealed, each at the epoch the copy had.
    pub sealed: Vec<(String, u32)>,
    /// Sessions the seals ended, and sessions left.
    pub sessions_ended: usize,
    pub sessions_left: usize,
    /// The members of the lost cell (id, Raft address).
    pub lost_members: Vec<(NodeId, String)>,
    /// The disk identity of the new member's directory.
    pub disk: u64,
}

/// The members of the cell the stopped node's directory `from` belonged to, but itself
/// (id, Raft address): whom to ask whether that cell still has a leader.
pub fn lost_members(from: &Path) -> Result<Vec<(NodeId, String)>, String> {
    let survivor = read_stopped(from, CellMachine::new(Hooks::new())).map_err(|e| e.to_string())?;
    Ok(survivor.members.iter().filter(|(id, _)| **id != survivor.node_id).map(|(id, n)| (*id, n.raft_addr.clone())).collect())
}

/// Reads the stopped cell node's directory `from`, seals every shard, and writes the
/// result as a new cell of one member on `cfg`'s data directory and addresses.
pub fn recover_from_survivor(from: &Path, cfg: &CellConfig) -> Result<CellRecovered, String> {
    let survivor = read_stopped(from, CellMachine::new(Hooks::new())).map_err(|e| e.to_string())?;
    let lost_members = survivor.members.iter().map(|(id, n)| (*id, n.raft_addr.clone())).collect();
    let state = survivor.state.state().clone();
    seal_and_write(state, survivor.last_log_id, survivor.term, survivor.node_id, lost_members, cfg)
}

/// As [`recover_from_survivor`], from a cell's snapshot file (read whole and checked
/// before anything is written). The file must be of the cell `cfg` names.
pub fn restore_from_snapshot(file: &Path, cfg: &CellConfig) -> Result<CellRecovered, String> {
    let (header, bytes) = snapshot_file::read(file).map_err(|e| e.to_string())?;
    if header.kind != GroupKind::Cell || header.group != cfg.cell {
        return Err(format!("{}: a snapshot of {} {:?}, not of cell {:?}", file.display(), header.kind, header.group, cfg.cell));
    }
    let state = CellState::restore(&bytes).map_err(|e| format!("{}: its state does not read as a cell's: {e}", file.display()))?;
    let lost_members = header.members.iter().map(|(id, m)| (*id, m.raft.clone())).collect();
    seal_and_write(state, header.last_log_id(), header.term, header.leader, lost_members, cfg)
}

/// Seals every shard of `state` that is not sealed yet, at the epoch it has (see the
/// module's doc), then writes it as the whole state of a new cell of one member.
fn seal_and_write(
    mut state: CellState,
    last_log_id: LogId,
    term: u64,
    source_node: NodeId,
    lost_members: Vec<(NodeId, String)>,
    cfg: &CellConfig,
) -> Result<CellRecovered, String> {
    let before = state.session_countdowns().count();
    let open: Vec<_> = state.shards().filter(|s| !s.sealed).map(|s| (s.key, s.epoch)).collect();
    let mut sealed = Vec::with_capacity(open.len());
    for (shard, epoch) in open {
        let applied = state.apply(&Entry::new(holdfast_raft::wall_clock_ms(), Command::SealShard { shard: shard.clone(), epoch }));
        applied.result.map_err(|e| format!("cannot seal {shard} at {epoch}: {e}"))?;
        sealed.push((shard.to_string(), epoch.0));
    }
    let left = state.session_countdowns().count();
    let node = Node::new(cfg.raft_addr.clone(), cfg.advertise_client_addr.clone().unwrap_or_else(|| cfg.client_addr.clone()));
    let disk = write_new_member(&cfg.data_dir, cfg.node_id, node, state.snapshot(), last_log_id, term).map_err(|e| e.to_string())?;
    Ok(CellRecovered {
        source_node,
        last_index: last_log_id.index,
        last_term: last_log_id.leader_id.term,
        sealed,
        sessions_ended: before - left,
        sessions_left: left,
        lost_members,
        disk,
    })
}
