//! What a runtime answers about itself and about a pointer: which platform it drives
//! ([`Platform`]), its versions ([`RuntimeInfo`]) and what a pointer refers to ([`MemoryKind`],
//! [`PointerInfo`]). Plain data every layer uses (errors report which platforms were passed over,
//! options pick one, runtimes say which they are), so it depends on nothing else of the crate.

use std::fmt;

/// Which GPU platform a runtime drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Platform {
    /// AMD GPUs through the HIP runtime (`libamdhip64.so`).
    Amd,
    /// NVIDIA GPUs through the CUDA runtime, with HIP semantics.
    Nvidia,
    /// The simulated GPU in host memory.
    Sim,
}

impl Platform {
    /// The name used by `HIPFILE_PLATFORM` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Amd => "amd",
            Platform::Nvidia => "nvidia",
            Platform::Sim => "sim",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of memory a pointer refers to, decoded from the platform's own numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Memory the runtime does not know: ordinary pageable host memory.
    Unregistered,
    /// Host memory the runtime allocated pinned or registered.
    Host,
    /// Device memory.
    Device,
    /// Managed (unified, migratable) memory.
    Managed,
    /// A device array (texture memory).
    Array,
}

/// What the runtime knows about a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerInfo {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// The device that owns the memory (meaningful for device and managed memory).
    pub device: i32,
    /// Start of the allocation holding the pointer (0 when unknown).
    pub base: usize,
    /// Length of that allocation in bytes (0 when unknown).
    pub len: usize,
}

impl PointerInfo {
    /// Bytes from `ptr` to the end of its allocation, or `None` if `ptr` lies outside it.
    pub fn remaining_from(&self, ptr: usize) -> Option<usize> {
        let end = self.base.checked_add(self.len)?;
        (ptr >= self.base && ptr <= end).then(|| end - ptr)
    }
}

/// Facts about a loaded runtime, for reports such as `hipfile check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// The platform.
    pub platform: Platform,
    /// The runtime's version number as the runtime reports it (`hipRuntimeGetVersion`).
    pub runtime_version: i32,
    /// The library that was loaded (a path or soname; "built-in" for the sim).
    pub library: String,
}
