//! The evacuation state machine against a model registry: the happy path, an abort
//! mid-wave, a crash and resume, and failed moves. The model registry keeps exactly
//! one owner per shard, like the real one; the tests check that the machine never asks
//! to move a shard twice after an abort, and that every shard ends with one owner.

use holdfast_core::{CellId, Epoch, NamespaceName, RegionId, ShardName};
use holdfast_drills::evacuation::{verify_owners, Action, Evacuation, Input, OwnerView, Phase, ShardState, MAX_ATTEMPTS};
use holdfast_drills::plan::{plan, CellInfo, Plan, PlanRequest, RegionInfo, RegionState, ShardPlacement};
use std::collections::BTreeMap;

type Key = (NamespaceName, ShardName);

fn key(ns: &str, shard: &str) -> Key {
    (NamespaceName::new(ns).unwrap(), ShardName::new(shard).unwrap())
}

fn region_of(cell: &CellId) -> RegionId {
    RegionId::new(cell.as_str().rsplit_once('-').unwrap().0).unwrap()
}

/// Five shards in eu-west, waves of two.
fn the_plan() -> Plan {
    let cell = |c: &str, cap| CellInfo { cell: CellId::new(c).unwrap(), region: region_of(&CellId::new(c).unwrap()), healthy: true, capacity: cap };
    let shard = |ns: &str, s: &str, c: &str, keys| {
        let (ns, shard) = key(ns, s);
        let cell = CellId::new(c).unwrap();
        ShardPlacement { ns, shard, region: region_of(&cell), cell, epoch: Epoch(4), keys, sessions: 0, acquires_per_s: 0 }
    };
    let region = |r: &str, state| RegionInfo { region: RegionId::new(r).unwrap(), state };
    plan(&PlanRequest {
        shards: vec![
            shard("payments", "s0", "eu-west-1", 40),
            shard("payments", "s1", "eu-west-1", 30),
            shard("search", "default", "eu-west-2", 20),
            shard("orders", "s0", "eu-west-2", 10),
            shard("orders", "s1", "eu-west-2", 10),
        ],
        cells: vec![cell("eu-west-1", 1000), cell("eu-west-2", 1000), cell("us-east-1", 100), cell("ap-south-1", 100)],
        regions: vec![region("eu-west", RegionState::Draining), region("us-east", RegionState::Active), region("ap-south", RegionState::Active)],
        evacuate: RegionId::new("eu-west").unwrap(),
        max_wave: 2,
        fallback: BTreeMap::new(),
    })
    .unwrap()
}

/// A model registry: one owner per shard, planned moves that complete when told.
struct Registry {
    owners: BTreeMap<Key, OwnerView>,
    /// Complete every move as soon as it is sent.
    eager: bool,
    /// Drop MoveShard requests on the floor (a lost request).
    deaf: bool,
    /// Refuse MoveShard for this shard definitively.
    refuse: Option<Key>,
}

impl Registry {
    fn new(plan: &Plan) -> Registry {
        let owners = plan
            .moves()
            .map(|m| {
                let v = OwnerView {
                    ns: m.ns.clone(),
                    shard: m.shard.clone(),
                    region: m.from_region.clone(),
                    cell: m.from_cell.clone(),
                    epoch: m.epoch,
                    moving_to: None,
                };
                ((m.ns.clone(), m.shard.clone()), v)
            })
            .collect();
        Registry { owners, eager: true, deaf: false, refuse: None }
    }

    fn owner(&self, k: &Key) -> Input {
        Input::Owner(self.owners[k].clone())
    }

    fn complete(&mut self, k: &Key) -> Input {
        let o = self.owners.get_mut(k).unwrap();
        let to = o.moving_to.take().expect("a move to complete");
        o.region = region_of(&to);
        o.cell = to;
        o.epoch = Epoch(o.epoch.0 + 1);
        self.owner(k)
    }

