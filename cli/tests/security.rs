//! Security against a real playground with TLS on (`holdfast dev`), as docs/security.md
//! states it:
//! - the matrix: every call of the table in docs/security.md, made by every role, in
//!   the caller's own namespace and in another; each allowed or `PERMISSION_DENIED`
//!   exactly as the table says, and no access across namespaces;
//! - a session is used only by its creator; a reader cannot release;
//! - a bearer token works over HTTP for its grants only and stops working within the
//!   stated bound of its revocation; no credentials is `UNAUTHENTICATED`;
//! - plaintext and certificate-less clients are refused on every port, and a client
//!   certificate without the node role cannot vote, append, send a snapshot, renew
//!   ownership or report a seal;
//! - break-lock is written to the durable audit log with who broke and why;
//! - one session asking for thousands of holds and waits is capped at 1,000, each
//!   refusal `QUOTA_EXCEEDED`, and the cell's memory stays bounded (measured).

mod common;

use common::{holdfast_at, Dev, WAIT};
use holdfast_core::ErrorCode;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use holdfast_proto::raft::v1::raft_service_client::RaftServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::status::code_of;
use holdfast_rpc::{CertFiles, Channel, Security, TlsMaterial, Transport, TransportOptions};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The caller's own namespace (its grants are here) and another one.
const OWN: &str = "alpha";
const OTHER: &str = "beta";
/// Principals and the role each is given in [`OWN`] (`operator`: cluster-wide).
const PRINCIPALS: &[(&str, Option<&str>)] =
    &[("nobody", None), ("reader", Some("reader")), ("holder", Some("holder")), ("admin", Some("admin")), ("operator", Some("operator")), ("root", None)];
/// A second holder in [`OWN`], for the session binding.
const HOLDER2: &str = "holder2";

fn rank(role: &str) -> u8 {
    match role {
        "reader" => 1,
        "holder" => 2,
        "admin" => 3,
        "operator" => 4,
        "node" => 5,
        other => panic!("docs/security.md names a role {other:?} this test does not know"),
    }
}

/// The table of docs/security.md: call → the role it needs.
fn documented_calls() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/security.md")).expect("docs/security.md");
    let mut calls = BTreeMap::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix("| `") else { continue };
        let Some((call, needs)) = rest.split_once("` | ") else { continue };
        if !(call.starts_with("LockService.") || call.starts_with("RegistryService.") || call.starts_with("HTTP ")) {
            continue;
        }
        let role = needs.split_whitespace().next().expect("a role").trim_end_matches('|').to_owned();
        assert!(calls.insert(call.to_owned(), role).is_none(), "{call} is in the table twice");
    }
    calls
}

/// Would `principal` be allowed `call` (needing `role`) in `ns`, by the table's rules?
fn expected(principal: &str, role: &str, ns: &str) -> bool {
    let given = PRINCIPALS.iter().find(|(p, _)| *p == principal).and_then(|(_, r)| *r);
    match (principal, role) {
        (_, "node") => false,
        ("root", _) => true,
        _ => match given {
            Some("operator") => true,
            Some(g) => role != "operator" && ns == OWN && rank(g) >= rank(role),
            None => false,
        },
    }
}

struct Playground {
    data: PathBuf,
    endpoints: Value,
    _dev: Dev,
    _ports: holdfast_testkit::PortBlock,
}

impl Playground {
    fn certs(&self) -> PathBuf {
        self.data.join("certs")
    }

    fn gateway_grpc(&self) -> String {
        self.endpoints["regions"]["east"]["gateway"]["grpc"].as_str().unwrap().to_owned()
    }

    fn gateway_http(&self) -> String {
        format!("https://{}", self.endpoints["regions"]["east"]["gateway"]["http"].as_str().unwrap())
    }

    /// `holdfast ARGS --endpoint <east gateway>` as root; its stdout.
    fn cli(&self, args: &[&str]) -> String {
        let out = holdfast_at(&self.data).args(args).args(["--endpoint", &self.gateway_grpc()]).output().expect("run holdfast");
        assert!(out.status.success(), "holdfast {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn transport(&self, user: &str) -> Transport {
        let material = TlsMaterial::load(CertFiles::user(&self.certs(), user)).expect("the user's certificate");
        Transport::new(TransportOptions::default(), Security::Tls(Arc::new(material)))
    }

    fn https(&self, user: Option<&str>) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(self.certs().join("ca.crt")).unwrap()).unwrap();
        let mut b = reqwest::Client::builder().add_root_certificate(ca).timeout(Duration::from_secs(10)).pool_max_idle_per_host(0);
        if let Some(user) = user {
            let mut pem = std::fs::read(self.certs().join(format!("client.{user}.crt"))).unwrap();
            pem.extend(std::fs::read(self.certs().join(format!("client.{user}.key"))).unwrap());
            b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        b.build().unwrap()
    }
}

