//! Drills on real playgrounds (issue 8), each step a `holdfast drill` command as an
//! SRE would type it:
//! - under a steady fenced workload, evacuate a region (and roll it back): zero
//!   violations, a report; then cut a region off, fail its shards over, kill a cell
//!   leader: zero violations, a report; then SIGSTOP a holder process past its TTL
//!   (its late write is refused) and a cell leader past its election timeout, and
//!   SIGKILL a whole region and restart it: zero violations;
//! - an evacuation killed half-way leaves every shard with exactly one owner and a
//!   rerun completes; an evacuation aborted from another terminal settles, and a
//!   rerun completes;
//! - the checker goes red on planted bugs: a fenced resource with its token check
//!   switched off, and a cell forced to grant one token twice.

mod common;

use common::{holdfast, kill, needs_root, wait_for, Dev};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn ok(args: &[&str]) -> String {
    let out = holdfast(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "holdfast {args:?} failed: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

fn report(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).expect("report.json")).expect("report.json parses")
}

fn violations(r: &Value, kind: &str) -> usize {
    r["violations"].as_array().expect("violations").iter().filter(|v| v["kind"] == kind).count()
}

/// Every shard the registry knows, with its owner: (ns/shard, cell, state).
fn owners(pg: &str, gw: &str) -> Vec<(String, String, String)> {
    let certs = format!("{pg}/certs");
    let v: Value = serde_json::from_str(&ok(&["shard", "list", "-o", "json", "--endpoint", gw, "--certs-dir", &certs])).expect("shard list json");
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!("{}/{}", s["ns"].as_str().unwrap(), s["shard"].as_str().unwrap()),
                s["cell"].as_str().unwrap_or("").to_owned(),
                s["state"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Exactly one owner per shard, none mid-move.
fn one_owner_each(pg: &str, gw: &str) {
    let o = owners(pg, gw);
    let mut names: Vec<&String> = o.iter().map(|(n, _, _)| n).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), o.len(), "a shard listed twice: {o:?}");
    for (n, cell, state) in &o {
        assert!(!cell.is_empty() && state == "active", "{n} has no settled owner: {cell:?} {state:?}");
    }
}

