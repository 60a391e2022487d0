//! Memory queries of the NVIDIA platform: the runtime's `cudaPointerGetAttributes`, the driver's
//! `cuPointerGetAttribute` for pointers the runtime would not describe, allocation ranges asked of
//! the driver in the owning device's primary context, and the switch to the device owning a
//! pointer that copies, fills and frees make. The ABI notes are in the platform's documentation.

use std::ffi::c_void;

use super::symbols::DevicePtr;
use super::NvidiaRuntime;
use crate::error::{HipError, HipResult};
use crate::runtime::{DeviceGuard, MemoryKind, PointerInfo};

/// `cudaErrorInvalidValue` (and `CUDA_ERROR_INVALID_VALUE`).
const CUDA_INVALID_VALUE: i32 = 1;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (`unsigned int`).
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: i32 = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: an `int` (boolean).
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: i32 = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: an `int`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: i32 = 9;

/// `cudaPointerAttributes` of CUDA 11 and later; `memory_type` is a plain integer, decoded by
/// [`decode_memory_type`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct RawPointerAttributes {
    memory_type: i32,
    device: i32,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<RawPointerAttributes>() == 24);

/// The out-buffer handed to `cudaPointerGetAttributes`: the 24-byte struct followed by spare room,
/// so a runtime whose struct grew at the end (as `cudaDeviceProp` has, release after release)
/// writes into the spare bytes instead of past our stack slot.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PointerAttributesSlot {
    attr: RawPointerAttributes,
    _spare: [u64; 8],
}

impl Default for RawPointerAttributes {
    fn default() -> Self {
        RawPointerAttributes {
            memory_type: 0,
            device: -1,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
        }
    }
}

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
        let mut slot = PointerAttributesSlot::default();
        // SAFETY: `slot` starts with the out-struct and is larger than it; `ptr` is only looked up.
        let rc = unsafe { (self.rt.pointer_get_attributes)(&mut slot.attr, ptr as *const c_void) };
        if rc == CUDA_INVALID_VALUE {
            return Ok(None);
        }
        self.check("cudaPointerGetAttributes", rc)?;
        Ok(Some(slot.attr))
    }

    /// Kind and device of `ptr` asked of the driver, for pointers the runtime would not describe.
    fn driver_kind(&self, ptr: usize) -> HipResult<(MemoryKind, i32)> {
        let drv = self.driver()?;
        let mut memory_type = 0u32;
        // SAFETY: MEMORY_TYPE writes one `unsigned int` into `memory_type`.
        let rc = unsafe {
            (drv.pointer_get_attribute)(
                (&mut memory_type as *mut u32).cast(),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr as DevicePtr,
            )
        };
        if rc == CUDA_INVALID_VALUE {
            return Ok((MemoryKind::Unregistered, -1));
        }
        self.check_driver("cuPointerGetAttribute", rc)?;
        let mut kind = decode_driver_memory_type(memory_type)?;
        if kind == MemoryKind::Device {
            let mut managed = 0i32;
            // SAFETY: IS_MANAGED writes one `int` into `managed`.
            let rc = unsafe {
                (drv.pointer_get_attribute)(
                    (&mut managed as *mut i32).cast(),
                    CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    ptr as DevicePtr,
                )
            };
            self.check_driver("cuPointerGetAttribute", rc)?;
            if managed != 0 {
                kind = MemoryKind::Managed;
            }
        }
        let mut device = -1i32;
        // SAFETY: DEVICE_ORDINAL writes one `int` into `device`.
        let rc = unsafe {
            (drv.pointer_get_attribute)(
                (&mut device as *mut i32).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr as DevicePtr,
            )
        };
        self.check_driver("cuPointerGetAttribute", rc)?;
        Ok((kind, device))
    }

    /// Base and length of the allocation holding `ptr`, asked with `device`'s primary context
    /// current (the caller's context is restored before returning).
    fn address_range(&self, ptr: usize, device: i32) -> HipResult<(usize, usize)> {
        // Switching driver contexts moves the runtime's current device with them, and restoring a
        // NULL context does not move it back: the device is restored on its own, after the context.
        let _device = DeviceGuard::keep(self)?;
        let _context = self.enter_context(device.max(0))?;
        let mut base: DevicePtr = 0;
        let mut len = 0usize;
        // SAFETY: both out-pointers are valid; the driver only looks `ptr` up.
        let rc = unsafe { (self.drv.mem_get_address_range)(&mut base, &mut len, ptr as DevicePtr) };
        self.check_driver("cuMemGetAddressRange_v2", rc)?;
        Ok((base as usize, len))
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
