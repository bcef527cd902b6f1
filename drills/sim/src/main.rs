//! `holdfast-sim --seeds N [--from S] | --seed S [--history FILE] [--moves]
//! [--no-faults] [--plant BUG] [--tick-ms T] [--no-slow-disk] [--no-power-cuts] [--no-region-faults]`: runs seeds of the simulation (docs/simulation.md) and
//! reports each one the checker flags, with the command that replays it. `--moves`:
//! two cells, the registry and a gateway, the shard moving between the cells. Exit status 1 if any seed
//! fails. With `--plant`, every node runs that planted bug (debug builds); with
//! `--until-found` (implied by `--plant`) the run stops at the first failing seed and
//! says how many seeds it took — exit status 0 then, 1 if no seed failed. `--tick-ms`:
//! simulated time advances in steps of T ms (1 unless given), cheaper per seed the
//! coarser, and a seed's history depends on it. The faults also slow a node's disk now
//! and then; `--no-slow-disk` leaves that out (the histories of the seeds run before
//! it was in the schedule), and cut the power of a whole group now and then (its nodes
//! lose what they had not synced); `--no-power-cuts` leaves that out. With moves they
//! also pause two of the registry's three voters now and then (its quorum lost), and
//! fault a second node of another group while the first fault lasts;
//! `--no-region-faults` and `--no-overlapping-faults` leave those out. Every host's
//! clock runs fast by a rate drawn up to `--drift-ppm P` parts per million (the stated
//! bound, 1,000, unless given; 0 replays the seeds run before drift). A server's panic
//! takes the process down; it says which seed did it first.

use holdfast_sim::{run, Options, BOUND_PPM, DEFAULT_TICK};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The command that replays `seed` exactly.
fn replay(seed: u64, opts: &Options) -> String {
    let mut c = format!("scripts/simulate.sh --seed {seed}");
    if opts.moves {
        c.push_str(" --moves");
    }
    if !opts.faults {
        c.push_str(" --no-faults");
    }
    if let Some(p) = &opts.plant {
        c.push_str(&format!(" --plant {p}"));
    }
    if opts.tick != DEFAULT_TICK {
        c.push_str(&format!(" --tick-ms {}", opts.tick.as_millis()));
    }
    if !opts.slow_disk {
        c.push_str(" --no-slow-disk");
    }
    if !opts.power_cuts {
        c.push_str(" --no-power-cuts");
    }
    if opts.moves && !opts.region_faults {
        c.push_str(" --no-region-faults");
    }
    if opts.moves && !opts.overlapping_faults {
        c.push_str(" --no-overlapping-faults");
    }
    if opts.drift_ppm != BOUND_PPM {
        c.push_str(&format!(" --drift-ppm {}", opts.drift_ppm));
    }
    c
}

/// A server's panic (an invariant of a state machine broken: its `expect`s) takes the
/// whole simulation down, every host being a task of this one process. Says which seed
/// did it, in the form `--until-found` uses (the mutant sweep reads it), and how to
/// replay it. A panic of the simulation itself (this harness, the drills' checker and
/// recorder, turmoil) is said as such and found nothing.
fn say_which_seed_panicked(current: Arc<AtomicU64>, base: Options, until_found: bool) {
    let default = std::panic::take_hook();
    let said = AtomicBool::new(false);
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        if said.swap(true, Ordering::Relaxed) {
            return;
        }
        let seed = current.load(Ordering::Relaxed);
        let (file, line) = info.location().map_or(("?", 0), |l| (l.file(), l.line()));
        let harness = in_harness(file);
        let whose = if harness { "the simulation itself" } else { "a server" };
        println!("seed {seed}: {whose} panicked at {file}:{line}: {}", info.payload_as_str().unwrap_or("(no message)"));
        if until_found && !harness {
            println!("found by seed {seed} (a server panicked)");
        }
        println!("replay: {}", replay(seed, &base));
    }));
}

/// Is a panic at `file` the simulation's own rather than a server's? This crate's
/// files are named from its own root (`src/stamps.rs`); the drills' crate and turmoil
/// by their full paths (`/.../drills/src/checker.rs`, `/.../turmoil-0.7.2/src/...`).
fn in_harness(file: &str) -> bool {
    file.starts_with("src/") || file.contains("/drills/src/") || file.contains("/turmoil-")
}