/// `holdfast drill evacuate --region east`, one shard per wave, as a background process.
fn evacuation(data_dir: &str, state_dir: &str) -> Child {
    Command::new(common::BIN)
        .args(["drill", "evacuate", "--data-dir", data_dir, "--region", "east", "--max-wave", "1", "--state-dir", state_dir])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn progress(state: &Path) -> String {
    std::fs::read_to_string(state.join("evacuate.json")).unwrap_or_default()
}

#[test]
fn drills_on_a_netns_playground_find_no_violation_and_catch_an_unfenced_resource() {
    if !needs_root("drills_on_a_netns_playground_find_no_violation_and_catch_an_unfenced_resource", "network namespaces") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("pg");
    std::fs::create_dir_all(&data).unwrap();
    let mut dev = Dev::start(&data, &["--netns", "--base-port", "8100"]);
    let ep = dev.endpoints(&data);
    let gw = ep["regions"]["west"]["gateway"]["grpc"].as_str().unwrap().to_owned();
    let d = data.to_str().unwrap();

    // The evacuation drill: zero violations, waves timed, the workload re-acquired on
    // the new owners (the command checks it), everything brought home again.
    let out = tmp.path().join("evacuate");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "evacuate", "--region", "east", "--settle-s", "2", "--out", o]);
    eprintln!("{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    assert!(!r["waves"].as_array().unwrap().is_empty(), "the report times the waves: {r}");
    assert!(std::fs::read_to_string(out.join("report.svg")).unwrap().starts_with("<svg"));
    let history = std::fs::read_to_string(out.join("history.jsonl")).unwrap();
    assert!(history.lines().filter(|l| l.contains("\"write_accepted\"")).count() > 20, "a steady workload wrote to the fenced resource");
    one_owner_each(d, &gw);
    assert!(owners(d, &gw).iter().any(|(n, c, _)| n == "drill/s0" && c == "east-1"), "rolled back home");

    // The partition drill: a region cut off (packets dropped), its shards failed over
    // unplanned with the fencing confirmed (the drill cut it off), a cell leader
    // killed; healed, restarted, brought home.
    let out = tmp.path().join("partition");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "partition", "--region", "south", "--settle-s", "2", "--cut-s", "6", "--out", o]);
    eprintln!("{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    let faults: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(faults.contains(&"partition_region") && faults.contains(&"kill_cell_leader"), "{faults:?}");
    one_owner_each(d, &gw);

    // Issue #43, static stability: the registry's quorum gone for 60 s (two voters
    // SIGSTOPped) under the workload in every region. Every region serves on with no
    // failed call (the drill checks the history), a registry write is refused with
    // UNAVAILABLE, and writes work again once the voters resume.
    let out = tmp.path().join("registry-outage");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "registry-outage", "--settle-s", "2", "--cut-s", "60", "--out", o]);
    eprintln!("{stdout}");
    assert!(stdout.contains("a registry write during the outage: UNAVAILABLE"), "{stdout}");
    assert!(stdout.contains("0 failed call(s)"), "{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    one_owner_each(d, &gw);

    // Issue #44: the registry's majority lost for good (two voters killed, their data
    // deleted) under the workload; the third formed again alone with `holdfast
    // registry recover`, the two added back empty. Every region serves throughout and
    // then grants only at the raised epochs; the drills below run on that registry.
    let out = tmp.path().join("registry-loss");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "registry-loss", "--settle-s", "2", "--out", o]);
    eprintln!("{stdout}");
    assert!(stdout.contains("registry recovered from node 1"), "{stdout}");
    assert!(stdout.contains("0 old-epoch grant(s) after a raised one"), "{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    one_owner_each(d, &gw);

    // Issue #44: the east cell's majority lost for good (two nodes killed, their data
    // deleted) under the workload; the third formed again alone with `holdfast cell
    // recover` (its copy's shards sealed), the two added back empty. The cell's shards
    // then grant only above every epoch they granted at before.
    let out = tmp.path().join("cell-loss");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "cell-loss", "--settle-s", "2", "--out", o]);
    eprintln!("{stdout}");
    assert!(stdout.contains("shards sealed at the epochs they had"), "{stdout}");
    assert!(stdout.contains("0 old-epoch grant(s) after a raised one"), "{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    one_owner_each(d, &gw);

    // Real processes stopped and killed: a holder SIGSTOPped past its TTL writes late
    // and is refused, a leader SIGSTOPped past its election timeout, a region killed.
    let out = tmp.path().join("process-faults");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "process-faults", "--region", "south", "--settle-s", "2", "--cut-s", "3", "--out", o]);
    eprintln!("{stdout}");
    assert!(stdout.contains("rejected by the fence"), "the paused holder's late write is refused: {stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    let faults: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    for f in ["pause_holder", "pause_leader", "kill_region"] {
        assert!(faults.contains(&f), "{f} missing from {faults:?}");
    }
    one_owner_each(d, &gw);

    // Issue #15, randomized pauses: a holder SIGSTOPped around its TTL again and again
    // (5 here; 50 by default, see docs/drills.md), each late write through the fence:
    // no stale write accepted. With the fence planted open, the same run must go red.
    let out = tmp.path().join("holder-pauses");
    let o = out.to_str().unwrap();
    let stdout = ok(&["drill", "run", "--data-dir", d, "--scenario", "holder-pauses", "--pauses", "5", "--settle-s", "1", "--out", o]);
    eprintln!("{stdout}");
    assert!(stdout.contains("refused by the fence"), "{stdout}");
    let r = report(&out);
    assert_eq!(r["violations"].as_array().unwrap().len(), 0, "{r}");
    let out = tmp.path().join("holder-pauses-unfenced");
    let o = out.to_str().unwrap();
    let failed = holdfast(&[
        "drill",
        "run",
        "--data-dir",
        d,
        "--scenario",
        "holder-pauses",
        "--pauses",
        "2",
        "--settle-s",
        "1",
        "--plant",
        "unfenced-resource",
        "--out",
        o,
    ]);
    assert!(!failed.status.success(), "a drill over an unfenced resource must fail");
    assert!(violations(&report(&out), "stale_write_accepted") > 0, "{}", report(&out));

    // An evacuation killed half-way: one owner each; a rerun resumes and completes.
    let state = tmp.path().join("evac-state");
    let s = state.to_str().unwrap();
    let mut driver = evacuation(d, s);
    wait_for(Duration::from_secs(60), "the evacuation's first move", || progress(&state).contains("\"moving\"") || progress(&state).contains("\"moved\""));
    kill("KILL", driver.id());
    let _ = driver.wait();
    assert!(progress(&state).contains("\"executing\""), "killed mid-way: {}", progress(&state));
    wait_for(Duration::from_secs(30), "every shard settled on one owner", || owners(d, &gw).iter().all(|(_, _, st)| st == "active"));
    one_owner_each(d, &gw);
    let stdout = ok(&["drill", "evacuate", "--data-dir", d, "--region", "east", "--state-dir", s]);
    assert!(stdout.contains("resuming"), "{stdout}");
    assert!(owners(d, &gw).iter().all(|(_, c, _)| !c.starts_with("east")), "east is empty: {:?}", owners(d, &gw));
    ok(&["drill", "evacuate", "--data-dir", d, "--region", "east", "--rollback", "--state-dir", s]);
    one_owner_each(d, &gw);

    // An evacuation aborted from another terminal: settles with one owner each; a
    // rerun completes; roll back.
    let mut driver = evacuation(d, s);
    wait_for(Duration::from_secs(60), "the second evacuation's first move", || {
        progress(&state).contains("\"executing\"") && (progress(&state).contains("\"moving\"") || progress(&state).contains("\"moved\""))
    });
    ok(&["drill", "evacuate", "--data-dir", d, "--region", "east", "--abort", "--state-dir", s]);
    let status = driver.wait().unwrap();
    assert!(!status.success(), "an aborted evacuation does not report success");
    assert!(progress(&state).contains("\"aborted\""), "{}", progress(&state));
    one_owner_each(d, &gw);
    ok(&["drill", "evacuate", "--data-dir", d, "--region", "east", "--state-dir", s]);
    ok(&["drill", "evacuate", "--data-dir", d, "--region", "east", "--rollback", "--state-dir", s]);
    one_owner_each(d, &gw);

    // Planted: the resource's token check switched off. The same drill must go red.
    let out = tmp.path().join("planted");
    let o = out.to_str().unwrap();
    let planted = holdfast(&[
        "drill",
        "run",
        "--data-dir",
        d,
        "--scenario",
        "process-faults",
        "--region",
        "south",
        "--settle-s",
        "2",
        "--cut-s",
        "3",
        "--plant",
        "unfenced-resource",
        "--out",
        o,
    ]);
    assert!(!planted.status.success(), "a drill against an unfenced resource must fail");
    let r = report(&out);
    let zombie =
        r["violations"].as_array().unwrap().iter().any(|v| v["kind"] == "stale_write_accepted" && v["summary"].as_str().unwrap().contains("s0-zombie"));
    assert!(zombie, "the checker must see the paused holder's late write accepted: {r}");

    // Issue #43: a region lost, failed over in one command. Its processes are killed;
    // without a confirmation the moves wait out the 35-minute lease (the command gives
    // up here, the moves in flight), and `--abort` from another command leaves every
    // shard with its one owner. With the fencing confirmed, every shard of the region
    // lands on the other regions' cells at once, none of them taking more than 60 %.
    ok(&["drill", "fault", "kill-region", "--data-dir", d, "--region", "south"]);
    let south = |o: &[(String, String, String)]| o.iter().filter(|(_, c, _)| c.starts_with("south")).count();
    let homed = south(&owners(d, &gw));
    assert!(homed > 0, "nothing homed in south to fail over: {:?}", owners(d, &gw));
    let waited = holdfast(&["region", "failover", "south", "--data-dir", d, "--timeout-s", "3", "--out", tmp.path().join("failover-wait").to_str().unwrap()]);
    assert!(!waited.status.success() && String::from_utf8_lossy(&waited.stderr).contains("still in flight"), "{waited:?}");
    assert!(owners(d, &gw).iter().any(|(_, _, st)| st == "moving"), "no move in flight: {:?}", owners(d, &gw));
    ok(&["region", "failover", "south", "--data-dir", d, "--abort"]);
    one_owner_each(d, &gw);
    assert_eq!(south(&owners(d, &gw)), homed, "an aborted failover moved shards");
    let out = tmp.path().join("failover");
    let stdout =
        ok(&["region", "failover", "south", "--data-dir", d, "--fence-confirmed", "--reason", "south killed by the test", "--out", out.to_str().unwrap()]);
    eprintln!("{stdout}");
    assert!(stdout.contains("failover of south done"), "{stdout}");
    one_owner_each(d, &gw);
    let after = owners(d, &gw);
    assert_eq!(south(&after), 0, "shards left in south: {after:?}");
    let mut per_cell = std::collections::BTreeMap::<String, usize>::new();
    for (_, cell, _) in &after {
        *per_cell.entry(cell.clone()).or_default() += 1;
    }
    for (cell, n) in &per_cell {
        assert!(*n * 100 <= after.len() * 60, "{cell} took {n} of {} shards: {per_cell:?}", after.len());
    }
    assert!(out.join("report.md").exists());

    assert!(dev.stop().success());
}

#[test]
fn the_checker_catches_a_cell_forced_to_grant_one_token_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("pg");
    std::fs::create_dir_all(&data).unwrap();
    let mut dev = Dev::start(&data, &["--base-port", "8200", "--unsafe-plant", "token-reuse"]);
    dev.endpoints(&data);
    let out = tmp.path().join("planted");
    let planted =
        holdfast(&["drill", "run", "--data-dir", data.to_str().unwrap(), "--scenario", "evacuate", "--settle-s", "3", "--out", out.to_str().unwrap()]);
    assert!(!planted.status.success(), "a drill against a cell that reuses tokens must fail");
    let r = report(&out);
    assert!(violations(&r, "token_did_not_grow") > 0, "the checker must see the reused tokens: {r}");
    assert!(dev.stop().success());
}
