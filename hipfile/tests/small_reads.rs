//! What one small synchronous read costs the library itself: heap allocations (counted by this
//! binary's global allocator, every thread of the process) and CPU time, per hot 4 KiB and
//! 64 KiB read through the Rust API and through the C ABI (`hipFileRead`), the staged engine
//! serving them.
//!
//! Two runtimes: the simulator in process (`SimRuntime`), and the simulated HIP runtime library
//! (`libamdhip64.so` of `hipfile-simhip`) loaded through the AMD platform code, as a program on
//! an AMD GPU loads the real one. The latter's own allocations are not counted (a library of its
//! own, with its own allocator): what is counted is ours. Under `HIPFILE_GPU_TESTS=1` both are
//! the machine's GPU runtime.
//!
//! Next to them, the floor: the same reads made with the runtime alone (`pread` into pinned
//! memory, an asynchronous copy, an event polled), which is what the runtime's copy and wait cost
//! and what a path costs above it is the library's.
//!
//! The test fails when a read allocates more than [`MOST_ALLOCATIONS_PER_READ`] times above the
//! floor on the same runtime. It prints its figures; in a release build (`cargo test --release
//! -p hipfile --test small_reads -- --nocapture`, `HIPFILE_SMALL_READS=N` reads per size and
//! path) the times are the library's per-request cost on this machine.
//!
//! A test binary of its own with one test: the allocator counts the whole process, and the C
//! ABI has one process-wide driver.
#![cfg(feature = "fallback")]

#[path = "support/capi_handle.rs"]
mod capi_handle;

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hipfile::capi::{
    hipFileBufDeregister, hipFileBufRegister, hipFileDriverClose, hipFileDriverOpen,
    hipFileHandleDeregister, hipFileRead, hipFileSuccess,
};
use hipfile::{AsDeviceMut, Driver, DriverOptions};
use hipfile_hip::{
    DeviceBuffer, DeviceRange, GpuRuntime, OwnedEvent, OwnedStream, PinnedBuffer, StreamOrder,
};

/// Heap allocations (and reallocations) made by every thread of the process.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counting;

// SAFETY: every call is passed on unchanged to the system allocator; counting touches no memory
// the caller sees.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `alloc`; `ptr` came from this allocator, which is the system's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, which is the system's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations one hot small read may make on top of the runtime's own (the floor's), on
/// any path measured here: the staged engine's transfer and the file side it shares with its
/// helpers.
const MOST_ALLOCATIONS_PER_READ: f64 = 2.0;

/// The count is the whole process's, so an allocation another thread makes once in a while (a
/// runtime's or a channel's) lands in some read's; less than one per hundred reads is no
/// allocation of every read, and is not held against the path.
const ONE_OFF: f64 = 0.01;

