//! The servers' own moments, recorded into the run's history as they happen: a cell
//! answering an Acquire with a grant (`CellGranted`), a cell's replica applying a grant
//! (`CellHoldBegan`), the end of a hold (`CellHoldEnded`) or of a session
//! (`CellSessionEnded`), a waiter queued or leaving the queue (`CellWaiterQueued`,
//! `CellWaiterLeft`), a cell's leader building its timers (`CellTimersRestarted`),
//! and the registry committing a shard's transfer (`ShardTransferred`). Every simulated host shares one clock, so
//! the checker can hold the one against the other however late a worker heard of
//! either (a held or slowed link delivers seconds late). They are read off the
//! servers' tracing events, the only window into a server the simulation needs; the
//! simulation's own tests assert that a run with grants records them, so a renamed
//! event cannot silently turn the check off (docs/simulation.md).

use crate::Log;
use holdfast_core::{CellId, EndReason, Epoch, FencingToken, LockName, NamespaceName, SessionId, ShardName};
use holdfast_drills::history::{EventKind, LockKey};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};

/// The cell's service logs each grant it answers (`debug`), its state machine each
/// grant, hold's end, change of a lock's queue and session's end it applies (`debug`,
/// on every replica); the
/// registry logs each transfer
/// it committed (`info`, from its service and from its leader's duties).
const CELL_TARGET: &str = "holdfast_cell::service";
const GRANTED: &str = "granted";
const MACHINE_TARGET: &str = "holdfast_cell::machine";
const HOLD_ENDED: &str = "hold ended";
const HOLD_BEGAN: &str = "hold began";
const SESSION_ENDED: &str = "session ended";
const QUEUED: &str = "waiter queued";
const LEFT: &str = "waiter left";
/// The leader duties log each build of the lease clock (`debug`).
const LEADER_TARGET: &str = "holdfast_cell::leader";
const TIMERS: &str = "timers restarted";
const REGISTRY_TARGET: &str = "holdfast_registry";
const TRANSFERRED: &str = "shard transferred";

/// The layer that turns those events into history lines.
pub(crate) struct Stamps(pub(crate) Log);

impl Stamps {
    /// Only the events it reads reach it.
    pub(crate) fn filter() -> Targets {
        Targets::new()
            .with_target(CELL_TARGET, Level::DEBUG)
            .with_target(MACHINE_TARGET, Level::DEBUG)
            .with_target(LEADER_TARGET, Level::DEBUG)
            .with_target(REGISTRY_TARGET, Level::INFO)
    }
}

/// The fields the events carry.
#[derive(Default)]
struct Fields {
    message: String,
    shard: String,
    lock: String,
    cell: String,
    token: u64,
    epoch: u64,
    session: Option<u64>,
    revision: Option<u64>,
    reason: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let slot = match field.name() {
            "message" => &mut self.message,
            "shard" => &mut self.shard,
            "lock" => &mut self.lock,
            "cell" => &mut self.cell,
            "reason" => &mut self.reason,
            _ => return,
        };
        *slot = format!("{value:?}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "token" => self.token = value,
            "epoch" => self.epoch = value,
            "session" => self.session = Some(value),
            "revision" => self.revision = Some(value),
            _ => {}
        }
    }
}

impl Fields {
    /// `ns/shard`, as a shard key displays.
    fn shard(&self) -> Option<(NamespaceName, ShardName)> {
        let (ns, shard) = self.shard.split_once('/')?;
        Some((NamespaceName::new(ns).ok()?, ShardName::new(shard).ok()?))
    }

    fn lock(&self) -> Option<LockKey> {
        let (ns, _) = self.shard()?;
        Some(LockKey { ns, name: LockName::new(self.lock.as_str()).ok()? })
    }

    /// The stable wire string of the reason a hold ended.
    fn reason(&self) -> Option<EndReason> {
        [EndReason::Released, EndReason::Expired, EndReason::Broken, EndReason::MaxHold, EndReason::Moved].into_iter().find(|r| r.as_str() == self.reason)
    }

    fn line(&self, target: &str) -> Option<EventKind> {
        if target == CELL_TARGET && self.message == GRANTED {
            return Some(EventKind::CellGranted { lock: self.lock()?, token: FencingToken(self.token) });
        }
        if target == MACHINE_TARGET && self.message == HOLD_ENDED {
            return Some(EventKind::CellHoldEnded {
                lock: self.lock()?,
                token: FencingToken(self.token),
                session: SessionId(self.session?),
                reason: self.reason()?,
            });
        }
        if target == MACHINE_TARGET && self.message == HOLD_BEGAN {
            let (token, session, revision) = (FencingToken(self.token), SessionId(self.session?), self.revision?);
            return Some(EventKind::CellHoldBegan { lock: self.lock()?, token, session, revision });
        }
        if target == MACHINE_TARGET && (self.message == QUEUED || self.message == LEFT) {
            let (lock, epoch, session, revision) = (self.lock()?, Epoch(u32::try_from(self.epoch).ok()?), SessionId(self.session?), self.revision?);
            return Some(if self.message == QUEUED {
                EventKind::CellWaiterQueued { lock, epoch, session, revision }
            } else {
                EventKind::CellWaiterLeft { lock, epoch, session, revision }
            });
        }
        if target == LEADER_TARGET && self.message == TIMERS {
            return Some(EventKind::CellTimersRestarted);
        }
        if target == MACHINE_TARGET && self.message == SESSION_ENDED {
            return Some(EventKind::CellSessionEnded { session: SessionId(self.session?) });
        }
        if target.starts_with(REGISTRY_TARGET) && self.message == TRANSFERRED {
            let (ns, shard) = self.shard()?;
            return Some(EventKind::ShardTransferred { ns, shard, cell: CellId::new(self.cell.as_str()).ok()?, epoch: Epoch(u32::try_from(self.epoch).ok()?) });
        }
        None
    }
}

impl<S: Subscriber> Layer<S> for Stamps {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        match fields.line(event.metadata().target()) {
            Some(kind) => self.0.record(kind),
            // One of these events, but not as this layer reads it: a renamed field
            // would turn the check off, so the run says so loudly.
            None if [GRANTED, HOLD_ENDED, HOLD_BEGAN, SESSION_ENDED, QUEUED, LEFT, TIMERS, TRANSFERRED].contains(&fields.message.as_str()) => {
                panic!("the simulation cannot read the servers' {:?} event (fields changed?): see drills/sim/src/stamps.rs", fields.message)
            }
            None => {}
        }
    }
}