    /// Performs one action; returns what the runtime would feed back.
    fn perform(&mut self, a: &Action, plan: &Plan) -> Vec<Input> {
        match a {
            Action::WaitHealthy { .. } => vec![Input::Healthy { healthy: true }],
            Action::MoveShard { ns, shard, to_cell } => {
                let k = (ns.clone(), shard.clone());
                if self.refuse.as_ref() == Some(&k) {
                    return vec![Input::MoveRefused { ns: ns.clone(), shard: shard.clone(), reason: "INVALID_ARGUMENT".into() }];
                }
                if self.deaf {
                    return vec![self.owner(&k)];
                }
                let o = self.owners.get_mut(&k).unwrap();
                assert_ne!(&o.cell, to_cell, "a move of a shard already at its target");
                if o.moving_to.is_none() {
                    o.moving_to = Some(to_cell.clone());
                }
                if self.eager {
                    vec![self.complete(&k)]
                } else {
                    vec![self.owner(&k)]
                }
            }
            Action::AbortMove { ns, shard, epoch } => {
                let k = (ns.clone(), shard.clone());
                let o = self.owners.get_mut(&k).unwrap();
                if o.moving_to.is_some() && o.epoch == *epoch {
                    o.moving_to = None;
                }
                vec![self.owner(&k)]
            }
            Action::ObserveOwners { shards } => shards.iter().map(|k| self.owner(k)).collect(),
            Action::Verify => {
                let owners: Vec<OwnerView> = self.owners.values().cloned().collect();
                vec![Input::Verified { problems: verify_owners(plan, &owners) }]
            }
        }
    }
}

/// Runs actions to quiescence, logging every action.
fn drive(ev: &mut Evacuation, reg: &mut Registry, mut actions: Vec<Action>, log: &mut Vec<Action>) {
    let plan = ev.progress().plan.clone();
    while !actions.is_empty() {
        let a = actions.remove(0);
        log.push(a.clone());
        for input in reg.perform(&a, &plan) {
            actions.extend(ev.step(input));
        }
    }
}

fn moves_of(log: &[Action]) -> BTreeMap<Key, usize> {
    let mut n = BTreeMap::new();
    for a in log {
        if let Action::MoveShard { ns, shard, .. } = a {
            *n.entry((ns.clone(), shard.clone())).or_default() += 1;
        }
    }
    n
}

/// The plan, an evacuation of it, a model registry (set up by `setup`) and the log of
/// actions, after `Start` was driven to quiescence.
fn started(setup: impl FnOnce(&Plan, &mut Registry)) -> (Plan, Evacuation, Registry, Vec<Action>) {
    let plan = the_plan();
    let mut ev = Evacuation::new(plan.clone());
    let mut reg = Registry::new(&plan);
    setup(&plan, &mut reg);
    let mut log = Vec::new();
    let a = ev.step(Input::Start);
    drive(&mut ev, &mut reg, a, &mut log);
    (plan, ev, reg, log)
}

#[test]
fn happy_path_moves_every_shard_once_wave_by_wave() {
    let plan = the_plan();
    let mut ev = Evacuation::new(plan.clone());
    let mut reg = Registry::new(&plan);
    let mut log = Vec::new();
    let first = ev.step(Input::Start);
    assert_eq!(first, vec![Action::WaitHealthy { wave: 0 }]);
    drive(&mut ev, &mut reg, first, &mut log);
    assert_eq!(ev.phase(), &Phase::Done);
    assert!(ev.succeeded(), "{}", ev.to_json());
    assert!(moves_of(&log).values().all(|&n| n == 1));
    assert_eq!(moves_of(&log).len(), 5);
    assert_eq!(log.iter().filter(|a| matches!(a, Action::WaitHealthy { .. })).count(), 3);
    // Moves of a wave are sent only after its gate, and never before the previous
    // wave's shards are all moved.
    let gates: Vec<usize> = log.iter().enumerate().filter(|(_, a)| matches!(a, Action::WaitHealthy { .. })).map(|(i, _)| i).collect();
    for (w, wave) in plan.waves.iter().enumerate() {
        for m in &wave.moves {
            let at = log.iter().position(|a| matches!(a, Action::MoveShard { ns, shard, .. } if *ns == m.ns && *shard == m.shard)).unwrap();
            assert!(at > gates[w] && gates.get(w + 1).is_none_or(|&next| at < next), "{m:?} at {at}, gates {gates:?}");
        }
    }
    for o in reg.owners.values() {
        assert_ne!(o.region.as_str(), "eu-west");
        assert_eq!(o.epoch, Epoch(5));
    }
    // Steps after Done change nothing.
    assert!(ev.step(Input::Start).is_empty());
    assert!(ev.step(Input::Abort { reason: "late".into() }).is_empty());
    assert_eq!(ev.phase(), &Phase::Done);
}