const SIZES: [usize; 2] = [4 << 10, 64 << 10];
const FILE_LEN: usize = 8 << 20;
const WARM_UP: usize = 200;
/// Measured reads per size and path: 4000, or `HIPFILE_SMALL_READS` (longer runs for a profiler).
fn reads() -> usize {
    std::env::var("HIPFILE_SMALL_READS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000)
}

/// CPU time of the calling thread and of the whole process, in nanoseconds.
fn cpu_ns() -> (u64, u64) {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live local the call writes.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime");
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    (
        read(libc::CLOCK_THREAD_CPUTIME_ID),
        read(libc::CLOCK_PROCESS_CPUTIME_ID),
    )
}

/// What the measured reads of one size cost, per read.
#[derive(Debug)]
struct Cost {
    allocations: f64,
    thread_cpu_us: f64,
    process_cpu_us: f64,
    median_us: f64,
}

/// Time `read(offset)` over [`reads`] hot reads of `size` bytes at offsets that visit the file
/// (after `WARM_UP` untimed ones), checking each returns `size`.
fn measure(size: usize, mut read: impl FnMut(usize, i64) -> isize) -> Cost {
    let slots = (FILE_LEN / size) as i64;
    let mut slot = 0i64;
    let mut next = || {
        slot = (slot + 7919) % slots;
        slot * size as i64
    };
    for _ in 0..WARM_UP {
        assert_eq!(read(size, next()), size as isize);
    }
    let reads = reads();
    let mut samples = Vec::with_capacity(reads);
    let offsets: Vec<i64> = (0..reads).map(|_| next()).collect();
    let allocations = ALLOCATIONS.load(Ordering::SeqCst);
    let (thread, process) = cpu_ns();
    for &offset in &offsets {
        let t = Instant::now();
        let n = read(size, offset);
        samples.push(t.elapsed().as_nanos() as u64);
        assert_eq!(n, size as isize, "read of {size} at {offset}");
    }
    let (thread_after, process_after) = cpu_ns();
    // The samples vector and the offsets were allocated before the count started.
    let allocations = ALLOCATIONS.load(Ordering::SeqCst) - allocations;
    samples.sort_unstable();
    let per = |ns: u64| ns as f64 / reads as f64 / 1000.0;
    Cost {
        allocations: allocations as f64 / reads as f64,
        thread_cpu_us: per(thread_after - thread),
        process_cpu_us: per(process_after - process),
        median_us: samples[reads / 2] as f64 / 1000.0,
    }
}

fn report(path: &str, size: usize, cost: &Cost) {
    println!(
        "{path:<32} {:>3} KiB: {:>6.2} allocations, {:>6.2} us thread CPU, {:>6.2} us process \
         CPU, {:>6.2} us median per read",
        size >> 10,
        cost.allocations,
        cost.thread_cpu_us,
        cost.process_cpu_us,
        cost.median_us
    );
}

fn data_file(dir: &tempfile::TempDir) -> File {
    let path = dir.path().join("data");
    let data: Vec<u8> = (0..FILE_LEN).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    File::create(&path).unwrap().write_all(&data).unwrap();
    // Read once, so every measured read is hot.
    assert_eq!(std::fs::read(&path).unwrap(), data);
    File::open(&path).unwrap()
}

/// The floor under every path: what the staged engine's work costs with nothing around it, a
/// `pread` into pinned memory, the copy to the device queued on a stream ordered with the
/// legacy default stream, an event recorded after it and polled (yielding) until it completes.
fn floor(runtime: Arc<dyn GpuRuntime>, file: &File, path: &str) -> Vec<(usize, Cost)> {
    let device = DeviceBuffer::new(Arc::clone(&runtime), 64 << 10).expect("device memory");
    let range = DeviceRange::query(&runtime, device.ptr(), device.len()).expect("device memory");
    let mut pinned = PinnedBuffer::new(Arc::clone(&runtime), 64 << 10).expect("pinned memory");
    let stream = OwnedStream::with_order(Arc::clone(&runtime), StreamOrder::WithDefaultStream)
        .expect("a stream");
    let event = OwnedEvent::new(Arc::clone(&runtime)).expect("an event");
    SIZES
        .iter()
        .map(|&size| {
            let cost = measure(size, |size, offset| {
                let got = file
                    .read_at(&mut pinned.as_mut_slice()[..size], offset as u64)
                    .expect("reads");
                let dst = range.slice(0, got).expect("inside the buffer");
                // SAFETY: `dst` is device memory of `runtime` of `got` bytes, the source is
                // pinned memory of at least `got` bytes, and both outlive the copy, which the
                // event below waits for.
                unsafe {
                    runtime.copy_to_device_async(dst.ptr(), pinned.as_ptr(), got, stream.handle())
                }
                .expect("queues the copy");
                event.record(&stream).expect("records");
                while !event.query().expect("queries") {
                    std::thread::yield_now();
                }
                got as isize
            });
            report(path, size, &cost);
            (size, cost)
        })
        .collect()
}

/// Reads through the facade's Rust API on a private driver over `runtime`, the staged engine
/// alone serving them.
fn rust_api(runtime: Arc<dyn GpuRuntime>, file: &File, path: &str) -> Vec<(usize, Cost)> {
    let driver = Driver::with_options(DriverOptions {
        selection: Some("fallback".into()),
        ..DriverOptions::with_runtime(runtime)
    })
    .expect("the driver opens");
    let handle = driver.register_file(file).expect("registers");
    let mut buffer = driver
        .register_buffer(driver.alloc(64 << 10).expect("device memory"))
        .expect("registers");
    SIZES
        .iter()
        .map(|&size| {
            let cost = measure(size, |size, offset| {
                let dst = buffer.slice_mut(..size).expect("inside the buffer");
                handle.read(dst, offset as u64).expect("reads") as isize
            });
            report(path, size, &cost);
            (size, cost)
        })
        .collect()
}

/// Reads through `hipFileRead` on the process-wide driver, whose platform is the runtime library
/// that `runtime` also is.
fn c_abi(runtime: Arc<dyn GpuRuntime>, file: &File, path: &str) -> Vec<(usize, Cost)> {
    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let buffer = DeviceBuffer::new(runtime, 64 << 10).expect("hipMalloc");
    let base = buffer.ptr() as *mut c_void;
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, deregistered before `buffer` is freed.
        unsafe { hipFileBufRegister(base, buffer.len(), 0) }.err,
        hipFileSuccess
    );
    let costs = SIZES
        .iter()
        .map(|&size| {
            let cost = measure(size, |size, offset| {
                // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches
                // during the call.
                (unsafe { hipFileRead(fh, base, size, offset, 0) }) as isize
            });
            report(path, size, &cost);
            (size, cost)
        })
        .collect();
    assert_eq!(hipFileBufDeregister(base).err, hipFileSuccess);
    hipFileHandleDeregister(fh);
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
    costs
}

