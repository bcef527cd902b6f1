//! openraft's storage conformance suite against the RocksDB log and state machine stores.

use holdfast_raft::rocks::open_db;
use holdfast_raft::testing::AppendLog;
use holdfast_raft::{LogStore, StateMachineStore, TypeConfig};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<AppendLog>, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore<AppendLog>), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = open_db(dir.path(), None).expect("open db");
        let sm = StateMachineStore::open(db.clone(), AppendLog::default()).expect("open sm");
        Ok((dir, LogStore::new(db), sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocksdb_stores_pass_openraft_storage_suite() {
    Suite::test_all(RocksBuilder).await.expect("storage suite");
}

/// The same stores on RocksDB's in-memory environment, as the simulation runs them:
/// appends reported durable inline (no WAL to sync) and snapshots written inline,
/// instead of on threads.
struct MemoryBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore<AppendLog>, ()> for MemoryBuilder {
    async fn build(&self) -> Result<((), LogStore, StateMachineStore<AppendLog>), StorageError<TypeConfig>> {
        let disk = holdfast_raft::rocks::MemoryDisk::new().expect("memory env");
        let db = open_db(std::path::Path::new("/sim/node"), Some(&disk)).expect("open db");
        assert!(db.inline_io());
        let sm = StateMachineStore::open(db.clone(), AppendLog::default()).expect("open sm");
        Ok(((), LogStore::new(db), sm))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_stores_on_a_memory_disk_pass_openraft_storage_suite() {
    Suite::test_all(MemoryBuilder).await.expect("storage suite");
}

/// The state machine half across a reopen: a snapshot persisted by one incarnation is what
/// the next one starts from (the suite only checks stores that stay open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_survives_reopen() {
    use holdfast_raft::types::{Entry, EntryPayload, LeaderId, LogId};
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};

    let dir = tempfile::tempdir().expect("temp dir");
    let lid = |i| LogId::new(LeaderId { term: 1, node_id: 1 }, i);
    {
        let db = open_db(dir.path(), None).expect("open");
        let mut sm = StateMachineStore::open(db, AppendLog::default()).expect("sm");
        let entries: Vec<Result<holdfast_raft::types::EntryResponder, std::io::Error>> = (1..=3u64)
            .map(|i| Ok((Entry { log_id: lid(i), payload: EntryPayload::Normal(holdfast_raft::Request::new(AppendLog::command(i * 10))) }, None)))
            .collect();
        sm.apply(futures_util::stream::iter(entries)).await.expect("apply");
        let snap = sm.get_snapshot_builder().await.build_snapshot().await.expect("build");
        assert_eq!(snap.meta.last_log_id, Some(lid(3)));
    }
    let db = open_db(dir.path(), None).expect("reopen");
    let mut sm = StateMachineStore::open(db, AppendLog::default()).expect("sm");
    let (applied, _) = sm.applied_state().await.expect("applied state");
    assert_eq!(applied, Some(lid(3)));
    assert_eq!(sm.handle().read(|s| s.values.clone()), vec![10, 20, 30]);
    assert_eq!(sm.handle().last_applied(), Some(3));
}

/// Issue #15, item 6: an entry the state machine cannot read stops the node with a
/// fatal error (the application's `apply` failed), instead of being skipped while
/// other replicas apply it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_committed_entry_stops_the_node() {
    use holdfast_raft::{NodeConfig, RaftNode, ReplicatedState};
    use openraft::async_runtime::WatchReceiver;
    struct Picky;
    impl ReplicatedState for Picky {
        fn apply(&mut self, log_index: u64, payload: &[u8]) -> std::io::Result<Vec<u8>> {
            match payload {
                b"future" => Err(holdfast_raft::undecodable("test", log_index, &"version 99")),
                _ => Ok(Vec::new()),
            }
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&mut self, _: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = RaftNode::start(NodeConfig::new(1, "picky", dir.path()), listener, Picky).await.unwrap();
    node.initialize([(1, node.node().clone())].into()).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while node.write(b"today".to_vec()).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the node never accepted a write");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(node.write(b"future".to_vec()).await.is_err(), "the unreadable entry was answered as applied");
    let mut m = node.raft().metrics();
    while m.borrow_watched().running_state.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "the node kept running after an unreadable entry");
        let _ = tokio::time::timeout(std::time::Duration::from_millis(100), m.changed()).await;
    }
}

/// A node stopped and started again in the same process (the cluster tests, a cell
/// re-hosted by the playground) must find its directory unlocked. The last handle to the
/// database may drop on another thread, and RocksDB releases its LOCK file only at the
/// end of the close: waiting for the handle count alone raced with it ("lock hold by
/// current process", seen once in CI). `Db::closed` dies only after the close.
#[test]
fn a_database_closed_on_another_thread_can_be_opened_again_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    for round in 0..200 {
        let db = open_db(dir.path(), None).expect("open");
        db.put(b"k", round.to_string()).expect("put");
        let closed = db.closed();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let holder = db.clone();
        let t = std::thread::spawn(move || {
            wait.recv().expect("go");
            drop(holder);
        });
        drop(db);
        go.send(()).expect("go");
        while closed.strong_count() > 0 {
            std::thread::yield_now();
        }
        open_db(dir.path(), None).unwrap_or_else(|e| panic!("round {round}: reopen right after close: {e}"));
        t.join().expect("thread");
    }
}
