//! Property tests: random command sequences against the registry, checking after every
//! step the invariants that placement depends on.

mod common;

use common::*;
use holdfast_core::{Epoch, FencingToken, Revision, ShardKey};
use holdfast_registry_state::{Applied, Command, Entry, RegionState, RegistryState, ShardState};
use proptest::prelude::*;
use std::collections::BTreeMap;

const REGIONS: [&str; 3] = ["east", "west", "south"];
const CELLS: [(&str, usize); 4] = [("east-1", 0), ("west-1", 1), ("west-2", 1), ("south-1", 2)];
const NAMESPACES: [&str; 2] = ["pay", "search"];
const SHARDS: [&str; 2] = ["default", "s1"];

#[derive(Debug, Clone)]
enum Op {
    CreateRegion(usize),
    SetRegion(usize, u8),
    Register(usize),
    CreateNs(usize, bool),
    UpdateNs(usize, u64, bool),
    Place(usize, usize, usize),
    Begin(usize, usize, usize, bool),
    /// Seal at the current epoch (or a stale one when `stale`).
    Seal(usize, usize, u64, bool),
    Complete(usize, usize, bool),
    Abort(usize, usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let r = 0..REGIONS.len();
    let c = 0..CELLS.len();
    let n = 0..NAMESPACES.len();
    let s = 0..SHARDS.len();
    prop_oneof![
        2 => r.clone().prop_map(Op::CreateRegion),
        1 => (r.clone(), 0u8..3).prop_map(|(r, st)| Op::SetRegion(r, st)),
        2 => c.clone().prop_map(Op::Register),
        2 => (n.clone(), any::<bool>()).prop_map(|(n, bad)| Op::CreateNs(n, bad)),
        1 => (n.clone(), 0u64..4, any::<bool>()).prop_map(|(n, v, bad)| Op::UpdateNs(n, v, bad)),
        3 => (n.clone(), s.clone(), c.clone()).prop_map(|(n, s, c)| Op::Place(n, s, c)),
        4 => (n.clone(), s.clone(), c, any::<bool>()).prop_map(|(n, s, c, p)| Op::Begin(n, s, c, p)),
        3 => (n.clone(), s.clone(), 0u64..100, prop::bool::weighted(0.2)).prop_map(|(n, s, h, st)| Op::Seal(n, s, h, st)),
        3 => (n.clone(), s.clone(), prop::bool::weighted(0.2)).prop_map(|(n, s, st)| Op::Complete(n, s, st)),
        1 => (n, s, prop::bool::weighted(0.2)).prop_map(|(n, s, st)| Op::Abort(n, s, st)),
    ]
}

/// The epoch a command names: the shard's current one, or one before it when `stale`.
fn epoch_of(st: &RegistryState, k: &ShardKey, stale: bool) -> Epoch {
    let e = st.get_owner(k).map_or(Epoch(1), |r| r.epoch);
    if stale {
        Epoch(e.0.saturating_sub(1))
    } else {
        e
    }
}

fn command(st: &RegistryState, op: &Op) -> Command {
    let k = |n: usize, s: usize| key(NAMESPACES[n], SHARDS[s]);
    match op {
        Op::CreateRegion(r) => Command::CreateRegion { region: region(REGIONS[*r]) },
        Op::SetRegion(r, s) => {
            Command::SetRegionState { region: region(REGIONS[*r]), state: [RegionState::Active, RegionState::Draining, RegionState::Evacuated][*s as usize] }
        }
        Op::Register(c) => {
            let (name, r) = CELLS[*c];
            Command::RegisterCell { cell: cell(name), region: region(REGIONS[r]), members: members(3) }
        }
        Op::CreateNs(n, bad) => {
            let mut cfg = ns_config(NAMESPACES[*n]);
            if *bad {
                cfg.ttl_min_ms = cfg.ttl_max_ms + 1;
            }
            Command::CreateNamespace { config: cfg }
        }
        Op::UpdateNs(n, v, bad) => {
            let mut cfg = ns_config(NAMESPACES[*n]);
            cfg.lock_delay_ms = 1_000 + v;
            if *bad {
                cfg.ttl_min_ms = cfg.ttl_max_ms + 1;
            }
            Command::UpdateNamespace { config: cfg, expected_version: *v }
        }
        Op::Place(n, s, c) => Command::PlaceShard { shard: k(*n, *s), cell: cell(CELLS[*c].0) },
        Op::Begin(n, s, c, planned) => Command::BeginMove { shard: k(*n, *s), to_cell: cell(CELLS[*c].0), planned: *planned },
        Op::Seal(n, s, h, stale) => {
            Command::Sealed { shard: k(*n, *s), epoch: epoch_of(st, &k(*n, *s), *stale), highest: Some(FencingToken(*h)), held_locks: vec![] }
        }
        Op::Complete(n, s, stale) => Command::CompleteMove { shard: k(*n, *s), epoch: epoch_of(st, &k(*n, *s), *stale) },
        Op::Abort(n, s, stale) => Command::AbortMove { shard: k(*n, *s), epoch: epoch_of(st, &k(*n, *s), *stale) },
    }
}

/// Invariants of one state.
fn check_state(st: &RegistryState) -> Result<(), TestCaseError> {
    let mut listed: BTreeMap<ShardKey, usize> = BTreeMap::new();
    for (c, _) in st.cells() {
        for owned in st.shards_of_cell(c) {
            *listed.entry(owned.shard.clone()).or_default() += 1;
            let r = st.get_owner(&owned.shard).unwrap();
            prop_assert_eq!(&r.cell, c, "a cell is renewed a shard it does not own");
            prop_assert_eq!(owned.epoch, r.epoch);
        }
    }
    for (k, r) in st.list_shards() {
        let owner = st.cell(&r.cell);
        prop_assert!(owner.is_some(), "shard {} owned by unknown cell {}", k, r.cell);
        prop_assert_eq!(&owner.unwrap().region, &r.region, "home region is not the owner's region");
        prop_assert!(r.epoch >= Epoch(1));
        prop_assert_ne!(st.region(&r.region), Some(RegionState::Evacuated), "an evacuated region owns {}", k);
        let expected = match &r.state {
            ShardState::Moving(m) if !m.planned => 0,
            _ => 1,
        };
        prop_assert_eq!(listed.get(k).copied().unwrap_or(0), expected, "shard {} listed to the wrong number of cells", k);
        if let ShardState::Moving(m) = &r.state {
            prop_assert_ne!(&m.to_cell, &r.cell);
        }
    }
    Ok(())
}

fn epochs(st: &RegistryState) -> BTreeMap<ShardKey, Epoch> {
    st.list_shards().map(|(k, r)| (k.clone(), r.epoch)).collect()
}

/// Runs `ops` from `st`, checking every step; returns every apply's output.
fn run(st: &mut RegistryState, ops: &[Op]) -> Result<Vec<Applied>, TestCaseError> {
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let before = st.clone();
        let before_epochs = epochs(st);
        let cmd = command(st, op);
        let applied = st.apply(&Entry::new(i as u64, cmd.clone()));
        match &applied.result {
            Err(e) => {
                prop_assert_eq!(&*st, &before, "refused {:?} ({}) changed the state", cmd, e);
                prop_assert!(applied.events.is_empty());
            }
            Ok(_) => {
                let mut rev = before.revision();
                for ev in &applied.events {
                    prop_assert_eq!(ev.revision, Revision(rev.0 + 1), "revisions must increase by one");
                    rev = ev.revision;
                    prop_assert_eq!(&ev.record, st.get_owner(&ev.shard).unwrap(), "event does not show the record");
                }
                prop_assert_eq!(st.revision(), rev);
            }
        }
        for (k, e) in before_epochs {
            let now = st.get_owner(&k).unwrap().epoch;
            prop_assert!(now >= e, "epoch of {} went back from {} to {}", k, e, now);
            prop_assert!(now.0 <= e.0 + 1, "epoch of {} jumped from {} to {}", k, e, now);
        }
        check_state(st)?;
        out.push(applied);
    }
    Ok(out)
}

