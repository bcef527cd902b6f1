//! holdfast-proto: the wire API. The generated code, the descriptor set for gRPC
//! reflection, and [`convert`]: the wire <-> domain conversions of `holdfast-core`'s
//! types (namespace config, intent, posture, mode, shard keys), shared by every server
//! and client. Depends only on `holdfast-core`; conversions of a state crate's types
//! live with the server that owns that state, not here.

#![allow(missing_debug_implementations, clippy::all)]

pub mod convert;
pub mod status;

/// The encoded `FileDescriptorSet` of every holdfast proto, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("holdfast_descriptor");

pub mod lock {
    pub mod v1 {
        tonic::include_proto!("holdfast.lock.v1");
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
