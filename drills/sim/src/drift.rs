//! Clock-rate drift: each simulated host's monotonic clock runs fast by its own rate,
//! up to a bound (docs/simulation.md, "Clock-rate drift").
//!
//! turmoil gives every host a paused tokio clock and moves all of them by the same step
//! each round, so by itself every host keeps one rate. Drift is added inside a host: a
//! task of its own compares the host's clock with the simulation's (`sim_elapsed`) and,
//! once the host has fallen behind the rate it should run at, advances the host's clock
//! past the end of the current step by the shortfall (`tokio::time::advance`). An
//! advance that ended inside the step would be taken back by the step's own wait, so it
//! always reaches past the step's end; the host then starts every later step that much
//! ahead, and every timer of its software (leases, TTLs, elections, retries) fires
//! early by it. Only fast rates are drawn: what leases depend on is the difference of
//! two clocks' rates, and a slow clock on one side is a fast one on the other.
//!
//! The history's clock stays the simulation's: a stamp taken on a host after its clock
//! jumped, in the same step, is read as the step's end ([`global_now`]), so the
//! checker still holds the moments of different hosts against one another.

use crate::{Dice, Log, Options};
use holdfast_drills::history::{EventKind, FaultKind};
use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The bound holdfast states on two clocks' rate difference, in parts per million
/// (`holdfast_core::CLOCK_RATE_BOUND_DENOMINATOR`: 1 part in 1,000). Hosts draw a fast
/// rate in `0..=` this by default, so any two differ by at most the bound.
pub const BOUND_PPM: u32 = 1_000_000 / holdfast_core::CLOCK_RATE_BOUND_DENOMINATOR;

/// A host's clock is advanced once it is at least this far behind its rate: small
/// beside every margin the servers keep, and the most by which a stamp on a host can
/// read later than the step it was taken in.
const STEP: Duration = Duration::from_millis(1);

thread_local! {
    /// The last jump: the host clock's instant just after it, and the simulation's
    /// time it stands for (the end of the step it was made in). Every host runs on the
    /// simulation's one thread, and no two hosts' paused clocks share an instant.
    static JUMPED: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
}

/// The simulation's time now, as the history records it: on a host whose clock just
/// jumped ahead, the end of the step it jumped in rather than its own clock's reading.
pub(crate) fn global_now() -> Option<Duration> {
    let now = turmoil::sim_elapsed()?;
    match JUMPED.with(Cell::get) {
        Some((at, step_end)) if Instant::now() == at => Some(step_end),
        _ => Some(now),
    }
}

/// How far a drifting host's clock had got ahead of the simulation's, measured on the
/// host before a jump (so what earlier jumps left, across steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lead {
    pub host: String,
    /// The rate drawn for it, parts per million fast.
    pub ppm: u32,
    /// Its clock's lead then.
    pub ahead: Duration,
    /// Over this much simulated time (since its software last started).
    pub over: Duration,
}

/// Each drifting host's latest [`Lead`], read by the tests (`Outcome::leads`).
#[derive(Clone, Default)]
pub(crate) struct Leads(Arc<Mutex<Vec<Lead>>>);

impl Leads {
    fn set(&self, lead: Lead) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match g.iter_mut().find(|l| l.host == lead.host) {
            Some(l) => *l = lead,
            None => g.push(lead),
        }
    }

    pub(crate) fn take(&self) -> Vec<Lead> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Runs `software` on a host whose clock runs `ppm` parts per million fast (none if 0).
/// Started again with the host after a crash: the new runtime's clock starts level.
pub(crate) async fn with_rate<F: Future>(host: String, ppm: u32, tick: Duration, leads: Leads, software: F) -> F::Output {
    if ppm > 0 {
        tokio::spawn(keep_rate(host, ppm, tick, leads));
    }
    software.await
}

async fn keep_rate(host: String, ppm: u32, tick: Duration, leads: Leads) {
    let Some(sim0) = turmoil::sim_elapsed() else { return };
    let host0 = Instant::now();
    // Check about once per STEP of lead gained, and at most once a step.
    let every = (STEP * 1_000_000 / ppm).clamp(tick, Duration::from_secs(1));
    loop {
        tokio::time::sleep(every).await;
        let Some(sim) = turmoil::sim_elapsed() else { return };
        let (elapsed, on_host) = (sim - sim0, host0.elapsed());
        leads.set(Lead { host: host.clone(), ppm, ahead: on_host.saturating_sub(elapsed), over: elapsed });
        let want = elapsed + elapsed * ppm / 1_000_000;
        // In whole milliseconds: tokio's timers count whole milliseconds from the
        // runtime's start and round a deadline up, so a clock left between two would
        // make every later step's wait one millisecond longer (measured: a host so
        // left ran at twice the rate with 1 ms steps).
        let behind = Duration::from_millis(want.saturating_sub(on_host).as_millis() as u64);
        if behind < STEP {
            continue;
        }
        // Past the end of this step, plus the shortfall.
        let into = Duration::from_nanos((sim.as_nanos() % tick.as_nanos()) as u64);
        let to_end = tick - into;
        tracing::debug!(target: "holdfast_sim::drift", host, ?behind, ?to_end, ?elapsed, ?on_host, "jump");
        tokio::time::advance(to_end + behind).await;
        JUMPED.with(|j| j.set(Some((Instant::now(), sim + to_end))));
    }
}

/// Each host's clock rate, drawn from a generator of its own (so the rest of the
/// schedule is the same with or without drift) and written into the history.
pub(crate) struct Clocks {
    dice: Dice,
    bound_ppm: u32,
    tick: Duration,
    pub(crate) leads: Leads,
    log: Log,
}

/// One host's clock rate.
#[derive(Clone)]
pub(crate) struct HostClock {
    host: String,
    ppm: u32,
    tick: Duration,
    leads: Leads,
}

impl HostClock {
    pub(crate) fn run<F: std::future::Future>(&self, software: F) -> impl std::future::Future<Output = F::Output> {
        with_rate(self.host.clone(), self.ppm, self.tick, self.leads.clone(), software)
    }
}

impl Clocks {
    pub(crate) fn new(opts: &Options, log: &Log) -> Clocks {
        Clocks { dice: Dice::new(opts.seed ^ 0x6472_6966_7473), bound_ppm: opts.drift_ppm, tick: opts.tick, leads: Default::default(), log: log.clone() }
    }

    pub(crate) fn draw(&mut self, host: &str) -> HostClock {
        let ppm = if self.bound_ppm == 0 { 0 } else { self.dice.range(0, u64::from(self.bound_ppm) + 1) as u32 };
        if ppm > 0 {
            self.log.record_at(0, EventKind::FaultInjected { kind: FaultKind::ClockRate, target: format!("{host} +{ppm}ppm") });
        }
        HostClock { host: host.to_owned(), ppm, tick: self.tick, leads: self.leads.clone() }
    }
}