#[test]
fn a_health_gate_that_fails_holds_the_wave() {
    let plan = the_plan();
    let mut ev = Evacuation::new(plan);
    ev.step(Input::Start);
    assert!(ev.step(Input::Healthy { healthy: false }).is_empty());
    assert!(ev.progress().shards.iter().all(|s| s.state == ShardState::Pending));
    let moves = ev.step(Input::Healthy { healthy: true });
    assert_eq!(moves.len(), 2);
    // A repeated "healthy" does not send the wave again.
    assert!(ev.step(Input::Healthy { healthy: true }).is_empty());
}

#[test]
fn abort_mid_wave_never_moves_a_shard_twice_and_leaves_one_owner_each() {
    let (plan, mut ev, mut reg, mut log) = started(|_, r| r.eager = false);
    // Wave 0 is in flight: two moves sent, none complete. One completes now.
    let wave0: Vec<Key> = plan.waves[0].moves.iter().map(|m| (m.ns.clone(), m.shard.clone())).collect();
    assert_eq!(moves_of(&log).len(), 2);
    let done = reg.complete(&wave0[0]);
    let a = ev.step(done);
    assert!(a.is_empty(), "{a:?}");

    let a = ev.step(Input::Abort { reason: "operator".into() });
    assert!(matches!(ev.phase(), Phase::Aborted { .. }));
    assert!(!a.iter().any(|x| matches!(x, Action::MoveShard { .. })), "{a:?}");
    assert_eq!(a.iter().filter(|x| matches!(x, Action::AbortMove { .. })).count(), 1, "only the shard still in flight is aborted: {a:?}");
    drive(&mut ev, &mut reg, a, &mut log);

    // Whatever comes in afterwards, nothing moves again.
    let mut later = vec![ev.step(Input::Start), ev.step(Input::Healthy { healthy: true })];
    for k in reg.owners.keys().cloned().collect::<Vec<_>>() {
        later.push(ev.step(reg.owner(&k)));
    }
    assert!(later.iter().flatten().all(|x| !matches!(x, Action::MoveShard { .. })), "{later:?}");
    assert!(moves_of(&log).values().all(|&n| n == 1), "{log:?}");

    assert!(ev.settled());
    let state = |k: &Key| ev.progress().shards.iter().find(|s| s.ns == k.0 && s.shard == k.1).unwrap().state.clone();
    assert_eq!(state(&wave0[0]), ShardState::Moved { epoch: Epoch(5) });
    assert_eq!(state(&wave0[1]), ShardState::Pending);
    for o in reg.owners.values() {
        assert!(o.moving_to.is_none(), "{o:?}");
    }
    let home = &reg.owners[&wave0[1]];
    assert_eq!(home.region.as_str(), "eu-west");
    assert_eq!(home.epoch, Epoch(4));
}

#[test]
fn resume_after_a_crash_mid_wave_finishes() {
    let (plan, ev, _, _) = started(|_, _| {}); // runs to Done with an eager registry...
    assert!(ev.succeeded());

    // ...so replay with a crash instead: wave 0 done, wave 1 gated, its two moves
    // recorded but the process dies while sending them: one reached the registry and
    // completed, one never left.
    let mut ev = Evacuation::new(plan.clone());
    let mut reg = Registry::new(&plan);
    let mut log = Vec::new();
    let a = ev.step(Input::Start);
    let wave1: Vec<Key> = plan.waves[1].moves.iter().map(|m| (m.ns.clone(), m.shard.clone())).collect();
    // Drive only until the gate of wave 1 returns its moves.
    let mut pending = a;
    let sent = loop {
        let a = pending.remove(0);
        log.push(a.clone());
        let inputs = reg.perform(&a, &plan);
        let mut next = Vec::new();
        for i in inputs {
            next.extend(ev.step(i));
        }
        if ev.phase() == &(Phase::Executing { wave: 1 }) && next.iter().any(|x| matches!(x, Action::MoveShard { .. })) {
            break next;
        }
        pending.extend(next);
    };
    let saved = ev.to_json(); // persisted before performing `sent`
    assert_eq!(sent.len(), 2);
    let first = sent.iter().find(|x| matches!(x, Action::MoveShard { ns, shard, .. } if (ns.clone(), shard.clone()) == wave1[0])).unwrap();
    reg.perform(first, &plan); // reached the registry and completed; the answer is lost
    drop(ev);

    let (mut ev, actions) = Evacuation::resume(Evacuation::progress_from_json(&saved).unwrap());
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(matches!(&actions[0], Action::ObserveOwners { shards } if shards.len() == 2));
    let mut log2 = Vec::new();
    drive(&mut ev, &mut reg, actions, &mut log2);
    assert!(ev.succeeded(), "{}", ev.to_json());
    // The completed shard was recognized, not moved again; the lost one was retried.
    let m2 = moves_of(&log2);
    assert_eq!(m2.get(&wave1[0]), None);
    assert_eq!(m2.get(&wave1[1]), Some(&1));
    let s = ev.progress().shards.iter().find(|s| (s.ns.clone(), s.shard.clone()) == wave1[1]).unwrap();
    assert_eq!(s.state, ShardState::Moved { epoch: Epoch(5) });
}