/// A one-region playground on its own ports.
fn start() -> Playground {
    let tmp = tempfile::tempdir().unwrap().keep();
    let data = tmp.join("playground");
    std::fs::create_dir_all(&data).unwrap();
    // Reserved machine-wide: other test binaries run beside this one.
    let ports = holdfast_testkit::port_block(32);
    let mut dev = Dev::start(&data, &["--base-port", &ports.base.to_string(), "--regions", "1"]);
    let endpoints = dev.endpoints(&data);
    let pg = Playground { data, endpoints, _dev: dev, _ports: ports };
    let cell = pg.endpoints["regions"]["east"]["cells"][0]["cell"].as_str().unwrap().to_owned();
    for ns in [OWN, OTHER] {
        pg.cli(&["ns", "create", ns, "--owner", "team", "--place-on", &cell]);
    }
    let ca_key = pg.certs().join("ca.key");
    for (user, role) in PRINCIPALS.iter().filter(|(u, _)| *u != "root").copied().chain([(HOLDER2, Some("holder"))]) {
        let certs = pg.certs();
        let out = holdfast_at(&pg.data)
            .args(["cert", "create-client", "--certs-dir"])
            .arg(&certs)
            .arg("--ca-key")
            .arg(&ca_key)
            .args(["--user", user])
            .output()
            .unwrap();
        assert!(out.status.success(), "cert for {user}: {}", String::from_utf8_lossy(&out.stderr));
        match role {
            Some("operator") => pg.cli(&["role", "grant", &format!("user:{user}"), "operator"]),
            Some(role) => pg.cli(&["role", "grant", &format!("user:{user}"), role, "--ns", OWN]),
            None => String::new(),
        };
    }
    pg
}

/// What a call answered: allowed (any answer but a refusal of the caller or a
/// failure to decide), the refusal's code, or unavailable (the gateway could not
/// decide: never what the table documents, so it never passes for either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allowed,
    Refused(ErrorCode),
    Unavailable,
}

/// The last answer that counted as allowed but was an error, for the failure message.
static LAST_ERROR: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn verdict<T>(r: Result<T, tonic::Status>) -> Verdict {
    match r {
        Ok(_) => Verdict::Allowed,
        Err(s) => match code_of(&s) {
            Some(c @ (ErrorCode::PermissionDenied | ErrorCode::Unauthenticated)) => Verdict::Refused(c),
            Some(ErrorCode::Unavailable) => {
                *LAST_ERROR.lock().unwrap() = holdfast_rpc::status::one_line(&s);
                Verdict::Unavailable
            }
            Some(_) => {
                *LAST_ERROR.lock().unwrap() = holdfast_rpc::status::one_line(&s);
                Verdict::Allowed
            }
            None if s.code() == tonic::Code::PermissionDenied => Verdict::Refused(ErrorCode::PermissionDenied),
            None if s.code() == tonic::Code::Unauthenticated => Verdict::Refused(ErrorCode::Unauthenticated),
            // Not an answer of holdfast's (a transport failure): the call never got to
            // be judged, which this test does not accept as either.
            None => panic!("no holdfast answer: {s:?}"),
        },
    }
}

fn http_verdict(status: u16) -> Verdict {
    match status {
        401 => Verdict::Refused(ErrorCode::Unauthenticated),
        403 => Verdict::Refused(ErrorCode::PermissionDenied),
        503 => {
            *LAST_ERROR.lock().unwrap() = "HTTP 503".into();
            Verdict::Unavailable
        }
        other => {
            *LAST_ERROR.lock().unwrap() = format!("HTTP {other}");
            Verdict::Allowed
        }
    }
}

fn shard(ns: &str) -> Option<pb::ShardRef> {
    Some(pb::ShardRef::named(ns.to_owned(), "default".to_owned()))
}

/// No such session: a call on it that passes the gateway is answered by the cell.
const NO_SESSION: u64 = 0x5eed;

