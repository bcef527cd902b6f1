//! holdfast-proto: the wire API. Generated code only, plus the descriptor set for
//! gRPC reflection. Conversions to and from domain types live with the servers and
//! clients that need them, not here.

#![allow(missing_debug_implementations, clippy::all)]

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
