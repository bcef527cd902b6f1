#!/usr/bin/env python3
"""Builds the test binaries of one or more cargo workspaces, then runs them side by side.

`cargo test` runs one test binary after another. Most of holdfast's binaries spend their
time waiting (leases to run out, elections, processes to start), so on 2 cores running
a few at once cuts the suite's wall time without starving anyone (docs/development.md,
"CI time"). Each binary runs as cargo would run it: from its package's directory, with
the arguments after `--` (scripts/test.sh passes `--test-threads=2`).

    scripts/run_tests.py [--jobs N] [--heavy KEY ...] [--background KEY ...] [--no-fail-fast]
                         [--timeout S] --suite="CARGO ARGS" [--suite=...] [-- TEST ARGS]

--suite      one `cargo test` selection, e.g. --suite=--workspace or
             --suite="--manifest-path drills/sim/Cargo.toml" (with `=`: the value
             starts with dashes); its doc tests run as one more job
--jobs       binaries at once (default $TEST_JOBS, else 2)
--heavy      a binary (by its key, e.g. "cli test:drill") that runs no other heavy
             one beside it: those that start many processes or burn CPU, whose
             short TTLs starve when they share 2 cores (a drill's 2 s session lost)
--background a binary whose tests do not read the wall clock (the deterministic
             simulation: simulated time, the same history however slow it runs) that
             starts first and runs beside everything, at the lowest CPU priority, outside
             the --jobs count: it takes only the CPU the others leave idle, and the
             heavy ones need not wait for it
--timeout    seconds one binary may take before it is killed and counted failed (1500)
--no-fail-fast  run everything even after a failure (default: stop at the first)

Each binary's output is kept and printed in full if it fails; otherwise one line says
how long it took and how much CPU it used. Durations are remembered in
$CARGO_TARGET_DIR/test-durations.json (over scripts/test-durations.json, the repo's) so the
longest binaries start first.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time


def build(suite: list) -> list:
    """Builds a suite's test binaries; returns (key, executable, package dir) for each."""
    cmd = ["cargo", "test", "--locked", "--no-run", "--message-format=json-render-diagnostics", *suite]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"run_tests: the build failed: {shlex.join(cmd)}")
    found = []
    for line in p.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
            pkg_dir = os.path.dirname(msg["manifest_path"])
            target = msg["target"]
            kind = target["kind"][0] if target["kind"] in (["test"], ["bin"]) else "lib"
            key = f"{os.path.relpath(pkg_dir) if pkg_dir != os.getcwd() else '.'} {kind}:{target['name']}"
            found.append((key, msg["executable"], pkg_dir))
    return found


class Job:
    def __init__(self, key: str, argv: list, cwd: str):
        self.key, self.argv, self.cwd = key, argv, cwd
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = None
        self.started = 0.0
        self.cpu = 0.0
        self.killed = False

    def start(self, background: bool = False):
        self.started = time.monotonic()
        # A session of its own: a timeout or a failure elsewhere kills the binary and
        # every process its tests started.
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=lowest_priority if background else None)

    def kill(self):
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read()


def lowest_priority():
    """Runs in the child, after its new session began: nice 19, and the same for the
    session's scheduling group where the kernel groups by session (autogroup, on by
    default on Linux desktops and servers alike: within a group alone, nice would only
    weigh the job against itself)."""
    os.nice(19)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
    except OSError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", action="append", required=True)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "2")))
    ap.add_argument("--heavy", action="append", default=[])
    ap.add_argument("--background", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--no-fail-fast", action="store_true")
    argv = sys.argv[1:]
    test_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, test_args = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)

    began = time.monotonic()
    jobs = []
    for suite in a.suite:
        args = shlex.split(suite)
        for key, exe, cwd in build(args):
            jobs.append(Job(key, [exe, *test_args], cwd))
        jobs.append(Job(f"doc tests of {suite}", ["cargo", "test", "--locked", "--doc", *args], os.getcwd()))
    print(f"run_tests: {len(jobs)} test binaries built in {time.monotonic() - began:.0f} s; running {a.jobs} at a time", flush=True)

    history_path = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "test-durations.json")
    # The durations measured here, over the ones the repo ships (measured on a 2-core
    # machine): a fresh machine's first run starts its longest binaries first too.
    history = {}
    for path in (os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-durations.json"), history_path):
        try:
            history.update(json.load(open(path)))
        except (OSError, ValueError):
            pass
    # Longest first (unknown ones count as long), so the last to finish are short.
    pending = sorted(jobs, key=lambda j: -history.get(j.key, 1e9))
    running, failed, done = [], [], []
    ran_from = time.monotonic()
    last_note = ran_from
    for job in [j for j in pending if j.key in a.background]:
        pending.remove(job)
        job.start(background=True)
        running.append(job)
    while pending or running:
        while len([j for j in running if j.key not in a.background]) < a.jobs and (not failed or a.no_fail_fast):
            heavy_running = any(j.key in a.heavy for j in running)
            job = next((j for j in pending if not (heavy_running and j.key in a.heavy)), None)
            if job is None:
                break
            pending.remove(job)
            job.start()
            running.append(job)
        if not running:
            break
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        job = next((j for j in running if j.proc.pid == pid), None) if pid else None
        if job is not None:
            job.proc.returncode = os.waitstatus_to_exitcode(status)
            running.remove(job)
            took = time.monotonic() - job.started
            job.cpu = usage.ru_utime + usage.ru_stime
            summary = next((l for l in job.output().splitlines() if l.startswith("test result:")), "")
            counted = summary.split(";")[0].removeprefix("test result: ") if summary else ""
            if job.proc.returncode == 0:
                history[job.key] = round(took, 1)
                done.append((took, job.cpu, job.key))
                print(f"ok      {took:6.1f} s  cpu {job.cpu:6.1f} s  {job.key} {counted}", flush=True)
            elif job.killed and failed:
                print(f"stopped {took:6.1f} s  {job.key}: killed after another binary failed", flush=True)
            else:
                failed.append(job.key)
                print(job.output(), flush=True)
                print(f"FAILED  {took:6.1f} s  {job.key}: exit {job.proc.returncode}", flush=True)
                if not a.no_fail_fast:
                    for other in running:
                        other.kill()
        elif not pid:
            time.sleep(0.2)
        # Timeouts and a note of what is still running, now and then.
        now = time.monotonic()
        for other in running:
            if now - other.started > a.timeout and not other.killed:
                print(f"run_tests: {other.key} ran past {a.timeout:.0f} s; killing it", flush=True)
                other.kill()
        if now - last_note > 300 and running:
            last_note = now
            print("run_tests: still running " + ", ".join(f"{j.key} ({now - j.started:.0f} s)" for j in running), flush=True)

    os.makedirs(os.path.dirname(history_path) or ".", exist_ok=True)
    with open(history_path, "w") as f:
        json.dump(history, f, indent=0, sort_keys=True)
    wall = time.monotonic() - ran_from
    busy = sum(d for d, _, _ in done)
    cpu = sum(c for _, c, _ in done)
    print(f"run_tests: {len(done)} passed, {len(failed)} failed; {wall:.0f} s of running for {busy:.0f} s of binaries "
          f"({cpu:.0f} s of CPU) at {a.jobs} at a time", flush=True)
    if failed:
        print("run_tests: FAILED: " + ", ".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
