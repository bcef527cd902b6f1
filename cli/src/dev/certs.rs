//! The playground's certificates, under `<data-dir>/certs`: a CA (its key beside it:
//! this is a laptop), `client.root.crt` for the command line, and per process
//! `nodes/<name>/` with the node certificate naming the host it listens on. Made once;
//! a restart reuses them, and a missing one is made again.

use super::layout::Layout;
use holdfast_rpc::certs::Ca;
use holdfast_rpc::{CertFiles, Identity};
use std::path::{Path, PathBuf};

/// How long playground certificates are valid, days.
const DAYS: u32 = 825;

pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("certs")
}

/// The certificates directory of process `name`.
pub fn node_dir(data_dir: &Path, name: &str) -> PathBuf {
    dir(data_dir).join("nodes").join(name)
}

/// Makes whatever certificate is missing.
pub fn ensure(layout: &Layout) -> Result<(), String> {
    let certs = dir(&layout.data_dir);
    let key = certs.join("ca.key");
    let ca = if key.exists() { Ca::read(&certs.join("ca.crt"), &key) } else { Ca::create(DAYS * 4).and_then(|ca| ca.write(&certs, &key).map(|_| ca)) }
        .map_err(|e| format!("the playground's CA: {e}"))?;
    let root = CertFiles::user(&certs, "root");
    if !root.cert.exists() {
        ca.issue(&Identity::user("root").expect("a valid name"), &[], DAYS, &root).map_err(|e| e.to_string())?;
    }
    for (name, host) in layout.processes() {
        let files = CertFiles::node(&node_dir(&layout.data_dir, &name));
        if files.cert.exists() {
            continue;
        }
        let id = Identity::node(&name).map_err(|e| e.to_string())?;
        let hosts = [host, "127.0.0.1".to_owned(), "localhost".to_owned()];
        ca.issue(&id, &hosts, DAYS, &files).map_err(|e| e.to_string())?;
    }
    Ok(())
}