/// Makes `call` in `ns` as the caller of `ch` (gRPC) or `http` (HTTP).
async fn make(call: &str, ch: &Channel, http: &reqwest::Client, base: &str, ns: &str) -> Verdict {
    let mut l = LockServiceClient::new(ch.clone());
    let mut r = RegistryServiceClient::new(ch.clone());
    let ns_s = ns.to_owned();
    match call {
        "LockService.CreateSession" => {
            verdict(l.create_session(pb::CreateSessionRequest { shard: shard(ns), ttl_ms: 2_000, client_label: "matrix".into() }).await)
        }
        "LockService.KeepAlive" => {
            let first = pb::KeepAliveRequest { session_id: NO_SESSION, shard: shard(ns), more: vec![] };
            verdict(l.keep_alive(tokio_stream::iter([first])).await)
        }
        "LockService.CloseSession" => verdict(l.close_session(pb::CloseSessionRequest { session_id: NO_SESSION, shard: shard(ns) }).await),
        "LockService.Acquire" => verdict(
            l.acquire(pb::AcquireRequest { shard: shard(ns), name: "m".into(), session_id: NO_SESSION, request_id: "r".into(), ..Default::default() }).await,
        ),
        "LockService.Release" => verdict(l.release(pb::ReleaseRequest { shard: shard(ns), name: "m".into(), token: 1, session_id: 0 }).await),
        "LockService.Describe" => verdict(l.describe(pb::DescribeRequest { shard: shard(ns), name: "m".into() }).await),
        "LockService.List" => verdict(l.list(pb::ListRequest { shard: shard(ns), ..Default::default() }).await),
        "LockService.ListSessions" => verdict(l.list_sessions(pb::ListSessionsRequest { shard: shard(ns) }).await),
        "LockService.Watch" => verdict(l.watch(pb::WatchRequest { shard: shard(ns), name: "m".into(), from_revision: 0 }).await),
        "LockService.CheckToken" => verdict(l.check_token(pb::CheckTokenRequest { shard: shard(ns), name: "m".into(), token: 1 }).await),
        "LockService.BreakLock" => {
            verdict(l.break_lock(pb::BreakLockRequest { shard: shard(ns), name: "m".into(), reason: "the security matrix".into() }).await)
        }
        "RegistryService.GetNamespace" => verdict(r.get_namespace(rpb::GetNamespaceRequest { name: ns_s }).await),
        "RegistryService.GetOwner" => verdict(r.get_owner(rpb::GetOwnerRequest { ns: ns_s, shard: "default".into(), fresh: false }).await),
        "RegistryService.ListShards" => verdict(r.list_shards(rpb::ListShardsRequest { ns: ns_s, cell: String::new() }).await),
        "RegistryService.UpdateNamespace" => {
            // A version that is never current: allowed callers get a conflict, nothing changes.
            let config = holdfast_proto::admin::v1::NamespaceConfig { name: ns_s, owner: "team".into(), ..Default::default() };
            verdict(r.update_namespace(rpb::UpdateNamespaceRequest { config: Some(config), expected_version: 999_999 }).await)
        }
        // The cluster-wide calls, each with arguments the registry refuses, so an allowed
        // caller changes nothing.
        "RegistryService.CreateNamespace" => verdict(r.create_namespace(rpb::CreateNamespaceRequest { config: None }).await),
        "RegistryService.ListNamespaces" => verdict(r.list_namespaces(rpb::ListNamespacesRequest {}).await),
        "RegistryService.CreateRegion" => verdict(r.create_region(rpb::CreateRegionRequest { region: "Not A Name".into() }).await),
        "RegistryService.SetRegionState" => verdict(r.set_region_state(rpb::SetRegionStateRequest { region: "nowhere".into(), state: 0 }).await),
        "RegistryService.ListRegions" => verdict(r.list_regions(rpb::ListRegionsRequest {}).await),
        "RegistryService.RetireCell" => verdict(r.retire_cell(rpb::RetireCellRequest { cell: "nowhere-1".into() }).await),
        "RegistryService.SetAutoFailover" => verdict(r.set_auto_failover(rpb::SetAutoFailoverRequest { ns: "nope".into(), auto_failover: None }).await),
        "RegistryService.RegisterCell" => {
            verdict(r.register_cell(rpb::RegisterCellRequest { cell: "nowhere-1".into(), region: "nowhere".into(), members: vec![] }).await)
        }
        "RegistryService.ListCells" => verdict(r.list_cells(rpb::ListCellsRequest::default()).await),
        "RegistryService.PlaceShard" => verdict(r.place_shard(rpb::PlaceShardRequest { ns: ns_s, shard: "matrix".into(), cell: "nowhere-1".into() }).await),
        "RegistryService.MoveShard" => verdict(
            r.move_shard(rpb::MoveShardRequest { ns: ns_s, shard: "default".into(), to_cell: "nowhere-1".into(), planned: true, ..Default::default() }).await,
        ),
        "RegistryService.AbortMove" => verdict(r.abort_move(rpb::AbortMoveRequest { ns: ns_s, shard: "default".into(), epoch: 999 }).await),
        "RegistryService.WatchOwnership" => verdict(r.watch_ownership(rpb::WatchOwnershipRequest { from_revision: 0, ns: ns_s }).await),
        "RegistryService.GrantRole" => verdict(r.grant_role(rpb::GrantRoleRequest { grant: None }).await),
        "RegistryService.RevokeRole" => verdict(r.revoke_role(rpb::RevokeRoleRequest { grant: None }).await),
        "RegistryService.CreateToken" => verdict(r.create_token(rpb::CreateTokenRequest { name: "matrix".into(), sha256: "not-a-hash".into() }).await),
        "RegistryService.RevokeToken" => verdict(r.revoke_token(rpb::RevokeTokenRequest { name: "no-such-token".into() }).await),
        "RegistryService.ListAccess" => verdict(r.list_access(rpb::ListAccessRequest::default()).await),
        "RegistryService.ListAudit" => verdict(r.list_audit(rpb::ListAuditRequest::default()).await),
        "RegistryService.RaftStatus" => verdict(r.raft_status(rpb::RaftStatusRequest {}).await),
        "RegistryService.RenewOwnership" => verdict(r.renew_ownership(rpb::RenewOwnershipRequest::default()).await),
        "RegistryService.ReportSealed" => verdict(r.report_sealed(rpb::ReportSealedRequest::default()).await),
        "RegistryService.AppendAudit" => verdict(r.append_audit(rpb::AppendAuditRequest { action: "forged".into(), detail: String::new() }).await),
        http_call => {
            let (method, path) = http_call.strip_prefix("HTTP ").and_then(|c| c.split_once(' ')).unwrap_or_else(|| panic!("no way to make {call}"));
            let session = format!("{ns}:default:{NO_SESSION:016x}");
            let path = path.replace("{ns}", ns).replace("{shard}", "default").replace("{name}", "m").replace("{id}", &session);
            let body = match path.rsplit('/').next().unwrap() {
                "namespaces" => json!({ "name": "Not A Name", "owner": "team" }),
                "sessions" => json!({ "ns": ns, "ttl_ms": 2_000 }),
                "acquire" => json!({ "session": session, "request_id": "r" }),
                "release" | "check" => json!({ "token": "1" }),
                "move" => json!({ "to_cell": "nowhere-1" }),
                "place" => json!({ "cell": "nowhere-1" }),
                "break" => json!({ "reason": "the security matrix" }),
                _ => Value::Null,
            };
            let url = format!("{base}{path}");
            let req = match method {
                "GET" => http.get(&url),
                "DELETE" => http.delete(&url),
                "POST" => http.post(&url).json(&body),
                m => panic!("method {m}"),
            };
            http_verdict(req.send().await.unwrap_or_else(|e| panic!("{call}: {e}")).status().as_u16())
        }
    }
}

