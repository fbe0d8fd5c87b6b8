//! Build script: with the `verbs` feature, bindgen makes the mlx5 direct-verbs bindings the
//! verbs NIC needs (rdma-core's `infiniband/mlx5dv.h`; libibverbs' own come from `rdma-sys`)
//! and links libmlx5. Without it, nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "verbs")]
    mlx5dv();
}

#[cfg(feature = "verbs")]
fn mlx5dv() {
    let header = "src/nic/verbs/mlx5dv.h";
    println!("cargo:rerun-if-changed={header}");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("mlx5dv.rs");
    let bindings = bindgen::Builder::default()
        .header(header)
        .allowlist_function("mlx5dv_init_obj")
        .allowlist_type("mlx5dv_obj")
        .allowlist_type("mlx5dv_qp")
        .allowlist_type("mlx5dv_cq")
        .allowlist_type("mlx5dv_obj_type")
        .default_enum_style(bindgen::EnumVariation::ModuleConsts)
        // the verbs types are rdma_sys's (the same C definitions)
        .blocklist_type("ibv_.*")
        .raw_line("use rdma_sys::*;")
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| panic!("the `verbs` feature needs rdma-core's development files (infiniband/mlx5dv.h: Debian/Ubuntu libibverbs-dev) and libclang: {e}"));
    bindings.write_to_file(&out).expect("write the mlx5dv bindings");
    println!("cargo:rustc-link-lib=mlx5");
}
