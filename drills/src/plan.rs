//! The region-evacuation planner: a pure function from what the registry reports
//! (shards, cells, regions) to a [`Plan`] of waves. Printing a plan changes nothing;
//! `--dry-run` is printing the plan.
//!
//! Rules:
//! - every shard homed in the evacuated region moves, to a **healthy** cell of another
//!   region whose state is **active** (the registry refuses moves into a draining or
//!   evacuated region);
//! - a shard's **load** is `1 + keys + sessions + acquires per second` (every shard
//!   costs its ownership renewals even when idle; a key is memory, a session is
//!   renewals, an acquire per second is two Raft writes per second); a cell's load is
//!   the sum over its shards;
//! - a target never takes more load than its capacity (its current shards count);
//! - shards are placed heaviest first, each on the target with the lowest utilization
//!   after taking it (`load / capacity`), ties by cell name — load spreads, and so do
//!   idle shards (a thousand empty shards split over the targets, they do not all go
//!   to the first cell by name);
//! - a namespace's fallback region, when the operator names one, comes first: its
//!   shards go to a cell there while one has room;
//! - waves hold at most `max_wave` moves, in `(namespace, shard)` order;
//! - the same input always gives the same plan.

use holdfast_core::{CellId, Epoch, NamespaceName, RegionId, ShardName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The persisted plan format's version (2: loads, not keys alone). A plan of version
/// 1 still reads: its missing fields are zero.
pub const PLAN_VERSION: u32 = 2;

/// A region's state in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionState {
    Active,
    Draining,
    Evacuated,
}

/// A region as the registry lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    pub region: RegionId,
    pub state: RegionState,
}

/// A cell, with its health as the harness judged it and its capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellInfo {
    pub cell: CellId,
    pub region: RegionId,
    pub healthy: bool,
    /// The most load this cell should carry across all its shards (see the module's
    /// rules for what a unit of load is).
    #[serde(alias = "capacity_keys")]
    pub capacity: u64,
}

/// A shard where it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlacement {
    pub ns: NamespaceName,
    pub shard: ShardName,
    pub region: RegionId,
    pub cell: CellId,
    pub epoch: Epoch,
    /// Keys held in the shard now (`lock_namespace_keys`).
    pub keys: u64,
    /// Sessions created in the shard, live now.
    #[serde(default)]
    pub sessions: u64,
    /// Grants per second, measured just before planning (rounded up).
    #[serde(default)]
    pub acquires_per_s: u64,
}

impl ShardPlacement {
    /// The shard's load (the module's rules).
    pub fn load(&self) -> u64 {
        1 + self.keys + self.sessions + self.acquires_per_s
    }
}

/// What to plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRequest {
    pub shards: Vec<ShardPlacement>,
    pub cells: Vec<CellInfo>,
    pub regions: Vec<RegionInfo>,
    pub evacuate: RegionId,
    /// The most shard moves in one wave (at least 1).
    pub max_wave: usize,
    /// The region each namespace falls back to: its shards go to a cell there when one
    /// has room, elsewhere only when none has.
    #[serde(default)]
    pub fallback: BTreeMap<NamespaceName, RegionId>,
}

/// Why there is no plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown region {0}")]
    UnknownRegion(RegionId),
    #[error("nothing to move: no shard is homed in {0}")]
    NothingToMove(RegionId),
    #[error("no healthy cell in another active region can take shards from {0}")]
    NoHealthyTarget(RegionId),
    #[error("not enough capacity: {needed} load to move, {available} free on healthy targets; {missing} missing")]
    NotEnoughCapacity { needed: u64, available: u64, missing: u64 },
    #[error("shard {ns}/{shard} has a load of {load} but the most free on one target is {largest_free}; {missing} missing")]
    ShardDoesNotFit { ns: NamespaceName, shard: ShardName, load: u64, largest_free: u64, missing: u64 },
    #[error("the wave size must be at least 1")]
    ZeroWaveSize,
}

/// Whether a plan empties a region or brings its shards home.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanKind {
    Evacuate,
    Rollback,
}

/// One shard's move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub ns: NamespaceName,
    pub shard: ShardName,
    pub keys: u64,
    /// The shard's load when planned.
    #[serde(default)]
    pub load: u64,
    /// The shard's epoch when planned: after the move it is strictly larger.
    pub epoch: Epoch,
    pub from_cell: CellId,
    pub from_region: RegionId,
    pub to_cell: CellId,
    pub to_region: RegionId,
}

