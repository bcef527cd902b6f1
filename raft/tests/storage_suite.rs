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
        let db = open_db(dir.path()).expect("open db");
        let sm = StateMachineStore::open(db.clone(), AppendLog::default()).expect("open sm");
        Ok((dir, LogStore::new(db), sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rocksdb_stores_pass_openraft_storage_suite() {
    Suite::test_all(RocksBuilder).await.expect("storage suite");
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
        let db = open_db(dir.path()).expect("open");
        let mut sm = StateMachineStore::open(db, AppendLog::default()).expect("sm");
        let entries: Vec<Result<holdfast_raft::types::EntryResponder, std::io::Error>> = (1..=3u64)
            .map(|i| Ok((Entry { log_id: lid(i), payload: EntryPayload::Normal(holdfast_raft::Request::new(AppendLog::command(i * 10))) }, None)))
            .collect();
        sm.apply(futures_util::stream::iter(entries)).await.expect("apply");
        let snap = sm.get_snapshot_builder().await.build_snapshot().await.expect("build");
        assert_eq!(snap.meta.last_log_id, Some(lid(3)));
    }
    let db = open_db(dir.path()).expect("reopen");
    let mut sm = StateMachineStore::open(db, AppendLog::default()).expect("sm");
    let (applied, _) = sm.applied_state().await.expect("applied state");
    assert_eq!(applied, Some(lid(3)));
    assert_eq!(sm.handle().read(|s| s.values.clone()), vec![10, 20, 30]);
    assert_eq!(sm.handle().last_applied(), Some(3));
}