#[test]
fn small_reads_allocate_little() {
    for name in [
        "HIPFILE_ALLOW_COMPAT_MODE",
        "HIPFILE_FORCE_COMPAT_MODE",
        "HIPFILE_STATS_LEVEL",
        "HIPFILE_SIM_DEVICES",
    ] {
        std::env::remove_var(name);
    }
    std::env::set_var("HIPFILE_BACKENDS", "fallback");
    // Reads that staging serves: the file is read back and forth for a second or more, after
    // which the engine would start pinning its page cache (a one-time cost, in the measured
    // reads) and then copy reads out of it.
    std::env::set_var("HIPFILE_PAGE_CACHE_PINS_KB", "0");
    let hip_library = hipfile_testkit::target::c_abi_runtime().expect("the runtime library");
    let dir = tempfile::tempdir().unwrap();
    let file = data_file(&dir);
    let sim = hipfile_testkit::target::runtime_under_test()
        .expect("the runtime")
        .runtime;
    let sim_name = format!("{:?}", sim.info().platform);
    let library_name = format!("{:?} library", hip_library.info().platform);
    let sim_floor = floor(Arc::clone(&sim), &file, &format!("floor, {sim_name}"));
    let library_floor = floor(
        Arc::clone(&hip_library),
        &file,
        &format!("floor, {library_name}"),
    );
    let paths = [
        (
            rust_api(sim, &file, &format!("Rust API, {sim_name}")),
            &sim_floor,
        ),
        (
            rust_api(
                Arc::clone(&hip_library),
                &file,
                &format!("Rust API, {library_name}"),
            ),
            &library_floor,
        ),
        (
            c_abi(hip_library, &file, &format!("C ABI, {library_name}")),
            &library_floor,
        ),
    ];
    // The runtime's own allocations (the simulator's, in this process) are the floor's too.
    for (costs, floor) in paths {
        for ((size, cost), (_, floor)) in costs.iter().zip(floor) {
            let ours = cost.allocations - floor.allocations;
            assert!(
                ours <= MOST_ALLOCATIONS_PER_READ + ONE_OFF,
                "a hot read of {size} bytes allocates {ours} times more than the runtime's own \
                 work does (at most {MOST_ALLOCATIONS_PER_READ})"
            );
        }
    }
}
