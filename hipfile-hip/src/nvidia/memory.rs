//! Memory queries of the NVIDIA platform: the runtime's `cudaPointerGetAttributes`, the driver's
//! `cuPointerGetAttribute` for pointers the runtime would not describe, allocation ranges asked of
//! the driver in the owning device's primary context, and the switch to the device owning a
//! pointer that copies, fills and frees make. The ABI notes are in the platform's documentation.

use super::errors::driver_failed;
use super::NvidiaRuntime;
use crate::error::{HipError, HipResult};
use crate::ffi::cuda::{RawPointerAttributes, CUDA_INVALID_VALUE};
use crate::runtime::{DeviceGuard, MemoryKind, PointerInfo};

/// Decode a `cudaMemoryType` (CUDA 11+ numbering).
pub fn decode_memory_type(memory_type: i32) -> HipResult<MemoryKind> {
    match memory_type {
        0 => Ok(MemoryKind::Unregistered),
        1 => Ok(MemoryKind::Host),
        2 => Ok(MemoryKind::Device),
        3 => Ok(MemoryKind::Managed),
        other => Err(HipError::Unexpected {
            call: "cudaPointerGetAttributes",
            detail: format!("type {other} is not a cudaMemoryType"),
        }),
    }
}

/// Decode a driver `CUmemorytype` (Host=1, Device=2, Array=3, Unified=4).
pub fn decode_driver_memory_type(memory_type: u32) -> HipResult<MemoryKind> {
    match memory_type {
        1 => Ok(MemoryKind::Host),
        2 => Ok(MemoryKind::Device),
        3 => Ok(MemoryKind::Array),
        4 => Ok(MemoryKind::Managed),
        other => Err(HipError::Unexpected {
            call: "cuPointerGetAttribute",
            detail: format!("{other} is not a CUmemorytype"),
        }),
    }
}

impl NvidiaRuntime {
    /// What the runtime, else the driver, knows about `ptr` (see [`crate::GpuRuntime::pointer_info`]).
    pub(super) fn query_pointer(&self, ptr: usize) -> HipResult<PointerInfo> {
        let unregistered = PointerInfo {
            kind: MemoryKind::Unregistered,
            device: -1,
            base: 0,
            len: 0,
        };
        let (kind, device) = match self.raw_attributes(ptr)? {
            Some(attr) => (decode_memory_type(attr.memory_type)?, attr.device),
            None => self.driver_kind(ptr)?,
        };
        let (base, len) = match kind {
            MemoryKind::Unregistered => return Ok(unregistered),
            MemoryKind::Host => self.address_range(ptr, device).unwrap_or((ptr, 0)),
            MemoryKind::Device | MemoryKind::Managed | MemoryKind::Array => {
                self.address_range(ptr, device)?
            }
        };
        Ok(PointerInfo {
            kind,
            device,
            base,
            len,
        })
    }

    /// Switch to the device owning `ptr` for the length of the guard. With one device there is
    /// nothing to switch to, and the pointer is not even looked up.
    pub(super) fn enter_owning_device(&self, ptr: usize) -> HipResult<Option<DeviceGuard<'_>>> {
        if self.cached_device_count()? <= 1 {
            return Ok(None);
        }
        let attr = self.raw_attributes(ptr)?;
        match attr {
            Some(a) if a.device >= 0 && matches!(a.memory_type, 2 | 3) => {
                DeviceGuard::switch(self, a.device).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// `cudaPointerGetAttributes`; `None` when the runtime refuses the pointer as an invalid value
    /// (what CUDA before 11 said of pageable memory).
    fn raw_attributes(&self, ptr: usize) -> HipResult<Option<RawPointerAttributes>> {
        let (rc, attr) = self.rt.pointer_attributes(ptr);
        if rc == CUDA_INVALID_VALUE {
            return Ok(None);
        }
        self.check("cudaPointerGetAttributes", rc)?;
        Ok(Some(attr))
    }

    /// Kind and device of `ptr` asked of the driver, for pointers the runtime would not describe.
    fn driver_kind(&self, ptr: usize) -> HipResult<(MemoryKind, i32)> {
        let drv = self.driver()?;
        let (rc, memory_type) = drv.pointer_memory_type(ptr);
        if rc == CUDA_INVALID_VALUE {
            return Ok((MemoryKind::Unregistered, -1));
        }
        self.check_driver("cuPointerGetAttribute", rc)?;
        let mut kind = decode_driver_memory_type(memory_type)?;
        if kind == MemoryKind::Device && drv.pointer_is_managed(ptr).map_err(driver_failed)? {
            kind = MemoryKind::Managed;
        }
        let device = drv.pointer_device(ptr).map_err(driver_failed)?;
        Ok((kind, device))
    }

    /// Base and length of the allocation holding `ptr`, asked with `device`'s primary context
    /// current (the caller's context is restored before returning).
    fn address_range(&self, ptr: usize, device: i32) -> HipResult<(usize, usize)> {
        // Switching driver contexts moves the runtime's current device with them, and restoring a
        // NULL context does not move it back: the device is restored on its own, after the context.
        let _device = DeviceGuard::keep(self)?;
        let _context = self.enter_context(device.max(0))?;
        self.drv.address_range(ptr).map_err(driver_failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_types_decode_by_match() {
        assert_eq!(decode_memory_type(0).unwrap(), MemoryKind::Unregistered);
        assert_eq!(decode_memory_type(1).unwrap(), MemoryKind::Host);
        assert_eq!(decode_memory_type(2).unwrap(), MemoryKind::Device);
        assert_eq!(decode_memory_type(3).unwrap(), MemoryKind::Managed);
        for bad in [-1, 4, 10] {
            assert!(matches!(
                decode_memory_type(bad),
                Err(HipError::Unexpected { .. })
            ));
        }
        assert_eq!(decode_driver_memory_type(1).unwrap(), MemoryKind::Host);
        assert_eq!(decode_driver_memory_type(2).unwrap(), MemoryKind::Device);
        assert_eq!(decode_driver_memory_type(3).unwrap(), MemoryKind::Array);
        assert_eq!(decode_driver_memory_type(4).unwrap(), MemoryKind::Managed);
        assert!(decode_driver_memory_type(0).is_err());
    }
}
