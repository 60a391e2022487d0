//! Reads copied straight out of the pinned page cache: byte for byte what the file holds, also
//! after the file was rewritten in place, truncated and refilled with other bytes. On the
//! simulated GPU by default; on the machine's GPU with `HIPFILE_GPU_TESTS=1`, where the device
//! reads the pinned pages by DMA and a pin kept past a change would show the old bytes.

use std::os::unix::fs::FileExt;

use hipfile::{Driver, DriverOptions, Settings};
use hipfile_hip::DeviceBuffer;
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

const WINDOW: usize = hipfile_fallback::pins::WINDOW;

fn pinned_bytes_served(driver: &Driver) -> u64 {
    driver
        .core()
        .session()
        .unwrap()
        .registry()
        .mechanisms()
        .into_iter()
        .flat_map(|(_, counters)| counters)
        .find(|(name, _)| *name == "pinned_page_cache_bytes")
        .map_or(0, |(_, v)| v)
}

#[test]
fn reads_out_of_the_pinned_page_cache_follow_the_file_byte_for_byte() {
    let gpu = runtime_under_test().unwrap().runtime;
    let driver = Driver::with_options(DriverOptions {
        selection: Some("fallback".into()),
        settings: Settings {
            // The file is written by the test itself: pin it at once.
            page_cache_pin_settle_ms: 0,
            stats_level: 1,
            ..Settings::default()
        },
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let size = WINDOW + 12345;
    std::fs::write(&path, pattern(21, 0, size)).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let handle = driver.register_file(&file).unwrap();
    let mut dev = DeviceBuffer::new(gpu.clone(), size).unwrap();
    let mut read_all = |want: &[u8]| {
        dev.fill(0).unwrap();
        assert_eq!(handle.read(&mut dev, 0).unwrap(), want.len());
        let got = dev.to_vec().unwrap();
        if let Some(i) = got[..want.len()].iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "byte {i} of {}: {:#04x}, the file holds {:#04x}",
                want.len(),
                got[i],
                want[i]
            );
        }
    };
    read_all(&pattern(21, 0, size));
    driver.settle();
    assert_eq!(driver.page_cache_pinned_bytes(), size);
    // The first read may have taken windows pinned while it ran.
    let first = pinned_bytes_served(&driver);
    read_all(&pattern(21, 0, size));
    assert_eq!(pinned_bytes_served(&driver), first + size as u64);

    // Rewritten in place through the page cache.
    let mut want = pattern(21, 0, size);
    let patch = pattern(22, 0, 3 * 4096 + 7);
    file.write_all_at(&patch, (WINDOW - 4096) as u64).unwrap();
    want[WINDOW - 4096..WINDOW - 4096 + patch.len()].copy_from_slice(&patch);
    read_all(&want);
    driver.settle();
    read_all(&want);

    // Truncated, then refilled to the same size with other bytes: new pages, new stamp.
    file.set_len(0).unwrap();
    let other = pattern(23, 0, size);
    file.write_all_at(&other, 0).unwrap();
    // The bytes show that no copy came out of the old pins (the read may take windows pinned
    // under the new stamp while it runs).
    read_all(&other);
    driver.settle();
    let before = pinned_bytes_served(&driver);
    read_all(&other);
    assert_eq!(pinned_bytes_served(&driver), before + size as u64);
    drop(handle);
    assert_eq!(
        driver.page_cache_pinned_bytes(),
        0,
        "deregistered: unpinned"
    );
}