fn usage() -> ! {
    eprintln!("usage: holdfast-sim (--seeds N [--from S] | --seed S [--history FILE]) [--moves] [--no-faults] [--plant BUG] [--until-found] [--tick-ms T] [--no-slow-disk] [--no-power-cuts] [--no-region-faults] [--no-overlapping-faults] [--drift-ppm P] [--real-pause-us U]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut seeds, mut from, mut one, mut history, mut until_found) = (None, 0u64, None, None, false);
    let mut base = Options::new(0);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || it.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| usage());
        match a.as_str() {
            "--seeds" => seeds = Some(num()),
            "--from" => from = num(),
            "--seed" => one = Some(num()),
            "--history" => history = Some(it.next().cloned().unwrap_or_else(|| usage())),
            "--no-faults" => base.faults = false,
            "--moves" => base.moves = true,
            "--slow-disk" => base.slow_disk = true,
            "--no-slow-disk" => base.slow_disk = false,
            "--power-cuts" => base.power_cuts = true,
            "--no-power-cuts" => base.power_cuts = false,
            "--region-faults" => base.region_faults = true,
            "--no-region-faults" => base.region_faults = false,
            "--overlapping-faults" => base.overlapping_faults = true,
            "--no-overlapping-faults" => base.overlapping_faults = false,
            "--plant" => {
                base.plant = Some(it.next().cloned().unwrap_or_else(|| usage()));
                until_found = true;
            }
            "--until-found" => until_found = true,
            "--real-pause-us" => base.real_pause = Duration::from_micros(num()),
            "--drift-ppm" => match num() {
                p @ 0..=500_000 => base.drift_ppm = p as u32,
                _ => usage(),
            },
            "--tick-ms" => match num() {
                t @ 1..=100 => base.tick = Duration::from_millis(t),
                _ => usage(),
            },
            _ => usage(),
        }
    }
    let list: Vec<u64> = match (seeds, one) {
        (Some(n), None) => (from..from + n).collect(),
        (None, Some(s)) => vec![s],
        _ => usage(),
    };
    let current = Arc::new(AtomicU64::new(0));
    say_which_seed_panicked(current.clone(), base.clone(), until_found);
    let started = Instant::now();
    let (mut failed, mut simulated, mut grants) = (Vec::new(), 0u128, 0usize);
    for (i, &seed) in list.iter().enumerate() {
        current.store(seed, Ordering::Relaxed);
        if i > 0 && i % 500 == 0 {
            let secs = started.elapsed().as_secs_f64();
            println!("... {i} seeds, {} failed, {:.2} seeds/s", failed.len(), i as f64 / secs);
        }
        let opts = Options { seed, ..base.clone() };
        match run(&opts) {
            Ok(o) => {
                simulated += o.simulated.as_millis();
                grants += o.grants;
                if let Some(path) = &history {
                    std::fs::write(path, o.history.to_jsonl()).unwrap_or_else(|e| eprintln!("{path}: {e}"));
                }
                if !o.is_clean() || o.grants == 0 {
                    eprintln!("seed {seed}: FAILED ({} grants)", o.grants);
                    for v in o.report.violations.iter().take(5) {
                        eprintln!("  {:?}: {}", v.kind, v.summary);
                    }
                    if o.report.violations.len() > 5 {
                        eprintln!("  ... {} violations in all (--history keeps the run)", o.report.violations.len());
                    }
                    failed.push(seed);
                    if until_found {
                        println!("found by seed {seed}: {} seeds run", i + 1);
                        println!("replay: {}", replay(seed, &base));
                        return;
                    }
                } else if list.len() == 1 {
                    println!("seed {seed}: clean, {} grants, {:.1} s simulated", o.grants, o.simulated.as_secs_f64());
                }
            }
            Err(e) => {
                eprintln!("seed {seed}: the run failed: {e}");
                failed.push(seed);
                if until_found {
                    println!("found by seed {seed} (the run itself failed): {} seeds run", i + 1);
                    println!("replay: {}", replay(seed, &base));
                    return;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} seeds, {} failed, {grants} grants checked, {:.0} s simulated in {secs:.1} s ({:.2} seeds/s)",
        list.len(),
        failed.len(),
        simulated as f64 / 1000.0,
        list.len() as f64 / secs
    );
    for &s in &failed {
        println!("replay: {}", replay(s, &base));
    }
    if until_found {
        println!("NOT found in {} seeds", list.len());
        std::process::exit(1);
    }
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
