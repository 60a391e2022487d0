//! What the conformance suite does not ask: the bytes a failure reports, appending writes, the
//! compat-mode decline, and files that report size 0. The backend is driven directly (to see the
//! `IoFailure` the dispatcher would turn into an error) or through a driver that holds only it.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Barrier};

use hipfile_backend_bounce::Bounce;
use hipfile_core::{
    Backend, BackendContext, CompatMode, Decline, Driver, DriverOptions, EnvConfig, FileIo, IoCall,
    IoOp, LiveSettings, OwnedRequest, PosixIo, RegisteredFile, RegistryBuilder, Settings, Submit,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, DeviceRange, GpuRuntime};
use hipfile_testkit::conformance::{pattern, SENTINEL};
use hipfile_testkit::faults::{Errno, ScriptedIo};

/// The chunk of these tests: `max_direct_io_size_kb` = 4.
const CHUNK: usize = 4096;

/// A backend on a fresh simulated GPU, over `io`, and the settings its requests carry.
struct Bench {
    gpu: Arc<dyn GpuRuntime>,
    backend: Bounce,
    settings: Arc<Settings>,
    env: EnvConfig,
}

impl Bench {
    fn new(io: Arc<dyn FileIo>) -> Bench {
        let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let settings = Settings {
            max_direct_io_size_kb: (CHUNK / 1024) as u64,
            ..Settings::default()
        };
        let ctx = BackendContext {
            runtime: Arc::clone(&gpu),
            io,
            settings: Arc::new(LiveSettings::new(settings.clone())),
            env: EnvConfig::default(),
        };
        Bench {
            gpu,
            backend: Bounce::new(&ctx),
            settings: Arc::new(settings),
            env: EnvConfig::default(),
        }
    }

    /// Submit `op` of all of `memory` at `file_offset` and wait for it.
    fn run(
        &self,
        op: IoOp,
        file: &Arc<RegisteredFile>,
        memory: &DeviceRange,
        file_offset: u64,
    ) -> hipfile_core::IoOutcome {
        let owned = OwnedRequest {
            op,
            file: Arc::clone(file),
            memory: memory.clone().into(),
            file_offset,
            append: false,
            registered_buffer: false,
            settings: Arc::clone(&self.settings),
            compat: CompatMode {
                allowed: true,
                forced: false,
            },
            env: self.env,
            doorbell: None,
            stream_ordered: false,
            file_stamp: None,
        };
        let req = owned.request();
        assert_eq!(self.backend.accepts(&req), Ok(()));
        self.backend.submit(&req, Submit::Wait).wait()
    }
}

fn registered(file: &std::fs::File) -> Arc<RegisteredFile> {
    Arc::new(RegisteredFile::open(file.as_raw_fd()).unwrap())
}

#[test]
fn a_failed_read_reports_the_chunks_that_reached_device_memory() {
    let bench = Bench::new(Arc::new(ScriptedIo::new().fail_pread(3, Errno::IO)));
    let dir = tempfile::tempdir().unwrap();
    let contents = pattern(1, 0, 4 * CHUNK);
    std::fs::write(dir.path().join("f"), &contents).unwrap();
    let file = registered(&std::fs::File::open(dir.path().join("f")).unwrap());
    let mut buf = DeviceBuffer::new(Arc::clone(&bench.gpu), 4 * CHUNK).unwrap();
    buf.fill(SENTINEL).unwrap();
    let memory = DeviceRange::query(&bench.gpu, buf.ptr(), 4 * CHUNK).unwrap();

    let failure = bench.run(IoOp::Read, &file, &memory, 0).unwrap_err();
    assert_eq!(failure.bytes_moved, 2 * CHUNK);
    assert_eq!(failure.error.errno(), Some(Errno::IO.raw_os_error()));
    let mut expected = contents[..2 * CHUNK].to_vec();
    expected.resize(4 * CHUNK, SENTINEL);
    assert!(
        buf.to_vec().unwrap() == expected,
        "only the chunks reported"
    );
}

#[test]
fn a_failed_write_reports_the_chunks_written_and_never_more() {
    // The 3rd pwrite writes 100 bytes of the third chunk, the 4th fails: the third chunk is
    // partly in the file but not counted.
    let io = ScriptedIo::new()
        .short_pwrite(3, 100)
        .fail_pwrite(4, Errno::NOSPC);
    let bench = Bench::new(Arc::new(io));
    let dir = tempfile::tempdir().unwrap();
    let f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.path().join("f"))
        .unwrap();
    let file = registered(&f);
    let data = pattern(2, 0, 4 * CHUNK);
    let mut buf = DeviceBuffer::new(Arc::clone(&bench.gpu), 4 * CHUNK).unwrap();
    buf.write_at(0, &data).unwrap();
    let memory = DeviceRange::query(&bench.gpu, buf.ptr(), 4 * CHUNK).unwrap();

    let failure = bench.run(IoOp::Write, &file, &memory, 0).unwrap_err();
    assert_eq!(failure.bytes_moved, 2 * CHUNK);
    assert_eq!(failure.error.errno(), Some(Errno::NOSPC.raw_os_error()));
    let written = std::fs::read(dir.path().join("f")).unwrap();
    assert!(
        written == data[..2 * CHUNK + 100],
        "two chunks and the short part"
    );
}

