//! Link arguments of `libcufile.so`: the SONAME NVIDIA's library has, and every symbol of the Rust
//! libraries it links kept local (see the crate docs, "Exports").

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcufile.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rerun-if-changed=build.rs");
}
