//! How long `holdfast registry recover` takes for a registry of N namespaces (issue #44):
//! a survivor's data directory holding N namespaces, one shard each, over three regions
//! and cells; then the recovery's three steps timed apart (read the survivor, raise the
//! epochs, write the new member), and the recovered voter started until it leads. Then
//! the snapshot file of that registry: saved over its RPC into a file (read at the
//! leader, streamed, written, checked), and a new registry restored from the file.
//! `scripts/recovery-time.sh` runs it; figures in docs/registry.md.
//!
//!   cargo run --profile perf -p holdfast-registry --example recovery_time -- 10000

use std::io::Write as _;
use std::time::Instant;

use holdfast_core::{CellId, Intent, NamespaceConfig, NamespaceName, NodeId, RegionId, ShardKey, ShardName};
use holdfast_proto::raft::v1::SaveSnapshotRequest;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_raft::recover::{read_stopped, write_new_member};
use holdfast_raft::snapshot_file;
use holdfast_raft::types::{LeaderId, LogId};
use holdfast_raft::Node;
use holdfast_registry::machine::{Hooks, RegistryMachine};
use holdfast_registry::{RegistryConfig, RegistryServer};
use holdfast_registry_state::{CellMember, Command, Entry, RegistryState, RECOVERY_EPOCH_GAP};

fn ok(st: &mut RegistryState, cmd: Command) {
    let a = st.apply(&Entry::new(1, cmd));
    assert!(a.result.is_ok(), "{:?}", a.result);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args().nth(1).map(|a| a.parse().expect("a number of namespaces")).unwrap_or(10_000);
    let root = tempfile::tempdir().expect("temp dir");

    let mut st = RegistryState::new();
    let cells: Vec<CellId> = ["east", "west", "south"].iter().map(|r| CellId::new(format!("{r}-1")).unwrap()).collect();
    for (i, r) in ["east", "west", "south"].iter().enumerate() {
        ok(&mut st, Command::CreateRegion { region: RegionId::new(*r).unwrap() });
        let members =
            (1..=3).map(|k| CellMember { node_id: NodeId(k), client_addr: format!("{r}-1-{k}:7300"), raft_addr: format!("{r}-1-{k}:7301") }).collect();
        ok(&mut st, Command::RegisterCell { cell: cells[i].clone(), region: RegionId::new(*r).unwrap(), members });
    }
    for i in 0..n {
        let ns = NamespaceName::new(format!("ns-{i:05}")).unwrap();
        ok(&mut st, Command::CreateNamespace { config: NamespaceConfig::with_defaults(ns.clone(), "team", Intent::Correctness) });
        ok(&mut st, Command::PlaceShard { shard: ShardKey::new(ns, ShardName::default_shard()), cell: cells[i % 3].clone() });
    }
    let survivor_dir = root.path().join("registry-1");
    let last = LogId::new(LeaderId { term: 7, node_id: 1 }, 2 * n as u64 + 10);
    let survivor = Node::new("127.0.0.1:1", "127.0.0.1:2");
    write_new_member(&survivor_dir, 1, survivor, st.snapshot(), last, 7).expect("write the survivor's directory");

    let t = Instant::now();
    let copy = read_stopped(&survivor_dir, RegistryMachine::new(Hooks::new())).expect("read");
    let read = t.elapsed();
    let t = Instant::now();
    let mut state = copy.state.state().clone();
    let r = state.recover(RECOVERY_EPOCH_GAP, 1, "bench", "survivor").expect("recover");
    let raise = t.elapsed();
    let snapshot = state.snapshot();
    let raft = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let overrides = [
        ("node_id", "1".to_owned()),
        ("data_dir", root.path().join("registry-1-recovered").display().to_string()),
        ("raft_addr", raft.local_addr().unwrap().to_string()),
        ("client_addr", client.local_addr().unwrap().to_string()),
        ("tls.insecure", "true".to_owned()),
    ];
    let cfg = RegistryConfig::load(None, &overrides).expect("config");
    let t = Instant::now();
    let bytes = snapshot.len();
    let node = Node::new(cfg.raft_addr.clone(), cfg.client_addr.clone());
    write_new_member(&cfg.data_dir, 1, node, snapshot, copy.last_log_id, copy.term).expect("write");
    let write = t.elapsed();
    let t = Instant::now();
    let server = RegistryServer::start(&cfg, raft, client).await.expect("start");
    while !server.leads() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let lead = t.elapsed();
    println!(
        "{n} namespaces, {} shards, snapshot {bytes} bytes: read {:.0} ms, raise {:.0} ms, write {:.0} ms, start to leading {:.0} ms",
        r.shards,
        read.as_secs_f64() * 1e3,
        raise.as_secs_f64() * 1e3,
        write.as_secs_f64() * 1e3,
        lead.as_secs_f64() * 1e3
    );

    // `holdfast snapshot save --registry`, as the command does it: the RPC's pieces
    // written to a file, synced, then the file checked whole.
    let file = root.path().join("registry.snap");
    let t = Instant::now();
    let ch = holdfast_rpc::Transport::insecure().connect(&server.client_addr().to_string()).await.expect("connect");
    let mut stream = RegistryServiceClient::new(ch).save_snapshot(SaveSnapshotRequest { group: "registry".into() }).await.expect("save").into_inner();
    let mut out = std::fs::File::create(&file).expect("create");
    while let Some(piece) = stream.message().await.expect("a piece") {
        out.write_all(&piece.data).expect("write");
    }
    out.sync_all().expect("sync");
    let header = snapshot_file::verify(&file).expect("the file checks");
    let save = t.elapsed();
    let t = Instant::now();
    let restored = RegistryConfig { data_dir: root.path().join("registry-restored"), ..cfg.clone() };
    holdfast_registry::recover::restore_from_snapshot(&file, &restored, RECOVERY_EPOCH_GAP, "bench").expect("restore");
    let restore = t.elapsed();
    println!(
        "snapshot file of {} bytes: save {:.0} ms (read at the leader, streamed, written, checked), restore {:.0} ms (checked, read, raised, written)",
        std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
        save.as_secs_f64() * 1e3,
        restore.as_secs_f64() * 1e3
    );
    assert_eq!(header.state_bytes, bytes as u64, "the file holds another state than the one recovered");
    server.shutdown().await;
}