/// Moves started together, after a health gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wave {
    pub index: usize,
    pub moves: Vec<Move>,
}

/// A cell's load and shard count before and after the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellLoad {
    pub cell: CellId,
    #[serde(alias = "before_keys")]
    pub before: u64,
    #[serde(alias = "after_keys")]
    pub after: u64,
    #[serde(alias = "capacity_keys")]
    pub capacity: u64,
    #[serde(default)]
    pub shards_before: u64,
    #[serde(default)]
    pub shards_after: u64,
}

/// What moves where, in which wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub version: u32,
    pub kind: PlanKind,
    /// The region being evacuated (for a rollback: the region its shards go back to).
    pub region: RegionId,
    pub max_wave: usize,
    pub waves: Vec<Wave>,
    /// Every cell that gains or loses shards.
    pub loads: Vec<CellLoad>,
}

/// Plans the evacuation of `req.evacuate`.
pub fn plan(req: &PlanRequest) -> Result<Plan, PlanError> {
    if req.max_wave == 0 {
        return Err(PlanError::ZeroWaveSize);
    }
    let state_of = |r: &RegionId| req.regions.iter().find(|x| &x.region == r).map(|x| x.state);
    if state_of(&req.evacuate).is_none() {
        return Err(PlanError::UnknownRegion(req.evacuate.clone()));
    }
    let mut to_move: Vec<&ShardPlacement> = req.shards.iter().filter(|s| s.region == req.evacuate).collect();
    if to_move.is_empty() {
        return Err(PlanError::NothingToMove(req.evacuate.clone()));
    }

    // Every cell's current load and shard count, from the shards it owns.
    let mut load: BTreeMap<&CellId, u64> = BTreeMap::new();
    let mut count: BTreeMap<&CellId, u64> = BTreeMap::new();
    for s in &req.shards {
        *load.entry(&s.cell).or_default() += s.load();
        *count.entry(&s.cell).or_default() += 1;
    }
    let targets: Vec<&CellInfo> =
        req.cells.iter().filter(|c| c.healthy && c.region != req.evacuate && state_of(&c.region) == Some(RegionState::Active)).collect();
    if targets.is_empty() {
        return Err(PlanError::NoHealthyTarget(req.evacuate.clone()));
    }
    let free = |c: &CellInfo, load: &BTreeMap<&CellId, u64>| c.capacity.saturating_sub(*load.get(&c.cell).unwrap_or(&0));
    let needed: u64 = to_move.iter().map(|s| s.load()).sum();
    let available: u64 = targets.iter().map(|c| free(c, &load)).sum();
    if needed > available {
        return Err(PlanError::NotEnoughCapacity { needed, available, missing: needed - available });
    }

    let (before, count_before) = (load.clone(), count.clone());
    // Heaviest first, then by name: the order decides the packing, so it is total.
    to_move.sort_by(|a, b| b.load().cmp(&a.load()).then_with(|| (&a.ns, &a.shard).cmp(&(&b.ns, &b.shard))));
    let mut moves = Vec::with_capacity(to_move.len());
    for s in to_move {
        let w = s.load();
        let preferred = req.fallback.get(&s.ns);
        let fits = |c: &&&CellInfo| free(c, &load) >= w;
        let in_fallback = |c: &&&CellInfo| preferred.is_some_and(|r| &c.region == r);
        let some_fallback_fits = targets.iter().filter(fits).any(|c| in_fallback(&c));
        let best = targets.iter().filter(fits).filter(|c| !some_fallback_fits || in_fallback(c)).min_by(|a, b| {
            // Utilization after taking the shard, compared without floats:
            // (la + w) / ca  vs  (lb + w) / cb.
            let ua = u128::from(load.get(&a.cell).copied().unwrap_or(0) + w) * u128::from(b.capacity);
            let ub = u128::from(load.get(&b.cell).copied().unwrap_or(0) + w) * u128::from(a.capacity);
            ua.cmp(&ub).then_with(|| a.cell.cmp(&b.cell))
        });
        let Some(target) = best else {
            let largest_free = targets.iter().map(|c| free(c, &load)).max().unwrap_or(0);
            return Err(PlanError::ShardDoesNotFit { ns: s.ns.clone(), shard: s.shard.clone(), load: w, largest_free, missing: w - largest_free });
        };
        *load.entry(&target.cell).or_default() += w;
        *load.entry(&s.cell).or_default() -= w;
        *count.entry(&target.cell).or_default() += 1;
        *count.entry(&s.cell).or_default() -= 1;
        moves.push(Move {
            ns: s.ns.clone(),
            shard: s.shard.clone(),
            keys: s.keys,
            load: w,
            epoch: s.epoch,
            from_cell: s.cell.clone(),
            from_region: s.region.clone(),
            to_cell: target.cell.clone(),
            to_region: target.region.clone(),
        });
    }
    moves.sort_by(|a, b| (&a.ns, &a.shard).cmp(&(&b.ns, &b.shard)));

    let capacity = |cell: &CellId| req.cells.iter().find(|c| &c.cell == cell).map_or(0, |c| c.capacity);
    let loads = count
        .iter()
        .filter(|(cell, n)| count_before.get(*cell) != Some(*n))
        .map(|(cell, n)| CellLoad {
            cell: (*cell).clone(),
            before: before.get(cell).copied().unwrap_or(0),
            after: load.get(cell).copied().unwrap_or(0),
            capacity: capacity(cell),
            shards_before: count_before.get(cell).copied().unwrap_or(0),
            shards_after: *n,
        })
        .collect();
    Ok(Plan {
        version: PLAN_VERSION,
        kind: PlanKind::Evacuate,
        region: req.evacuate.clone(),
        max_wave: req.max_wave,
        waves: into_waves(moves, req.max_wave),
        loads,
    })
}

