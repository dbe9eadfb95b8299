//! Generates the libfabric bindings against the headers installed on this machine.
//!
//! Most of libfabric's data path (`fi_write`, `fi_cq_read`, `fi_mr_reg`, ...) is `static inline`
//! in the headers, dispatching through a fid's ops table; bindgen cannot bind those directly. Its
//! `wrap_static_fns` mode emits a C file of out-of-line wrappers, compiled here with `cc`, so the
//! Rust side calls exactly what a C program would call.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_LIB_DIR");

    let include = env::var("LIBFABRIC_INCLUDE_DIR").ok();
    if let Ok(dir) = env::var("LIBFABRIC_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=fabric");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("static_wrappers");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*|FID_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    if let Some(dir) = &include {
        builder = builder.clang_arg(format!("-I{dir}"));
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!("bindgen failed on <rdma/fabric.h>: {e}; install libfabric-dev and libclang-dev")
    });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs to OUT_DIR");

    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .include(env::current_dir().expect("build scripts run in the package directory"))
        .flag("-include")
        .flag("wrapper.h")
        .warnings(false);
    if let Some(dir) = &include {
        cc.include(dir);
    }
    cc.compile("gaspi_fabric_static_wrappers");
}
