//! Host memory a request names by address, and the one type requests carry for memory of
//! either kind.
//!
//! A [`HostRange`] is pinned or registered host memory ([`MemoryKind::Host`]) or ordinary
//! pageable memory the runtime does not know ([`MemoryKind::Unregistered`]). Unlike a
//! [`DeviceRange`], nothing can vouch for its extent: pageable memory has no allocation the
//! runtime knows, so a range over it is the application's word (its C contract, as upstream's: the
//! buffer it passes is valid for the IO and left alone while the IO runs). The range is
//! therefore never turned into a Rust reference. Its only operations hand the raw address to the
//! kernel (`pread(2)`, `pwrite(2)`), which checks every page itself: an unmapped address is
//! `EFAULT` (or a short count up to the first bad page), never a fault in the library. Where the
//! runtime does know the allocation (pinned memory), the range must lie inside it.
//!
//! Why a type of its own rather than a wider [`DeviceRange`]: every operation of a device range
//! (synchronous and staged copies, P2P transfers) goes through the GPU runtime and is sound
//! because the runtime vouched for the bytes; none of them means anything for memory the runtime
//! does not know, and a host range's operations go through the kernel instead. The two meet in
//! [`IoMemory`], the memory of one request (or of a registered buffer): the request stays one
//! type, and each backend asks for the kind it serves ([`IoMemory::device_range`],
//! [`IoMemory::host_range`]).
//!
//! What a host range cannot prove is that no Rust reference to the same bytes is alive elsewhere
//! in the process: a range made from the address of memory the Rust program still borrows is its
//! maker's mistake (the Rust facade makes ranges only from an exclusive borrow it holds until the
//! request is finished).

use std::fmt;
use std::sync::Arc;

use crate::error::HipResult;
use crate::runtime::{GpuRuntime, MemoryKind, PointerInfo};
use crate::vouched::device_range::{DeviceRange, Refusal};

/// The device ordinal of host memory: HIP's and CUDA's `hipCpuDeviceId` / `cudaCpuDeviceId`.
pub const HOST_DEVICE: i32 = -1;

/// A range of host memory (pinned, registered or pageable) named by address; see the module
/// docs for what vouches for it. Cheap to copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostRange {
    pub(super) ptr: usize,
    pub(super) len: usize,
    kind: MemoryKind,
}

/// Whether `info`, the runtime's answer for host memory at `ptr`, lets the `len` bytes there
/// be named: an allocation the runtime names must hold all of them; memory it does not know has
/// no extent to check (the kernel checks every page when the bytes move).
fn vouch_host(info: &PointerInfo, ptr: usize, len: usize) -> Result<(), Refusal> {
    if ptr.checked_add(len).is_none() {
        return Err(Refusal::PastEnd(info.kind));
    }
    if info.kind == MemoryKind::Host && info.base != 0 && info.len != 0 {
        return match info.remaining_from(ptr) {
            Some(room) if room >= len => Ok(()),
            _ => Err(Refusal::PastEnd(info.kind)),
        };
    }
    Ok(())
}

impl HostRange {
    /// The `len` bytes at `ptr`, if the runtime reports them as host memory (pinned, registered
    /// or unknown to it) and, for an allocation it knows, inside it. Device, managed and array
    /// memory are [`Refusal::NotHost`].
    pub fn check(runtime: &Arc<dyn GpuRuntime>, ptr: usize, len: usize) -> Result<Self, Refusal> {
        let info = runtime.pointer_info(ptr).map_err(Refusal::Query)?;
        Self::from_info(&info, ptr, len)
    }

    fn from_info(info: &PointerInfo, ptr: usize, len: usize) -> Result<Self, Refusal> {
        if !is_host(info.kind) {
            return Err(Refusal::NotHost(info.kind));
        }
        vouch_host(info, ptr, len)?;
        Ok(HostRange {
            ptr,
            len,
            kind: info.kind,
        })
    }

