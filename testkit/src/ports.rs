//! Port ranges for tests that start a whole deployment on fixed ports (`holdfast dev
//! --base-port`, the Terraform single-host deployment). Test binaries run side by side
//! (scripts/run_tests.py), so a range is reserved machine-wide: a lock file per range,
//! held while the [`PortBlock`] lives and released by the kernel if the process dies.
//! Ranges sit below the kernel's ephemeral range when there is room, since a port
//! checked free there can be taken by any outgoing connection before its node binds it.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;

/// The widest range a caller may ask for; ranges are this far apart.
const STRIDE: u32 = 320;
const FIRST: u32 = 20_000;

/// A reserved range `base..base + span`, every port of it free when reserved.
#[derive(Debug)]
pub struct PortBlock {
    pub base: u16,
    _lock: File,
}

/// Reserves `span` (at most 320) consecutive free ports on 127.0.0.1 for as long as the
/// returned block lives. Panics if none is free: a test cannot run without one.
pub fn port_block(span: u16) -> PortBlock {
    assert!(u32::from(span) <= STRIDE, "a port block spans at most {STRIDE} ports");
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse::<u32>().ok()))
        .unwrap_or(32_768);
    // The ranges below the ephemeral ones, or 20,000-59,999 if that leaves too few.
    let top = if ephemeral_from >= FIRST + 10 * STRIDE { ephemeral_from } else { 60_000 };
    let blocks = (top - FIRST) / STRIDE;
    let dir = std::env::temp_dir().join("holdfast-test-ports");
    std::fs::create_dir_all(&dir).expect("create the port lock directory");
    let first = std::process::id() % blocks;
    for i in 0..blocks {
        let base = (FIRST + ((first + i) % blocks) * STRIDE) as u16;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(format!("{base}.lock"))).expect("open a port lock");
        if lock.try_lock().is_err() {
            continue;
        }
        if (0..span).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok()) {
            return PortBlock { base, _lock: lock };
        }
    }
    panic!("no free range of {span} ports between {FIRST} and {top}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_blocks_never_overlap_and_a_dropped_one_is_free_again() {
        let a = port_block(300);
        let b = port_block(300);
        let c = port_block(10);
        for (x, y) in [(&a, &b), (&a, &c), (&b, &c)] {
            assert!(x.base.abs_diff(y.base) >= 300, "{} and {}", x.base, y.base);
        }
        let path = std::env::temp_dir().join("holdfast-test-ports").join(format!("{}.lock", a.base));
        let other = File::open(&path).unwrap();
        assert!(other.try_lock().is_err(), "a live block's lock must be held");
        drop(a);
        assert!(other.try_lock().is_ok(), "a dropped block's lock must be released");
    }
}
