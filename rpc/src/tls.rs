//! Mutual TLS: the certificates a process presents and trusts, reloaded from disk
//! without a restart, and the identity a peer's certificate proves.
//!
//! Every holdfast certificate is signed by the cluster's CA and names its holder in a
//! URI subject-alternative name: `holdfast://node/<name>` for a server process (cell
//! node, registry voter, gateway), `holdfast://user/<name>` for a person or a service.
//! Server certificates also carry the DNS names and IPs they are reached at, which
//! clients verify. `holdfast cert` makes them (docs/security.md).
//!
//! A certificates directory holds `ca.crt` and, for a server, `node.crt` and
//! `node.key`; for a client, `client.<user>.crt` and `client.<user>.key`.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tracing::{info, warn};

/// The URI scheme of holdfast identities in certificates.
pub const IDENTITY_SCHEME: &str = "holdfast://";

/// The user that holds a key to every port: the bootstrap operator (like a database's
/// root). Keep its key offline.
pub const ROOT_USER: &str = "root";

/// How often the certificate files are looked at for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Who a certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Identity {
    /// A holdfast server process: a peer on every port.
    Node(String),
    /// A person or a service.
    User(String),
}

/// A name that cannot be an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("identity name {0:?}: 1-64 characters of a-z, 0-9, '.', '_', '-'")]
pub struct BadName(pub String);

fn check_name(name: &str) -> Result<(), BadName> {
    if holdfast_core::valid_principal_name(name) {
        Ok(())
    } else {
        Err(BadName(name.to_owned()))
    }
}

impl Identity {
    pub fn node(name: &str) -> Result<Identity, BadName> {
        check_name(name).map(|_| Identity::Node(name.to_owned()))
    }

    pub fn user(name: &str) -> Result<Identity, BadName> {
        check_name(name).map(|_| Identity::User(name.to_owned()))
    }

    /// The URI it is written as in a certificate.
    pub fn uri(&self) -> String {
        match self {
            Identity::Node(n) => format!("{IDENTITY_SCHEME}node/{n}"),
            Identity::User(n) => format!("{IDENTITY_SCHEME}user/{n}"),
        }
    }

    /// Reads a certificate's URI back; `None` for anything that is not a holdfast
    /// identity.
    pub fn from_uri(uri: &str) -> Option<Identity> {
        let rest = uri.strip_prefix(IDENTITY_SCHEME)?;
        let (kind, name) = rest.split_once('/')?;
        match kind {
            "node" => Identity::node(name).ok(),
            "user" => Identity::user(name).ok(),
            _ => None,
        }
    }

    /// A peer of the cluster, trusted on every port: a node, or the root user.
    pub fn is_node_or_root(&self) -> bool {
        matches!(self, Identity::Node(_)) || *self == Identity::User(ROOT_USER.into())
    }

    /// The identity a certificate (DER) proves, from its URI SAN.
    pub fn of_certificate(der: &[u8]) -> Option<Identity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let san = cert.subject_alternative_name().ok()??;
        san.value.general_names.iter().find_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Identity::from_uri(u),
            _ => None,
        })
    }
}

impl fmt::Display for Identity {
    /// `node:<name>` or `user:<name>`, as audit records and policies write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Node(n) => write!(f, "node:{n}"),
            Identity::User(n) => write!(f, "user:{n}"),
        }
    }
}

/// TLS settings of a server (`[tls]` in its config file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsOptions {
    /// Plaintext, no authentication: every port open to whoever reaches it. For a
    /// laptop only; every process logs it loudly. Default false.
    pub insecure: bool,
    /// Directory with `ca.crt`, `node.crt` and `node.key` (docs/security.md).
    /// Required unless `insecure`.
    pub certs_dir: Option<PathBuf>,
}

impl TlsOptions {
    /// The security a server with these options runs with.
    pub fn security(&self) -> Result<Security, String> {
        if self.insecure {
            warn!("INSECURE: plaintext and no authentication on every port (--insecure): anyone who reaches this process can call anything; never run a deployment this way");
            return Ok(Security::Insecure);
        }
        Ok(Security::Tls(Arc::new(self.material()?)))
    }

    fn material(&self) -> Result<TlsMaterial, String> {
        let dir = self
            .certs_dir
            .as_ref()
            .ok_or("TLS is on by default: set tls.certs_dir (--certs-dir) to a directory with ca.crt, node.crt and node.key, or run with --insecure")?;
        TlsMaterial::load(CertFiles::node(dir))
    }

