//! Builders shared by the registry state tests.

#![allow(dead_code)]

use holdfast_core::{CellId, Intent, NamespaceConfig, NamespaceName, NodeId, RegionId, ShardKey, ShardName};
use holdfast_registry_state::{Applied, CellMember, Command, Entry, RegistryState};

pub fn region(s: &str) -> RegionId {
    RegionId::new(s).unwrap()
}

pub fn cell(s: &str) -> CellId {
    CellId::new(s).unwrap()
}

pub fn ns(s: &str) -> NamespaceName {
    NamespaceName::new(s).unwrap()
}

pub fn key(ns: &str, shard: &str) -> ShardKey {
    ShardKey::new(NamespaceName::new(ns).unwrap(), ShardName::new(shard).unwrap())
}

pub fn ns_config(ns: &str) -> NamespaceConfig {
    NamespaceConfig::with_defaults(NamespaceName::new(ns).unwrap(), "team", Intent::Correctness)
}

pub fn members(n: u64) -> Vec<CellMember> {
    (1..=n).map(|i| CellMember { node_id: NodeId(i), client_addr: format!("127.0.0.1:70{i:02}"), raft_addr: format!("127.0.0.1:71{i:02}") }).collect()
}

pub fn apply(st: &mut RegistryState, cmd: Command) -> Applied {
    st.apply(&Entry::new(1_000, cmd))
}

/// Applies and asserts success.
pub fn ok(st: &mut RegistryState, cmd: Command) -> Applied {
    let a = apply(st, cmd.clone());
    assert!(a.result.is_ok(), "{cmd:?} refused: {:?}", a.result);
    a
}

/// Two active regions `east` and `west`, cells `east-1` (east) and `west-1`, `west-2`
/// (west), namespace `pay`, shard `pay/default` on `east-1` at epoch 1.
pub fn world() -> RegistryState {
    let mut st = RegistryState::new();
    for r in ["east", "west"] {
        ok(&mut st, Command::CreateRegion { region: region(r) });
    }
    ok(&mut st, Command::RegisterCell { cell: cell("east-1"), region: region("east"), members: members(3) });
    ok(&mut st, Command::RegisterCell { cell: cell("west-1"), region: region("west"), members: members(3) });
    ok(&mut st, Command::RegisterCell { cell: cell("west-2"), region: region("west"), members: members(3) });
    ok(&mut st, Command::CreateNamespace { config: ns_config("pay") });
    ok(&mut st, Command::PlaceShard { shard: key("pay", "default"), cell: cell("east-1") });
    st
}
