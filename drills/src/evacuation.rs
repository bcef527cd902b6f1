//! The evacuation as an explicit state machine, pure like openraft's engine: it takes
//! [`Input`]s (what the runtime observed) and returns [`Action`]s (what the runtime
//! should do next), and never performs I/O.
//!
//! ```text
//! Planned ──Start──▶ Executing{0} ──gate, moves──▶ Executing{1} … ──▶ Verifying ──▶ Done
//!    │                    │
//!    └──────Abort─────────┴──▶ Aborted   (also: a wave that ends with a failed shard)
//! ```
//!
//! Per shard: `Pending → Moving → Moved{epoch}` or `Failed`. Each wave opens with a
//! health gate (`WaitHealthy`); its moves are sent together; the next wave starts only
//! when every shard of this one is `Moved` or `Failed`, and a wave with a failure
//! aborts the evacuation.
//!
//! **Persistence.** [`Progress`] is the whole state, as versioned JSON. The runtime
//! saves it *after every step and before performing the returned actions*, so a
//! crash can lose an action but never a record of one. [`Evacuation::resume`]
//! reloads it and re-observes the owners of every shard in flight: a shard already at
//! its target with a higher epoch is `Moved`, one still at its source and not moving is
//! retried, one moving is waited on. The registry makes a repeated `MoveShard` safe: a
//! shard already moving is refused (`MOVING`).
//!
//! **Abort** sends no further moves: every shard in flight gets an `AbortMove` at the
//! epoch last seen (the registry refuses it if the move already completed), and then
//! ends either home or at its target — one owner either way.

use crate::plan::{Move, Plan};
use holdfast_core::{CellId, Epoch, NamespaceName, RegionId, ShardName};
use serde::{Deserialize, Serialize};

/// The persisted progress format's version.
pub const PROGRESS_VERSION: u32 = 1;
/// How many times a move is sent before its shard counts as failed.
pub const MAX_ATTEMPTS: u32 = 3;

/// Where the evacuation is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    Planned,
    Executing { wave: usize },
    Verifying,
    Done,
    Aborted { reason: String },
}

/// Where one shard is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ShardState {
    /// Not yet sent (or, after an abort, back home).
    Pending,
    /// `MoveShard` was (or was about to be) sent `attempts` times.
    Moving { attempts: u32 },
    /// At its target at this epoch.
    Moved { epoch: Epoch },
    /// Not moving any more; it has one owner, whichever the last observation says.
    Failed { reason: String },
}

impl ShardState {
    fn is_terminal(&self) -> bool {
        matches!(self, ShardState::Moved { .. } | ShardState::Failed { .. })
    }
}

/// One shard of the plan and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardProgress {
    pub ns: NamespaceName,
    pub shard: ShardName,
    pub wave: usize,
    pub from_cell: CellId,
    pub to_cell: CellId,
    /// The planned epoch: the move succeeded when the target owns a larger one.
    pub planned_epoch: Epoch,
    /// The epoch last seen at the source (an aborted, sealed move bumps it there).
    pub source_epoch: Epoch,
    pub state: ShardState,
}

/// Everything the evacuation knows; saved as JSON after every step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub version: u32,
    pub plan: Plan,
    pub phase: Phase,
    /// The current wave passed its health gate (its moves were sent).
    pub gate_passed: bool,
    pub shards: Vec<ShardProgress>,
    /// What verification found wrong (empty when it passed or has not run).
    pub verification: Vec<String>,
}

/// A shard's owner as the registry answers it (`GetOwner`, `WatchOwnership`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerView {
    pub ns: NamespaceName,
    pub shard: ShardName,
    pub region: RegionId,
    pub cell: CellId,
    pub epoch: Epoch,
    /// Set while the shard is being moved.
    pub moving_to: Option<CellId>,
}