    /// The certificates load (or plaintext was asked for).
    pub fn validate(&self) -> Result<(), String> {
        if self.insecure {
            return Ok(());
        }
        self.material().map(|_| ())
    }
}

/// Where a certificate, its key and the CA bundle are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// A server's files in `dir`.
    pub fn node(dir: &Path) -> CertFiles {
        CertFiles { ca: dir.join("ca.crt"), cert: dir.join("node.crt"), key: dir.join("node.key") }
    }

    /// User `user`'s client files in `dir`.
    pub fn user(dir: &Path, user: &str) -> CertFiles {
        CertFiles { ca: dir.join("ca.crt"), cert: dir.join(format!("client.{user}.crt")), key: dir.join(format!("client.{user}.key")) }
    }

    fn stamp(&self) -> Vec<Option<(SystemTime, u64)>> {
        [&self.ca, &self.cert, &self.key].iter().map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len())))).collect()
    }
}

/// How a process speaks: plaintext, or mutual TLS with its material.
#[derive(Debug, Clone)]
pub enum Security {
    Insecure,
    Tls(Arc<TlsMaterial>),
}

impl Security {
    pub fn is_tls(&self) -> bool {
        matches!(self, Security::Tls(_))
    }
}

/// The rustls configurations built from one set of files.
#[derive(Debug)]
struct Built {
    stamp: Vec<Option<(SystemTime, u64)>>,
    /// Client certificate required (gRPC ports).
    server_mtls: Arc<ServerConfig>,
    /// Client certificate optional (HTTP ports: probes and bearer tokens).
    server_optional: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    identity: Option<Identity>,
    expiry: Vec<Expiry>,
}

/// A process's certificate, key and CA bundle, reloaded when the files change (checked
/// at most once a second, when a connection is made): rotating a certificate needs no
/// restart, and a broken rotation keeps the last good material.
#[derive(Debug)]
pub struct TlsMaterial {
    files: CertFiles,
    built: Mutex<(Instant, Arc<Built>)>,
    /// The ends of validity `/metrics` shows, refreshed by [`publish_expiry`] while
    /// this material lives.
    expiry: Arc<Mutex<Vec<Expiry>>>,
}

/// One certificate's end of validity, as `holdfast_certificate_not_after_seconds`.
#[derive(Debug, Clone, PartialEq)]
struct Expiry {
    /// `own` (the certificate this process presents) or `ca` (the earliest-ending
    /// certificate of the CA bundle it trusts).
    certificate: &'static str,
    file: String,
    not_after_unix: i64,
}

/// How often the expiry gauges are set again: the recorder drops a gauge not set for a
/// minute (holdfast-telemetry's idle timeout).
const EXPIRY_REFRESH: Duration = Duration::from_secs(20);

/// When a certificate stops being valid, in Unix seconds (its notAfter).
fn not_after(der: &CertificateDer<'_>) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

fn expiries(files: &CertFiles, chain: &[CertificateDer<'_>], ca: &[CertificateDer<'_>]) -> Vec<Expiry> {
    let own = chain.first().and_then(not_after).map(|t| Expiry { certificate: "own", file: files.cert.display().to_string(), not_after_unix: t });
    let ca = ca.iter().filter_map(not_after).min().map(|t| Expiry { certificate: "ca", file: files.ca.display().to_string(), not_after_unix: t });
    own.into_iter().chain(ca).collect()
}

fn set_expiry_gauges(expiry: &[Expiry]) {
    for e in expiry {
        metrics::gauge!(holdfast_core::metric_names::CERT_NOT_AFTER, "certificate" => e.certificate, "file" => e.file.clone()).set(e.not_after_unix as f64);
    }
}

/// Sets the expiry gauges now and, on a tokio runtime, every [`EXPIRY_REFRESH`] for as
/// long as `expiry` lives (the task holds it weakly).
fn publish_expiry(expiry: &Arc<Mutex<Vec<Expiry>>>) {
    set_expiry_gauges(&expiry.lock().unwrap_or_else(|e| e.into_inner()));
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let weak = Arc::downgrade(expiry);
        rt.spawn(async move {
            loop {
                tokio::time::sleep(EXPIRY_REFRESH).await;
                let Some(expiry) = weak.upgrade() else { return };
                let current = expiry.lock().unwrap_or_else(|e| e.into_inner()).clone();
                set_expiry_gauges(&current);
            }
        });
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

fn build(files: &CertFiles) -> Result<Built, String> {
    let stamp = files.stamp();
    let ca = read_certs(&files.ca)?;
    let chain = read_certs(&files.cert)?;
    let expiry = expiries(files, &chain, &ca);
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("{}: {e}", files.key.display()))?;
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c).map_err(|e| format!("{}: {e}", files.ca.display()))?;
    }
    let roots = Arc::new(roots);
    let identity = Identity::of_certificate(&chain[0]);
    let p = provider();
    let versions = rustls::DEFAULT_VERSIONS;
    let mtls = WebPkiClientVerifier::builder_with_provider(roots.clone(), p.clone()).build().map_err(|e| format!("client verifier: {e}"))?;
    let optional =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), p.clone()).allow_unauthenticated().build().map_err(|e| format!("client verifier: {e}"))?;
    let server = |verifier| -> Result<Arc<ServerConfig>, String> {
        let mut c = ServerConfig::builder_with_provider(p.clone())
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("{}: {e}", files.cert.display()))?;
        c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(c))
    };
    let mut client = ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain.clone(), key.clone_key())
        .map_err(|e| format!("{}: {e}", files.cert.display()))?;
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Built { stamp, server_mtls: server(mtls)?, server_optional: server(optional)?, client: Arc::new(client), identity, expiry })
}

