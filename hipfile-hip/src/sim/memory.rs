//! The simulator's memory table: every allocation and host registration by base and length, the
//! lookups behind pointer queries, and the range checks every copy, fill and transfer passes.
//! Making, freeing and touching the memory itself is `runtime`'s, with the simulator's other
//! `unsafe`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::{lock, SimRuntime, CURRENT_CONTEXT};
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::MemoryKind;

/// Alignment of every simulated allocation: a page, so O_DIRECT accepts device buffers.
pub const SIM_ALIGN: usize = 4096;

/// One allocation or registration the simulator tracks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Allocation {
    pub(super) len: usize,
    pub(super) kind: MemoryKind,
    pub(super) device: i32,
    /// Allocated by the simulator (freed by it) rather than registered host memory.
    pub(super) owned: bool,
    /// Registered read-only: memory the process may only read, such as a mapping of a file.
    /// Copies out of it read it with `process_vm_readv`, which answers `EFAULT` where a page
    /// is gone (a file truncated under its mapping) instead of raising `SIGBUS`; a real GPU
    /// reads the pinned pages it holds.
    pub(super) read_only: bool,
    /// The context of the library's own it was registered in (0: the device's primary one);
    /// the sim unregisters it only in that context.
    pub(super) context: usize,
}

/// The allocations by base address, shared with the queued work and the P2P driver that check
/// ranges after `&SimRuntime` is gone.
pub(super) type AllocationTable = Arc<RwLock<BTreeMap<usize, Allocation>>>;

impl SimRuntime {
    /// Number of live allocations of `kind` (leak checks in tests).
    pub fn live_allocations(&self, kind: MemoryKind) -> usize {
        self.allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|a| a.kind == kind)
            .count()
    }

    /// The most allocations of `kind` that were live at once since the runtime was made (bounds
    /// checks in tests: a pool that grows past its bound and shrinks back is caught).
    pub fn peak_allocations(&self, kind: MemoryKind) -> usize {
        lock(&self.peaks).get(&kind).copied().unwrap_or(0)
    }

    /// Whether host memory registered at `ptr` was registered in a context of the library's own.
    pub fn registered_in_own_context(&self, ptr: usize) -> bool {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Self::find(&allocs, ptr).is_some_and(|(_, a)| a.context != 0)
    }

    /// Track caller-owned host memory as registered (`hipHostRegister`).
    pub fn host_register(&self, ptr: usize, len: usize) -> HipResult<()> {
        self.register_host(ptr, len, false)
    }

    /// [`SimRuntime::host_register`], read-only when `read_only` (the runtimes' read-only flag):
    /// copies out of such memory fail where a page is gone instead of raising `SIGBUS`.
    pub fn register_host(&self, ptr: usize, len: usize, read_only: bool) -> HipResult<()> {
        if ptr == 0 || len == 0 {
            return Err(HipError::call(
                "hipHostRegister",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if Self::find(&allocs, ptr).is_some() {
            return Err(HipError::call("hipHostRegister", HipErrorCode(712)));
        }
        allocs.insert(
            ptr,
            Allocation {
                len,
                kind: MemoryKind::Host,
                device: self.current(),
                owned: false,
                read_only,
                context: CURRENT_CONTEXT.with(Cell::get),
            },
        );
        Ok(())
    }

    /// Forget host memory registered with [`SimRuntime::host_register`].
    pub fn host_unregister(&self, ptr: usize) -> HipResult<()> {
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match allocs.get(&ptr) {
            Some(a) if a.context != CURRENT_CONTEXT.with(Cell::get) => Err(HipError::call(
                "hipHostUnregister",
                HipErrorCode::INVALID_CONTEXT,
            )),
            Some(a) if !a.owned && a.kind == MemoryKind::Host => {
                allocs.remove(&ptr);
                Ok(())
            }
            _ => Err(HipError::call("hipHostUnregister", HipErrorCode(713))),
        }
    }

    pub(super) fn find(
        allocs: &BTreeMap<usize, Allocation>,
        ptr: usize,
    ) -> Option<(usize, Allocation)> {
        let (&base, &a) = allocs.range(..=ptr).next_back()?;
        (ptr < base + a.len.max(1)).then_some((base, a))
    }

    /// Check that `[ptr, ptr + len)` lies inside one tracked allocation.
    pub(super) fn check_range(&self, ptr: usize, len: usize, call: &'static str) -> HipResult<()> {
        Self::check_range_in(&self.allocations, ptr, len, call)
    }

    /// [`SimRuntime::check_range`] against `allocations`, for queued work that outlives `&self`.
    fn check_range_in(
        allocations: &AllocationTable,
        ptr: usize,
        len: usize,
        call: &'static str,
    ) -> HipResult<()> {
        if len == 0 {
            return Ok(());
        }
        let allocs = allocations.read().unwrap_or_else(PoisonError::into_inner);
        match Self::find(&allocs, ptr) {
            Some((base, a)) if ptr + len <= base + a.len => Ok(()),
            _ => Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
        }
    }

    /// Run `f` while `[ptr, ptr + len)` is known to lie inside one live allocation: the table's
    /// read lock is held meanwhile, and memory is deallocated only after its entry is removed
    /// under the write lock. `hipErrorInvalidValue` (and `f` not run) otherwise.
    pub(super) fn with_range(
        allocations: &AllocationTable,
        ptr: usize,
        len: usize,
        call: &'static str,
        f: impl FnOnce(),
    ) -> HipResult<()> {
        if len == 0 {
            return Ok(());
        }
        let allocs = allocations.read().unwrap_or_else(PoisonError::into_inner);
        match Self::find(&allocs, ptr) {
            Some((base, a)) if ptr + len <= base + a.len => {
                f();
                Ok(())
            }
            _ => Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
        }
    }

    /// Whether `ptr` lies in host memory registered read-only.
    pub(super) fn read_only_host(&self, ptr: usize) -> bool {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Self::find(&allocs, ptr).is_some_and(|(_, a)| a.read_only)
    }

    /// Track `len` bytes at `base` that the simulator allocated as `kind`, on the current
    /// device; counts them towards the kind's peak.
    pub(super) fn track(&self, base: usize, len: usize, kind: MemoryKind) {
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        allocs.insert(
            base,
            Allocation {
                len,
                kind,
                device: self.current(),
                owned: true,
                read_only: false,
                context: 0,
            },
        );
        let live = allocs.values().filter(|a| a.kind == kind).count();
        drop(allocs);
        let mut peaks = lock(&self.peaks);
        let peak = peaks.entry(kind).or_insert(0);
        *peak = (*peak).max(live);
    }

    /// Stop tracking the allocation at `ptr`, made by the simulator as one of `kinds`; what it
    /// was, for freeing. Anything else at `ptr` is `hipErrorInvalidValue` for `call`.
    pub(super) fn untrack(
        &self,
        ptr: usize,
        kinds: &[MemoryKind],
        call: &'static str,
    ) -> HipResult<Allocation> {
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match allocs.get(&ptr) {
            Some(a) if a.owned && kinds.contains(&a.kind) => {
                let a = *a;
                allocs.remove(&ptr);
                Ok(a)
            }
            _ => Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
        }
    }
}