fn into_waves(moves: Vec<Move>, max_wave: usize) -> Vec<Wave> {
    moves.chunks(max_wave).enumerate().map(|(index, chunk)| Wave { index, moves: chunk.to_vec() }).collect()
}

impl Plan {
    /// Every move, wave by wave.
    pub fn moves(&self) -> impl Iterator<Item = &Move> {
        self.waves.iter().flat_map(|w| w.moves.iter())
    }

    /// The reverse moves, last wave first: brings every shard of this plan home.
    /// The epochs are the planned ones, a lower bound (each move bumped them). Health
    /// and capacity are not re-checked — the shards came from there — and the registry
    /// takes moves only into an active region, so set the region active first.
    pub fn rollback(&self) -> Plan {
        let moves: Vec<Move> = self
            .waves
            .iter()
            .rev()
            .flat_map(|w| w.moves.iter().rev())
            .map(|m| Move {
                from_cell: m.to_cell.clone(),
                from_region: m.to_region.clone(),
                to_cell: m.from_cell.clone(),
                to_region: m.from_region.clone(),
                ..m.clone()
            })
            .collect();
        Plan {
            version: PLAN_VERSION,
            kind: match self.kind {
                PlanKind::Evacuate => PlanKind::Rollback,
                PlanKind::Rollback => PlanKind::Evacuate,
            },
            region: self.region.clone(),
            max_wave: self.max_wave,
            waves: into_waves(moves, self.max_wave),
            loads: self
                .loads
                .iter()
                .map(|l| CellLoad { before: l.after, after: l.before, shards_before: l.shards_after, shards_after: l.shards_before, ..l.clone() })
                .collect(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan serializes")
    }

    pub fn from_json(text: &str) -> Result<Plan, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// A Markdown summary an operator reviews before executing.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let what = match self.kind {
            PlanKind::Evacuate => "Evacuate",
            PlanKind::Rollback => "Roll back the evacuation of",
        };
        let shards = self.moves().count();
        let keys: u64 = self.moves().map(|m| m.keys).sum();
        let load: u64 = self.moves().map(|m| m.load).sum();
        let _ = writeln!(out, "# {what} {}\n", self.region);
        let _ = writeln!(out, "{shards} shards ({keys} keys, load {load}) in {} waves of at most {}.\n", self.waves.len(), self.max_wave);
        for w in &self.waves {
            let _ = writeln!(out, "## Wave {}\n", w.index);
            let _ = writeln!(out, "| shard | keys | load | epoch | from | to |\n|---|---:|---:|---:|---|---|");
            for m in &w.moves {
                let _ = writeln!(
                    out,
                    "| {}/{} | {} | {} | {} | {} ({}) | {} ({}) |",
                    m.ns, m.shard, m.keys, m.load, m.epoch.0, m.from_cell, m.from_region, m.to_cell, m.to_region
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "## Expected load per cell\n\n| cell | shards before | shards after | load before | load after | capacity |\n|---|---:|---:|---:|---:|---:|"
        );
        for l in &self.loads {
            let _ = writeln!(out, "| {} | {} | {} | {} | {} | {} |", l.cell, l.shards_before, l.shards_after, l.before, l.after, l.capacity);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, state: RegionState) -> RegionInfo {
        RegionInfo { region: RegionId::new(name).unwrap(), state }
    }
    fn cell(name: &str, region: &str, healthy: bool, capacity: u64) -> CellInfo {
        CellInfo { cell: CellId::new(name).unwrap(), region: RegionId::new(region).unwrap(), healthy, capacity }
    }
    fn shard(ns: &str, shard: &str, cell: &str, keys: u64) -> ShardPlacement {
        let region = cell.rsplit_once('-').unwrap().0;
        ShardPlacement {
            ns: NamespaceName::new(ns).unwrap(),
            shard: ShardName::new(shard).unwrap(),
            region: RegionId::new(region).unwrap(),
            cell: CellId::new(cell).unwrap(),
            epoch: Epoch(3),
            keys,
            sessions: 0,
            acquires_per_s: 0,
        }
    }

    /// Three regions; eu-west holds five shards; us-east and ap-south have room.
    fn request() -> PlanRequest {
        PlanRequest {
            shards: vec![
                shard("payments", "s0", "eu-west-1", 400),
                shard("payments", "s1", "eu-west-1", 300),
                shard("search", "default", "eu-west-2", 200),
                shard("orders", "s0", "eu-west-2", 100),
                shard("orders", "s1", "eu-west-2", 100),
                shard("billing", "default", "us-east-1", 500),
            ],
            cells: vec![
                cell("eu-west-1", "eu-west", true, 2000),
                cell("eu-west-2", "eu-west", true, 2000),
                cell("us-east-1", "us-east", true, 1000),
                cell("us-east-2", "us-east", false, 5000),
                cell("ap-south-1", "ap-south", true, 1000),
            ],
            regions: vec![region("eu-west", RegionState::Draining), region("us-east", RegionState::Active), region("ap-south", RegionState::Active)],
            evacuate: RegionId::new("eu-west").unwrap(),
            max_wave: 2,
            fallback: BTreeMap::new(),
        }
    }

    #[test]
    fn every_shard_moves_to_a_healthy_active_target_within_capacity() {
        let req = request();
        let p = plan(&req).unwrap();
        assert_eq!(p.moves().count(), 5);
        assert_eq!(p.waves.len(), 3);
        assert!(p.waves.iter().all(|w| w.moves.len() <= 2));
        for m in p.moves() {
            assert_ne!(m.to_region.as_str(), "eu-west");
            assert_ne!(m.to_cell.as_str(), "us-east-2", "unhealthy cells take nothing");
        }
        // Capacity: us-east-1 carries 501 of 1000 (billing's 500 keys and the shard
        // itself); ap-south-1 0 of 1000; 1105 load to place (five shards, 1100 keys).
        for l in &p.loads {
            assert!(l.after <= l.capacity || l.cell.as_str().starts_with("eu-west"), "{l:?}");
        }
        let after = |c: &str| p.loads.iter().find(|l| l.cell.as_str() == c).unwrap();
        assert_eq!(after("us-east-1").after + after("ap-south-1").after, 1606);
        assert_eq!(after("us-east-1").shards_after + after("ap-south-1").shards_after, 6);
        assert_eq!((after("eu-west-1").after, after("eu-west-1").shards_after), (0, 0));
        // Least-loaded first: the largest shard goes to the empty ap-south-1.
        let s0 = p.moves().find(|m| m.ns.as_str() == "payments" && m.shard.as_str() == "s0").unwrap();
        assert_eq!(s0.to_cell.as_str(), "ap-south-1");
        // Waves in (namespace, shard) order.
        let order: Vec<String> = p.moves().map(|m| format!("{}/{}", m.ns, m.shard)).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
    }

    #[test]
    fn the_plan_is_deterministic_whatever_the_input_order() {
        let req = request();
        let mut shuffled = req.clone();
        shuffled.shards.reverse();
        shuffled.cells.reverse();
        shuffled.regions.reverse();
        assert_eq!(plan(&req).unwrap(), plan(&shuffled).unwrap());
        assert_eq!(plan(&req).unwrap().to_json(), plan(&req).unwrap().to_json());
    }

    #[test]
    fn wave_size_limits_every_wave() {
        for max_wave in 1..=6 {
            let mut req = request();
            req.max_wave = max_wave;
            let p = plan(&req).unwrap();
            assert_eq!(p.waves.len(), 5usize.div_ceil(max_wave));
            assert!(p.waves.iter().all(|w| !w.moves.is_empty() && w.moves.len() <= max_wave));
            assert_eq!(p.waves.iter().map(|w| w.index).collect::<Vec<_>>(), (0..p.waves.len()).collect::<Vec<_>>());
        }
        let mut req = request();
        req.max_wave = 0;
        assert_eq!(plan(&req), Err(PlanError::ZeroWaveSize));
    }

    #[test]
    fn unknown_region_is_refused() {
        let mut req = request();
        req.evacuate = RegionId::new("mars").unwrap();
        assert_eq!(plan(&req), Err(PlanError::UnknownRegion(RegionId::new("mars").unwrap())));
    }

    #[test]
    fn nothing_to_move_is_refused() {
        let mut req = request();
        req.evacuate = RegionId::new("ap-south").unwrap();
        assert!(matches!(plan(&req), Err(PlanError::NothingToMove(_))));
    }

    #[test]
    fn not_enough_capacity_says_how_much_is_missing() {
        let mut req = request();
        req.cells[4].capacity = 300; // ap-south-1; us-east-1 has 499 free
        let err = plan(&req).unwrap_err();
        assert_eq!(err, PlanError::NotEnoughCapacity { needed: 1105, available: 799, missing: 306 });
        assert!(err.to_string().contains("306 missing"), "{err}");
    }

    #[test]
    fn a_shard_larger_than_any_free_space_is_refused() {
        let mut req = request();
        req.shards[0].keys = 700;
        req.shards[1].keys = 100;
        req.cells[4].capacity = 606; // ap-south-1: 606 free
        req.cells[2].capacity = 1107; // us-east-1: 606 free
                                      // Loads 701 + 101 + 201 + 101 + 101 = 1205 to move, 1212 free, no cell has 701.
        let err = plan(&req).unwrap_err();
        assert!(matches!(err, PlanError::ShardDoesNotFit { load: 701, largest_free: 606, missing: 95, .. }), "{err}");
    }

    #[test]
    fn no_healthy_target_is_refused() {
        let mut req = request();
        req.cells[2].healthy = false;
        req.cells[4].healthy = false;
        assert!(matches!(plan(&req), Err(PlanError::NoHealthyTarget(_))));
        // Healthy cells in a draining region are no targets either.
        let mut req = request();
        req.regions[1].state = RegionState::Draining;
        req.regions[2].state = RegionState::Evacuated;
        assert!(matches!(plan(&req), Err(PlanError::NoHealthyTarget(_))));
    }

    #[test]
    fn rollback_reverses_every_move_and_round_trips() {
        let p = plan(&request()).unwrap();
        let back = p.rollback();
        assert_eq!(back.kind, PlanKind::Rollback);
        assert_eq!(back.moves().count(), p.moves().count());
        for m in back.moves() {
            assert!(m.to_region.as_str() == "eu-west" && m.from_region.as_str() != "eu-west");
            let orig = p.moves().find(|o| o.ns == m.ns && o.shard == m.shard).unwrap();
            assert_eq!((&orig.from_cell, &orig.to_cell), (&m.to_cell, &m.from_cell));
        }
        assert!(back.waves.iter().all(|w| w.moves.len() <= p.max_wave));
        // Rolling back a rollback gives the original moves back.
        let twice = back.rollback();
        assert_eq!(twice.kind, PlanKind::Evacuate);
        assert_eq!(twice.moves().collect::<Vec<_>>(), p.moves().collect::<Vec<_>>());
        assert_eq!(Plan::from_json(&p.to_json()).unwrap(), p);
    }

    #[test]
    fn markdown_lists_every_wave_and_move() {
        let p = plan(&request()).unwrap();
        let md = p.to_markdown();
        assert!(md.starts_with("# Evacuate eu-west"), "{md}");
        assert_eq!(md.matches("## Wave ").count(), 3, "{md}");
        assert!(md.contains("| payments/s0 | 400 | 401 | 3 | eu-west-1 (eu-west) | ap-south-1 (ap-south) |"), "{md}");
        assert!(md.contains("| ap-south-1 | 0 | "), "the expected load of every target: {md}");
    }

    /// Measured on the playground before loads: 1,001 idle shards of region east all
    /// went to south-1 (the first target by name), none to west-1, because the planner
    /// weighed keys only. Every shard now weighs at least one.
    #[test]
    fn idle_shards_spread_over_the_targets() {
        let shards = (0..1001).map(|i| shard("bulk", &format!("s{i}"), "east-1", 0)).collect();
        let req = PlanRequest {
            shards,
            cells: vec![cell("east-1", "east", true, 10_000), cell("south-1", "south", true, 10_000), cell("west-1", "west", true, 10_000)],
            regions: vec![region("east", RegionState::Draining), region("south", RegionState::Active), region("west", RegionState::Active)],
            evacuate: RegionId::new("east").unwrap(),
            max_wave: 100,
            fallback: BTreeMap::new(),
        };
        let p = plan(&req).unwrap();
        let to = |c: &str| p.moves().filter(|m| m.to_cell.as_str() == c).count();
        assert_eq!((to("south-1"), to("west-1")), (501, 500));
        assert_eq!(p.waves.len(), 11);
    }

    /// A namespace's fallback region comes first while a cell there has room, even
    /// when a cell elsewhere is emptier; without room there, anywhere will do.
    #[test]
    fn a_namespaces_fallback_region_is_preferred_while_it_has_room() {
        let shards = vec![shard("pay", "a", "east-1", 10), shard("pay", "b", "east-1", 10), shard("web", "c", "east-1", 10)];
        let mut req = PlanRequest {
            shards,
            cells: vec![cell("east-1", "east", true, 1000), cell("south-1", "south", true, 1000), cell("west-1", "west", true, 15)],
            regions: vec![region("east", RegionState::Draining), region("south", RegionState::Active), region("west", RegionState::Active)],
            evacuate: RegionId::new("east").unwrap(),
            max_wave: 10,
            fallback: BTreeMap::from([(NamespaceName::new("pay").unwrap(), RegionId::new("west").unwrap())]),
        };
        let p = plan(&req).unwrap();
        let target = |shard: &str| p.moves().find(|m| m.shard.as_str() == shard).unwrap().to_cell.to_string();
        // west-1 (capacity 15) takes one pay shard of load 11; the other does not fit
        // there and goes to south-1; web has no fallback and goes by utilization.
        assert_eq!([target("a"), target("b"), target("c")], ["west-1", "south-1", "south-1"]);
        req.fallback.clear();
        let p = plan(&req).unwrap();
        assert!(p.moves().all(|m| m.to_cell.as_str() == "south-1"), "without a fallback the emptier south-1 wins: {p:?}");
    }

    /// Sessions and the acquire rate weigh like keys: two shards without keys, one
    /// with a thousand sessions and one with 500 grants a second, go to different
    /// cells, and the busier cell's existing load decides who gets what.
    #[test]
    fn sessions_and_acquire_rate_count_as_load() {
        let mut busy = shard("api", "sessions", "east-1", 0);
        busy.sessions = 1000;
        let mut hot = shard("api", "hot", "east-1", 0);
        hot.acquires_per_s = 500;
        assert_eq!((busy.load(), hot.load()), (1001, 501));
        let req = PlanRequest {
            shards: vec![busy, hot, shard("other", "default", "south-1", 200)],
            cells: vec![cell("east-1", "east", true, 10_000), cell("south-1", "south", true, 10_000), cell("west-1", "west", true, 10_000)],
            regions: vec![region("east", RegionState::Draining), region("south", RegionState::Active), region("west", RegionState::Active)],
            evacuate: RegionId::new("east").unwrap(),
            max_wave: 10,
            fallback: BTreeMap::new(),
        };
        let p = plan(&req).unwrap();
        let target = |shard: &str| p.moves().find(|m| m.shard.as_str() == shard).unwrap().to_cell.to_string();
        // The heaviest first, to the emptiest: west-1; then the hot one: south-1
        // (201 + 501) beats west-1 (1001 + 501).
        assert_eq!((target("sessions").as_str(), target("hot").as_str()), ("west-1", "south-1"));
    }
}
