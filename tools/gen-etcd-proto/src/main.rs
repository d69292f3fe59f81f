//! Writes the prost messages and tonic client/server stubs for etcd's gRPC API.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/etcd-api");
    let out = root.join("src/pb");
    std::fs::create_dir_all(&out).expect("create src/pb");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Clients are generic over any gRPC service (tonic's Channel where one is wanted):
        // no `connect` helper that would tie the library to tonic's transport feature.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_protos(&[root.join("proto/etcd.proto")], &[root.join("proto")])
        .expect("compile etcd.proto");
}
