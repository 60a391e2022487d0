//! Host memory a request names by address, the loan that lets it be named, and the one type
//! requests carry for memory of either kind.
//!
//! A [`HostRange`] is pinned or registered host memory ([`MemoryKind::Host`]) or ordinary
//! pageable memory the runtime does not know ([`MemoryKind::Unregistered`]). Unlike a
//! [`DeviceRange`], nothing can vouch for its extent: pageable memory has no allocation the
//! runtime knows. The range is therefore never turned into a Rust reference. Its only operations
//! hand the raw address to the kernel (`pread(2)`, `pwrite(2)`), which checks every page itself:
//! an unmapped address is `EFAULT` (or a short count up to the first bad page), never a fault in
//! the library. Where the runtime does know the allocation (pinned memory), the range must lie
//! inside it.
//!
//! ## Host memory is lent, never taken
//!
//! The kernel checks that an address is mapped, not that the bytes are free: a read into memory
//! that a `&[u8]` elsewhere in the program still covers is undefined behaviour, however the bytes
//! got there. So a host range is made only inside a [`HostLoan`], the application's statement
//! that it lends these bytes for a request: live, and neither read nor written by anything else
//! (Rust references included) until the request finishes. A loan comes about in one of two ways:
//! - [`HostLoan::lend_mut`] / [`HostLoan::lend`], `unsafe`: the C ABIs call them, because their
//!   caller's contract (hipFile's, cuFile's) is exactly that promise for the buffer it passes;
//! - [`HostLoan::scoped_mut`] / [`HostLoan::scoped`], safe: the Rust API lends a borrow it
//!   holds for the length of a closure. The loan is revoked when the closure returns: revoking
//!   waits for a move of its bytes in flight, and a range of a revoked loan moves nothing
//!   (`EFAULT`). A loan (or a range made inside it) that a request keeps past the closure thus
//!   never touches the bytes after the borrow ends, which is what a lifetime could not promise
//!   once ranges are stored in batches, registrations and stream-ordered ops, and what a guard
//!   value could not (it may be leaked rather than dropped).
//!
//! A loan of `&[u8]` ([`HostLoan::scoped`], [`HostLoan::lend`]) is lent for reading only: the
//! kernel may read its bytes (a file write) but not write them; a file read into it is refused.
//! [`IoMemory::check`] makes host memory only inside a loan that covers it
//! ([`Refusal::NotLent`] otherwise).
//!
//! Why a type of its own rather than a wider [`DeviceRange`]: every operation of a device range
//! (synchronous and staged copies, P2P transfers) goes through the GPU runtime and is sound
//! because the runtime vouched for the bytes; none of them means anything for memory the runtime
//! does not know, and a host range's operations go through the kernel instead. The two meet in
//! [`IoMemory`], the memory of one request (or of a registered buffer): the request stays one
//! type, and each backend asks for the kind it serves ([`IoMemory::device_range`],
//! [`IoMemory::host_range`]).

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use crate::error::HipResult;
use crate::runtime::{GpuRuntime, MemoryKind, PinnedBuffer, PointerInfo};
use crate::vouched::device_range::{DeviceRange, Refusal};

/// The device ordinal of host memory: HIP's and CUDA's `hipCpuDeviceId` / `cudaCpuDeviceId`.
pub const HOST_DEVICE: i32 = -1;

/// The application's loan of `len` host bytes at `ptr` to the library for a request (or a
/// registration): see the module docs. Cheap to clone; clones are the same loan.
#[derive(Clone)]
pub struct HostLoan {
    pub(super) ptr: usize,
    pub(super) len: usize,
    pub(super) writable: bool,
    /// For a loan of a borrow ([`HostLoan::scoped_mut`]): revoked when the borrow ends. `None`
    /// for a loan made with `unsafe`, whose maker answers for the bytes.
    pub(super) scope: Option<Arc<LoanScope>>,
}

/// Whether a scoped loan still holds: readers are the moves of its bytes in flight, the writer
/// is the end of the scope, which waits for them.
#[derive(Debug)]
pub(super) struct LoanScope {
    pub(super) live: RwLock<bool>,
    /// The memory of a [`LentPinned`], kept alive by every loan and range of it; its bytes are
    /// reached only under `live`'s write lock.
    owned: Option<Mutex<PinnedBuffer>>,
}

impl LoanScope {
    /// Hold the loan for one move of its bytes: `None` once it was revoked.
    fn hold(&self) -> Option<RwLockReadGuard<'_, bool>> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        (*live).then_some(live)
    }

    fn revoke(&self) {
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = false;
    }
}

/// Revokes its scope when dropped, also while a panic unwinds out of the closure.
struct Revoke(Arc<LoanScope>);

impl Drop for Revoke {
    fn drop(&mut self) {
        self.0.revoke();
    }
}

