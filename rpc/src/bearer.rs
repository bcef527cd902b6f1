//! Bearer tokens: the credential of a caller without a client certificate (a script
//! calling the HTTP API, a CI job). A token is `hft.<name>.<secret>`; the registry
//! stores only the SHA-256 of the secret, and a gateway compares hashes
//! (docs/security.md). The secret is 32 random bytes, shown once when it is made.

use ring::digest::{digest, SHA256};
use ring::rand::{SecureRandom, SystemRandom};
use std::fmt;

/// What every holdfast token starts with, so a leaked one is easy to recognise.
pub const TOKEN_PREFIX: &str = "hft.";
/// The HTTP header (and gRPC metadata key) a token travels in, as `Bearer <token>`.
pub const AUTHORIZATION: &str = "authorization";
/// Hex digits of a secret.
const SECRET_HEX: usize = 64;

/// A token: its name (the principal `token:<name>`) and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    name: String,
    secret: String,
}

impl fmt::Debug for BearerToken {
    /// Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BearerToken({})", self.name)
    }
}

impl BearerToken {
    /// A new token named `name`, with a fresh secret from the operating system's
    /// random source.
    pub fn generate(name: &str) -> Result<BearerToken, String> {
        if !holdfast_core::valid_principal_name(name) {
            return Err(format!("token name {name:?}: 1-64 characters of a-z, 0-9, '.', '_', '-'"));
        }
        let mut bytes = [0u8; SECRET_HEX / 2];
        SystemRandom::new().fill(&mut bytes).map_err(|_| "the operating system's random source failed".to_owned())?;
        Ok(BearerToken { name: name.to_owned(), secret: hex(&bytes) })
    }

    /// Reads `hft.<name>.<secret>`; `None` for anything else.
    pub fn parse(s: &str) -> Option<BearerToken> {
        let rest = s.trim().strip_prefix(TOKEN_PREFIX)?;
        let (name, secret) = rest.rsplit_once('.')?;
        let ok = holdfast_core::valid_principal_name(name) && secret.len() == SECRET_HEX && secret.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| BearerToken { name: name.to_owned(), secret: secret.to_owned() })
    }

    /// Reads an `Authorization` value: `Bearer <token>`.
    pub fn from_authorization(value: &str) -> Option<BearerToken> {
        let (scheme, token) = value.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| BearerToken::parse(token)).flatten()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The principal a grant names: `token:<name>`.
    pub fn principal(&self) -> String {
        format!("token:{}", self.name)
    }

    /// The SHA-256 of the secret, hex: what the registry stores.
    pub fn sha256(&self) -> String {
        hex(digest(&SHA256, self.secret.as_bytes()).as_ref())
    }

    /// Does this token's secret hash to `sha256` (hex)? In time independent of where
    /// they differ.
    pub fn matches(&self, sha256: &str) -> bool {
        let mine = self.sha256();
        mine.len() == sha256.len() && mine.bytes().zip(sha256.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b.to_ascii_lowercase())) == 0
    }

    /// The whole token, secret included: shown once, to whoever made it.
    pub fn reveal(&self) -> String {
        format!("{TOKEN_PREFIX}{}.{}", self.name, self.secret)
    }

    /// The `Authorization` value that presents it.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.reveal())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_matches_only_its_own_hash() {
        let t = BearerToken::generate("ci.bot-1").unwrap();
        let shown = t.reveal();
        assert!(shown.starts_with("hft.ci.bot-1."), "{shown}");
        let back = BearerToken::parse(&shown).unwrap();
        assert_eq!(back, t);
        assert_eq!(BearerToken::from_authorization(&t.authorization()), Some(t.clone()));
        assert_eq!(BearerToken::from_authorization(&format!("bearer {shown}")), Some(t.clone()));
        assert!(t.matches(&t.sha256()) && t.matches(&t.sha256().to_uppercase()));
        let other = BearerToken::generate("ci.bot-1").unwrap();
        assert_ne!(other.reveal(), shown, "fresh secrets");
        assert!(!other.matches(&t.sha256()));
        assert_eq!(t.principal(), "token:ci.bot-1");
        assert!(!format!("{t:?}").contains(&t.secret), "Debug hides the secret");
    }

    #[test]
    fn malformed_tokens_are_none() {
        let secret = "a".repeat(64);
        for bad in [
            String::new(),
            format!("hft.Bad.{secret}"),
            format!("hft.x.{}", "a".repeat(63)),
            format!("hft.x.{}", "A".repeat(64)),
            format!("xyz.x.{secret}"),
            format!("hft.{secret}"),
        ] {
            assert_eq!(BearerToken::parse(&bad), None, "{bad}");
        }
        assert_eq!(BearerToken::from_authorization(&format!("Basic hft.x.{secret}")), None);
        assert!(BearerToken::generate("Nope").is_err());
    }
}
