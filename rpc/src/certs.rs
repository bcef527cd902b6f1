//! Making certificates (feature `certgen`): a cluster CA, node certificates and user
//! (client) certificates, in the layout [`crate::tls`] reads. What `holdfast cert`
//! does, what `holdfast dev` does for its playground, and what tests do.

use crate::tls::{CertFiles, Identity};
use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// A certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{0}")]
    Gen(#[from] rcgen::Error),
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |err| CertError::Io { path: path.to_owned(), err }
}

/// Writes `text` to `path`; a private key gets mode 0600.
fn write(path: &Path, text: &str, private: bool) -> Result<(), CertError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::write(path, text).map_err(io(path))?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io(path))?;
    }
    Ok(())
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    // A little in the past, so a clock a few minutes behind still accepts it.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days));
}

/// The cluster's certificate authority: `ca.crt` (public, copied next to every other
/// certificate) and its key (keep it offline: whoever holds it can mint any identity).
#[derive(Debug)]
pub struct Ca {
    cert_pem: String,
    key_pem: String,
}

impl Ca {
    /// A new CA, valid `days`.
    pub fn create(days: u32) -> Result<Ca, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "holdfast cluster CA");
        params.distinguished_name = dn;
        validity(&mut params, days);
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// Reads a CA written by [`Ca::write`].
    pub fn read(cert: &Path, key: &Path) -> Result<Ca, CertError> {
        Ok(Ca { cert_pem: std::fs::read_to_string(cert).map_err(io(cert))?, key_pem: std::fs::read_to_string(key).map_err(io(key))? })
    }

    /// Writes `ca.crt` into `certs_dir` and the key to `key`.
    pub fn write(&self, certs_dir: &Path, key: &Path) -> Result<(), CertError> {
        write(&certs_dir.join("ca.crt"), &self.cert_pem, false)?;
        write(key, &self.key_pem, true)
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Issues a certificate for `identity`, valid `days`, naming `hosts` (DNS names or
    /// IPs) for a server; writes it, its key and `ca.crt` to `files`.
    pub fn issue(&self, identity: &Identity, hosts: &[String], days: u32, files: &CertFiles) -> Result<(), CertError> {
        let ca_key = KeyPair::from_pem(&self.key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, identity.to_string());
        params.distinguished_name = dn;
        let uri = identity.uri().try_into().map_err(|e| CertError::Invalid(format!("{identity}: {e}")))?;
        params.subject_alt_names.push(SanType::URI(uri));
        for h in hosts {
            let san = match h.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(h.as_str().try_into().map_err(|e| CertError::Invalid(format!("host {h:?}: {e}")))?),
            };
            params.subject_alt_names.push(san);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        // Nodes are servers to their clients and clients of their peers.
        params.extended_key_usages = match identity {
            Identity::Node(_) => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            Identity::User(_) => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, days);
        let cert = params.signed_by(&key, &issuer)?;
        write(&files.ca, &self.cert_pem, false)?;
        write(&files.cert, &cert.pem(), false)?;
        write(&files.key, &key.serialize_pem(), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_certificates_carry_their_identity_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(30).unwrap();
        ca.write(dir.path(), &dir.path().join("ca.key")).unwrap();
        let node = CertFiles::node(&dir.path().join("n1"));
        ca.issue(&Identity::node("n1").unwrap(), &["127.0.0.1".into(), "cell-1.example".into()], 30, &node).unwrap();
        let m = crate::tls::TlsMaterial::load(node).unwrap();
        assert_eq!(m.identity(), Some(Identity::Node("n1".into())));
        let user = CertFiles::user(dir.path(), "alice");
        ca.issue(&Identity::user("alice").unwrap(), &[], 30, &user).unwrap();
        assert_eq!(crate::tls::TlsMaterial::load(user).unwrap().identity(), Some(Identity::User("alice".into())));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.path().join("ca.key")).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
