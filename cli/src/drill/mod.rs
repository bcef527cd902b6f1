//! `holdfast drill`: drills on a running playground's real processes (issue 8).
//!
//! The pure parts — the history model, the safety checker, the evacuation planner and
//! state machine, the reports — live in the `holdfast-drills` crate. This module is
//! the runtime that performs what they decide and records what it sees:
//! - [`playground`]: reads `endpoints.json`; calls the registry through any gateway;
//! - [`record`]: the drill history, one JSON line per event, in real-time order;
//! - [`resource`]: the fenced resource the workload writes to;
//! - [`workload`]: SDK workers taking locks and writing with their tokens;
//! - [`observe`]: the registry's ownership watch, holder reads, cells' served shards;
//! - [`evacuate`]: `holdfast drill evacuate` — plan, waves, verify, abort, rollback;
//! - [`failover`]: `holdfast region failover` — a lost region's shards moved unplanned, in waves;
//! - [`faults`]: `holdfast drill fault` — kill, cut, pause, restart real processes;
//! - [`holder`]: a lock holder in its own process, for a real SIGSTOP;
//! - [`run`]: `holdfast drill run` — a workload, a scenario, the checker, a report.
//!
//! See docs/drills.md and docs/runbooks/evacuation.md.

mod evacuate;
pub mod failover;
mod faults;
mod holder;
mod loss;
mod observe;
mod playground;
mod resource;
mod run;
mod workload;

use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DrillCmd {
    /// Evacuate a region: plan, execute in waves behind a health gate, verify.
    ///
    /// `--dry-run` prints the plan and changes nothing; `--abort` stops a running (or
    /// interrupted) evacuation leaving every shard with one owner; `--rollback` brings
    /// the shards home. Rerunning resumes from the saved progress.
    ///
    /// Example: holdfast drill evacuate --data-dir /tmp/hf --region east --dry-run
    Evacuate(evacuate::EvacuateArgs),
    /// A checked drill on a running playground: workload, scenario, checker, report.
    ///
    /// A fenced workload runs through the SDK during a scenario (an evacuation, or a region cut off plus a cell leader killed), then
    /// the safety checker over the whole history and a report (Markdown, JSON, SVG).
    /// Exits non-zero if the checker finds a violation.
    ///
    /// Example: holdfast drill run --data-dir /tmp/hf --scenario evacuate --out /tmp/drill
    Run(run::RunArgs),
    /// Inject one fault into a running playground's real processes.
    #[command(subcommand)]
    Fault(faults::FaultCmd),
    /// Check a recorded history (history.jsonl) and write its report next to it.
    ///
    /// Example: holdfast drill check /tmp/drill/history.jsonl
    Check {
        history: PathBuf,
        /// Where to write report.{md,json,svg} (default: the history's directory).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub async fn run(cmd: DrillCmd) -> Result<(), String> {
    match cmd {
        DrillCmd::Evacuate(a) => evacuate::run(a).await,
        DrillCmd::Run(a) => run::run(a).await,
        DrillCmd::Fault(f) => faults::run(f).await,
        DrillCmd::Check { history, out } => {
            let text = std::fs::read_to_string(&history).map_err(|e| format!("{}: {e}", history.display()))?;
            let h = holdfast_drills::history::History::from_jsonl(&text).map_err(|e| format!("{}: {e}", history.display()))?;
            let dir = out.unwrap_or_else(|| history.parent().map(PathBuf::from).unwrap_or_default());
            let check = run::report(&dir, "drill check", &h)?;
            if check.is_clean() {
                Ok(())
            } else {
                Err(format!("{} violation(s); see {}", check.violations.len(), dir.join("report.md").display()))
            }
        }
    }
}
