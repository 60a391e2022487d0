//! `cuFileGetBARSizeInKB`: the size of a GPU's PCI BAR, the window through which peers (NVMe
//! drives, NICs) reach its memory.
//!
//! The GPU runtime names the device's PCI bus id (`GpuRuntime::pci_bus_id`); the kernel lists the
//! device's regions in `/sys/bus/pci/devices/<id>/resource`, one `start end flags` line per BAR.
//! The answer is the largest prefetchable memory BAR: BAR1 on NVIDIA GPUs (BAR0 holds registers,
//! BAR3 a small window), the VRAM BAR0 on AMD GPUs. A device the runtime gives no PCI id (the
//! simulated GPU) answers `CU_FILE_PLATFORM_NOT_SUPPORTED`.

use std::ffi::c_int;
use std::path::Path;

use hipfile::capi::{self, guarded_pair, pair, Door, StatusPair};

use crate::door::CuFile;
use crate::types::*;

/// `IORESOURCE_MEM`: the region is memory (not IO ports).
const IORESOURCE_MEM: u64 = 0x200;
/// `IORESOURCE_PREFETCH`: the memory is prefetchable.
const IORESOURCE_PREFETCH: u64 = 0x2000;
/// The first six lines of a `resource` file are the standard BARs (the next is the ROM).
const STANDARD_BARS: usize = 6;

fn hex(field: &str) -> Option<u64> {
    u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()
}

/// The size in bytes of the largest prefetchable memory BAR listed in `resource` (the text of a
/// sysfs `resource` file); `None` when there is none.
pub fn largest_prefetchable_bar(resource: &str) -> Option<u64> {
    resource
        .lines()
        .take(STANDARD_BARS)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(hex);
            let (start, end, flags) = (fields.next()??, fields.next()??, fields.next()??);
            let prefetchable_memory = IORESOURCE_MEM | IORESOURCE_PREFETCH;
            (flags & prefetchable_memory == prefetchable_memory && end > start)
                .then(|| end - start + 1)
        })
        .max()
}

/// The BAR size of PCI device `bus_id` in KiB, from the sysfs tree at `sysfs_devices`.
pub fn bar_size_kb(sysfs_devices: &Path, bus_id: &str) -> std::io::Result<Option<u64>> {
    let resource = std::fs::read_to_string(
        sysfs_devices
            .join(bus_id.to_ascii_lowercase())
            .join("resource"),
    )?;
    Ok(largest_prefetchable_bar(&resource).map(|bytes| bytes / 1024))
}

/// `cuFileGetBARSizeInKB` of the open driver's GPU `gpu_index`.
pub fn bar_size_of(gpu_index: c_int) -> Result<usize, CUfileError_t> {
    let invalid = CUfileError_t::op(CU_FILE_INVALID_VALUE);
    let session = CuFile::driver()
        .session()
        .ok_or(CUfileError_t::op(CU_FILE_DRIVER_NOT_INITIALIZED))?;
    let runtime = session.runtime();
    let gpu_error =
        |e: &hipfile_hip::HipError| pair(&hipfile_core::Error::hip(e, "the GPU's PCI id"));
    let devices = runtime.device_count().map_err(|e| gpu_error(&e))?;
    if gpu_index < 0 || gpu_index >= devices {
        return Err(invalid);
    }
    let Some(bus_id) = runtime.pci_bus_id(gpu_index).map_err(|e| gpu_error(&e))? else {
        return Err(CUfileError_t::op(CU_FILE_PLATFORM_NOT_SUPPORTED));
    };
    match bar_size_kb(Path::new("/sys/bus/pci/devices"), &bus_id) {
        Ok(Some(kb)) => Ok(usize::try_from(kb).unwrap_or(usize::MAX)),
        Ok(None) => Err(CUfileError_t::op(CU_FILE_PLATFORM_NOT_SUPPORTED)),
        Err(_) => Err(CUfileError_t::op(CU_FILE_INTERNAL_ERROR)),
    }
}

/// The BAR size (KiB) of GPU `gpuIndex`.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetBARSizeInKB(
    gpuIndex: c_int,
    barSize: *mut usize,
) -> CUfileError_t {
    guarded_pair(|| {
        // As cuFile, a NULL out-pointer is refused before the driver, the index and the platform.
        if barSize.is_null() {
            return CUfileError_t::op(CU_FILE_INVALID_VALUE);
        }
        match bar_size_of(gpuIndex) {
            // SAFETY: the C caller passes its own size_t (not NULL: refused above).
            Ok(kb) => unsafe { capi::write_out(barSize, kb) },
            Err(e) => e,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NVIDIA GPU's resource file: BAR0 16 MiB of registers, BAR1 a 32 GiB prefetchable
    /// window, BAR3 32 MiB prefetchable, an IO BAR, the ROM.
    const NVIDIA: &str = "\
0x00000000fa000000 0x00000000faffffff 0x0000000000040200
0x0000038000000000 0x00000387ffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000038800000000 0x0000038801ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x000000000000f000 0x000000000000f07f 0x0000000000040101
0x00000000fb000000 0x00000000fb07ffff 0x0000000000046200
";

    #[test]
    fn the_bar_is_the_largest_prefetchable_memory_region() {
        assert_eq!(largest_prefetchable_bar(NVIDIA), Some(32 << 30));
        // Registers and IO ports only: no BAR to answer with.
        let no_window = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n\
                         0x000000000000f000 0x000000000000f07f 0x0000000000040101\n";
        assert_eq!(largest_prefetchable_bar(no_window), None);
        assert_eq!(largest_prefetchable_bar("garbage\n"), None);
    }

    #[test]
    fn the_sysfs_file_of_the_bus_id_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("0000:17:00.0")).unwrap();
        std::fs::write(dir.path().join("0000:17:00.0/resource"), NVIDIA).unwrap();
        // Runtimes print the id in upper case; sysfs names it in lower case.
        assert_eq!(
            bar_size_kb(dir.path(), "0000:17:00.0").unwrap(),
            Some(32 << 20)
        );
        assert!(bar_size_kb(dir.path(), "0000:18:00.0").is_err());
    }
}
