//! The decorators fire exactly the scripted faults, count every call, and the driver reports
//! what they inject; the leak checks see what they should.

use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use hipfile_core::{
    pread_full, Driver, DriverOptions, ErrorKind, FileIo, IoCall, IoOp, RegistryBuilder,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{
    DeviceBuffer, DeviceRange, EventWait, GpuRuntime, HipErrorCode, PinnedBuffer, StagingLane,
    StreamOrder,
};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::faults::{
    open_fds_for, Errno, FileOp, FiredIoFault, FiredRuntimeFault, IoFault, LeakSnapshot, RuntimeOp,
    ScriptedIo, ScriptedRuntime, Trigger,
};

use crate::backend::vec_copy_descriptor;

const CHUNK_KB: u64 = 16;
const CHUNK: usize = 16 * 1024;

fn driver(runtime: Arc<dyn GpuRuntime>, io: Arc<dyn FileIo>) -> Driver {
    let mut backends = RegistryBuilder::new();
    backends.add(vec_copy_descriptor()).unwrap();
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        io,
        ..DriverOptions::with_runtime(runtime)
    });
    driver
        .stage_settings(|s| s.max_direct_io_size_kb = CHUNK_KB)
        .unwrap();
    driver
}

fn call(op: IoOp, handle: hipfile_core::FileHandleId, buffer: usize, size: usize) -> IoCall {
    IoCall {
        op,
        handle,
        buffer,
        size,
        file_offset: 0,
        buffer_offset: 0,
        loan: None,
    }
}

#[test]
fn the_third_pread_fails_with_eio_and_only_it() {
    let file = tempfile::tempfile().unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[7u8; 100], 0).unwrap();
    let io = ScriptedIo::new().fail_pread(3, Errno::IO);
    let mut buf = [0u8; 10];
    for call in 1..=5u64 {
        let r = io.pread(file.as_fd(), &mut buf, 0);
        if call == 3 {
            assert_eq!(
                r.unwrap_err().raw_os_error(),
                Some(Errno::IO.raw_os_error())
            );
        } else {
            assert_eq!(r.unwrap(), 10);
        }
    }
    assert_eq!(io.calls(FileOp::Pread), 5);
    assert_eq!(io.calls(FileOp::Pwrite), 0);
    assert_eq!(
        io.fired(),
        [FiredIoFault {
            op: FileOp::Pread,
            call: 3,
            fault: IoFault::Fail(Errno::IO)
        }]
    );
}

#[test]
fn short_and_interrupted_calls_transfer_what_the_script_says() {
    let file = tempfile::tempfile().unwrap();
    let data = pattern(1, 0, 100);
    let io = ScriptedIo::new()
        .short_pwrite(1, 30)
        .interrupt_pwrite(2)
        .short_pread(1, 5)
        .interrupt_pread(2);
    assert_eq!(io.pwrite(file.as_fd(), &data, 0).unwrap(), 30);
    let e = io.pwrite(file.as_fd(), &data[30..], 30).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
    assert_eq!(io.pwrite(file.as_fd(), &data[30..], 30).unwrap(), 70);
    let mut buf = vec![0u8; 100];
    assert_eq!(io.pread(file.as_fd(), &mut buf, 0).unwrap(), 5);
    assert_eq!(&buf[..5], &data[..5]);
    // pread_full retries EINTR and continues a short read: the bytes all arrive.
    let mut buf = vec![0u8; 100];
    assert_eq!(pread_full(&io, file.as_fd(), &mut buf, 0).unwrap(), 100);
    assert_eq!(buf, data);
    assert_eq!(io.calls(FileOp::Pwrite), 3);
    assert_eq!(io.calls(FileOp::Pread), 3);
    let fired: Vec<_> = io.fired().iter().map(|f| (f.op, f.call, f.fault)).collect();
    assert_eq!(
        fired,
        [
            (FileOp::Pwrite, 1, IoFault::Short(30)),
            (FileOp::Pwrite, 2, IoFault::Fail(Errno::INTR)),
            (FileOp::Pread, 1, IoFault::Short(5)),
            (FileOp::Pread, 2, IoFault::Fail(Errno::INTR)),
        ]
    );
}

#[test]
fn rules_from_n_on_apply_to_every_later_call_and_earlier_rules_win() {
    let file = tempfile::tempfile().unwrap();
    let io = ScriptedIo::new()
        .fail_pwrite(4, Errno::IO)
        .fail_pwrites_from(3, Errno::NOSPC);
    for _ in 0..2 {
        assert_eq!(io.pwrite(file.as_fd(), b"x", 0).unwrap(), 1);
    }
    let errs: Vec<_> = (0..3)
        .map(|_| io.pwrite(file.as_fd(), b"x", 0).unwrap_err().raw_os_error())
        .collect();
    assert_eq!(
        errs,
        [
            Some(Errno::NOSPC.raw_os_error()),
            Some(Errno::IO.raw_os_error()),
            Some(Errno::NOSPC.raw_os_error())
        ]
    );
    assert!(Trigger::From(3).matches(7) && !Trigger::Nth(3).matches(4));
}