impl HostLoan {
    /// Lend `bytes`, which the library may read and write, for the length of `lent`; the loan is
    /// revoked when `lent` returns (module docs).
    pub fn scoped_mut<R>(bytes: &mut [u8], lent: impl FnOnce(HostLoan) -> R) -> R {
        Self::scoped_raw(bytes.as_mut_ptr() as usize, bytes.len(), true, lent)
    }

    /// Lend `bytes`, which the library may only read (a file write), for the length of `lent`;
    /// the loan is revoked when `lent` returns.
    pub fn scoped<R>(bytes: &[u8], lent: impl FnOnce(HostLoan) -> R) -> R {
        Self::scoped_raw(bytes.as_ptr() as usize, bytes.len(), false, lent)
    }

    fn scoped_raw<R>(
        ptr: usize,
        len: usize,
        writable: bool,
        lent: impl FnOnce(HostLoan) -> R,
    ) -> R {
        let scope = Arc::new(LoanScope {
            live: RwLock::new(true),
            owned: None,
        });
        let _revoke = Revoke(Arc::clone(&scope));
        lent(HostLoan {
            ptr,
            len,
            writable,
            scope: Some(scope),
        })
    }

    /// First address lent.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the library may write the bytes (read a file into them).
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The part of this loan from `offset` for `len` bytes, or `None` past its end.
    pub fn slice(&self, offset: usize, len: usize) -> Option<HostLoan> {
        let ptr = super::sub_range(self.ptr, self.len, offset, len)?;
        Some(HostLoan {
            ptr,
            len,
            ..self.clone()
        })
    }

    /// Whether the loan lends all of the `len` bytes at `ptr`.
    pub fn covers(&self, ptr: usize, len: usize) -> bool {
        let (Some(end), Some(lent_end)) = (ptr.checked_add(len), self.ptr.checked_add(self.len))
        else {
            return false;
        };
        ptr >= self.ptr && end <= lent_end
    }
}

impl fmt::Debug for HostLoan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostLoan")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("writable", &self.writable)
            .field("scoped", &self.scope.is_some())
            .finish()
    }
}

/// Pinned host memory lent to the library for as long as it lives: every [`LentPinned::loan`] of
/// it is good for any number of requests and registrations, and Rust code reaches its bytes only
/// through [`LentPinned::with_bytes`], which waits until no move of them is in flight (and holds
/// moves off meanwhile). The buffer is freed when the last loan, range and handle are gone. For
/// test suites and programs that keep one buffer for many requests.
#[derive(Debug)]
pub struct LentPinned {
    scope: Arc<LoanScope>,
    ptr: usize,
    len: usize,
}

impl LentPinned {
    /// Lend `buffer` from now on.
    pub fn new(buffer: PinnedBuffer) -> Self {
        let (ptr, len) = (buffer.as_ptr() as usize, buffer.len());
        LentPinned {
            scope: Arc::new(LoanScope {
                live: RwLock::new(true),
                owned: Some(Mutex::new(buffer)),
            }),
            ptr,
            len,
        }
    }

    /// A loan of all of the buffer, for reading and writing.
    pub fn loan(&self) -> HostLoan {
        HostLoan {
            ptr: self.ptr,
            len: self.len,
            writable: true,
            scope: Some(Arc::clone(&self.scope)),
        }
    }

    /// First address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Run `access` on the bytes, once no move of them is in flight; none starts until it
    /// returns (so a request on this buffer's loan made inside `access` waits for ever).
    pub fn with_bytes<R>(&self, access: impl FnOnce(&mut [u8]) -> R) -> R {
        let _no_moves = self
            .scope
            .live
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let owned = self
            .scope
            .owned
            .as_ref()
            .expect("a LentPinned owns its buffer");
        let mut buffer = owned.lock().unwrap_or_else(PoisonError::into_inner);
        access(buffer.as_mut_slice())
    }
}

/// A range of host memory (pinned, registered or pageable) inside a [`HostLoan`]; see the
/// module docs. Cheap to clone.
#[derive(Clone)]
pub struct HostRange {
    pub(super) ptr: usize,
    pub(super) len: usize,
    kind: MemoryKind,
    writable: bool,
    scope: Option<Arc<LoanScope>>,
}

impl PartialEq for HostRange {
    fn eq(&self, other: &Self) -> bool {
        (self.ptr, self.len, self.kind, self.writable)
            == (other.ptr, other.len, other.kind, other.writable)
    }
}

