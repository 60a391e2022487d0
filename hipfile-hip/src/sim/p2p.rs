//! The sim's P2P driver ([`SimP2p`]) and its fault script ([`SimP2pScript`]). Its
//! [`P2pDriver`](crate::P2pDriver) entry points, which move bytes through device addresses, are
//! in `runtime` with the simulator's other `unsafe`.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use super::memory::AllocationTable;
use super::{lock, SimRuntime};
use crate::p2p::{errno_error, MAX_P2P_TRANSFER};
use crate::runtime::MemoryKind;

/// One scripted fault of the sim's P2P driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimP2pFault {
    /// The call fails with this errno and moves nothing.
    Errno(i32),
    /// The call moves this many bytes fewer than asked (at least one byte still moves).
    Short(usize),
}

#[derive(Debug, Default)]
struct ScriptState {
    calls: u64,
    faults: Vec<(u64, SimP2pFault)>,
}

/// The fault script of a simulated P2P driver: which calls fail or come back short. Calls are
/// counted from the runtime's creation, reads and writes together; faults are armed relative to
/// the calls made so far, so a test says "the next call" without knowing what ran before.
#[derive(Debug, Default)]
pub struct SimP2pScript {
    state: Mutex<ScriptState>,
}

impl SimP2pScript {
    /// The `nth` call from now (1 = the next one) fails with `errno`.
    pub fn fail_call(&self, nth: u64, errno: i32) {
        self.arm(nth, SimP2pFault::Errno(errno));
    }

    /// The `nth` call from now (1 = the next one) moves `by` bytes fewer than asked.
    pub fn short_call(&self, nth: u64, by: usize) {
        self.arm(nth, SimP2pFault::Short(by));
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        lock(&self.state).calls
    }

    /// Forget every fault not yet fired.
    pub fn clear(&self) {
        lock(&self.state).faults.clear();
    }

    fn arm(&self, nth: u64, fault: SimP2pFault) {
        let mut st = lock(&self.state);
        let at = st.calls + nth.max(1);
        st.faults.push((at, fault));
    }

    /// Count a call; the fault armed for it, if any.
    fn next_call(&self) -> Option<SimP2pFault> {
        let mut st = lock(&self.state);
        st.calls += 1;
        let now = st.calls;
        let i = st.faults.iter().position(|(at, _)| *at == now)?;
        Some(st.faults.swap_remove(i).1)
    }
}

/// The sim's P2P driver: O_DIRECT `pread`/`pwrite` between a file and simulated device memory,
/// which is exactly what a P2P DMA does. Refuses (EFAULT) a range that is not inside one device
/// allocation, as a GPU's DMA engine faults on it.
#[derive(Debug)]
pub struct SimP2p {
    pub(super) allocations: AllocationTable,
    pub(super) script: Arc<SimP2pScript>,
}

impl SimP2p {
    fn check_device(&self, ptr: usize, len: usize) -> io::Result<()> {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match SimRuntime::find(&allocs, ptr) {
            Some((base, a)) if a.kind == MemoryKind::Device && ptr + len <= base + a.len => Ok(()),
            _ => Err(errno_error(libc::EFAULT)),
        }
    }

    /// The size this call moves after the script had its say.
    fn scripted_size(&self, size: usize) -> io::Result<usize> {
        let size = size.min(MAX_P2P_TRANSFER);
        match self.script.next_call() {
            None => Ok(size),
            Some(SimP2pFault::Errno(e)) => Err(errno_error(e)),
            Some(SimP2pFault::Short(by)) => Ok(size.saturating_sub(by).max(1).min(size)),
        }
    }

    /// What a transfer of `size` bytes at `device_ptr` and `file_offset` moves, after checking
    /// that the device range lies inside one device allocation and letting the script have its
    /// say: the size and the file offset for `pread`/`pwrite`.
    pub(super) fn admit(
        &self,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<(usize, libc::off_t)> {
        self.check_device(device_ptr, size.min(MAX_P2P_TRANSFER))?;
        let size = self.scripted_size(size)?;
        let offset = libc::off_t::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        Ok((size, offset))
    }
}

/// The bytes a `pread`/`pwrite` moved, or the errno it failed with.
pub(super) fn os_result(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}
