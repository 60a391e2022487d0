//! Link settings of the simulated CUDA library.

fn main() {
    // Stream workers of the simulator are threads running this library's code: unmapping it on
    // dlclose would pull the code from under them, so the library stays loaded once loaded.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