    /// `len` bytes of host memory at `ptr` registered by the application with that length
    /// (`hipFileBufRegister`, cuFileBufRegister): the registration's length is its word, as
    /// upstream takes it. `kind` must be a host kind; `None` otherwise.
    pub fn registered(ptr: usize, len: usize, kind: MemoryKind) -> Option<Self> {
        (is_host(kind) && ptr.checked_add(len).is_some()).then_some(HostRange { ptr, len, kind })
    }

    /// The `len` bytes at `offset` into this range, or `None` when they do not fit inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Option<HostRange> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then_some(HostRange {
            ptr: self.ptr + offset,
            len,
            kind: self.kind,
        })
    }

    /// First address of the range (for reports and alignment checks).
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// [`MemoryKind::Host`] or [`MemoryKind::Unregistered`].
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }
}

impl fmt::Debug for HostRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRange")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Whether `kind` is host memory: pinned or registered, or unknown to the runtime.
pub fn is_host(kind: MemoryKind) -> bool {
    matches!(kind, MemoryKind::Host | MemoryKind::Unregistered)
}

/// The memory of one request or registered buffer: device memory the runtime vouched for, or
/// host memory named by address (module docs).
#[derive(Clone, Debug)]
pub enum IoMemory {
    /// Device or managed memory.
    Device(DeviceRange),
    /// Pinned, registered or pageable host memory.
    Host(HostRange),
}

impl IoMemory {
    /// The `len` bytes at `ptr` as the runtime's pointer query finds them: a [`DeviceRange`]
    /// for device or managed memory (checked as [`DeviceRange::check`] does), a [`HostRange`]
    /// for host memory (as [`HostRange::check`]). One pointer query either way.
    pub fn check(runtime: &Arc<dyn GpuRuntime>, ptr: usize, len: usize) -> Result<Self, Refusal> {
        let info = runtime.pointer_info(ptr).map_err(Refusal::Query)?;
        if is_host(info.kind) {
            HostRange::from_info(&info, ptr, len).map(IoMemory::Host)
        } else {
            DeviceRange::from_info(runtime, &info, ptr, len).map(IoMemory::Device)
        }
    }

    /// The `len` bytes at `offset` into this memory, or `None` when they do not fit inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Option<IoMemory> {
        match self {
            IoMemory::Device(r) => r.slice(offset, len).map(IoMemory::Device),
            IoMemory::Host(r) => r.slice(offset, len).map(IoMemory::Host),
        }
    }

    /// First address.
    pub fn ptr(&self) -> usize {
        match self {
            IoMemory::Device(r) => r.ptr(),
            IoMemory::Host(r) => r.ptr(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            IoMemory::Device(r) => r.len(),
            IoMemory::Host(r) => r.len(),
        }
    }

    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kind of memory, as the runtime reported it.
    pub fn kind(&self) -> MemoryKind {
        match self {
            IoMemory::Device(r) => r.kind(),
            IoMemory::Host(r) => r.kind(),
        }
    }

    /// The device that owns the memory; [`HOST_DEVICE`] (-1) for host memory.
    pub fn device(&self) -> i32 {
        match self {
            IoMemory::Device(r) => r.device(),
            IoMemory::Host(_) => HOST_DEVICE,
        }
    }

    /// The device range, for the engines that serve device memory.
    pub fn device_range(&self) -> Option<&DeviceRange> {
        match self {
            IoMemory::Device(r) => Some(r),
            IoMemory::Host(_) => None,
        }
    }

    /// The host range, for the engine that serves host memory.
    pub fn host_range(&self) -> Option<&HostRange> {
        match self {
            IoMemory::Device(_) => None,
            IoMemory::Host(r) => Some(r),
        }
    }

    /// The device range, or `HIP_ERROR_INVALID_VALUE` for host memory (an engine of device
    /// memory offered host memory against its `accepts`).
    pub fn expect_device(&self, what: &'static str) -> HipResult<&DeviceRange> {
        self.device_range()
            .ok_or_else(|| crate::HipError::call(what, crate::HipErrorCode::INVALID_VALUE))
    }
}

impl From<DeviceRange> for IoMemory {
    fn from(range: DeviceRange) -> Self {
        IoMemory::Device(range)
    }
}