/// A driver reading and writing 4 chunks through the scripted IO; returns its result and the
/// device contents.
fn through_driver(
    io: Arc<ScriptedIo>,
    op: IoOp,
) -> (Result<usize, hipfile_core::Error>, Vec<u8>, Vec<u8>) {
    let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let driver = driver(rt.clone(), io);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let contents = pattern(2, 0, 4 * CHUNK);
    std::fs::write(&path, if op == IoOp::Read { &contents[..] } else { &[] }).unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    let mut dev = DeviceBuffer::new(rt, 4 * CHUNK).unwrap();
    if op == IoOp::Write {
        dev.write_at(0, &contents).unwrap();
    }
    let r = driver.io(call(op, handle, dev.ptr(), 4 * CHUNK));
    (r, dev.to_vec().unwrap(), std::fs::read(&path).unwrap())
}

#[test]
fn the_driver_reports_a_scripted_eio_and_enospc_as_os_errors() {
    let io = Arc::new(ScriptedIo::new().fail_pread(3, Errno::IO));
    let (r, dev, _) = through_driver(io.clone(), IoOp::Read);
    let e = r.unwrap_err();
    assert_eq!(
        (e.kind(), e.errno()),
        (ErrorKind::Os, Some(Errno::IO.raw_os_error()))
    );
    assert_eq!(io.fired().len(), 1);
    assert_eq!(io.calls(FileOp::Pread), 3);
    // The two chunks before the failure landed where they belong, nothing after them.
    let contents = pattern(2, 0, 4 * CHUNK);
    assert_eq!(&dev[..2 * CHUNK], &contents[..2 * CHUNK]);
    assert!(dev[2 * CHUNK..].iter().all(|&b| b == 0));

    let io = Arc::new(ScriptedIo::new().fail_pwrite(2, Errno::NOSPC));
    let (r, _, file) = through_driver(io.clone(), IoOp::Write);
    let e = r.unwrap_err();
    assert_eq!(e.errno(), Some(Errno::NOSPC.raw_os_error()));
    assert_eq!(io.calls(FileOp::Pwrite), 2);
    assert_eq!(file, pattern(2, 0, CHUNK));
}

#[test]
fn short_and_interrupted_transfers_lose_no_byte_through_the_driver() {
    for op in [IoOp::Read, IoOp::Write] {
        let io = Arc::new(
            ScriptedIo::new()
                .interrupt_pread(1)
                .interrupt_pwrite(1)
                .short_pread(3, 1)
                .short_pwrite(3, 4095),
        );
        let (r, dev, file) = through_driver(io.clone(), op);
        assert_eq!(r.unwrap(), 4 * CHUNK, "{op:?}");
        let contents = pattern(2, 0, 4 * CHUNK);
        assert_eq!(dev, contents, "{op:?}: device");
        assert_eq!(file, contents, "{op:?}: file");
        assert_eq!(io.fired().len(), 2, "{op:?}: {:?}", io.fired());
    }
}

