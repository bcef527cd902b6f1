//! holdfast-proto: the wire API. The generated code, the descriptor set for gRPC
//! reflection, [`convert`]: the wire <-> domain conversions of `holdfast-core`'s
//! types (namespace config, intent, posture, mode, shard keys), shared by every server
//! and client, and [`json`]: the JSON shapes of the same answers, which the gateway's
//! HTTP API and the command line's `-o json` share. Depends only on `holdfast-core`;
//! conversions of a state crate's types live with the server that owns that state, not
//! here. How statuses carry codes is the wire edge's (`holdfast-rpc`).

#![allow(missing_debug_implementations, clippy::all)]

pub mod convert;
pub mod json;

/// The encoded `FileDescriptorSet` of every holdfast proto, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("holdfast_descriptor");

pub mod lock {
    pub mod v1 {
        tonic::include_proto!("holdfast.lock.v1");

        impl ShardRef {
            /// A reference to shard `shard` of `ns` at whatever epoch the cell serves
            /// (an empty shard is `default`).
            pub fn named(ns: impl Into<String>, shard: impl Into<String>) -> ShardRef {
                ShardRef { ns: ns.into(), shard: shard.into(), epoch: 0 }
            }

            /// The same shard, believed to be at `epoch` (the cell answers
            /// `STALE_EPOCH` if it is not).
            pub fn at(self, epoch: u32) -> ShardRef {
                ShardRef { epoch, ..self }
            }
        }

        impl From<&holdfast_core::ShardKey> for ShardRef {
            fn from(k: &holdfast_core::ShardKey) -> ShardRef {
                ShardRef::named(k.ns.to_string(), k.shard.to_string())
            }
        }
    }
}

pub mod raft {
    pub mod v1 {
        tonic::include_proto!("holdfast.raft.v1");
    }
}

pub mod admin {
    pub mod v1 {
        tonic::include_proto!("holdfast.admin.v1");
    }
}

pub mod registry {
    pub mod v1 {
        tonic::include_proto!("holdfast.registry.v1");
    }
}