impl From<HostRange> for IoMemory {
    fn from(range: HostRange) -> Self {
        IoMemory::Host(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimRuntime;
    use crate::{DeviceBuffer, PinnedBuffer};

    fn sim() -> Arc<dyn GpuRuntime> {
        Arc::new(SimRuntime::default())
    }

    #[test]
    fn memory_is_checked_as_the_kind_the_runtime_reports() {
        let rt = sim();
        let dev = DeviceBuffer::new(rt.clone(), 4096).unwrap();
        let m = IoMemory::check(&rt, dev.ptr(), 4096).unwrap();
        assert!(m.device_range().is_some() && m.host_range().is_none());
        assert!(matches!(
            IoMemory::check(&rt, dev.ptr(), 4097),
            Err(Refusal::PastEnd(MemoryKind::Device))
        ));
        let pinned = PinnedBuffer::new(rt.clone(), 4096).unwrap();
        let at = pinned.as_ptr() as usize;
        let m = IoMemory::check(&rt, at + 96, 4000).unwrap();
        assert_eq!(
            (m.kind(), m.device(), m.len()),
            (MemoryKind::Host, HOST_DEVICE, 4000)
        );
        assert!(matches!(
            IoMemory::check(&rt, at + 96, 4001),
            Err(Refusal::PastEnd(MemoryKind::Host))
        ));
        let pageable = [0u8; 64];
        let m = IoMemory::check(&rt, pageable.as_ptr() as usize, 1 << 30).unwrap();
        assert_eq!(
            m.kind(),
            MemoryKind::Unregistered,
            "pageable memory has no extent the runtime knows"
        );
        assert!(HostRange::check(&rt, usize::MAX - 2, 4).is_err());
        assert!(matches!(
            HostRange::check(&rt, dev.ptr(), 16),
            Err(Refusal::NotHost(MemoryKind::Device))
        ));
    }

    #[test]
    fn host_slices_stay_inside() {
        let r = HostRange::registered(0x1000, 4096, MemoryKind::Unregistered).unwrap();
        assert_eq!(r.slice(4000, 96).unwrap().ptr(), 0x1000 + 4000);
        assert!(r.slice(4000, 97).is_none());
        assert!(r.slice(usize::MAX, 2).is_none());
        assert!(HostRange::registered(0x1000, 16, MemoryKind::Device).is_none());
    }

    /// A page the process can neither read nor write, mapped for the life of the test (an
    /// unmapped address could be taken by another thread's mapping meanwhile).
    fn no_access_page() -> usize {
        // SAFETY: a fresh anonymous mapping of one page that nothing dereferences; left mapped
        // until the test process ends.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    #[test]
    fn the_kernel_moves_host_bytes_and_answers_efault_for_a_bad_address() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let rt = sim();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let mut dst = vec![0u8; 16];
        let range = HostRange::check(&rt, dst.as_mut_ptr() as usize, 16).unwrap();
        assert_eq!(
            range.read_from(file.as_fd(), 2).unwrap(),
            8,
            "short at end of file"
        );
        let src = *b"abc";
        let out = HostRange::check(&rt, src.as_ptr() as usize, 3).unwrap();
        assert_eq!(out.write_to(file.as_fd(), Some(1)).unwrap(), 3);
        assert_eq!(out.write_to(file.as_fd(), None).unwrap(), 3, "appended");
        assert_eq!(&dst[..8], b"23456789");
        let mut back = vec![0u8; 13];
        let whole = HostRange::check(&rt, back.as_mut_ptr() as usize, 13).unwrap();
        assert_eq!(whole.read_from(file.as_fd(), 0).unwrap(), 13);
        assert_eq!(&back, b"0abc456789abc");

        let bad = HostRange::check(&rt, no_access_page(), 4096).unwrap();
        let efault = |r: std::io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(efault(bad.read_from(file.as_fd(), 0)), Some(libc::EFAULT));
        assert_eq!(
            efault(bad.write_to(file.as_fd(), Some(0))),
            Some(libc::EFAULT)
        );
        assert_eq!(efault(bad.write_to(file.as_fd(), None)), Some(libc::EFAULT));
    }
}
