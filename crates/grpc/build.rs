//! Generates the apache.rocketmq.v2 messages and the MessagingService client from our own
//! `.proto` files, compiled by `protox` (pure Rust: no protoc binary to download or install).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
