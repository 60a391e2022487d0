//! Validated ranges of GPU memory: what the layers above hand to copies and direct IO instead of
//! bare addresses.
//!
//! A [`DeviceRange`] is made only by asking the runtime ([`DeviceRange::query`]): the memory must
//! be device (or managed) memory, and the whole range must lie inside the one allocation the
//! pointer belongs to. Narrowing it ([`DeviceRange::slice`]) is checked against its bounds. Every
//! operation on a range (synchronous copies, the direct-IO transfers of a [`crate::P2pDriver`], and the
//! asynchronous copies of a [`crate::StagingLane`]) stays inside those bounds, so safe code above
//! this crate can move bytes to and from GPU memory without restating that proof.
//!
//! Why this is sound without an `unsafe` constructor: the range covers memory the runtime reports
//! as GPU memory, never host memory that Rust code holds references to (pinned or pageable host
//! memory is refused), so no operation on it can write to memory the Rust program owns. What a
//! range cannot prove is that the allocation stays alive: memory freed by its owner after the
//! query is the owner's contract to keep (upstream's too: the C caller keeps the buffer alive
//! while it does IO on it); the runtimes answer an address they no longer know with an error.
//! Managed memory is host-accessible; a range over it is still only written through the runtime,
//! and a host slice over managed memory can be made only with `unsafe`, whose author keeps the
//! two apart.

use std::fmt;
use std::sync::Arc;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{GpuRuntime, MemoryKind, PointerInfo};

/// Why [`DeviceRange::check`] refused a range.
#[derive(Debug)]
pub enum Refusal {
    /// The pointer query failed (an address the runtime does not know, or a runtime failure).
    Query(HipError),
    /// The memory is not device or managed memory.
    NotDevice(MemoryKind),
    /// The range runs past the end of its allocation (of this kind of memory).
    PastEnd(MemoryKind),
    /// The memory is not host memory ([`crate::HostRange::check`]).
    NotHost(MemoryKind),
    /// Host memory (of this kind) that no [`crate::HostLoan`] of the request lends: the library
    /// names host memory only where its application lent it ([`crate::IoMemory::check`]).
    NotLent(MemoryKind),
}

/// A range of device (or managed) memory inside one allocation, checked by the runtime's pointer
/// query. Cheap to clone (one reference count).
#[derive(Clone)]
pub struct DeviceRange {
    pub(super) runtime: Arc<dyn GpuRuntime>,
    pub(super) ptr: usize,
    pub(super) len: usize,
    device: i32,
    kind: MemoryKind,
}

/// Whether the runtime's answer `info` for `ptr` vouches for the `len` bytes there: device or
/// managed memory of a device (an ordinal, not CUDA's -2 of an address it does not know), in an
/// allocation whose base and length the runtime named, holding all of `ptr..ptr + len`. A query
/// that succeeded proves nothing by itself: past the end of a CUDA allocation the runtime answers
/// success with "unregistered" for an unmapped address, or vouches for the neighbouring
/// allocation with its own base and length, never for the bytes of both.
fn vouch(info: &PointerInfo, ptr: usize, len: usize) -> Result<(), Refusal> {
    if !matches!(info.kind, MemoryKind::Device | MemoryKind::Managed) {
        return Err(Refusal::NotDevice(info.kind));
    }
    if info.device < 0 || info.base == 0 || info.len == 0 {
        return Err(Refusal::Query(HipError::call(
            "DeviceRange: the runtime named no device allocation holding the address",
            HipErrorCode::INVALID_VALUE,
        )));
    }
    match info.remaining_from(ptr) {
        // An empty range may sit at the end of its allocation; any byte must lie inside it.
        Some(room) if room >= len && (room > 0 || len == 0) => Ok(()),
        _ => Err(Refusal::PastEnd(info.kind)),
    }
}

impl DeviceRange {
    /// The `len` bytes at `ptr`, if the runtime reports them as device or managed memory inside
    /// one allocation. Host memory, memory the runtime does not know, and a range that runs past
    /// the end of its allocation are [`HipErrorCode::INVALID_VALUE`].
    pub fn query(runtime: &Arc<dyn GpuRuntime>, ptr: usize, len: usize) -> HipResult<Self> {
        Self::check(runtime, ptr, len).map_err(|refusal| match refusal {
            Refusal::Query(e) => e,
            Refusal::NotDevice(_) => HipError::call(
                "DeviceRange: not device memory",
                HipErrorCode::INVALID_VALUE,
            ),
            Refusal::PastEnd(_) | Refusal::NotHost(_) | Refusal::NotLent(_) => HipError::call(
                "DeviceRange: past the end of the allocation",
                HipErrorCode::INVALID_VALUE,
            ),
        })
    }

    /// As [`DeviceRange::query`], with the reason for a refusal kept apart, for callers that
    /// answer each with its own error code (one pointer query either way).
    pub fn check(runtime: &Arc<dyn GpuRuntime>, ptr: usize, len: usize) -> Result<Self, Refusal> {
        let info = runtime.pointer_info(ptr).map_err(Refusal::Query)?;
        Self::from_info(runtime, &info, ptr, len)
    }

    /// As [`DeviceRange::check`], on the runtime's answer `info` for `ptr`.
    pub(crate) fn from_info(
        runtime: &Arc<dyn GpuRuntime>,
        info: &PointerInfo,
        ptr: usize,
        len: usize,
    ) -> Result<Self, Refusal> {
        vouch(info, ptr, len)?;
        Ok(DeviceRange {
            runtime: Arc::clone(runtime),
            ptr,
            len,
            device: info.device,
            kind: info.kind,
        })
    }