impl TlsMaterial {
    /// Loads the files now: a missing or unreadable one is an error at start.
    pub fn load(files: CertFiles) -> Result<TlsMaterial, String> {
        let built = build(&files)?;
        if built.identity.is_none() {
            warn!(cert = %files.cert.display(), "the certificate names no holdfast identity (holdfast://node/... or holdfast://user/...)");
        }
        let expiry = Arc::new(Mutex::new(built.expiry.clone()));
        publish_expiry(&expiry);
        Ok(TlsMaterial { files, built: Mutex::new((Instant::now(), Arc::new(built))), expiry })
    }

    pub fn files(&self) -> &CertFiles {
        &self.files
    }

    /// The current configurations, rebuilt first if the files changed.
    fn current(&self) -> Arc<Built> {
        let mut g = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if g.0.elapsed() >= RELOAD_CHECK {
            g.0 = Instant::now();
            if self.files.stamp() != g.1.stamp {
                match build(&self.files) {
                    Ok(b) => {
                        info!(cert = %self.files.cert.display(), "certificates changed on disk: reloaded");
                        *self.expiry.lock().unwrap_or_else(|e| e.into_inner()) = b.expiry.clone();
                        set_expiry_gauges(&b.expiry);
                        g.1 = Arc::new(b);
                    }
                    // A half-written rotation: keep serving with the last good one.
                    Err(e) => warn!(error = %e, "certificates changed on disk but do not load; keeping the previous ones"),
                }
            }
        }
        g.1.clone()
    }

    pub(crate) fn server_config(&self, client_cert_required: bool) -> Arc<ServerConfig> {
        let b = self.current();
        if client_cert_required {
            b.server_mtls.clone()
        } else {
            b.server_optional.clone()
        }
    }

    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        self.current().client.clone()
    }

    /// The identity this process's own certificate names.
    pub fn identity(&self) -> Option<Identity> {
        self.current().identity.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_through_their_uri() {
        for id in [Identity::node("cell-east-1-n1").unwrap(), Identity::user("alice").unwrap()] {
            assert_eq!(Identity::from_uri(&id.uri()), Some(id));
        }
        assert_eq!(Identity::from_uri("holdfast://admin/x"), None);
        assert_eq!(Identity::from_uri("spiffe://holdfast/node/x"), None);
        assert!(Identity::user("Alice").is_err());
        assert!(Identity::user(&"a".repeat(65)).is_err());
        assert!(Identity::user(ROOT_USER).unwrap().is_node_or_root());
        assert!(!Identity::user("alice").unwrap().is_node_or_root());
        assert_eq!(Identity::node("n1").unwrap().to_string(), "node:n1");
    }

    #[test]
    fn tls_is_on_unless_insecure_is_said() {
        let e = TlsOptions::default().security().unwrap_err();
        assert!(e.contains("--insecure"), "{e}");
        assert!(!TlsOptions { insecure: true, certs_dir: None }.security().unwrap().is_tls());
        let e = TlsOptions { insecure: false, certs_dir: Some("/nonexistent".into()) }.security().unwrap_err();
        assert!(e.contains("/nonexistent/ca.crt"), "{e}");
    }
}