/// What the runtime feeds in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    Start,
    /// The answer to [`Action::WaitHealthy`]. `false` changes nothing: keep waiting, or
    /// abort.
    Healthy {
        healthy: bool,
    },
    /// A shard's owner, observed after an action or on the registry's watch.
    Owner(OwnerView),
    /// The registry refused a `MoveShard` definitively (not `UNAVAILABLE`, which is
    /// unknown — observe the owner instead; not `MOVING`, which means in progress).
    MoveRefused {
        ns: NamespaceName,
        shard: ShardName,
        reason: String,
    },
    /// The answer to [`Action::Verify`]: what is wrong (empty: all good).
    Verified {
        problems: Vec<String>,
    },
    /// The operator's abort switch.
    Abort {
        reason: String,
    },
}

/// What the runtime should do. None of it is done by this module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Wait until the targets are healthy, then feed [`Input::Healthy`].
    WaitHealthy { wave: usize },
    /// A planned `MoveShard`; then feed the owner as it changes.
    MoveShard { ns: NamespaceName, shard: ShardName, to_cell: CellId },
    /// `AbortMove` at `epoch`; then feed the owner.
    AbortMove { ns: NamespaceName, shard: ShardName, epoch: Epoch },
    /// Read these shards' owners and feed each.
    ObserveOwners { shards: Vec<(NamespaceName, ShardName)> },
    /// Check the result (see [`verify_owners`], plus the safety checker), then feed
    /// [`Input::Verified`].
    Verify,
}

/// The state machine. Build with [`Evacuation::new`] or [`Evacuation::resume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evacuation {
    progress: Progress,
}

impl Evacuation {
    pub fn new(plan: Plan) -> Evacuation {
        let shards = plan
            .waves
            .iter()
            .flat_map(|w| w.moves.iter().map(move |m| (w.index, m)))
            .map(|(wave, m): (usize, &Move)| ShardProgress {
                ns: m.ns.clone(),
                shard: m.shard.clone(),
                wave,
                from_cell: m.from_cell.clone(),
                to_cell: m.to_cell.clone(),
                planned_epoch: m.epoch,
                source_epoch: m.epoch,
                state: ShardState::Pending,
            })
            .collect();
        Evacuation { progress: Progress { version: PROGRESS_VERSION, plan, phase: Phase::Planned, gate_passed: false, shards, verification: Vec::new() } }
    }