impl Eq for HostRange {}

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
    /// The `len` bytes at `ptr` inside `loan`, if the runtime reports them as host memory
    /// (pinned, registered or unknown to it) and, for an allocation it knows, inside it. Device,
    /// managed and array memory are [`Refusal::NotHost`]; bytes the loan does not cover are
    /// [`Refusal::NotLent`].
    pub fn check(
        runtime: &Arc<dyn GpuRuntime>,
        loan: &HostLoan,
        ptr: usize,
        len: usize,
    ) -> Result<Self, Refusal> {
        let info = runtime.pointer_info(ptr).map_err(Refusal::Query)?;
        Self::from_info(&info, Some(loan), ptr, len)
    }

    fn from_info(
        info: &PointerInfo,
        loan: Option<&HostLoan>,
        ptr: usize,
        len: usize,
    ) -> Result<Self, Refusal> {
        if !is_host(info.kind) {
            return Err(Refusal::NotHost(info.kind));
        }
        vouch_host(info, ptr, len)?;
        let loan = loan
            .filter(|loan| loan.covers(ptr, len))
            .ok_or(Refusal::NotLent(info.kind))?;
        Ok(HostRange {
            ptr,
            len,
            kind: info.kind,
            writable: loan.writable,
            scope: loan.scope.clone(),
        })
    }

    /// The `len` bytes at `offset` into this range, or `None` when they do not fit inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Option<HostRange> {
        let ptr = super::sub_range(self.ptr, self.len, offset, len)?;
        Some(HostRange {
            ptr,
            len,
            ..self.clone()
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

    /// Whether its loan lets the library write the bytes (read a file into them).
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Run `moving` while the range's loan holds (a scoped loan is not revoked meanwhile);
    /// `EFAULT`, as the kernel answers for memory the process may not touch, once it was revoked.
    pub(super) fn while_lent<R>(&self, moving: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match &self.scope {
            None => moving(),
            Some(scope) => {
                let _held = scope
                    .hold()
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
                moving()
            }
        }
    }
}

impl fmt::Debug for HostRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRange")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("writable", &self.writable)
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
    /// for host memory inside `loan` (as [`HostRange::check`]; without a loan that covers the
    /// bytes, [`Refusal::NotLent`]). One pointer query either way.
    pub fn check(
        runtime: &Arc<dyn GpuRuntime>,
        ptr: usize,
        len: usize,
        loan: Option<&HostLoan>,
    ) -> Result<Self, Refusal> {
        let info = runtime.pointer_info(ptr).map_err(Refusal::Query)?;
        if is_host(info.kind) {
            HostRange::from_info(&info, loan, ptr, len).map(IoMemory::Host)
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
        let m = IoMemory::check(&rt, dev.ptr(), 4096, None).unwrap();
        assert!(m.device_range().is_some() && m.host_range().is_none());
        assert!(matches!(
            IoMemory::check(&rt, dev.ptr(), 4097, None),
            Err(Refusal::PastEnd(MemoryKind::Device))
        ));
        let mut pinned = PinnedBuffer::new(rt.clone(), 4096).unwrap();
        let at = pinned.as_ptr() as usize;
        HostLoan::scoped_mut(pinned.as_mut_slice(), |loan| {
            let m = IoMemory::check(&rt, at + 96, 4000, Some(&loan)).unwrap();
            assert_eq!(
                (m.kind(), m.device(), m.len()),
                (MemoryKind::Host, HOST_DEVICE, 4000)
            );
            assert!(matches!(
                IoMemory::check(&rt, at + 96, 4001, Some(&loan)),
                Err(Refusal::PastEnd(MemoryKind::Host))
            ));
        });
        let pageable = [0u8; 64];
        let ptr = pageable.as_ptr() as usize;
        // SAFETY: `pageable` is this test's own array, which nothing writes; the loan (for
        // reading only) serves pointer queries alone: no bytes move through it.
        let loan = unsafe { HostLoan::lend(ptr, 1 << 30) };
        let m = IoMemory::check(&rt, ptr, 1 << 30, Some(&loan)).unwrap();
        assert_eq!(
            m.kind(),
            MemoryKind::Unregistered,
            "pageable memory has no extent the runtime knows"
        );
        assert!(HostRange::check(&rt, &loan, usize::MAX - 2, 4).is_err());
        assert!(matches!(
            HostRange::check(&rt, &loan, dev.ptr(), 16),
            Err(Refusal::NotHost(MemoryKind::Device))
        ));
    }

    #[test]
    fn host_memory_is_named_only_inside_a_loan_that_covers_it() {
        let rt = sim();
        let mut pageable = [0u8; 64];
        let ptr = pageable.as_ptr() as usize;
        assert!(matches!(
            IoMemory::check(&rt, ptr, 64, None),
            Err(Refusal::NotLent(MemoryKind::Unregistered))
        ));
        HostLoan::scoped_mut(&mut pageable[8..], |loan| {
            assert!(IoMemory::check(&rt, ptr + 8, 56, Some(&loan)).is_ok());
            let part = loan.slice(8, 16).unwrap();
            assert!(part.covers(ptr + 16, 16) && !part.covers(ptr + 16, 17));
            assert!(loan.slice(8, 49).is_none());
            assert!(matches!(
                IoMemory::check(&rt, ptr, 64, Some(&loan)),
                Err(Refusal::NotLent(MemoryKind::Unregistered))
            ));
            assert!(matches!(
                HostRange::check(&rt, &loan, ptr + 8, 57),
                Err(Refusal::NotLent(_))
            ));
        });
        let pinned = PinnedBuffer::new(rt.clone(), 4096).unwrap();
        assert!(matches!(
            IoMemory::check(&rt, pinned.as_ptr() as usize, 4096, None),
            Err(Refusal::NotLent(MemoryKind::Host))
        ));
    }

    #[test]
    fn host_slices_stay_inside() {
        let rt = sim();
        let mut bytes = vec![0u8; 4096];
        let at = bytes.as_ptr() as usize;
        HostLoan::scoped_mut(&mut bytes, |loan| {
            let r = HostRange::check(&rt, &loan, at, 4096).unwrap();
            assert_eq!(r.slice(4000, 96).unwrap().ptr(), at + 4000);
            assert!(r.slice(4000, 97).is_none());
            assert!(r.slice(usize::MAX, 2).is_none());
        });
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
        HostLoan::scoped_mut(&mut dst, |loan| {
            let range = HostRange::check(&rt, &loan, loan.ptr(), 16).unwrap();
            assert_eq!(
                range.read_from(file.as_fd(), 2).unwrap(),
                8,
                "short at end of file"
            );
        });
        let src = *b"abc";
        HostLoan::scoped(&src, |loan| {
            let out = HostRange::check(&rt, &loan, loan.ptr(), 3).unwrap();
            assert_eq!(out.write_to(file.as_fd(), Some(1)).unwrap(), 3);
            assert_eq!(out.write_to(file.as_fd(), None).unwrap(), 3, "appended");
            assert_eq!(
                out.read_from(file.as_fd(), 0).unwrap_err().raw_os_error(),
                Some(libc::EFAULT),
                "bytes lent for reading are never written"
            );
        });
        assert_eq!(&dst[..8], b"23456789");
        assert_eq!(src, *b"abc");
        let mut back = vec![0u8; 13];
        HostLoan::scoped_mut(&mut back, |loan| {
            let whole = HostRange::check(&rt, &loan, loan.ptr(), 13).unwrap();
            assert_eq!(whole.read_from(file.as_fd(), 0).unwrap(), 13);
        });
        assert_eq!(&back, b"0abc456789abc");

        let page = no_access_page();
        // SAFETY: the page is this test's own mapping, which nothing else uses; the kernel
        // refuses to touch it (PROT_NONE).
        let loan = unsafe { HostLoan::lend_mut(page, 4096) };
        let bad = HostRange::check(&rt, &loan, page, 4096).unwrap();
        let efault = |r: std::io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(efault(bad.read_from(file.as_fd(), 0)), Some(libc::EFAULT));
        assert_eq!(
            efault(bad.write_to(file.as_fd(), Some(0))),
            Some(libc::EFAULT)
        );
        assert_eq!(efault(bad.write_to(file.as_fd(), None)), Some(libc::EFAULT));
    }

    #[test]
    fn a_range_kept_past_its_scope_moves_nothing() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let rt = sim();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let mut dst = vec![7u8; 8];
        let kept = HostLoan::scoped_mut(&mut dst, |loan| {
            HostRange::check(&rt, &loan, loan.ptr(), 8).unwrap()
        });
        assert_eq!(
            kept.read_from(file.as_fd(), 0).unwrap_err().raw_os_error(),
            Some(libc::EFAULT)
        );
        assert_eq!(
            kept.write_to(file.as_fd(), Some(0))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EFAULT)
        );
        assert_eq!(
            dst, [7u8; 8],
            "the borrow's bytes were not touched after it ended"
        );
    }

    #[test]
    fn a_lent_pinned_buffer_serves_requests_and_its_owner_between_them() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let rt = sim();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let lent = LentPinned::new(PinnedBuffer::new(rt.clone(), 16).unwrap());
        let range = HostRange::check(&rt, &lent.loan(), lent.ptr() + 2, 4).unwrap();
        assert_eq!(range.kind(), MemoryKind::Host);
        assert_eq!(range.read_from(file.as_fd(), 6).unwrap(), 4);
        lent.with_bytes(|b| {
            assert_eq!(&b[2..6], b"6789");
            b[2..6].copy_from_slice(b"wxyz");
        });
        assert_eq!(range.write_to(file.as_fd(), Some(0)).unwrap(), 4);
        drop(lent);
        assert_eq!(
            range.write_to(file.as_fd(), None).unwrap(),
            4,
            "the range keeps the buffer alive"
        );
        let mut back = [0u8; 14];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 0).unwrap();
        assert_eq!(&back, b"wxyz456789wxyz");
    }
}
