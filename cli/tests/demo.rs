//! `holdfast demo` runs the timeline of docs/design.md on a fresh playground and passes.

use std::process::Command;

#[test]
fn holdfast_demo_plays_the_seed_timeline_and_passes() {
    // 60 ports, reserved machine-wide: other test binaries run beside this one.
    let ports = holdfast_testkit::port_block(64);
    let base = ports.base;
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast")).args(["demo", "--base-port", &base.to_string()]).output().expect("run holdfast demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "holdfast demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for step in
        ["A writes with token", "A paused (SIGSTOP)", "worker B", "A resumes", "REJECTED", "now on west-1", "(epoch 2)", "every step happened as expected"]
    {
        assert!(stdout.contains(step), "the timeline lacks {step:?}:\n{stdout}");
    }
}
