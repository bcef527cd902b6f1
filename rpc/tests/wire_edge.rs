//! The wire edge is one crate: no other file of the workspace — tests included —
//! builds a gRPC channel, a tonic server or an HTTP server by hand. Each of them would
//! bypass the transport's limits, TCP_NODELAY and (soon) TLS; this test fails on the
//! first one added, naming the file and line and the call to use instead.

use std::path::{Path, PathBuf};

/// Constructions that belong to `holdfast-rpc`, and what to call instead.
const FORBIDDEN: &[(&str, &str)] = &[
    ("Channel::from_shared", "Transport::channel / Transport::connect"),
    ("Channel::from_static", "Transport::channel / Transport::connect"),
    ("Endpoint::from_shared", "Transport::channel / Transport::connect"),
    ("Endpoint::new(", "Transport::channel / Transport::connect"),
    ("Endpoint::from_static", "Transport::channel / Transport::connect"),
    // tonic's generated `connect` builds its own endpoint.
    ("ServiceClient::connect(", "Transport::connect, then XClient::new(channel)"),
    ("AdminClient::connect(", "Transport::connect, then XClient::new(channel)"),
    ("Server::builder()", "Transport::grpc_server"),
    ("serve_with_incoming", "Transport::serve_grpc"),
    ("TcpIncoming", "Transport::serve_grpc"),
    ("axum::serve(", "Transport::serve_http"),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("rpc/ sits in the workspace").to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name == "target" || name.starts_with('.') {
                continue;
            }
            rust_files(&p, out);
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_channel_or_server_is_built_outside_the_wire_edge() {
    let root = workspace_root();
    let edge = root.join("rpc");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 50, "the scan found only {} files under {}: is the root right?", files.len(), root.display());
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&edge)) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (pattern, instead) in FORBIDDEN {
                if line.contains(pattern) {
                    found.push(format!("{}:{}: `{pattern}` — use holdfast_rpc's {instead}", f.strip_prefix(&root).unwrap_or(f).display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "built outside the wire edge:\n{}", found.join("\n"));
}

#[test]
fn the_scan_sees_what_it_forbids() {
    // The check must be able to fail: the wire edge itself builds each of these.
    let mut text = String::new();
    for f in ["transport.rs", "serve.rs"] {
        text += &std::fs::read_to_string(workspace_root().join("rpc/src").join(f)).unwrap();
    }
    for needle in ["Endpoint::from_shared", "Server::builder()", "serve_with_incoming", "axum::serve("] {
        assert!(text.contains(needle), "rpc/src no longer contains {needle}: update FORBIDDEN");
    }
}