#[test]
fn every_call_by_every_role_in_its_own_and_another_namespace_is_allowed_or_refused_as_documented() {
    let pg = start();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let calls = documented_calls();
        assert!(calls.len() >= 45, "the table in docs/security.md lists {} calls", calls.len());
        let grpc = pg.gateway_grpc();
        let base = pg.gateway_http();
        // The gateway learns of the grants within its refresh; wait for the last one.
        let t = pg.transport("operator");
        let ch = t.channel(&grpc).unwrap();
        let end = Instant::now() + WAIT;
        while make("RegistryService.ListRegions", &ch, &pg.https(Some("operator")), &base, OWN).await != Verdict::Allowed {
            assert!(Instant::now() < end, "the operator grant never reached the gateway");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut wrong = Vec::new();
        let mut made = 0;
        for (principal, _) in PRINCIPALS {
            let t = pg.transport(principal);
            let ch = t.channel(&grpc).unwrap();
            let http = pg.https(Some(principal));
            for (call, role) in &calls {
                for ns in [OWN, OTHER] {
                    let want = if expected(principal, role, ns) { Verdict::Allowed } else { Verdict::Refused(ErrorCode::PermissionDenied) };
                    LAST_ERROR.lock().unwrap().clear();
                    // UNAVAILABLE is never an answer to "may I": a moment when the
                    // shard's cell cannot answer (adopting it, electing, or the move an
                    // operator just made in this matrix draining it). Asked again for
                    // up to 10 s; one that persists fails the test.
                    let mut got = make(call, &ch, &http, &base, ns).await;
                    for _ in 0..100 {
                        if got != Verdict::Unavailable {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        got = make(call, &ch, &http, &base, ns).await;
                    }
                    made += 1;
                    if got != want {
                        let answer = LAST_ERROR.lock().unwrap().clone();
                        wrong.push(format!("{principal:>8} {call} in {ns}: {got:?} ({answer}), documented {want:?}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{} of {made} calls not as docs/security.md says:\n{}", wrong.len(), wrong.join("\n"));
        eprintln!("{made} calls, each allowed or refused as documented");
    });
}

/// Creates a session in [`OWN`] as `user` through the gateway, retrying while the
/// shard settles.
async fn session_as(t: &Transport, grpc: &str) -> u64 {
    let mut l = LockServiceClient::new(t.channel(grpc).unwrap());
    let end = Instant::now() + WAIT;
    loop {
        match l.create_session(pb::CreateSessionRequest { shard: shard(OWN), ttl_ms: 10_000, client_label: "binding".into() }).await {
            Ok(r) => return r.into_inner().session_id,
            Err(s) => assert!(Instant::now() < end, "create session: {s:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn sessions_tokens_ports_and_the_audit_log() {
    let pg = start();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let grpc = pg.gateway_grpc();
        let base = pg.gateway_http();
        let (holder, holder2, root, reader) = (pg.transport("holder"), pg.transport(HOLDER2), pg.transport("root"), pg.transport("reader"));
        // Wait until both holders' grants reached the gateway.
        let end = Instant::now() + WAIT;
        for t in [&holder, &holder2] {
            let mut l = LockServiceClient::new(t.channel(&grpc).unwrap());
            while verdict(l.list_sessions(pb::ListSessionsRequest { shard: shard(OWN) }).await) != Verdict::Allowed {
                assert!(Instant::now() < end, "grants never reached the gateway");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }

        // ---- a session is its creator's
        let sid = session_as(&holder, &grpc).await;
        let mut mine = LockServiceClient::new(holder.channel(&grpc).unwrap());
        let acquire = |session_id: u64, rid: &str| pb::AcquireRequest {
            shard: shard(OWN),
            name: "bound".into(),
            session_id,
            request_id: rid.into(),
            ..Default::default()
        };
        // The shard may still be being adopted (MOVING): retried, as any client would.
        let end = Instant::now() + WAIT;
        let token = loop {
            match mine.acquire(acquire(sid, "mine")).await {
                Ok(r) => break r.into_inner().token,
                Err(e) if holdfast_rpc::status::code_of(&e).is_some_and(|c| c.is_retryable()) && Instant::now() < end => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("the creator acquires on its session: {e:?}"),
            }
        };
        for (who, t) in [("another holder", &holder2), ("root", &root)] {
            let mut theirs = LockServiceClient::new(t.channel(&grpc).unwrap());
            let denied = |r: Verdict, what: &str| assert_eq!(r, Verdict::Refused(ErrorCode::PermissionDenied), "{who} {what} another's session");
            denied(verdict(theirs.acquire(acquire(sid, "theirs")).await), "acquired on");
            denied(
                verdict(theirs.keep_alive(tokio_stream::iter([pb::KeepAliveRequest { session_id: sid, shard: shard(OWN), more: vec![] }])).await),
                "renewed",
            );
            denied(verdict(theirs.release(pb::ReleaseRequest { shard: shard(OWN), name: "bound".into(), token, session_id: 0 }).await), "released a hold of");
            denied(verdict(theirs.close_session(pb::CloseSessionRequest { session_id: sid, shard: shard(OWN) }).await), "closed");
        }
        // Nor behind one's own session, in a batch of renewals: refused for that session.
        let theirs_own = session_as(&holder2, &grpc).await;
        let mut theirs = LockServiceClient::new(holder2.channel(&grpc).unwrap());
        let batch = pb::KeepAliveRequest { session_id: theirs_own, shard: shard(OWN), more: vec![sid] };
        let answer = theirs.keep_alive(tokio_stream::iter([batch])).await.expect("their own session renews").into_inner().message().await.unwrap().unwrap();
        let more: Vec<(u64, &str)> = answer.more.iter().map(|m| (m.session_id, m.code.as_str())).collect();
        assert_eq!(more, vec![(sid, "PERMISSION_DENIED")], "another holder renewed a session not theirs in a batch");
        let mut r = LockServiceClient::new(reader.channel(&grpc).unwrap());
        let released = r.release(pb::ReleaseRequest { shard: shard(OWN), name: "bound".into(), token, session_id: 0 }).await;
        assert_eq!(verdict(released), Verdict::Refused(ErrorCode::PermissionDenied), "a reader cannot release");
        let d = mine.describe(pb::DescribeRequest { shard: shard(OWN), name: "bound".into() }).await.unwrap().into_inner();
        assert_eq!(d.holders.iter().map(|h| h.token).collect::<Vec<_>>(), vec![token], "the hold is untouched");
        let sessions = mine.list_sessions(pb::ListSessionsRequest { shard: shard(OWN) }).await.unwrap().into_inner().sessions;
        assert_eq!(sessions.iter().find(|s| s.session_id == sid).map(|s| s.owner.as_str()), Some("user:holder"));
        mine.release(pb::ReleaseRequest { shard: shard(OWN), name: "bound".into(), token, session_id: 0 }).await.expect("the creator releases");

        // ---- break-lock: admin only, and audited durably with who and why
        let token = mine.acquire(acquire(sid, "again")).await.unwrap().into_inner().token;
        let admin = pg.transport("admin");
        let mut a = LockServiceClient::new(admin.channel(&grpc).unwrap());
        let b = a.break_lock(pb::BreakLockRequest { shard: shard(OWN), name: "bound".into(), reason: "INC-4211 wedged holder".into() }).await;
        assert!(b.expect("the admin breaks").into_inner().new_floor >= token, "the floor covers the broken token");
        let audit = pg.cli(&["audit", "list", "-o", "json", "--limit", "1000"]);
        let records: Vec<Value> = serde_json::from_str(&audit).unwrap();
        let brk = records.iter().find(|r| r["action"] == "break_lock").unwrap_or_else(|| panic!("no break_lock in the audit log: {audit}"));
        assert_eq!(brk["by"], "user:admin");
        assert!(brk["detail"].as_str().unwrap().contains("INC-4211 wedged holder"), "{brk}");
        assert!(records.iter().any(|r| r["action"] == "grant" && r["by"] == "user:root"), "grants are audited: {audit}");

        // ---- bearer tokens over HTTP, and their revocation's bound
        let created: Value = serde_json::from_str(&pg.cli(&["token", "create", "ci-bot", "-o", "json"])).unwrap();
        let bearer = format!("Bearer {}", created["token"].as_str().unwrap());
        pg.cli(&["role", "grant", "token:ci-bot", "reader", "--ns", OWN]);
        let anonymous = pg.https(None);
        let get = |ns: &str, auth: Option<&str>| {
            let mut req = anonymous.get(format!("{base}/v1/locks/{ns}/default/bound"));
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            async move { req.send().await.unwrap().status().as_u16() }
        };
        let end = Instant::now() + WAIT;
        while http_verdict(get(OWN, Some(&bearer)).await) != Verdict::Allowed {
            assert!(Instant::now() < end, "the token's grant never reached the gateway");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(get(OTHER, Some(&bearer)).await, 403, "a token's grant is for its namespace only");
        assert_eq!(get(OWN, None).await, 401, "no certificate, no token");
        let forged = bearer[..bearer.len() - 4].to_owned() + "0000";
        assert_eq!(get(OWN, Some(&forged)).await, 401, "a wrong secret");
        pg.cli(&["token", "revoke", "ci-bot"]);
        let revoked = Instant::now();
        while get(OWN, Some(&bearer)).await != 401 {
            assert!(revoked.elapsed() < Duration::from_secs(5), "a revoked token still works after {:?}", revoked.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = revoked.elapsed();
        eprintln!("a revoked token failed closed {took:?} after the revoke committed");
        assert!(took <= Duration::from_millis(2_000), "docs/security.md promises 2 s; it took {took:?}");

        // ---- every port: plaintext and certificate-less clients are refused
        let plain = Transport::insecure();
        let region = &pg.endpoints["regions"]["east"];
        let mut grpc_ports =
            vec![grpc.clone(), region["registry"]["client"].as_str().unwrap().to_owned(), region["registry"]["raft"].as_str().unwrap().to_owned()];
        for n in region["cells"][0]["nodes"].as_array().unwrap() {
            grpc_ports.push(n["client"].as_str().unwrap().to_owned());
            grpc_ports.push(n["raft"].as_str().unwrap().to_owned());
        }
        for port in &grpc_ports {
            let mut c = RegistryServiceClient::new(plain.channel(port).unwrap());
            let r = tokio::time::timeout(Duration::from_secs(5), c.list_regions(rpb::ListRegionsRequest {})).await;
            assert!(!matches!(r, Ok(Ok(_))), "plaintext answered on {port}");
            // TLS with the CA but no client certificate: the handshake fails.
            let r = anonymous.get(format!("https://{port}/")).send().await;
            assert!(r.is_err(), "a TLS client without a certificate got an answer on {port}: {r:?}");
        }
        for port in [base.trim_start_matches("https://").to_owned()] {
            let r = reqwest::Client::new().get(format!("http://{port}/v1/namespaces/{OWN}")).send().await;
            assert!(!r.is_ok_and(|r| r.status().is_success()), "plaintext HTTP answered on {port}");
        }

        // ---- a user certificate is not a node: no votes, appends, snapshots, renewals, seals
        let raft = region["cells"][0]["nodes"][0]["raft"].as_str().unwrap();
        let mut rc = RaftServiceClient::new(root.channel(raft).unwrap());
        let denied = |r: Verdict, what: &str| assert_eq!(r, Verdict::Refused(ErrorCode::PermissionDenied), "root's certificate {what}");
        denied(verdict(rc.vote(raftpb::VoteRequest::default()).await), "voted");
        denied(verdict(rc.append_entries(raftpb::AppendEntriesRequest::default()).await), "appended");
        denied(verdict(rc.install_snapshot(tokio_stream::iter(Vec::<raftpb::InstallSnapshotRequest>::new())).await), "sent a snapshot");
        let mut reg = RegistryServiceClient::new(root.channel(region["registry"]["client"].as_str().unwrap()).unwrap());
        denied(verdict(reg.renew_ownership(rpb::RenewOwnershipRequest::default()).await), "renewed ownership");
        denied(verdict(reg.report_sealed(rpb::ReportSealedRequest::default()).await), "reported a seal");
        denied(verdict(reg.append_audit(rpb::AppendAuditRequest::default()).await), "appended to the audit log");
    });
}

/// A session that asks for far more than its share: 1,000 holds and waits are granted
/// or queued, every further attempt (a hold, or a wait behind another session's hold)
/// is refused with `QUOTA_EXCEEDED`, the session's count stays at the cap, and the cell
/// nodes' memory grows by no more than a few MiB across thousands of refused attempts,
/// which are refused by the leader before they reach the Raft log.
/// Against the cell directly, as root (no gateway rate limit in the way).
#[test]
fn a_session_asking_for_thousands_of_holds_and_waits_is_capped_and_the_cell_stays_small() {
    use holdfast_rpc::{Budget, Hints, Upstream};
    const CAP: usize = 1_000;
    // 5,000 in CI; `HOLDFAST_GREEDY_ATTEMPTS=100000` for the issue's full size by hand.
    let refused_n: usize = std::env::var("HOLDFAST_GREEDY_ATTEMPTS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let pg = start();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cell = &pg.endpoints["regions"]["east"]["cells"][0];
        let nodes = cell["nodes"].as_array().unwrap();
        let members: Vec<String> = nodes.iter().map(|n| n["client"].as_str().unwrap().to_owned()).collect();
        let pids: Vec<u32> = nodes.iter().map(|n| n["pid"].as_u64().unwrap() as u32).collect();
        let cell = Arc::new(Upstream::new(&pg.transport("root"), members, Hints::Anywhere));
        let budget = Budget::per_attempt(Duration::from_secs(10));
        let session = |label: &'static str| {
            let cell = cell.clone();
            async move {
                let end = Instant::now() + WAIT;
                loop {
                    let req = pb::CreateSessionRequest { shard: shard(OWN), ttl_ms: 30_000, client_label: label.into() };
                    match cell
                        .call(budget, |ch| {
                            let req = req.clone();
                            async move { LockServiceClient::new(ch).create_session(req).await }
                        })
                        .await
                    {
                        Ok(r) => return r.value.session_id,
                        Err(e) => assert!(Instant::now() < end, "create session: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let (greedy, other) = (session("greedy").await, session("other").await);
        // Both sessions renewed every 5 s for as long as the test runs (the long run of
        // 100,000 attempts outlives a TTL).
        let keepalive = {
            let cell = cell.clone();
            tokio::spawn(async move {
                loop {
                    for id in [greedy, other] {
                        let req = pb::KeepAliveRequest { session_id: id, shard: shard(OWN), more: vec![] };
                        let renewed = cell
                            .call(budget, |ch| {
                                let req = req.clone();
                                async move {
                                    let mut s = LockServiceClient::new(ch).keep_alive(tokio_stream::iter(vec![req])).await?.into_inner();
                                    let first = s.message().await?;
                                    Ok(tonic::Response::new(first))
                                }
                            })
                            .await;
                        renewed.expect("a renewal");
                    }
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            })
        };
        let acquire = |session: u64, name: String, wait_ms: u64| {
            let cell = cell.clone();
            async move {
                let req = pb::AcquireRequest {
                    shard: shard(OWN),
                    name: name.clone(),
                    session_id: session,
                    mode: pb::Mode::Exclusive as i32,
                    wait_timeout_ms: wait_ms,
                    request_id: format!("{session}-{name}-{wait_ms}"),
                    value: Vec::new(),
                };
                // A waiting call outlasts its wait: no retry while it is queued.
                cell.call(Budget::per_attempt(Duration::from_millis(wait_ms) + Duration::from_secs(10)), |ch| {
                    let req = req.clone();
                    async move { LockServiceClient::new(ch).acquire(req).await }
                })
                .await
            }
        };
        // Many in flight at once, as a greedy client would.
        async fn all<F: std::future::Future + Send + 'static>(fs: Vec<F>) -> Vec<F::Output>
        where
            F::Output: Send + 'static,
        {
            let sem = Arc::new(tokio::sync::Semaphore::new(64));
            let tasks: Vec<_> = fs
                .into_iter()
                .map(|f| {
                    let sem = sem.clone();
                    tokio::spawn(async move {
                        let _p = sem.acquire_owned().await.unwrap();
                        f.await
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        }

        // `other` holds 600 locks; `greedy` holds 400 of its own and waits behind 600.
        for r in all((0..600).map(|i| acquire(other, format!("w{i}"), 0)).collect()).await {
            r.expect("other's holds");
        }
        for r in all((0..400).map(|i| acquire(greedy, format!("h{i}"), 0)).collect()).await {
            r.expect("greedy's holds");
        }
        // The waits stay open until granted: run them in the background and watch the
        // session's count reach the cap.
        let waits: Vec<_> = (0..600).map(|i| tokio::spawn(acquire(greedy, format!("w{i}"), 600_000))).collect();
        // None while the call fails: a cell under this load may elect a new leader
        // mid-test (a cold CI run saw NOT_LEADER here), and the count is asked again.
        let count = |cell: Arc<Upstream>| async move {
            let r = cell
                .call(budget, |ch| async move { LockServiceClient::new(ch).list_sessions(pb::ListSessionsRequest { shard: shard(OWN) }).await })
                .await
                .ok()?;
            let s = r.value.sessions.into_iter().find(|s| s.session_id == greedy).expect("greedy's session");
            Some((s.holds, s.waits))
        };
        let end = Instant::now() + WAIT;
        while count(cell.clone()).await != Some((400, 600)) {
            assert!(Instant::now() < end, "greedy never reached 400 holds and 600 waits: {:?}", count(cell.clone()).await);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The cell's Raft log, as far as any node has it.
        let raft_addrs: Vec<String> = nodes.iter().map(|n| n["raft"].as_str().unwrap().to_owned()).collect();
        let root = pg.transport("root");
        let last_log = || {
            let (root, raft_addrs) = (&root, &raft_addrs);
            async move {
                let mut max = 0;
                for a in raft_addrs {
                    let m = RaftAdminClient::new(root.channel(a).unwrap()).metrics(raftpb::MetricsRequest {}).await.expect("raft metrics").into_inner();
                    max = max.max(m.last_log_index);
                }
                max
            }
        };
        let log_before = last_log().await;
        let before: u64 = pids.iter().map(|p| holdfast_testkit::rss_bytes(Some(*p))).sum();
        let t0 = Instant::now();
        // Over the cap: new holds, and new waits behind `other`'s locks.
        let attempts: Vec<_> = (0..refused_n)
            .map(|i| if i % 2 == 0 { acquire(greedy, format!("more{i}"), 0) } else { acquire(greedy, format!("w{}", i % 600), 1_000 + i as u64) })
            .collect();
        let mut refused = 0;
        for r in all(attempts).await {
            match r {
                Err(holdfast_rpc::CallError::Refused { code: ErrorCode::QuotaExceeded, .. }) => refused += 1,
                other => panic!("an attempt over the cap was answered {other:?}"),
            }
        }
        let took = t0.elapsed();
        let after: u64 = pids.iter().map(|p| holdfast_testkit::rss_bytes(Some(*p))).sum();
        assert_eq!(refused, refused_n);
        let end = Instant::now() + WAIT;
        let now = loop {
            if let Some(c) = count(cell.clone()).await {
                break c;
            }
            assert!(Instant::now() < end, "no node answered the session count");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(now, (400, 600), "the session holds and waits exactly its cap of {CAP}");
        let grown = after.saturating_sub(before);
        // Refused at the leader before proposing: no Raft entry per attempt (a few for
        // renewals may land meanwhile).
        let appended = last_log().await - log_before;
        assert!(appended < 100, "{refused_n} refused attempts appended {appended} Raft entries");
        eprintln!("{refused_n} attempts over the cap refused in {took:?}; the three cell nodes' RSS {} -> {} MiB", before >> 20, after >> 20);
        assert!(grown < 64 << 20, "{refused_n} refused attempts grew the cell nodes by {} MiB", grown >> 20);
        for w in waits {
            w.abort();
        }
        keepalive.abort();
    });
}
