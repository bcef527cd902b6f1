#!/usr/bin/env python3
"""Proves the safety tests can fail: each mutant below breaks one guarded check in a
scratch copy of the repo, and the named tests must go red on it. A mutant that
survives (tests stay green) fails this script.

Run from the repo root (scripts/check-safety-tests.sh does). Uses CARGO_TARGET_DIR.

A mutant's tests run while the next mutants build (at the lowest CPU priority), two
mutants' tests at a time: most of a mutant's time is its build, most of its tests' time
is waiting (docs/development.md, "CI time").

`--simulate N [--moves M] [names]`: instead of the named tests, the deterministic
simulation (docs/simulation.md) runs against each mutant of the code it simulates, seed
after seed up to N (up to M for the mutants that need moves, about six times dearer a
seed; 0 skips them), and reports the seed that found it (or that none did). It builds
the simulation's perf profile and steps it as the thousands of clean seeds run
(`--tick-ms 5`, docs/simulation.md), so a mutant's seed count is comparable to theirs.
Not part of CI.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_tests import lowest_priority  # noqa: E402  (the scripts' one way to run at the lowest CPU priority)

STATE = "cells/state/src"
CELL_TESTS = ["-p", "holdfast-cell-state", "--test", "properties", "--test", "semantics", "--test", "safety"]
# The lease clock's and the fence's unit tests. One package set for both, so their
# mutants share one build of the set.
SERVER_TESTS = ["-p", "holdfast-cell", "-p", "holdfast-fence", "--lib"]
# Access control: the grant and token rules (unit tests of core, the wire edge and the
# gateway's enforcement point), and the whole-system test of docs/security.md.
ACCESS_TESTS = ["-p", "holdfast-core", "-p", "holdfast-rpc", "-p", "holdfast-gateway", "--lib"]
SECURITY_E2E = ["-p", "holdfast", "--test", "security"]
# The Raft log's durability rule (raft/src/log_store.rs): the server packages' lib
# tests plus the raft crate's, one package set.
RAFT_TESTS = [*SERVER_TESTS[:-1], "-p", "holdfast-raft", "--lib"]

# (name, file, exact text, replacement, cargo test args)
MUTANTS = [
    ("a deposed leader keeps a waiter waiting, and answers it with the grant it applies late", "cells/server/src/leader.rs",
     "        cell.hooks.end_term(term);\n", "        let _ = term;\n",
     ["-p", "holdfast-cell", "--test", "cell", "--", "deposed"]),
    # Issue #42: the safety holes found by reading, each with the test that reproduced it.
    ("a node back on an empty disk votes as the member it was (a committed grant lost, its token issued again)", "raft/src/identity.rs",
     "            Some(expected) if expected == self.disk => Ok(()),", "            Some(_) => Ok(()),",
     ["-p", "holdfast-cell", "--test", "safety", "a_node_back"]),
    ("init forms a second group around a member that holds Raft state", "raft/src/identity.rs",
     "    if pristine && who.has_state {", "    if false && pristine && who.has_state {",
     ["-p", "holdfast-cell", "--test", "safety", "initialize_refuses"]),
    ("a grant committed past the ownership lease is answered", "cells/server/src/cell.rs",
     "        if !covered {", "        if false && !covered {",
     ["-p", "holdfast-cell", "--test", "ownership", "a_grant_whose_commit_stalls"]),
    ("a waiter is woken with a grant committed past the ownership lease", "cells/server/src/term.rs",
     "EventKind::Acquired { token, .. } if self.covers(now, &ev.shard, token.epoch()) => WaitResult::Granted(token),",
     "EventKind::Acquired { token, .. } => WaitResult::Granted(token),", SERVER_TESTS),
    ("a release is bound to nobody: one sent before the next grant ends it", "cells/server/src/service.rs",
     "        let cmd = Command::ReleaseHeld { shard, name, token, session };", "        let cmd = Command::Release { shard, name, token }; let _ = session;",
     ["-p", "holdfast-cell", "--test", "safety", "a_release_of"]),
    ("the table releases a hold for a session that does not hold it", f"{STATE}/locks.rs",
     "            if holder != by {", "            if false && holder != by {", CELL_TESTS),
    ("a seal leaves the shard's sessions alive", f"{STATE}/shards.rs",
     "        for session in homed {\n", "        for session in homed.into_iter().filter(|_| false) {\n", CELL_TESTS),
    ("finished acquires are forgotten by count, and an old retry is granted again", f"{STATE}/state.rs",
     "        while volatile && sess.ended_requests.len() > ENDED_REQUESTS_PER_SESSION {", "        while sess.ended_requests.len() > ENDED_REQUESTS_PER_SESSION {", CELL_TESTS),
    ("a finished acquire is forgotten before its retry window", "cells/server/src/clock.rs",
     "        let cutoff = now.checked_sub(RETRY_WINDOW)?;", "        let cutoff = now;", SERVER_TESTS),
    ("a new leader counts a hold's max-hold from its election", "cells/server/src/clock.rs",
     "let granted = arrivals.granted(key, name, token).unwrap_or(now).min(now);", "let granted = now;", SERVER_TESTS),
    ("a restarted leader resumes its old term (after a power cut, two entries share a log id)", "raft/src/node.rs",
     "            enable_leader_restore: Some(false),", "            enable_leader_restore: Some(true),",
     ["--manifest-path", "drills/sim/Cargo.toml", "--test", "sim", "a_cell_that_loses_power"]),
    ("the simulation's memory disk acknowledges appends it never made durable", "raft/src/log_store.rs",
     "                        disk.synced(&indexes);\n", "",
     ["--manifest-path", "drills/sim/Cargo.toml", "--test", "sim", "a_cell_that_loses_power"]),
    # Issue #43: static stability.
    ("a renewal is confirmed past the ownership lease", "cells/server/src/term.rs",
     "        if left.is_some_and(|l| l.is_zero()) {\n            return Renewal::LeaseEnded;", "        if false && left.is_some_and(|l| l.is_zero()) {\n            return Renewal::LeaseEnded;",
     ["-p", "holdfast-cell", "--test", "ownership", "renewals_are_confirmed_only"]),
    ("a renewal is confirmed for longer than the ownership lease has left", "cells/server/src/term.rs",
     "left.map_or(remaining, |l| remaining.min(l + ttl / 3))", "left.map_or(remaining, |l| remaining.max(l + ttl / 3))",
     ["-p", "holdfast-cell", "--test", "ownership", "renewals_are_confirmed_only"]),
    ("a new session is confirmed its whole TTL past the ownership lease", "cells/server/src/service.rs",
     "let confirmed = self.cell.hooks.door(|t| t.confirmable(Instant::now(), home.as_ref(), ttl, ttl))?.ok_or_else(|| lease_ended(session))?;",
     "let confirmed = ttl; let _ = (&home, lease_ended);",
     ["-p", "holdfast-gateway", "--test", "gateway", "a_cut_off_holder"]),
    ("an unplanned move completes before the source's lease ran out, unconfirmed", "registry/server/src/leader.rs",
     "ShardState::Moving(mv) if !mv.planned && leases.expired(now, k) =>", "ShardState::Moving(mv) if !mv.planned =>",
     ["-p", "holdfast-registry", "--test", "registry", "unplanned_move_completes_only_after"]),
    ("a new registry leader restarts an epoch on a deposed cell leader's word", "registry/server/src/service.rs",
     "                        (false, true) if settled => Some(Command::Restarted", "                        (false, true) => Some(Command::Restarted",
     ["-p", "holdfast-registry", "--test", "registry", "right_after_a_registry_election"]),
    ("a stalled replication stream waits forever", "raft/src/network.rs",
     "Err(_) if oldest.is_some() => return Err(Failure::Timeout(ttl)),", "Err(_) if false => return Err(Failure::Timeout(ttl)),",
     ["-p", "holdfast-raft", "--test", "cluster", "--", "a_stalled_replication_stream"]),
    ("append acknowledged unsynced", "raft/src/log_store.rs",
     "Some(db) => sync(&db),", "Some(_) => Ok(()),", RAFT_TESTS),
    ("vote saved ahead of queued appends", "raft/src/log_store.rs",
     "    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {\n        self.drain().await?;\n",
     "    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {\n", RAFT_TESTS),
    ("two exclusive holders", f"{STATE}/state.rs",
     "Mode::Exclusive => lock.holders.is_empty(),", "Mode::Exclusive => true,", CELL_TESTS),
    ("shared joins exclusive", f"{STATE}/state.rs",
     "Mode::Shared => lock.holders.values().all(|h| h.mode == Mode::Shared),", "Mode::Shared => true,", CELL_TESTS),
    ("token not advanced", f"{STATE}/state.rs",
     "shard.seq = token.seq();", "", CELL_TESTS),
    ("dead session stays queued", f"{STATE}/sessions.rs",
     "self.dequeue(ctx, key, name, session, rid, DequeueReason::SessionEnded);", "let _ = (key, name, rid);", CELL_TESTS),
    ("waiters granted newest first", f"{STATE}/state.rs",
     ".and_then(|l| l.waiters.pop_front()).expect(\"front exists\");", ".and_then(|l| l.waiters.pop_back()).expect(\"front exists\");", CELL_TESTS),
    ("a late copy of a lift ends the next lock-delay", f"{STATE}/locks.rs",
     "let this_one = begun.is_none_or(|b| recorded.is_none_or(|r| r == b));", "let this_one = true;", CELL_TESTS),
    ("a lock-delay's beginning is not recorded", f"{STATE}/state.rs",
     "self.delays.insert((key.clone(), name.clone()), token);", "", CELL_TESTS),
    ("a volatile table keeps a lock-delay the log named", f"{STATE}/locks.rs",
     "let begun = begun.filter(|_| !self.volatile);", "let begun = begun;",
     ["-p", "holdfast-cell-state", "--test", "volatile"]),
    ("a late copy of a lift drops the next lock-delay's timer", "cells/server/src/clock.rs",
     "// A lift of an earlier delay leaves the running one's timer alone.\n                self.follow_delay(now, state, shard, name);",
     "self.delays.remove(&(shard.clone(), name.clone()));", SERVER_TESTS),
    ("a late copy of a timeout ends a retried wait", f"{STATE}/locks.rs",
     "Some(RequestRecord::Waiting { .. }) if queued.is_some_and(", "Some(RequestRecord::Waiting { .. }) if false && queued.is_some_and(", CELL_TESTS),
    ("a wait's queueing is not recorded", f"{STATE}/locks.rs",
     "self.queued_at.insert((a.session, a.request_id.clone()), self.revision);", "", CELL_TESTS),
    ("barging past the queue", f"{STATE}/locks.rs",
     "!l.delayed && l.waiters.is_empty() && compatible(l, a.mode)", "!l.delayed && compatible(l, a.mode)", CELL_TESTS),
    ("retry not recognised", f"{STATE}/locks.rs",
     "if let Some(rec) = self.requests.get(&(a.session, a.request_id.clone())) {",
     "if let Some(rec) = None::<&RequestRecord> {", CELL_TESTS),
    ("release ignores the token", f"{STATE}/locks.rs",
     "let held = shard.locks.get(name).is_some_and(|l| l.holders.contains_key(&token));",
     "let token = shard.locks.get(name).and_then(|l| l.holders.keys().next().copied()).unwrap_or(token); let held = shard.locks.get(name).is_some_and(|l| l.holders.contains_key(&token));",
     CELL_TESTS),
    ("snapshot drops the revision", f"{STATE}/state.rs",
     "    pub(crate) revision: Revision,", "    #[serde(skip)]\n    pub(crate) revision: Revision,", CELL_TESTS),
    ("grant during lock-delay", f"{STATE}/state.rs",
     "if lock.delayed || shard.sealed.is_some() {", "if shard.sealed.is_some() {", CELL_TESTS),
    ("checkpoint marked only at commit", "cells/server/src/clock.rs",
     "                t.checkpointed = true;\n                t.checkpoint_in_flight = true;\n", "", SERVER_TESTS),
    ("late renewal revives an expiring session", "cells/server/src/clock.rs",
     "if t.expiring || t.deadline <= now {", "if t.deadline <= now {", SERVER_TESTS),
    ("new leader counts a checkpointed TTL from its election", "cells/server/src/clock.rs",
     "arrivals.seen(id).unwrap_or(now).min(now)", "now", SERVER_TESTS),
    ("grants after the ownership lease ran out", "cells/server/src/ownership.rs",
     "            Some(until) if now >= until => {", "            Some(until) if false && now >= until => {", SERVER_TESTS),
    ("fence check and write not atomic", "fence/src/rocks/mod.rs",
     "        let _serialized = self.stripe(&fkey);\n", "", SERVER_TESTS),
    ("a renewal's clear that lands before its checkpoint counts", "cells/server/src/clock.rs",
     "t.checkpointed = t.checkpoint_in_flight;", "t.checkpointed = false;", SERVER_TESTS),
    ("a closed or expired session's lock goes to a waiter without the ownership lease", "cells/server/src/cell.rs",
     "                    Some(home) => home,\n", "                    Some(_) => return Ok(()),\n",
     ["-p", "holdfast-cell", "--test", "ownership", "a_cut_off_cell_hands"]),
    ("an efficiency reservation does not advance the log's seq (a later leader reuses tokens)", "cells/state/src/volatile.rs",
     "        shard.seq = Seq(through);\n", "        let _ = through;\n", ["-p", "holdfast-cell-state", "--test", "volatile"]),
    ("a leader's volatile table grants beyond the tokens reserved for it", "cells/state/src/state.rs",
     "if shard.ceiling.is_some_and(|c| seq > c) {", "if false && shard.ceiling.is_some_and(|c| seq > c) {",
     ["-p", "holdfast-cell-state", "--test", "volatile"]),
    ("a grant reaches other namespaces", "core/src/access.rs",
     "(self.role >= role && ns.is_some() && self.ns.as_ref() == ns)", "(self.role >= role && ns.is_some())", ACCESS_TESTS),
    ("any secret of the right length matches a token", "rpc/src/bearer.rs",
     "mine.len() == sha256.len() && mine.bytes()", "mine.len() == sha256.len() || mine.bytes()", ACCESS_TESTS),
    ("a stale access policy is trusted", "gateway/src/access.rs",
     "Some(c) if c.fetched.elapsed() <= self.extend => Ok(f(c)),", "Some(c) if c.fetched.elapsed() <= self.extend * 1000 => Ok(f(c)),", ACCESS_TESTS),
    ("a snapshot header's size is believed", "raft/src/service.rs",
     "if header.total_bytes > MAX_SNAPSHOT_BYTES {", "if false && header.total_bytes > MAX_SNAPSHOT_BYTES {",
     ["-p", "holdfast-raft", "--test", "cluster", "a_snapshot_header"]),
    ("a session at its cap writes a Raft entry per refused attempt", "cells/server/src/service.rs",
     "self.cell.check_session_room(session, &rid).and_then(|()| self.cell.may_propose(&cmd))", "self.cell.may_propose(&cmd)",
     SECURITY_E2E),
    ("a wake-up outlives its call", "cells/server/src/machine.rs",
     "        let _ = self.hooks.door_in(self.term, |t| t.disarm_closed(&self.key));\n", "",
     ["-p", "holdfast-cell", "--test", "cell", "a_waiting_acquire"]),
    ("a node whose storage failed serves on", "raft/src/serving.rs",
     "                failure.fail(fatal.to_string());\n                stop.cancel();\n", "                let _ = fatal;\n",
     ["-p", "holdfast", "--test", "processes", "a_leader_whose"]),
    ("a deposed cell leader's renewal is believed", "registry/server/src/service.rs",
     "if term < *seen && now.duration_since(*at) < window {", "if false && term < *seen && now.duration_since(*at) < window {",
     ["-p", "holdfast-registry", "--test", "registry", "a_deposed_cell_leaders"]),
    ("a planned move completes before the source sealed", "registry/state/src/transfers.rs",
     "        if m.planned && m.seal.is_none() {", "        if false && m.planned && m.seal.is_none() {",
     ["-p", "holdfast-registry-state", "--test", "behaviour", "planned_move_drains"]),
    ("a recovered registry keeps the epochs of its copy", "registry/state/src/recovery.rs",
     "                epoch: raised(old.epoch).expect(\"checked above\"),", "                epoch: old.epoch,",
     ["-p", "holdfast-registry-state", "--test", "recovery"]),
    ("a restored registry keeps the epochs of its snapshot", "registry/server/src/recover.rs",
     "    let recovery = state.recover(gap,", "    let recovery = state.clone().recover(gap,",
     ["-p", "holdfast-cell", "--test", "ownership", "a_registry_restored_from_a_snapshot"]),
    ("a restored cell grants at the epochs of its copy", "cells/server/src/recover.rs",
     ".filter(|s| !s.sealed).map(|s| (s.key, s.epoch))", ".filter(|s| !s.sealed && false).map(|s| (s.key, s.epoch))",
     ["-p", "holdfast-cell", "--test", "ownership", "a_cell_restored_from_a_snapshot"]),
    ("automatic failover moves a shard its lease still covers", "registry/state/src/failover.rs",
     " || !lapsed(key) ||", " ||", ["-p", "holdfast-registry-state", "--test", "behaviour", "automatic_failover"]),
    ("automatic failover moves a namespace that did not opt in", "registry/state/src/failover.rs",
     "let Some(policy) = self.auto_failover.get(&key.ns) else", "let Some(policy) = self.auto_failover.values().next() else",
     ["-p", "holdfast-registry", "--test", "registry", "automatic_failover"]),
    ("a cell grants before the registry recorded its adoption", "cells/server/src/ownership.rs",
     "        if !c.adopted {", "        if false && !c.adopted {", SERVER_TESTS),
    ("a shard at the end of its seq never asks for the next epoch", "cells/server/src/ownership.rs",
     "!s.sealed && s.seq < Seq::BUMP_THRESHOLD", "!s.sealed", SERVER_TESTS),
    ("a restarted follower votes at once", "raft/src/service.rs",
     "Some(until) if !req.leadership_transfer && tokio::time::Instant::now() < until =>",
     "Some(until) if false && !req.leadership_transfer && tokio::time::Instant::now() < until =>",
     ["-p", "holdfast-raft", "--test", "cluster", "a_restarted_follower"]),
    ("a stopping leader does not hand over", "raft/src/serving.rs",
     "            self.node.hand_over_leadership(self.deadline / 2).await;\n", "",
     ["-p", "holdfast", "--test", "processes", "sigterm"]),
    ("the checker misses a grant after the ownership ended", "drills/src/checker.rs",
     "if ends.is_empty() || !ends.iter().all(|end| end.is_some_and(|e| e < line)) {",
     "if true || ends.is_empty() || !ends.iter().all(|end| end.is_some_and(|e| e < line)) {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses two holders of a lock", "drills/src/checker.rs",
     "                if let Some(&(other, g)) = holds.first() {", "                if let Some(&(other, g)) = holds.first().filter(|_| false) {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses a release nobody asked for", "drills/src/checker.rs",
     "if !before(released.get(&(lock, token))) && !before(closed.get(&session)) {",
     "if false && !before(released.get(&(lock, token))) && !before(closed.get(&session)) {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses a grant during the lock-delay", "drills/src/checker.rs",
     "let until = history.events[i].t_ms.saturating_add(delay - allowed);", "let until = history.events[i].t_ms;",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses a grant to a session that had ended", "drills/src/checker.rs",
     "                if let Some(&end) = ended.get(session) {", "                if let Some(&end) = ended.get(session).filter(|_| false) {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses a grant out of queue order", "drills/src/checker/queues.rs",
     "if let Some(&(first, q)) = queue.first().filter(|(s, _)| *s != session) {", "if let Some(&(first, q)) = queue.first().filter(|_| false) {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker lets any heal excuse a waiter", "drills/src/checker/queues.rs",
     "Some(FaultKind::CutFromRegistry | FaultKind::StaleRoute | FaultKind::RegistryQuorumLost | FaultKind::RegionCut)\n",
     "Some(_)\n",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("the checker misses a waiter that outstayed its bound", "drills/src/checker/queues.rs",
     "            if longest > bound {", "            if longest > bound && false {",
     ["-p", "holdfast-drills", "--test", "checker"]),
    ("a waiter whose call went away stays queued", "cells/server/src/clock.rs",
     "                    self.waits.insert((ev.session, ev.request_id.clone()), (now + ttl, Some(ev.revision)));\n", "                    let _ = ttl;\n",
     SERVER_TESTS),
    ("a stuck cell leader eats a renewal's whole deadline at the gateway", "gateway/src/gateway.rs",
     "let budget = Budget::per_attempt((total / 2).max(MIN_RENEWAL_ATTEMPT).min(total)).until(Instant::now() + total);",
     "let budget = Budget::per_attempt(total.max(MIN_RENEWAL_ATTEMPT));",
     ["-p", "holdfast", "--test", "paused_leader"]),
    ("a replica skips an entry it cannot read", "raft/src/sm_store.rs",
     "let payload = self.write_lock().apply(index, &req.payload)?;", "let payload = self.write_lock().apply(index, &req.payload).unwrap_or_default();",
     ["-p", "holdfast-raft", "--test", "storage_suite", "an_unreadable"]),
    ("a session is usable by anyone", "cells/server/src/cell.rs",
     "(Some(owner), Some(caller)) if owner == caller => Ok(()),", "(Some(_), Some(_)) => Ok(()),", SECURITY_E2E),
    ("a batch of renewals renews another's session", "cells/server/src/service.rs",
     "                None => self.cell.check_session_owner(ctx, session),\n", "                None => Ok(()),\n", SECURITY_E2E),
]


# The code the simulation runs (drills/sim): the cell and its Raft substrate; with
# --moves also the registry, the gateway and the cells' ownership of their shards.
SIMULATED = ("cells/state/", "cells/server/src/clock.rs", "cells/server/src/cell.rs", "cells/server/src/machine.rs",
             "cells/server/src/service.rs", "cells/server/src/term.rs", "cells/server/src/leader.rs", "raft/src/")
SIMULATED_WITH_MOVES = ("cells/server/src/ownership.rs", "cells/server/src/follow.rs", "registry/", "gateway/src/")
# In the simulated code, but out of its reach: RocksDB's in-memory environment keeps
# every write, synced or not, across a simulated crash, so a lost unsynced write
# cannot happen there (the raft crate's log-store tests, RAFT_TESTS, kill these).
NOT_SIMULATED = ("append acknowledged unsynced", "vote saved ahead of queued appends")
# In a file the one-cell simulation runs, but about the ownership lease, which exists
# only with the registry: run with moves.
NEEDS_MOVES = ("a closed or expired session's lock goes to a waiter without the ownership lease", "a grant committed past the ownership lease is answered",
               "a waiter is woken with a grant committed past the ownership lease")


class Scratch:
    """One scratch copy of the repo for a whole run, mutated one mutant at a time, built
    in the ordinary target dir.

    Cargo names a workspace member's artifacts by its path inside the workspace and
    judges freshness by file times, so the copy (which keeps the repo's times) takes
    the ordinary build's artifacts as they are: a mutant's build compiles only the
    crate it changed and its dependents in the mutant's package set. A mutant's file is
    written when it is applied and written back when it is undone, each write newer
    than the build before it, so a crate is rebuilt exactly when one of its files
    changed since its last build. (A fresh copy per mutant, every mutant file touched
    each time, rebuilt nearly the whole workspace for every mutant; a target dir of
    the mutants' own compiled the whole workspace once more on a fresh machine.)

    The price: the target dir holds artifacts built from a mutant, which a checkout
    whose files are older than that build (the repo the copy came from) would take
    for fresh. [`forget_our_builds`] removes the fingerprints of the repo's crates when
    the run ends, and at the start of the next run if one was cut short (a marker file
    says so), so every later build compiles them from their sources again.
    """

    def __init__(self, repo: str, tmp: str):
        self.dst = os.path.join(tmp, "repo")
        shutil.copytree(repo, self.dst, ignore=shutil.ignore_patterns(".git", "target"))

    @contextlib.contextmanager
    def mutated(self, path: str, old: str, new: str):
        f = os.path.join(self.dst, path)
        src = open(f).read()
        if src.count(old) != 1:
            raise SystemExit(f"the guarded text is gone from {path}; update this script")
        open(f, "w").write(src.replace(old, new))
        try:
            yield self.dst
        finally:
            open(f, "w").write(src)


def split_cargo_test_args(args: list) -> tuple:
    """`cargo test` arguments as this list writes them -> (what selects and builds the
    test binaries, what each binary is run with: the test name filter and anything
    after `--`)."""
    build, run, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a == "--":
            run += args[i + 1:]
            break
        if a in ("-p", "--package", "--test", "--manifest-path", "--features", "--bin"):
            build += args[i:i + 2]
            i += 2
            continue
        if a.startswith("-"):
            build.append(a)
        else:
            run.insert(0, a)
        i += 1
    return build, run


def packages_of(build_args: list) -> set:
    """The packages a build selects (the simulation's workspace by its manifest)."""
    names = {build_args[i + 1] for i, a in enumerate(build_args[:-1]) if a in ("-p", "--package")}
    if "drills/sim/Cargo.toml" in build_args:
        names.add("holdfast-sim")
    return names


def packages_with_bins(repo: str) -> set:
    """The repo's packages with programs of their own, which their integration tests may
    start (`CARGO_BIN_EXE_*`, a path into the target dir)."""
    return {pkg["name"] for pkg in workspace_packages(repo) if any("bin" in t["kind"] for t in pkg["targets"])}


# Mutants' tests running at once (each while later mutants build). Most of them wait on
# leases and elections far more than they compute.
MUTANT_RUNS = 2


def is_heavy(build_args: list) -> bool:
    """Tests that start clusters of processes or burn CPU (as scripts/test.sh's --heavy
    binaries): the command line's, the simulation's, the gateway's clusters."""
    packages = packages_of(build_args)
    return bool(packages & {"holdfast", "holdfast-sim"}) or ("holdfast-gateway" in packages and "--test" in build_args)


def as_workspace_build(build_args: list) -> list:
    """A package set's build as a build of the whole workspace's targets of those kinds:
    cargo settles dependencies' features over the packages a build selects, so `-p
    holdfast-cell` alone compiled about sixty third-party crates (tokio, serde, openraft
    among them) a second time, with other features than the suite's `--workspace` build
    (on a fresh machine, all of them; with `--exclude` as well). Selected this way every
    dependency is the suite's; `build_tests` keeps only the named packages' binaries.
    (The simulation is a workspace of one package, built whole already.)"""
    if "--manifest-path" in build_args:
        return build_args
    out, i = ["--workspace"], 0
    while i < len(build_args):
        if build_args[i] in ("-p", "--package"):
            i += 2
            continue
        out.append(build_args[i])
        i += 1
    return out


def build_tests(dst: str, build_args: list, env: dict, keep: str):
    """Builds a mutant's test binaries and copies them to `keep` (the next mutant's build
    overwrites the originals while these run). Returns [(executable, package dir)], or
    the compiler's output if the build failed."""
    wanted = packages_of(build_args)
    b = subprocess.run(["cargo", "test", "--locked", "--no-run", "--message-format=json-render-diagnostics", *as_workspace_build(build_args)],
                       cwd=dst, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       start_new_session=True, preexec_fn=lowest_priority)
    if b.returncode != 0:
        return b.stderr + "\n".join(json.loads(l).get("message", {}).get("rendered") or "" for l in b.stdout.splitlines() if l.startswith("{"))
    os.makedirs(keep, exist_ok=True)
    built = []
    for line in b.stdout.splitlines():
        msg = json.loads(line) if line.startswith("{") else {}
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]
                and msg["target"]["kind"] != ["bin"] and package_name(msg["package_id"]) in wanted):
            copy = os.path.join(keep, os.path.basename(msg["executable"]))
            shutil.copy2(msg["executable"], copy)
            built.append((copy, os.path.dirname(msg["manifest_path"])))
    return built


def package_name(package_id: str) -> str:
    """`path+file:///…/cells/server#holdfast-cell@0.1.0` -> `holdfast-cell` (a package
    whose name is its folder's: `…/core#0.1.0` -> `core`)."""
    tail = package_id.rsplit("#", 1)[-1]
    return tail.split("@")[0] if "@" in tail else package_id.rsplit("#", 1)[0].rsplit("/", 1)[-1]


class MutantRun:
    """A mutant's test binaries, run one after another as `cargo test` runs them (from
    their package's directory, stopping at the first that fails) on a thread of their
    own, so that the next mutant builds meanwhile."""

    def __init__(self, name: str, built: list, test_args: list, env: dict, packages: set, heavy: bool, build_s: float):
        self.name, self.packages, self.heavy, self.build_s = name, packages, heavy, build_s
        self.result, self.failing, self.run_s = None, "", 0.0
        self.thread = threading.Thread(target=self._run, args=(built, test_args, env))
        self.thread.start()

    def _run(self, built: list, test_args: list, env: dict):
        started = time.monotonic()
        try:
            for exe, cwd in built:
                r = subprocess.run([exe, *test_args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    lines = r.stdout.splitlines()
                    failing = [l for l in lines if "Test failed:" in l] or [l for l in lines if "panicked" in l]
                    self.failing = failing[0].strip()[:160] if failing else "tests failed"
                    self.result = "killed"
                    return
            self.result = "survived" if built else "no test binary was built"
        finally:
            self.run_s = time.monotonic() - started
            for exe, _ in built:
                with contextlib.suppress(OSError):
                    os.remove(exe)

    def wait(self) -> str:
        self.thread.join()
        return self.result

    def report(self) -> str:
        took = f"(built in {self.build_s:.0f} s, ran {self.run_s:.0f} s)"
        if self.result == "killed":
            return f"killed    {self.name}: {self.failing} {took}"
        if self.result == "survived":
            return f"SURVIVED  {self.name}: the tests did not notice {took}"
        return f"ERROR     {self.name}: {self.result} {took}"


def target_dir(repo: str) -> str:
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(repo, "target"))


def mutants_env() -> dict:
    # Incremental compilation: a mutant changes a line or two of one crate, and rustc
    # then recompiles only what the change touched (the first build of each package
    # set compiles our crates in full, once). Measured: the 13 mutants of the cell's
    # unit tests in 50 s instead of 147 s.
    return dict(os.environ, PROPTEST_CASES=os.environ.get("PROPTEST_CASES", "400"), CARGO_INCREMENTAL="1")


def workspace_packages(repo: str) -> list:
    """The repo's own packages, of both workspaces, as `cargo metadata` describes them."""
    packages = []
    for manifest in ("Cargo.toml", "drills/sim/Cargo.toml"):
        meta = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--locked", "--manifest-path", manifest],
                              cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
        packages += json.loads(meta.stdout)["packages"]
    return packages


def forget_our_builds(repo: str, profile: str) -> None:
    """Removes the fingerprints of the repo's own crates in `profile` (`<package>-<hash>`
    under `.fingerprint`): cargo rebuilds a crate whose fingerprint is missing, so no
    later build takes a mutant's artifact for the real code's. Third-party crates are
    never mutated and keep theirs."""
    fingerprints = os.path.join(target_dir(repo), profile, ".fingerprint")
    if not os.path.isdir(fingerprints):
        return
    ours = {pkg["name"] for pkg in workspace_packages(repo)}
    for name in os.listdir(fingerprints):
        if name.rsplit("-", 1)[0] in ours:
            shutil.rmtree(os.path.join(fingerprints, name), ignore_errors=True)


@contextlib.contextmanager
def mutants_build(repo: str, profile: str):
    """Brackets a run that builds mutants into the ordinary target dir: a run cut short
    before (its marker is still there) is cleaned up first, and this one when it ends."""
    marker = os.path.join(target_dir(repo), f"mutants-building-{profile}")
    if os.path.exists(marker):
        print("mutants: an earlier run was cut short; its mutants' artifacts are forgotten first", flush=True)
        forget_our_builds(repo, profile)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    open(marker, "w").close()
    try:
        yield
    finally:
        forget_our_builds(repo, profile)
        os.remove(marker)


def simulate(repo: str, seeds: int, moves_seeds: int, only: list) -> int:
    env = mutants_env()
    rows = []
    with mutants_build(repo, "perf"), tempfile.TemporaryDirectory(prefix="holdfast-mutants-") as tmp:
        scratch = Scratch(repo, tmp)
        for name, path, old, new, _ in MUTANTS:
            moves = path.startswith(SIMULATED_WITH_MOVES) or name in NEEDS_MOVES
            if not (path.startswith(SIMULATED) or moves) or name in NOT_SIMULATED or (only and not any(o in name for o in only)) or (moves and moves_seeds == 0):
                continue
            started = time.monotonic()
            with scratch.mutated(path, old, new) as dst:
                b = subprocess.run(["cargo", "build", "-q", "--locked", "--profile", "perf", "--manifest-path", "drills/sim/Cargo.toml"], cwd=dst, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if b.returncode != 0:
                    print(b.stdout[-3000:])
                    print(f"mutant '{name}' does not build in the simulation", flush=True)
                    return 2
                sim = os.path.join(target_dir(repo), "perf", "holdfast-sim")
                n = moves_seeds if moves else seeds
                r = subprocess.run([sim, "--seeds", str(n), "--until-found", "--tick-ms", "5", *(["--moves"] if moves else [])], cwd=dst, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            found = [l for l in r.stdout.splitlines() if l.startswith("found by")]
            took = f"({'moves, ' if moves else ''}{time.monotonic() - started:.0f} s with the build)"
            # A server's panic (a state machine's invariant) aborts the simulation, which
            # names the seed first: found too. A panic of the simulation itself found
            # nothing and proves nothing either.
            panicked = [l for l in r.stdout.splitlines() if "the simulation itself panicked" in l]
            row = (f"found     {name}: {found[0]} {took}" if found
                   else f"ERROR     {name}: {panicked[0]} {took}" if panicked
                   else f"not found {name}: no seed of {n} failed {took}")
            rows.append(row)
            print(row, flush=True)
    print(f"{sum(r.startswith('found ') for r in rows)} of {len(rows)} simulated mutants found within {seeds} seeds ({moves_seeds} with moves)")
    return 0


def main() -> int:
    repo = os.getcwd()
    only = sys.argv[1:]
    if only[:1] == ["--simulate"]:
        seeds, rest = int(only[1]), only[2:]
        moves_seeds = seeds
        if rest[:1] == ["--moves"]:
            moves_seeds, rest = int(rest[1]), rest[2:]
        return simulate(repo, seeds, moves_seeds, rest)
    # Every guarded text first, in a second: a mutant whose text moved fails the run
    # before any build. `--texts-only` stops there (scripts/test.sh runs it before the
    # suite, so a moved text fails CI at once rather than after half an hour).
    stale = [f"{name} ({path})" for name, path, old, _, _ in MUTANTS if open(os.path.join(repo, path)).read().count(old) != 1]
    if stale:
        print(f"guarded text missing or not unique; update this script: {stale}", flush=True)
        return 2
    if only == ["--texts-only"]:
        print(f"all {len(MUTANTS)} guarded texts found once")
        return 0
    # Mutants that run the same tests one after another, each file's together: a build
    # then recompiles only the crate a mutant changed (and its dependents in that set).
    chosen = sorted((m for m in MUTANTS if not only or any(o in m[0] for o in only)), key=lambda m: (m[4], m[1]))
    survivors = []
    began = time.monotonic()
    env = mutants_env()
    with_bins = packages_with_bins(repo)
    with mutants_build(repo, "debug"), tempfile.TemporaryDirectory(prefix="holdfast-mutants-") as tmp:
        scratch = Scratch(repo, tmp)
        remaining, running = list(chosen), []

        def finish(run):
            # A mutant counts as caught only if a test failed on it; a build that
            # produced no test binary proves nothing either.
            if run.wait() != "killed":
                survivors.append(run.name)
            print(run.report(), flush=True)
            running.remove(run)

        try:
            while remaining:
                # The next mutant in order whose build relinks no program that a running
                # mutant's tests start (a package's own binaries, by a path compiled into
                # its tests); if there is none, the oldest run ends first.
                pick = next((m for m in remaining if not any(r.packages & packages_of(split_cargo_test_args(m[4])[0]) & with_bins for r in running)), None)
                if pick is None:
                    finish(running[0])
                    continue
                remaining.remove(pick)
                name, path, old, new, args = pick
                build_args, test_args = split_cargo_test_args(args)
                started = time.monotonic()
                with scratch.mutated(path, old, new) as dst:
                    built = build_tests(dst, build_args, env, os.path.join(tmp, f"mutant-{len(chosen) - len(remaining)}"))
                if isinstance(built, str):
                    print(built[-3000:])
                    print(f"mutant '{name}' does not compile; fix the mutant", flush=True)
                    return 2
                # Two mutants' tests at a time, and never two that start many processes.
                heavy = is_heavy(build_args)
                while len(running) >= MUTANT_RUNS or (heavy and any(r.heavy for r in running)):
                    finish(running[0])
                running.append(MutantRun(name, built, test_args, env, packages_of(build_args), heavy, time.monotonic() - started))
        finally:
            while running:
                finish(running[0])
    spent = f"{len(chosen)} mutants in {time.monotonic() - began:.0f} s"
    if survivors:
        print(f"{len(survivors)} mutant(s) survived: {survivors} ({spent})")
        return 1
    print(f"every mutant was caught ({spent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
