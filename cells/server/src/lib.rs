//! holdfast-cell: the cell server. Thin glue between the pure lock table
//! (`holdfast-cell-state`), the Raft substrate (`holdfast-raft`) and the lock API
//! (`holdfast-proto`): the leader's lease clock, the LockService, leadership as a type.

pub mod clock;
