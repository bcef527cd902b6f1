//! `holdfast role`, `holdfast token` and `holdfast audit`: who may do what, the bearer
//! tokens of callers without a certificate, and the durable audit log. Each goes to
//! the registry through a gateway and needs `operator` (root has it); every change is
//! itself recorded in the audit log. docs/security.md has the roles and what each
//! may call.

use crate::client::registry;
use crate::ops::{emit, Gw};
use clap::{Args, Subcommand};
use holdfast_core::{Grant, NamespaceName, Role};
use holdfast_proto::convert::{grant_from, grant_to};
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::BearerToken;
use serde_json::{json, Value};

#[derive(Debug, Subcommand)]
pub enum RoleCmd {
    /// Give a principal a role: `reader`, `holder` or `admin` in a namespace, or
    /// `operator` of the whole cluster.
    ///
    /// Example: holdfast role grant user:alice holder --ns payments
    Grant {
        #[command(flatten)]
        gw: Gw,
        #[command(flatten)]
        grant: GrantArgs,
    },
    /// Take a role back.
    ///
    /// Example: holdfast role revoke user:alice holder --ns payments
    Revoke {
        #[command(flatten)]
        gw: Gw,
        #[command(flatten)]
        grant: GrantArgs,
    },
    /// Every grant, with the policy's version.
    ///
    /// Example: holdfast role list -o json
    List {
        #[command(flatten)]
        gw: Gw,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make a bearer token (for the HTTP API). Its secret is printed once, here, and
    /// stored nowhere: the registry keeps its SHA-256. Grant it roles as
    /// `token:<name>`.
    ///
    /// Example: holdfast token create ci-bot && holdfast role grant token:ci-bot reader --ns payments
    Create {
        #[command(flatten)]
        gw: Gw,
        name: String,
    },
    /// Every token: name, who made it, when (never a secret).
    List {
        #[command(flatten)]
        gw: Gw,
    },
    /// Revoke a token and every grant to it. Gateways refuse it within a few seconds
    /// (docs/security.md states the bound).
    Revoke {
        #[command(flatten)]
        gw: Gw,
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// The audit log, oldest first: namespace, policy and placement changes, moves,
    /// evacuations and break-locks, each with who and when.
    ///
    /// Example: holdfast audit list --after 120 --limit 50
    List {
        #[command(flatten)]
        gw: Gw,
        /// Records after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many (at most 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
}

/// Who, which role, where: a grant as the command line names it.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// `user:<name>` (a client certificate's user) or `token:<name>`.
    principal: String,
    role: Role,
    /// The namespace (every role but operator).
    #[arg(long)]
    ns: Option<String>,
}

impl GrantArgs {
    fn into_pb(self) -> Result<rpb::RoleGrant, String> {
        let ns = self.ns.map(NamespaceName::new).transpose().map_err(|e| e.to_string())?;
        let g = Grant { principal: self.principal, role: self.role, ns };
        g.validate()?;
        Ok(grant_to(&g))
    }
}

fn grant_row(g: &rpb::RoleGrant) -> Value {
    match grant_from(g.clone()) {
        Ok(g) => json!({ "principal": g.principal, "role": g.role.as_str(), "ns": g.ns.map(|n| n.to_string()) }),
        Err(e) => json!({ "principal": g.principal, "role": format!("unreadable: {e}"), "ns": g.ns }),
    }
}

pub async fn role(cmd: RoleCmd) -> Result<(), String> {
    match cmd {
        RoleCmd::Grant { gw, grant } => {
            let req = rpb::GrantRoleRequest { grant: Some(grant.into_pb()?) };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.grant_role(r).await })).await?;
            emit(gw.output, &json!({ "granted": grant_row(req.grant.as_ref().expect("set above")), "version": r.version }));
        }
        RoleCmd::Revoke { gw, grant } => {
            let req = rpb::RevokeRoleRequest { grant: Some(grant.into_pb()?) };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.revoke_role(r).await })).await?;
            emit(gw.output, &json!({ "revoked": grant_row(req.grant.as_ref().expect("set above")), "version": r.version }));
        }
        RoleCmd::List { gw } => {
            let r = list_access(&gw).await?;
            emit(gw.output, &r.grants.iter().map(grant_row).collect::<Vec<_>>());
        }
    }
    Ok(())
}

async fn list_access(gw: &Gw) -> Result<rpb::ListAccessResponse, String> {
    gw.remote()?.call(|ch| registry(ch, rpb::ListAccessRequest::default(), |mut c, r| async move { c.list_access(r).await })).await
}

pub async fn token(cmd: TokenCmd) -> Result<(), String> {
    match cmd {
        TokenCmd::Create { gw, name } => {
            let token = BearerToken::generate(&name)?;
            let req = rpb::CreateTokenRequest { name: name.clone(), sha256: token.sha256() };
            // Not retried: a second create of the same name is refused, and a lost
            // answer is better retried by a person who can revoke first.
            let r = gw.remote()?.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.create_token(r).await })).await?;
            emit(gw.output, &json!({ "name": name, "token": token.reveal(), "version": r.version }));
            eprintln!("Keep the token now: it is shown once. Present it as `Authorization: Bearer <token>`.");
        }
        TokenCmd::List { gw } => {
            let r = list_access(&gw).await?;
            let rows: Vec<Value> =
                r.tokens.iter().map(|t| json!({ "name": t.name, "created_by": t.created_by, "created_unix_ms": t.created_unix_ms })).collect();
            emit(gw.output, &rows);
        }
        TokenCmd::Revoke { gw, name } => {
            let req = rpb::RevokeTokenRequest { name: name.clone() };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.revoke_token(r).await })).await?;
            emit(gw.output, &json!({ "revoked": name, "version": r.version }));
        }
    }
    Ok(())
}

pub async fn audit(cmd: AuditCmd) -> Result<(), String> {
    let AuditCmd::List { gw, after, limit } = cmd;
    let req = rpb::ListAuditRequest { after_seq: after, limit };
    let r = gw.remote()?.call(|ch| registry(ch, req, |mut c, r| async move { c.list_audit(r).await })).await?;
    let rows: Vec<Value> =
        r.records.iter().map(|a| json!({ "seq": a.seq, "at_unix_ms": a.at_unix_ms, "by": a.by, "action": a.action, "detail": a.detail })).collect();
    emit(gw.output, &rows);
    if matches!(gw.output, crate::ops::Output::Table) && !r.records.is_empty() {
        eprintln!("(next page: --after {})", r.next_after_seq);
    }
    Ok(())
}