#[test]
fn resume_waits_on_a_move_in_flight() {
    let (plan, ev, mut reg, _) = started(|_, r| r.eager = false);
    let saved = ev.to_json();
    let (mut ev, actions) = Evacuation::resume(Evacuation::progress_from_json(&saved).unwrap());
    let mut log2 = Vec::new();
    drive(&mut ev, &mut reg, actions, &mut log2);
    assert!(moves_of(&log2).is_empty(), "moves in flight are waited on: {log2:?}");
    reg.eager = true;
    let wave0: Vec<Key> = plan.waves[0].moves.iter().map(|m| (m.ns.clone(), m.shard.clone())).collect();
    for k in &wave0 {
        let input = reg.complete(k);
        let a = ev.step(input);
        drive(&mut ev, &mut reg, a, &mut log2);
    }
    assert!(ev.succeeded(), "{}", ev.to_json());
}

#[test]
fn a_refused_move_fails_its_shard_which_stays_home_with_one_owner() {
    let (plan, ev, reg, log) = started(|plan, r| r.refuse = Some((plan.waves[1].moves[0].ns.clone(), plan.waves[1].moves[0].shard.clone())));
    let refused = reg.refuse.clone().unwrap();
    assert!(matches!(ev.phase(), Phase::Aborted { reason } if reason.contains("wave 1")), "{:?}", ev.phase());
    let s = ev.progress().shards.iter().find(|s| (s.ns.clone(), s.shard.clone()) == refused).unwrap();
    assert!(matches!(s.state, ShardState::Failed { .. }));
    let o = &reg.owners[&refused];
    assert_eq!((o.cell.as_str(), o.epoch, o.moving_to.is_none()), (s.from_cell.as_str(), Epoch(4), true));
    // Wave 2 never started.
    for m in &plan.waves[2].moves {
        assert_eq!(moves_of(&log).get(&(m.ns.clone(), m.shard.clone())), None);
    }
    assert!(ev.settled());
}

#[test]
fn a_move_that_never_takes_is_retried_then_failed() {
    let (plan, ev, reg, log) = started(|_, r| r.deaf = true);
    assert!(matches!(ev.phase(), Phase::Aborted { .. }));
    for m in &plan.waves[0].moves {
        assert_eq!(moves_of(&log)[&(m.ns.clone(), m.shard.clone())], MAX_ATTEMPTS as usize);
    }
    assert!(reg.owners.values().all(|o| o.region.as_str() == "eu-west" && o.moving_to.is_none()));
}

#[test]
fn resume_after_abort_re_sends_the_aborts() {
    let (_, mut ev, mut reg, mut log) = started(|_, r| r.eager = false);
    let aborts = ev.step(Input::Abort { reason: "crash before the aborts were sent".into() });
    assert_eq!(aborts.iter().filter(|x| matches!(x, Action::AbortMove { .. })).count(), 2);
    let (mut ev, actions) = Evacuation::resume(Evacuation::progress_from_json(&ev.to_json()).unwrap());
    assert_eq!(actions.iter().filter(|x| matches!(x, Action::AbortMove { .. })).count(), 2);
    drive(&mut ev, &mut reg, actions, &mut log);
    assert!(ev.settled());
    assert!(reg.owners.values().all(|o| o.region.as_str() == "eu-west" && o.moving_to.is_none()));
    assert!(moves_of(&log).values().all(|&n| n == 1));
}

#[test]
fn verification_reports_what_is_left_behind() {
    let plan = the_plan();
    let reg = Registry::new(&plan);
    let owners: Vec<OwnerView> = reg.owners.values().cloned().collect();
    let problems = verify_owners(&plan, &owners);
    // Each of the five is not at its target, and each is still homed in eu-west.
    assert_eq!(problems.len(), 10, "{problems:#?}");
}
