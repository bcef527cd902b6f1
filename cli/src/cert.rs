//! `holdfast cert`: the cluster's certificates, in the layout every holdfast process
//! reads (docs/security.md): a CA, a certificate per node naming the hosts it is
//! reached at, a client certificate per user.

use clap::{Args, Subcommand};
use holdfast_rpc::certs::Ca;
use holdfast_rpc::{CertFiles, Identity};
use std::path::{Path, PathBuf};

// The command names (`create-ca`, `create-node`, `create-client`) are what operators
// of certificate-based databases already type.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Subcommand)]
pub enum CertCmd {
    /// Create the cluster's CA: `ca.crt` in --certs-dir, its key at --ca-key (keep it
    /// offline: whoever holds it can mint any identity).
    ///
    /// Example: holdfast cert create-ca --certs-dir certs --ca-key safe/ca.key
    CreateCa {
        #[arg(long)]
        certs_dir: PathBuf,
        /// Default: <certs-dir>/ca.key.
        #[arg(long)]
        ca_key: Option<PathBuf>,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Create a node's certificate (`node.crt`, `node.key`, and a copy of `ca.crt`) in
    /// --certs-dir, naming every host (DNS name or IP) the node is reached at.
    ///
    /// Example: holdfast cert create-node --certs-dir certs/cell-east-1-n1 --ca-key safe/ca.key \
    ///            --name cell-east-1-n1 --host cell-east-1-n1.holdfast.svc --host 10.0.3.7
    CreateNode {
        #[arg(long)]
        certs_dir: PathBuf,
        #[command(flatten)]
        ca: CaFiles,
        /// The node's identity (`holdfast://node/<name>`).
        #[arg(long)]
        name: String,
        /// A DNS name or IP clients dial the node at; repeat for each.
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
    /// Create a user's client certificate (`client.<user>.crt`, `.key`, and a copy of
    /// `ca.crt`) in --certs-dir. `root` holds a key to every port.
    ///
    /// Example: holdfast cert create-client --certs-dir ~/.holdfast/certs --ca-key safe/ca.key --user alice
    CreateClient {
        #[arg(long)]
        certs_dir: PathBuf,
        #[command(flatten)]
        ca: CaFiles,
        #[arg(long)]
        user: String,
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
}

/// The CA that signs.
#[derive(Debug, Args)]
pub struct CaFiles {
    /// The CA's key.
    #[arg(long)]
    ca_key: PathBuf,
    /// The CA's certificate. Default: `ca.crt` next to the key.
    #[arg(long)]
    ca_cert: Option<PathBuf>,
}

impl CaFiles {
    fn read(&self) -> Result<Ca, String> {
        let cert = self.ca_cert.clone().unwrap_or_else(|| self.ca_key.parent().unwrap_or(Path::new(".")).join("ca.crt"));
        Ca::read(&cert, &self.ca_key).map_err(|e| e.to_string())
    }
}

pub fn run(cmd: CertCmd) -> Result<(), String> {
    match cmd {
        CertCmd::CreateCa { certs_dir, ca_key, days } => {
            let key = ca_key.unwrap_or_else(|| certs_dir.join("ca.key"));
            if key.exists() {
                return Err(format!("{} exists: a second CA would not trust the certificates of the first", key.display()));
            }
            Ca::create(days).and_then(|ca| ca.write(&certs_dir, &key)).map_err(|e| e.to_string())?;
            println!("CA: {} (key {}, keep it offline)", certs_dir.join("ca.crt").display(), key.display());
        }
        CertCmd::CreateNode { certs_dir, ca, name, hosts, days } => {
            let id = Identity::node(&name).map_err(|e| e.to_string())?;
            let files = CertFiles::node(&certs_dir);
            ca.read()?.issue(&id, &hosts, days, &files).map_err(|e| e.to_string())?;
            println!("{id}: {} (hosts {})", files.cert.display(), hosts.join(", "));
        }
        CertCmd::CreateClient { certs_dir, ca, user, days } => {
            let id = Identity::user(&user).map_err(|e| e.to_string())?;
            let files = CertFiles::user(&certs_dir, &user);
            ca.read()?.issue(&id, &[], days, &files).map_err(|e| e.to_string())?;
            println!("{id}: {}", files.cert.display());
        }
    }
    Ok(())
}
