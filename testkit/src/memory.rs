//! How much memory a process holds, for tests that bound what a caller can make a
//! node keep (Linux `/proc`).

/// Resident set size of process `pid` (`None`: this process), bytes.
pub fn rss_bytes(pid: Option<u32>) -> u64 {
    let path = pid.map_or_else(|| "/proc/self/status".to_owned(), |p| format!("/proc/{p}/status"));
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{path} has no VmRSS"));
    kb * 1024
}
