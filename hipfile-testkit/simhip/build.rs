//! Link settings of the simulated HIP runtime library.

fn main() {
    // A C program linked with `-lamdhip64` records this soname, so the AMD platform's
    // dlopen("libamdhip64.so.6") in the same process finds the library already loaded.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamdhip64.so.6");
    // Stream workers of the simulator are threads running this library's code: unmapping it on
    // dlclose would pull the code from under them, so the library stays loaded once loaded.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
