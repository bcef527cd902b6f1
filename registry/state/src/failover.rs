//! Automatic failover, a namespace's opt-in (issue #43; docs/registry.md, "Automatic
//! failover"): once a cell has stopped renewing its ownership lease and the lease has
//! run out, the registry leader moves the opted-in namespaces' shards off it, as
//! unplanned moves that complete at once (the lease having run out is what an
//! unplanned move waits for). Off by default: a region cut off for longer than the
//! lease then loses those shards without an operator's word.
//!
//! The policy is replicated state ([`RegistryState::set_auto_failover`]); the choice of
//! targets is a pure function of the state and of two facts the leader measures on its
//! own clock — which shards' leases have run out, which cells renew — handed in
//! ([`RegistryState::auto_failover_moves`]).

use crate::outcome::{Outcome, RegistryError};
use crate::state::{RegionState, RegistryState, ShardState};
use holdfast_core::{CellId, NamespaceName, RegionId, ShardKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A namespace's automatic failover: present means opted in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverPolicy {
    /// The region its shards go to first; any other active region's cells otherwise.
    pub fallback: Option<RegionId>,
}

/// One move the leader should begin: `shard` from its lapsed cell to `to_cell`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoMove {
    pub shard: ShardKey,
    pub from_cell: CellId,
    pub to_cell: CellId,
}

impl RegistryState {
    /// The namespace's automatic failover, if it opted in.
    pub fn auto_failover(&self, ns: &NamespaceName) -> Option<&FailoverPolicy> {
        self.auto_failover.get(ns)
    }

    /// Opts `ns` in (`Some`) or out (`None`). The namespace and the fallback region
    /// must exist.
    pub(crate) fn set_auto_failover(&mut self, ns: &NamespaceName, policy: &Option<FailoverPolicy>) -> Result<Outcome, RegistryError> {
        if !self.namespaces.contains_key(ns) {
            return Err(RegistryError::UnknownNamespace(ns.to_string()));
        }
        if let Some(region) = policy.as_ref().and_then(|p| p.fallback.as_ref()) {
            if !self.regions.contains_key(region) {
                return Err(RegistryError::UnknownRegion(region.to_string()));
            }
        }
        match policy {
            Some(p) => self.auto_failover.insert(ns.clone(), p.clone()),
            None => self.auto_failover.remove(ns),
        };
        Ok(Outcome::AutoFailover { ns: ns.clone(), policy: policy.clone() })
    }

    /// The moves automatic failover would begin now, at most `limit`: every active
    /// shard of an opted-in namespace whose lease has run out (`lapsed`) on a cell that
    /// does not renew (not in `renewing`), each to a renewing cell of an active region
    /// — the namespace's fallback region's if it has one, else any — the one with the
    /// fewest shards (counting the moves chosen before it), ties by name. A shard with
    /// no such cell stays where it is.
    pub fn auto_failover_moves(&self, lapsed: impl Fn(&ShardKey) -> bool, renewing: &BTreeSet<CellId>, limit: usize) -> Vec<AutoMove> {
        if self.auto_failover.is_empty() {
            return Vec::new();
        }
        let targets: Vec<(&CellId, &RegionId)> = self
            .cells
            .iter()
            .filter(|(c, r)| renewing.contains(*c) && self.regions.get(&r.region) == Some(&RegionState::Active))
            .map(|(c, r)| (c, &r.region))
            .collect();
        if targets.is_empty() {
            return Vec::new();
        }
        // Shards per cell: what is active there or moving in.
        let mut load: BTreeMap<CellId, usize> = BTreeMap::new();
        for s in self.shards.values() {
            *load.entry(s.moving().map_or(&s.cell, |m| &m.to_cell).clone()).or_default() += 1;
        }
        let mut moves = Vec::new();
        for (key, record) in &self.shards {
            if moves.len() == limit {
                break;
            }
            let Some(policy) = self.auto_failover.get(&key.ns) else { continue };
            if record.state != ShardState::Active || renewing.contains(&record.cell) || !lapsed(key) || record.epoch.next().is_none() {
                continue;
            }
            let in_fallback = |r: &RegionId| policy.fallback.as_ref() == Some(r);
            let pick = |only_fallback: bool| {
                targets
                    .iter()
                    .filter(|(c, r)| **c != record.cell && (!only_fallback || in_fallback(r)))
                    .min_by_key(|(c, _)| (load.get(*c).copied().unwrap_or(0), *c))
                    .map(|(c, _)| (*c).clone())
            };
            let Some(to) = pick(true).or_else(|| pick(false)) else { continue };
            *load.entry(to.clone()).or_default() += 1;
            moves.push(AutoMove { shard: key.clone(), from_cell: record.cell.clone(), to_cell: to });
        }
        moves
    }
}
