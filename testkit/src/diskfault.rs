//! Disk faults for tests of real processes: an `LD_PRELOAD` shim
//! (`testkit/diskfault/diskfault.c`) that fails or slows the syncs and writes of one
//! process's data directory while a control file says so. Built here with the system C
//! compiler (`$CC`, else `cc`), once per test process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the shim does to the files under the process's data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFault {
    None,
    /// `fsync`, `fdatasync` and `sync_file_range` fail with EIO.
    FailSync,
    /// `write`, `pwrite`, `writev` and `pwritev` fail with EIO.
    FailWrite,
    /// Every `fsync` and `fdatasync` takes this many milliseconds longer.
    SlowSync(u64),
}

/// The shim's path, built on first use; panics with the compiler's output if it fails.
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("diskfault/diskfault.c");
        let out = std::env::temp_dir().join(format!("holdfast-diskfault-{}.so", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(&cc).args(["-shared", "-fPIC", "-O2", "-o"]).arg(&out).arg(&src).arg("-ldl").output();
        match built {
            Ok(o) if o.status.success() => out,
            Ok(o) => panic!("building the disk-fault shim with {cc} failed: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => panic!("building the disk-fault shim: cannot run {cc}: {e}"),
        }
    })
}

/// The environment that puts a process's files under `data_dir` in the shim's hands,
/// steered by the control file `ctl`.
pub fn env(data_dir: &Path, ctl: &Path) -> Vec<(&'static str, String)> {
    vec![("LD_PRELOAD", shim().display().to_string()), ("DISKFAULT_DIR", data_dir.display().to_string()), ("DISKFAULT_CTL", ctl.display().to_string())]
}

/// Sets the fault the shim injects from its next call on.
pub fn set(ctl: &Path, fault: DiskFault) {
    let line = match fault {
        DiskFault::None => String::new(),
        DiskFault::FailSync => "fail-sync\n".into(),
        DiskFault::FailWrite => "fail-write\n".into(),
        DiskFault::SlowSync(ms) => format!("slow-sync {ms}\n"),
    };
    std::fs::write(ctl, line).expect("write the disk-fault control file");
}

/// The faults the shim injected so far, as (unix ms, call, path), oldest first.
pub fn injected(ctl: &Path) -> Vec<(u64, String, String)> {
    let log = PathBuf::from(format!("{}.log", ctl.display()));
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.splitn(3, ' ');
            Some((w.next()?.parse().ok()?, w.next()?.to_owned(), w.next()?.to_owned()))
        })
        .collect()
}