/// Regions, cells and namespaces up front, so most random ops reach placement and
/// transfers instead of being refused for missing topology.
fn with_setup(ops: Vec<Op>) -> Vec<Op> {
    let mut all: Vec<Op> = (0..REGIONS.len()).map(Op::CreateRegion).collect();
    all.extend((0..CELLS.len()).map(Op::Register));
    all.extend((0..NAMESPACES.len()).map(|n| Op::CreateNs(n, false)));
    all.extend(ops);
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_commands_keep_the_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let ops = with_setup(ops);
        let mut st = RegistryState::new();
        run(&mut st, &ops)?;
        // The whole event history is in order.
        let all = st.events_after(Revision(0)).unwrap();
        prop_assert!(all.windows(2).all(|w| w[0].revision < w[1].revision));
        prop_assert_eq!(all.last().map_or(Revision(0), |e| e.revision), st.revision());
    }

    #[test]
    fn snapshot_restore_continue_equals_continuing(ops in prop::collection::vec(op(), 1..120), split in 0usize..120) {
        let ops = with_setup(ops);
        let split = split.min(ops.len());
        let mut st = RegistryState::new();
        run(&mut st, &ops[..split])?;
        let mut restored = RegistryState::restore(&st.snapshot()).unwrap();
        prop_assert_eq!(&restored, &st);
        let a = run(&mut st, &ops[split..])?;
        let b = run(&mut restored, &ops[split..])?;
        prop_assert_eq!(a, b);
        prop_assert_eq!(restored, st);
    }
}