#[test]
fn reads_stop_at_the_end_of_a_file_that_reports_size_zero() {
    let bench = Bench::new(Arc::new(PosixIo));
    let path = "/proc/version";
    let expected = std::fs::read(path).unwrap();
    assert_eq!(
        std::fs::metadata(path).unwrap().len(),
        0,
        "procfs reports 0"
    );
    assert!(!expected.is_empty() && expected.len() < CHUNK);
    let file = registered(&std::fs::File::open(path).unwrap());
    let mut buf = DeviceBuffer::new(Arc::clone(&bench.gpu), 2 * CHUNK).unwrap();
    buf.fill(SENTINEL).unwrap();
    let memory = DeviceRange::query(&bench.gpu, buf.ptr(), 2 * CHUNK).unwrap();

    let n = bench.run(IoOp::Read, &file, &memory, 0).unwrap();
    assert_eq!(n, expected.len());
    let mut want = expected;
    want.resize(2 * CHUNK, SENTINEL);
    assert!(buf.to_vec().unwrap() == want);
}

#[test]
fn it_declines_when_compat_mode_is_disallowed() {
    let bench = Bench::new(Arc::new(PosixIo));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let file = registered(&std::fs::File::open(dir.path().join("f")).unwrap());
    let buf = DeviceBuffer::new(Arc::clone(&bench.gpu), CHUNK).unwrap();
    let memory = DeviceRange::query(&bench.gpu, buf.ptr(), CHUNK).unwrap();
    let owned = OwnedRequest {
        op: IoOp::Read,
        file,
        memory: memory.into(),
        file_offset: 0,
        append: false,
        registered_buffer: false,
        settings: Arc::clone(&bench.settings),
        compat: CompatMode {
            allowed: false,
            forced: false,
        },
        env: bench.env,
        doorbell: None,
        stream_ordered: false,
        file_stamp: None,
    };
    let req = owned.request();
    assert_eq!(
        bench.backend.accepts(&req),
        Err(Decline::CompatModeDisallowed)
    );
}

/// A driver whose registry holds only `bounce`, on a fresh simulated GPU.
fn driver() -> (Driver, Arc<dyn GpuRuntime>) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let mut backends = RegistryBuilder::new();
    hipfile_backend_bounce::register(&mut backends).unwrap();
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        env: EnvConfig::default(),
        ..DriverOptions::with_runtime(Arc::clone(&gpu))
    });
    driver
        .stage_settings(|s| s.max_direct_io_size_kb = (CHUNK / 1024) as u64)
        .unwrap();
    driver.open().unwrap();
    (driver, gpu)
}

#[test]
fn appending_writes_land_whole_and_in_order() {
    fn record_byte(round: usize, thread: usize) -> u8 {
        (10 + round * 16 + thread) as u8
    }
    const THREADS: usize = 8;
    const ROUNDS: usize = 4;
    // Several chunks each, so an append that let go of the file between chunks would interleave.
    const RECORD: usize = 16 * CHUNK + 100;
    let (driver, gpu) = driver();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    std::fs::write(&path, b"head").unwrap();
    let f = OpenOptions::new().append(true).open(&path).unwrap();
    let handle = driver.handle_register(f.as_raw_fd()).unwrap();

    // One after the other: in order, after what the file held, whatever the offset says.
    for (i, offset) in [(1u8, 0i64), (2, 1 << 20)] {
        let mut buf = DeviceBuffer::new(Arc::clone(&gpu), RECORD).unwrap();
        buf.fill(i).unwrap();
        let call = IoCall {
            op: IoOp::Write,
            handle,
            buffer: buf.ptr(),
            size: RECORD,
            file_offset: offset,
            buffer_offset: 0,
        };
        assert_eq!(driver.io(call).unwrap(), RECORD);
    }
    let mut expected = b"head".to_vec();
    expected.extend([1u8; RECORD]);
    expected.extend([2u8; RECORD]);
    assert!(std::fs::read(&path).unwrap() == expected);

    // From many threads at once, started together, several rounds: every record whole.
    for round in 0..ROUNDS {
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (driver, gpu, start) = (&driver, &gpu, &start);
                s.spawn(move || {
                    let mut buf = DeviceBuffer::new(Arc::clone(gpu), RECORD).unwrap();
                    buf.fill(record_byte(round, t)).unwrap();
                    let call = IoCall {
                        op: IoOp::Write,
                        handle,
                        buffer: buf.ptr(),
                        size: RECORD,
                        file_offset: 0,
                        buffer_offset: 0,
                    };
                    start.wait();
                    assert_eq!(driver.io(call).unwrap(), RECORD);
                });
            }
        });
    }
    let contents = std::fs::read(&path).unwrap();
    assert_eq!(contents.len(), expected.len() + ROUNDS * THREADS * RECORD);
    assert!(contents[..expected.len()] == expected);
    let mut seen: Vec<u8> = contents[expected.len()..]
        .chunks(RECORD)
        .map(|record| {
            assert!(
                record.iter().all(|&b| b == record[0]),
                "a record was interleaved with another"
            );
            record[0]
        })
        .collect();
    seen.sort_unstable();
    let mut written: Vec<u8> = (0..ROUNDS)
        .flat_map(|round| (0..THREADS).map(move |t| record_byte(round, t)))
        .collect();
    written.sort_unstable();
    assert_eq!(seen, written);
    driver.handle_deregister(handle).unwrap();
    driver.close().unwrap();
}
