//! holdfast-drills: what a drill records, checks, plans and reports.
//!
//! What lives here, all pure (no clock, no I/O, no tokio):
//! - [`history`]: the JSON-lines history of a drill (grants, releases, fenced writes,
//!   ownership and serving observations, faults, waves);
//! - [`observe`]: what the observers fold their polls into (owners by epoch, cells'
//!   serving intervals);
//! - [`checker`]: reads a whole history and reports every safety violation, treating a
//!   timed-out operation as *unknown*, never as absent;
//! - [`plan`]: the region-evacuation planner (which shard moves where, in waves);
//! - [`evacuation`]: the evacuation as an explicit state machine with a persisted,
//!   resumable progress record — it takes observations and returns actions;
//! - [`report`]: a drill report as Markdown, JSON and a hand-written SVG timeline.
//!
//! What does not: talking to the registry, cells or the fenced resource, injecting
//! faults, or the `holdfast drill` command. A runtime (the CLI) performs the actions
//! this crate returns and records what it sees into a [`history::History`].
//! See `docs/drills.md`.

pub mod checker;
pub mod evacuation;
pub mod history;
pub mod observe;
pub mod plan;
pub mod record;
pub mod report;