#[test]
fn scripted_runtime_fails_the_nth_copy_sync_and_async() {
    let sim = Arc::new(SimRuntime::default());
    let rt = Arc::new(
        ScriptedRuntime::new(sim.clone())
            .fail_copy_to_device(2, HipErrorCode::ILLEGAL_ADDRESS)
            .fail_copy_from_device(1, HipErrorCode::INVALID_VALUE),
    );
    let dynrt: Arc<dyn GpuRuntime> = rt.clone();
    let mut dev = DeviceBuffer::new(dynrt.clone(), 4096).unwrap();
    dev.write_at(0, &[1u8; 16]).unwrap();
    let e = dev.write_at(0, &[2u8; 16]).unwrap_err();
    assert_eq!(e.code(), HipErrorCode::ILLEGAL_ADDRESS);
    let mut out = [0u8; 16];
    assert_eq!(
        dev.read_at(0, &mut out).unwrap_err().code(),
        HipErrorCode::INVALID_VALUE
    );
    dev.read_at(0, &mut out).unwrap();
    assert_eq!(out, [1u8; 16], "the failed copy wrote nothing");

    // An async copy counts with the sync ones and fails at enqueue time.
    let rt2 =
        Arc::new(ScriptedRuntime::new(sim.clone()).fail_copy_to_device(1, HipErrorCode::UNKNOWN));
    let dynrt2: Arc<dyn GpuRuntime> = rt2.clone();
    let mut lane = StagingLane::new(
        &dynrt2,
        0,
        4096,
        EventWait::Yield,
        StreamOrder::WithDefaultStream,
    )
    .unwrap();
    lane.half_mut(0).unwrap()[..16].fill(9);
    let range = DeviceRange::query(&dynrt2, dev.ptr(), 16).unwrap();
    assert_eq!(
        lane.upload(0, &range).unwrap_err().code(),
        HipErrorCode::UNKNOWN
    );
    lane.upload(0, &range).unwrap();
    lane.finish().unwrap();
    drop(lane);
    dev.read_at(0, &mut out).unwrap();
    assert_eq!(out, [9u8; 16]);
    assert_eq!(rt2.calls(RuntimeOp::CopyToDevice), 2);
    assert_eq!(
        rt.fired(),
        [
            FiredRuntimeFault {
                op: RuntimeOp::CopyToDevice,
                call: 2,
                code: HipErrorCode::ILLEGAL_ADDRESS
            },
            FiredRuntimeFault {
                op: RuntimeOp::CopyFromDevice,
                call: 1,
                code: HipErrorCode::INVALID_VALUE
            },
        ]
    );
    assert_eq!(rt.calls(RuntimeOp::CopyToDevice), 2);
    assert_eq!(rt.calls(RuntimeOp::CopyFromDevice), 3);
}

#[test]
fn scripted_pinning_failures_leak_nothing() {
    let sim = Arc::new(SimRuntime::default());
    let rt = Arc::new(
        ScriptedRuntime::new(sim.clone())
            .fail_host_alloc(1)
            .fail_host_allocs_from(3),
    );
    let dynrt: Arc<dyn GpuRuntime> = rt.clone();
    let before = LeakSnapshot::take(&sim, &[]).unwrap();
    assert_eq!(
        PinnedBuffer::new(dynrt.clone(), 4096).unwrap_err().code(),
        HipErrorCode::OUT_OF_MEMORY
    );
    let ok = PinnedBuffer::new(dynrt.clone(), 4096).unwrap();
    assert!(PinnedBuffer::new(dynrt.clone(), 4096).is_err());
    assert!(PinnedBuffer::new(dynrt.clone(), 4096).is_err());
    assert_eq!(rt.calls(RuntimeOp::HostAlloc), 4);
    assert_eq!(rt.fired().len(), 3);
    let leak = before.compare_now(&sim).unwrap_err();
    assert!(leak.contains("1 pinned host buffers"), "{leak}");
    drop(ok);
    before.compare_now(&sim).unwrap();
}

#[test]
fn a_failed_device_copy_fails_the_request_with_the_hip_code() {
    let sim = Arc::new(SimRuntime::default());
    let rt =
        Arc::new(ScriptedRuntime::new(sim).fail_copy_to_device(2, HipErrorCode::ILLEGAL_ADDRESS));
    let driver = driver(rt.clone(), Arc::new(ScriptedIo::new()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(3, 0, 3 * CHUNK)).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    let dev = DeviceBuffer::new(rt.clone(), 3 * CHUNK).unwrap();
    let e = driver
        .io(call(IoOp::Read, handle, dev.ptr(), 3 * CHUNK))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HipDriverError);
    assert_eq!(e.hip_code(), Some(HipErrorCode::ILLEGAL_ADDRESS));
    assert_eq!(rt.calls(RuntimeOp::CopyToDevice), 2);
    // The next request is not scripted and succeeds.
    assert_eq!(
        driver
            .io(call(IoOp::Read, handle, dev.ptr(), 3 * CHUNK))
            .unwrap(),
        3 * CHUNK
    );
}

#[test]
fn descriptors_of_a_registered_file_are_released_by_deregistration_and_close() {
    let sim = Arc::new(SimRuntime::default());
    let driver = driver(sim.clone(), Arc::new(ScriptedIo::new()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"abc").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    assert_eq!(open_fds_for(&path).unwrap(), 1);
    let before = LeakSnapshot::take(&sim, &[&path]).unwrap();
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    assert!(
        open_fds_for(&path).unwrap() >= 2,
        "the driver reopens the file"
    );
    assert!(before
        .compare_now(&sim)
        .unwrap_err()
        .contains("descriptors"));
    driver.handle_deregister(handle).unwrap();
    before.compare_now(&sim).unwrap();
    driver.handle_register(file.as_raw_fd()).unwrap();
    driver.close().unwrap();
    before.compare_now(&sim).unwrap();
    drop(file);
    assert_eq!(open_fds_for(&path).unwrap(), 0);
    assert!(hipfile_testkit::faults::open_fd_count().unwrap() >= 3);
}
