//! Mutual TLS end to end, on real sockets: who gets through a node's port, who is
//! refused, and certificates rotated on disk without a restart.

use holdfast_rpc::certs::Ca;
use holdfast_rpc::{auth, CertFiles, Identity, Peer, Security, TlsMaterial, Transport, TransportOptions};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

fn transport(files: CertFiles) -> Transport {
    Transport::new(TransportOptions::default(), Security::Tls(Arc::new(TlsMaterial::load(files).unwrap())))
}

fn issue(ca: &Ca, dir: &Path, id: Identity) -> CertFiles {
    let files = match &id {
        Identity::Node(n) => CertFiles::node(&dir.join(n)),
        Identity::User(u) => CertFiles::user(&dir.join("users"), u),
    };
    let hosts = if matches!(id, Identity::Node(_)) { vec!["127.0.0.1".to_owned()] } else { vec![] };
    ca.issue(&id, &hosts, 30, &files).unwrap();
    files
}

/// Serves gRPC health behind the nodes-and-root boundary, and an HTTP route that
/// answers with the caller's identity; returns both addresses.
async fn serve(t: &Transport) -> (String, String) {
    let (_, health) = tonic_health::server::health_reporter();
    let router = t.grpc_server().add_service(InterceptedService::new(health, auth::nodes_and_root));
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc.local_addr().unwrap().to_string();
    let t2 = t.clone();
    tokio::spawn(async move { t2.serve_grpc(router, grpc, std::future::pending()).await });
    let app = axum::Router::new().route(
        "/who",
        axum::routing::get(|axum::extract::ConnectInfo(p): axum::extract::ConnectInfo<Peer>| async move {
            p.identity.map_or("nobody".to_owned(), |i| i.to_string())
        }),
    );
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap().to_string();
    let t3 = t.clone();
    tokio::spawn(async move { t3.serve_http(app, http, std::future::pending()).await });
    (grpc_addr, http_addr)
}

async fn check(t: &Transport, addr: &str) -> Result<(), String> {
    let ch = t.connect(addr).await.map_err(|e| e.to_string())?;
    HealthClient::new(ch).check(HealthCheckRequest { service: String::new() }).await.map(|_| ()).map_err(|s| holdfast_rpc::status::one_line(&s))
}

/// `GET /who` over a fresh connection of `t`.
async fn who(t: &Transport, addr: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut io = t.stream(addr).await.map_err(|e| e.to_string())?;
    io.write_all(b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.map_err(|e| e.to_string())?;
    let mut out = String::new();
    let _ = io.read_to_string(&mut out).await;
    if !out.starts_with("HTTP/1.1 200") {
        return Err(format!("no HTTP answer: {out:?}"));
    }
    Ok(out.rsplit("\r\n\r\n").next().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn a_node_port_lets_nodes_and_root_in_and_refuses_everyone_else() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::create(30).unwrap();
    ca.write(dir.path(), &dir.path().join("ca.key")).unwrap();
    let server = transport(issue(&ca, dir.path(), Identity::node("n1").unwrap()));
    let (grpc, http) = serve(&server).await;

    let node = transport(issue(&ca, dir.path(), Identity::node("n2").unwrap()));
    let root = transport(issue(&ca, dir.path(), Identity::user("root").unwrap()));
    let alice = transport(issue(&ca, dir.path(), Identity::user("alice").unwrap()));
    check(&node, &grpc).await.expect("a node gets in");
    check(&root, &grpc).await.expect("root gets in");
    let e = check(&alice, &grpc).await.unwrap_err();
    assert!(e.starts_with("PERMISSION_DENIED") && e.contains("user:alice"), "{e}");

    // Plaintext and a certificate from another CA do not get a connection at all.
    assert!(check(&Transport::insecure(), &grpc).await.is_err(), "plaintext refused");
    let other = Ca::create(30).unwrap();
    let rogue_dir = dir.path().join("rogue");
    other.write(&rogue_dir, &rogue_dir.join("ca.key")).unwrap();
    let rogue_files = issue(&other, &rogue_dir, Identity::node("n1").unwrap());
    // It trusts the real CA (so it can verify the server) but holds a rogue certificate.
    std::fs::copy(dir.path().join("ca.crt"), &rogue_files.ca).unwrap();
    assert!(check(&transport(rogue_files), &grpc).await.is_err(), "a certificate of another CA refused");

    // The HTTP port: TLS always, a client certificate optional (probes, bearer tokens).
    assert_eq!(who(&alice, &http).await.unwrap(), "user:alice");
    assert!(who(&Transport::insecure(), &http).await.is_err(), "plaintext refused on the HTTP port too");
}

#[tokio::test]
async fn certificates_rotated_on_disk_take_effect_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::create(30).unwrap();
    ca.write(dir.path(), &dir.path().join("ca.key")).unwrap();
    let server_files = issue(&ca, dir.path(), Identity::node("n1").unwrap());
    let server = transport(server_files.clone());
    let (grpc, _) = serve(&server).await;

    // A client's certificate: rotated from a node's to a user's, its next connection
    // is the user's (and refused by the node boundary).
    let client_files = issue(&ca, dir.path(), Identity::node("n2").unwrap());
    let client = transport(client_files.clone());
    check(&client, &grpc).await.expect("as node n2");
    let alice = issue(&ca, dir.path(), Identity::user("alice").unwrap());
    std::fs::copy(&alice.cert, &client_files.cert).unwrap();
    std::fs::copy(&alice.key, &client_files.key).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let e = check(&client, &grpc).await.unwrap_err();
    assert!(e.contains("user:alice"), "the rotated certificate is presented: {e}");

    // The server's certificate: rotated to one that does not name 127.0.0.1, new
    // connections fail the client's name check — the new one is served.
    ca.issue(&Identity::node("n1").unwrap(), &["elsewhere.example".into()], 30, &server_files).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = transport(issue(&ca, dir.path(), Identity::node("n3").unwrap()));
    let e = check(&fresh, &grpc).await.unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");

    // A rotation that leaves a broken file keeps the last good material.
    std::fs::write(&server_files.cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(check(&fresh, &grpc).await.is_err(), "still the last good (elsewhere.example) certificate, not a crash");
}