    /// The `len` bytes at `offset` into this range, or `None` when they do not fit inside it.
    pub fn slice(&self, offset: usize, len: usize) -> Option<DeviceRange> {
        let ptr = super::sub_range(self.ptr, self.len, offset, len)?;
        Some(DeviceRange {
            runtime: Arc::clone(&self.runtime),
            ptr,
            len,
            device: self.device,
            kind: self.kind,
        })
    }

    /// First address of the range (for reports, alignment checks and lookups; moving bytes goes
    /// through the range's own operations).
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

    /// The device that owns the memory.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The kind of memory: [`MemoryKind::Device`] or [`MemoryKind::Managed`].
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// Whether `runtime` is the runtime this range was checked by.
    pub fn belongs_to(&self, runtime: &Arc<dyn GpuRuntime>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.runtime), Arc::as_ptr(runtime))
    }

    pub(crate) fn check_len(&self, len: usize, what: &'static str) -> HipResult<()> {
        if len <= self.len {
            Ok(())
        } else {
            Err(HipError::call(what, HipErrorCode::INVALID_VALUE))
        }
    }
}

impl fmt::Debug for DeviceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceRange")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("device", &self.device)
            .field("kind", &self.kind)
            .finish()
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
    fn a_range_is_device_memory_inside_one_allocation() {
        let rt = sim();
        let buf = DeviceBuffer::new(rt.clone(), 8192).unwrap();
        let whole = DeviceRange::query(&rt, buf.ptr(), 8192).unwrap();
        assert_eq!((whole.len(), whole.kind()), (8192, MemoryKind::Device));
        let inner = DeviceRange::query(&rt, buf.ptr() + 4096, 4096).unwrap();
        assert_eq!(inner.ptr(), buf.ptr() + 4096);
        assert!(DeviceRange::query(&rt, buf.ptr() + 4096, 4097).is_err());
        assert!(DeviceRange::query(&rt, buf.ptr(), usize::MAX).is_err());
        let pinned = PinnedBuffer::new(rt.clone(), 4096).unwrap();
        assert!(DeviceRange::query(&rt, pinned.as_ptr() as usize, 16).is_err());
        let stack = [0u8; 16];
        assert!(DeviceRange::query(&rt, stack.as_ptr() as usize, 16).is_err());
    }

    /// What CUDA 13 answered on an H100 for addresses just past a `cudaMalloc` allocation: an
    /// unmapped one is "success, unregistered, device -2, no pointer" (and `cuMemGetAddressRange`
    /// finds nothing); a mapped one is the neighbouring allocation, with its own base and size.
    #[test]
    fn only_an_answer_naming_a_device_allocation_that_holds_the_bytes_vouches_for_them() {
        let info = |kind, device, base, len| PointerInfo {
            kind,
            device,
            base,
            len,
        };
        let ours = 0x7f00_0000_0000usize;
        let past = ours + (1 << 20);
        let refused = |i: &PointerInfo, ptr, len| vouch(i, ptr, len).is_err();
        // Unmapped past the end: success with type 0 (unregistered), device -2.
        assert!(refused(&info(MemoryKind::Unregistered, -2, 0, 0), past, 1));
        // A device kind without an allocation named, or without a device, vouches for nothing.
        assert!(refused(&info(MemoryKind::Device, -2, past, 4096), past, 1));
        assert!(refused(&info(MemoryKind::Device, 0, 0, 0), past, 1));
        assert!(refused(&info(MemoryKind::Device, 0, 0, 1 << 30), past, 1));
        // Our allocation's answer never stretches past its end, by a byte or from its end.
        let whole = info(MemoryKind::Device, 0, ours, 1 << 20);
        assert!(vouch(&whole, ours, 1 << 20).is_ok());
        assert!(refused(&whole, ours, (1 << 20) + 1));
        assert!(refused(&whole, past, 1));
        assert!(vouch(&whole, past, 0).is_ok(), "an empty range at the end");
        assert!(refused(&whole, past + 1, 0));
        assert!(refused(&whole, ours - 1, 2));
        // The neighbour vouches for its own bytes only: from its base, not from before it.
        let neighbour = info(MemoryKind::Device, 0, past, 4096);
        assert!(vouch(&neighbour, past, 4096).is_ok());
        assert!(refused(&neighbour, past - 1, 2));
        assert!(refused(&neighbour, past, 4097));
        // Managed memory of a device is vouched for like device memory; pinned host memory never.
        assert!(vouch(&info(MemoryKind::Managed, 0, ours, 4096), ours, 4096).is_ok());
        assert!(refused(&info(MemoryKind::Host, 0, ours, 4096), ours, 1));
    }

    #[test]
    fn slices_stay_inside_and_copies_are_bounded() {
        let rt = sim();
        let buf = DeviceBuffer::new(rt.clone(), 8192).unwrap();
        let whole = DeviceRange::query(&rt, buf.ptr(), 8192).unwrap();
        assert!(whole.slice(8192, 0).is_some());
        assert!(whole.slice(8000, 193).is_none());
        assert!(whole.slice(usize::MAX, 2).is_none());
        let tail = whole.slice(4096, 4096).unwrap();
        tail.copy_from_host(&[9u8; 4096]).unwrap();
        assert!(
            tail.copy_from_host(&[9u8; 4097]).is_err(),
            "longer than the range"
        );
        let mut back = [0u8; 4096];
        tail.copy_to_host(&mut back).unwrap();
        assert_eq!(back, [9u8; 4096]);
        assert!(tail.copy_to_host(&mut [0u8; 5000]).is_err());
        tail.slice(0, 16).unwrap().fill(3).unwrap();
        assert_eq!(
            &buf.to_vec().unwrap()[4096..4113],
            &[[3u8; 16].as_slice(), &[9]].concat()
        );
        assert!(whole.belongs_to(&rt));
        assert!(!whole.belongs_to(&sim()));
    }
}
