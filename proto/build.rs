//! Compiles `ufo/v1/*.proto` into `OUT_DIR`, with a file descriptor set for gRPC reflection.

use std::{env, error::Error, path::PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    // A vendored protoc keeps the build offline and independent of the machine; PROTOC still wins.
    if env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
        unsafe { env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let protos = [
        "ufo/v1/executor.proto",
        "ufo/v1/session.proto",
        "ufo/v1/agent.proto",
        "ufo/v1/dialout.proto",
    ];
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("ufo_descriptor.bin"))
        // Screenshots and artifacts as `bytes::Bytes`: decoded as slices of the received buffer and
        // passed on without copying.
        .bytes(".")
        .compile_protos(&protos, &["."])?;
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