    /// Picks up a saved progress after a crash. The actions re-observe every shard in
    /// flight (and re-send aborts, or re-open the health gate), never a blind move.
    pub fn resume(progress: Progress) -> (Evacuation, Vec<Action>) {
        let ev = Evacuation { progress };
        let p = &ev.progress;
        let observe = |pick: &dyn Fn(&ShardProgress) -> bool| {
            let shards: Vec<_> = p.shards.iter().filter(|s| pick(s)).map(|s| (s.ns.clone(), s.shard.clone())).collect();
            (!shards.is_empty()).then_some(Action::ObserveOwners { shards })
        };
        let actions = match &p.phase {
            Phase::Planned | Phase::Done => Vec::new(),
            Phase::Executing { wave } => {
                let wave = *wave;
                let mut a: Vec<Action> = observe(&|s| s.wave == wave && !s.state.is_terminal()).into_iter().collect();
                if !p.gate_passed {
                    a.push(Action::WaitHealthy { wave });
                }
                a
            }
            Phase::Verifying => vec![Action::Verify],
            Phase::Aborted { .. } => {
                let mut a: Vec<Action> = p
                    .shards
                    .iter()
                    .filter(|s| matches!(s.state, ShardState::Moving { .. }))
                    .map(|s| Action::AbortMove { ns: s.ns.clone(), shard: s.shard.clone(), epoch: s.source_epoch })
                    .collect();
                a.extend(observe(&|s| matches!(s.state, ShardState::Moving { .. })));
                a
            }
        };
        (ev, actions)
    }

    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    pub fn phase(&self) -> &Phase {
        &self.progress.phase
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.progress).expect("progress serializes")
    }

    pub fn progress_from_json(text: &str) -> Result<Progress, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Done, verified clean, every shard moved.
    pub fn succeeded(&self) -> bool {
        self.progress.phase == Phase::Done
            && self.progress.verification.is_empty()
            && self.progress.shards.iter().all(|s| matches!(s.state, ShardState::Moved { .. }))
    }

    /// No shard is in flight: every one has settled on one owner.
    pub fn settled(&self) -> bool {
        !self.progress.shards.iter().any(|s| matches!(s.state, ShardState::Moving { .. }))
    }

    /// Feeds one input; returns what to do next.
    pub fn step(&mut self, input: Input) -> Vec<Action> {
        match input {
            Input::Start => self.start(),
            Input::Healthy { healthy } => self.gate(healthy),
            Input::Owner(view) => self.observed(view),
            Input::MoveRefused { ns, shard, reason } => {
                if let Some(s) = self.shard_mut(&ns, &shard) {
                    if matches!(s.state, ShardState::Moving { .. }) {
                        s.state = ShardState::Failed { reason };
                    }
                }
                self.maybe_advance()
            }
            Input::Verified { problems } => {
                if self.progress.phase == Phase::Verifying {
                    self.progress.verification = problems;
                    self.progress.phase = Phase::Done;
                }
                Vec::new()
            }
            Input::Abort { reason } => self.abort(reason),
        }
    }

    fn start(&mut self) -> Vec<Action> {
        if self.progress.phase != Phase::Planned {
            return Vec::new();
        }
        self.enter_wave(0)
    }

    fn enter_wave(&mut self, wave: usize) -> Vec<Action> {
        if wave >= self.progress.plan.waves.len() {
            self.progress.phase = Phase::Verifying;
            return vec![Action::Verify];
        }
        self.progress.phase = Phase::Executing { wave };
        self.progress.gate_passed = false;
        vec![Action::WaitHealthy { wave }]
    }

    fn gate(&mut self, healthy: bool) -> Vec<Action> {
        let Phase::Executing { wave } = self.progress.phase else { return Vec::new() };
        if !healthy || self.progress.gate_passed {
            return Vec::new();
        }
        self.progress.gate_passed = true;
        let mut actions = Vec::new();
        for s in self.progress.shards.iter_mut().filter(|s| s.wave == wave) {
            if s.state == ShardState::Pending {
                s.state = ShardState::Moving { attempts: 1 };
                actions.push(Action::MoveShard { ns: s.ns.clone(), shard: s.shard.clone(), to_cell: s.to_cell.clone() });
            }
        }
        actions.extend(self.maybe_advance());
        actions
    }

    fn observed(&mut self, v: OwnerView) -> Vec<Action> {
        let retry_allowed = match self.progress.phase {
            Phase::Executing { wave } => self.progress.gate_passed.then_some(wave),
            _ => None,
        };
        let aborted = matches!(self.progress.phase, Phase::Aborted { .. });
        let Some(s) = self.shard_mut(&v.ns, &v.shard) else { return Vec::new() };
        let mut actions = Vec::new();
        if v.cell == s.to_cell && v.moving_to.is_none() {
            s.state = if v.epoch > s.planned_epoch {
                ShardState::Moved { epoch: v.epoch }
            } else {
                ShardState::Failed { reason: format!("at the target at {} without a bump over the planned {}", v.epoch, s.planned_epoch) }
            };
        } else if v.cell == s.from_cell {
            s.source_epoch = v.epoch;
            match (&v.moving_to, &s.state) {
                // In flight: wait for the registry to finish it — or, after an abort,
                // make sure it is stopped (a repeated AbortMove is refused harmlessly).
                (Some(to), ShardState::Pending) if *to == s.to_cell => {
                    s.state = ShardState::Moving { attempts: 1 };
                    if aborted {
                        actions.push(Action::AbortMove { ns: s.ns.clone(), shard: s.shard.clone(), epoch: v.epoch });
                    }
                }
                // Our own move, in flight (its AbortMove, if any, was sent by the abort).
                (Some(to), ShardState::Moving { .. }) if *to == s.to_cell => {}
                (Some(to), ShardState::Pending | ShardState::Moving { .. }) => {
                    s.state = ShardState::Failed { reason: format!("being moved to {to} by someone else") };
                }
                (None, ShardState::Moving { attempts }) => {
                    // Home and not moving: never sent, lost, or aborted.
                    if aborted {
                        s.state = ShardState::Pending;
                    } else if retry_allowed == Some(s.wave) && *attempts < MAX_ATTEMPTS {
                        s.state = ShardState::Moving { attempts: attempts + 1 };
                        actions.push(Action::MoveShard { ns: s.ns.clone(), shard: s.shard.clone(), to_cell: s.to_cell.clone() });
                    } else if !aborted && retry_allowed == Some(s.wave) {
                        s.state = ShardState::Failed { reason: format!("still at its source after {attempts} attempts") };
                    }
                }
                _ => {}
            }
        } else if !matches!(s.state, ShardState::Failed { .. }) {
            s.state = ShardState::Failed { reason: format!("owned by {}, neither source nor target", v.cell) };
        }
        actions.extend(self.maybe_advance());
        actions
    }

    fn abort(&mut self, reason: String) -> Vec<Action> {
        match self.progress.phase {
            Phase::Planned | Phase::Executing { .. } => {}
            // Too late to abort: roll back instead.
            Phase::Verifying | Phase::Done | Phase::Aborted { .. } => return Vec::new(),
        }
        self.progress.phase = Phase::Aborted { reason };
        let in_flight: Vec<&ShardProgress> = self.progress.shards.iter().filter(|s| matches!(s.state, ShardState::Moving { .. })).collect();
        let mut actions: Vec<Action> =
            in_flight.iter().map(|s| Action::AbortMove { ns: s.ns.clone(), shard: s.shard.clone(), epoch: s.source_epoch }).collect();
        if !in_flight.is_empty() {
            actions.push(Action::ObserveOwners { shards: in_flight.iter().map(|s| (s.ns.clone(), s.shard.clone())).collect() });
        }
        actions
    }

    fn maybe_advance(&mut self) -> Vec<Action> {
        let Phase::Executing { wave } = self.progress.phase else { return Vec::new() };
        if !self.progress.gate_passed {
            return Vec::new();
        }
        let in_wave = || self.progress.shards.iter().filter(move |s| s.wave == wave);
        if !in_wave().all(|s| s.state.is_terminal()) {
            return Vec::new();
        }
        let failed = in_wave().filter(|s| matches!(s.state, ShardState::Failed { .. })).count();
        if failed > 0 {
            self.progress.phase = Phase::Aborted { reason: format!("{failed} shard(s) of wave {wave} failed to move") };
            return Vec::new();
        }
        self.enter_wave(wave + 1)
    }

    fn shard_mut(&mut self, ns: &NamespaceName, shard: &ShardName) -> Option<&mut ShardProgress> {
        self.progress.shards.iter_mut().find(|s| &s.ns == ns && &s.shard == shard)
    }
}

