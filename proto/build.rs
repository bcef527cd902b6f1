//! Compiles every `.proto` under `holdfast/` with a vendored protoc, so a fresh machine
//! needs no system protobuf compiler. A file descriptor set is written for gRPC
//! reflection.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read proto dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

fn main() {
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc");
    // SAFETY-free: build scripts are single-threaded; prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    let mut files = Vec::new();
    collect(Path::new("holdfast"), &mut files);
    files.sort();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("holdfast_descriptor.bin"))
        .compile_protos(&files, &[PathBuf::from(".")])
        .expect("compile protos");
    println!("cargo:rerun-if-changed=holdfast");
}
