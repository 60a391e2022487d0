//! Telling hipfile-rs's own `libcufile.so.0` from NVIDIA's.
//!
//! hipfile-rs ships a `libcufile.so.0` of its own (the crate hipfile-cufile) whose driver runs on
//! hipfile-hip. With it on the loader's path, the NVIDIA platform's `dlopen("libcufile.so.0")`
//! for GPUDirect Storage gets it back, and opening its driver would open the very driver that is
//! opening, from inside its own open. [`own_library`] recognises such a library before any of its
//! functions runs:
//!
//! - the same object: `dladdr` of the library's entry point names the object that holds this
//!   code (the library is the one running this check);
//! - another build of hipfile-rs (say `libhipfile.so` loading hipfile-rs's `libcufile.so.0`):
//!   the object's file holds [`OWN_MARKER`], bytes every build of this code carries (they are the
//!   needle of the search) and NVIDIA's library does not.

use std::ffi::{c_void, CStr};
use std::path::PathBuf;

/// Bytes that every object built with this code holds, and no other library.
pub(crate) static OWN_MARKER: &[u8] =
    b"hipfile-rs: a libcufile built on hipfile-hip, not NVIDIA's cuFile";

/// The base address and file of the loaded object holding `addr`.
fn object_of(addr: *const c_void) -> Option<(usize, PathBuf)> {
    // SAFETY: all-zero is a valid `Dl_info` (null pointers and zero addresses).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only reads the loader's tables for `addr` and writes `info`.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-null: the loader's NUL-terminated name of the object, valid while it is loaded
    // (the library whose entry point this is stays loaded while the caller holds it).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some((
        info.dli_fbase as usize,
        PathBuf::from(name.to_string_lossy().into_owned()),
    ))
}

/// Whether the file at `path` holds [`OWN_MARKER`].
fn carries_marker(path: &std::path::Path) -> bool {
    let needle = std::hint::black_box(OWN_MARKER);
    std::fs::read(path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

/// Why the library whose exported function is at `entry` is hipfile-rs's own `libcufile.so.0`
/// (so not NVIDIA's GPUDirect Storage); `None` when it is not.
pub(crate) fn own_library(entry: *const c_void) -> Option<String> {
    let (base, path) = object_of(entry)?;
    let this = object_of(own_library as fn(*const c_void) -> Option<String> as *const c_void);
    if this.is_some_and(|(own_base, _)| own_base == base) {
        return Some(format!(
            "{} is this library itself (hipfile-rs's libcufile.so.0), not NVIDIA's cuFile",
            path.display()
        ));
    }
    carries_marker(&path).then(|| {
        format!(
            "{} is hipfile-rs's own libcufile.so.0, not NVIDIA's cuFile",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this object is recognised as ours (the same-object rule), and this test
    /// binary's file carries the marker (the rule for other builds).
    #[test]
    fn this_object_is_recognised_as_ours() {
        let here = own_library as fn(*const c_void) -> Option<String> as *const c_void;
        let why = own_library(here).expect("this object is ours");
        assert!(why.contains("this library itself"), "{why}");
        let (_, path) = object_of(here).expect("dladdr names this object");
        assert!(carries_marker(&path), "{}", path.display());
    }

    /// libc is not ours.
    #[test]
    fn another_library_is_not() {
        let libc_fn = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as *const c_void;
        assert_eq!(own_library(libc_fn), None);
    }
}