/// The registry half of verification: every planned shard at its target, not moving,
/// at a larger epoch than planned, and no shard homed in the evacuated region.
/// (The other half — no stale token accepted, workloads re-acquired — is the safety
/// checker's and the workload's.)
pub fn verify_owners(plan: &Plan, owners: &[OwnerView]) -> Vec<String> {
    let mut problems = Vec::new();
    for m in plan.moves() {
        match owners.iter().find(|o| o.ns == m.ns && o.shard == m.shard) {
            None => problems.push(format!("{}/{}: no owner reported", m.ns, m.shard)),
            Some(o) if o.cell != m.to_cell || o.moving_to.is_some() => problems.push(format!(
                "{}/{}: owned by {} (moving to {:?}), planned {}",
                m.ns,
                m.shard,
                o.cell,
                o.moving_to.as_ref().map(|c| c.as_str()),
                m.to_cell
            )),
            Some(o) if o.epoch <= m.epoch => problems.push(format!("{}/{}: epoch {} not bumped over {}", m.ns, m.shard, o.epoch, m.epoch)),
            Some(_) => {}
        }
    }
    if plan.kind == crate::plan::PlanKind::Evacuate {
        for o in owners.iter().filter(|o| o.region == plan.region) {
            problems.push(format!("{}/{}: still homed in {}", o.ns, o.shard, plan.region));
        }
    }
    problems
}
