//! Many threads registering, moving bytes and deregistering on one driver.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Barrier};
use std::thread;

use hipfile_core::{Driver, DriverOptions, ErrorKind, IoCall, IoOp, RegistryBuilder};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, GpuRuntime, MemoryKind};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::faults::open_fds_for;

use crate::backend::vec_copy_descriptor;

const THREADS: usize = 64;

#[test]
fn sixty_four_threads_register_move_bytes_and_deregister_on_one_driver() {
    let sim = Arc::new(SimRuntime::default());
    let rt: Arc<dyn GpuRuntime> = sim.clone();
    let mut backends = RegistryBuilder::new();
    backends.add(vec_copy_descriptor()).unwrap();
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        ..DriverOptions::with_runtime(rt.clone())
    });
    driver
        .stage_settings(|s| s.max_direct_io_size_kb = 4)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let barrier = Barrier::new(THREADS);

    let leftovers: Vec<_> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (driver, rt, dir, barrier) = (&driver, &rt, &dir, &barrier);
                s.spawn(move || {
                    let size = 3 * 4096 + 17 * t + 1;
                    let path = dir.path().join(format!("t{t}"));
                    let file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .unwrap();
                    let mut src = DeviceBuffer::new(Arc::clone(rt), size).unwrap();
                    let data = pattern(t as u64, 0, size);
                    src.write_at(0, &data).unwrap();
                    let dst = DeviceBuffer::new(Arc::clone(rt), size).unwrap();
                    barrier.wait();
                    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
                    driver.buf_register(src.ptr(), size, 0).unwrap();
                    let io = |op, buffer| IoCall {
                        op,
                        handle,
                        buffer,
                        size,
                        file_offset: 0,
                        buffer_offset: 0,
                        loan: None,
                    };
                    assert_eq!(driver.io(io(IoOp::Write, src.ptr())).unwrap(), size);
                    assert_eq!(driver.io(io(IoOp::Read, dst.ptr())).unwrap(), size);
                    assert_eq!(dst.to_vec().unwrap(), data, "thread {t}: device read-back");
                    assert_eq!(std::fs::read(&path).unwrap(), data, "thread {t}: file");
                    driver.buf_deregister(src.ptr()).unwrap();
                    driver.handle_deregister(handle).unwrap();
                    assert_eq!(
                        open_fds_for(&path).unwrap(),
                        1,
                        "thread {t}: only the caller's fd"
                    );
                    (handle, src, path)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    assert_eq!(driver.use_count(), 1, "implicit opens add no references");
    for (handle, src, path) in &leftovers {
        assert_eq!(
            driver.file(*handle).unwrap_err().kind(),
            ErrorKind::HandleNotRegistered
        );
        assert_eq!(
            driver.buf_deregister(src.ptr()).unwrap_err().kind(),
            ErrorKind::MemoryNotRegistered
        );
        assert_eq!(open_fds_for(path).unwrap(), 0);
    }
    driver.close().unwrap();
    assert_eq!(driver.use_count(), 0);
    drop(leftovers);
    assert_eq!(sim.live_allocations(MemoryKind::Device), 0);
    assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
}
