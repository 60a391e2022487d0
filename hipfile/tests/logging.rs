//! The library's log, captured in files: silent by default; at INFO the driver opening and
//! closing and the backends that will not serve; at WARN failovers and failures; at DEBUG the
//! path of each request. The logger and its level are process-wide, so this binary is its own
//! process and its one test runs the cases in order.

#![cfg(all(feature = "fastpath", feature = "fallback"))]

use std::ffi::{c_char, CStr};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

use hipfile::capi::{
    hipFileError_t, hipFileGetParameterString, hipFileInvalidValue, hipFileParamEnvLogfilePath,
    hipFileParamLoggingLevel, hipFileSetParameterString, hipFileStringConfigParameter_t,
    hipFileSuccess,
};
use hipfile::{BatchRequest, BatchStatus, Driver, DriverOptions, LogLevel, Settings};
use hipfile_core::EnvConfig;
use hipfile_hip::sim::{SimConfig, SimRuntime};
use hipfile_hip::{DeviceBuffer, GpuRuntime, OwnedStream, StreamRef};

/// A driver on a simulated GPU (with or without its P2P driver) whose settings log at `level`
/// to `file`.
fn driver(sim: &Arc<SimRuntime>, level: LogLevel, file: &Path) -> Driver {
    driver_with(sim, level, file, Settings::default())
}

/// [`driver`], from `settings` instead of the defaults.
fn driver_with(sim: &Arc<SimRuntime>, level: LogLevel, file: &Path, settings: Settings) -> Driver {
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    Driver::with_options(DriverOptions {
        selection: None,
        env: EnvConfig {
            unsupported_file_systems: Some(true),
            ..EnvConfig::default()
        },
        settings: Settings {
            logging_level: level,
            log_file_path: file.to_str().unwrap().to_string(),
            ..settings
        },
        ..DriverOptions::with_runtime(gpu)
    })
    .unwrap()
}

fn sim(p2p: bool) -> Arc<SimRuntime> {
    Arc::new(SimRuntime::new(SimConfig {
        p2p,
        ..SimConfig::default()
    }))
}

/// Write then read back 4096 bytes at offset 0 of a file in `dir`.
fn roundtrip(sim: &Arc<SimRuntime>, driver: &Driver, dir: &Path) {
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("data"))
        .unwrap();
    let handle = driver.register_file(&file).unwrap();
    let mut src = DeviceBuffer::new(gpu.clone(), 4096).unwrap();
    src.write_at(0, &[7u8; 4096]).unwrap();
    assert_eq!(handle.write(&src, 0).unwrap(), 4096);
    let mut dst = DeviceBuffer::new(gpu, 4096).unwrap();
    assert_eq!(handle.read(&mut dst, 0).unwrap(), 4096);
    assert_eq!(dst.to_vec().unwrap(), vec![7u8; 4096]);
}

/// The lines of `path` at `level` (the sink writes the level name after the process id).
fn lines_at(text: &str, level: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.split_whitespace().nth(2) == Some(level))
        .map(str::to_string)
        .collect()
}

fn has(lines: &[String], needle: &str) -> bool {
    lines.iter().any(|l| l.contains(needle))
}

fn set_string(param: hipFileStringConfigParameter_t, text: &CStr) -> hipFileError_t {
    // SAFETY: `text` is a NUL-terminated string that outlives the call.
    unsafe { hipFileSetParameterString(param, text.as_ptr()) }
}

fn get_string(param: hipFileStringConfigParameter_t) -> String {
    let mut buf = [0 as c_char; 64];
    // SAFETY: `buf` has room for the 64 bytes the call is told it has.
    let r = unsafe { hipFileGetParameterString(param, buf.as_mut_ptr(), 64) };
    assert_eq!(r.err, hipFileSuccess);
    // SAFETY: a successful call wrote a NUL-terminated string into `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_log_says_what_the_driver_did_at_the_level_asked_and_nothing_by_default() {
    let dir = tempfile::tempdir().unwrap();

    // Default level: no logger is installed, no file is made, nothing is printed.
    let quiet = dir.path().join("quiet.log");
    assert_eq!(Settings::default().logging_level, LogLevel::Off);
    let gpu = sim(false);
    let d = driver(&gpu, Settings::default().logging_level, &quiet);
    roundtrip(&gpu, &d, dir.path());
    drop(d);
    assert!(!quiet.exists(), "the default level wrote a log");
    assert_eq!(log::max_level(), log::LevelFilter::Off);

    // DEBUG, on a platform without a P2P driver: the fastpath starts but declines every
    // request, the fallback runs them.
    let debug = dir.path().join("debug.log");
    let gpu = sim(false);
    let d = driver(&gpu, LogLevel::Debug, &debug);
    roundtrip(&gpu, &d, dir.path());
    // Two stream-ordered reads on one stream: each is timed through the stream engine.
    {
        let data = std::fs::File::open(dir.path().join("data")).unwrap();
        let data = d.register_file(&data).unwrap();
        let runtime: Arc<dyn GpuRuntime> = gpu.clone();
        let stream = OwnedStream::new_independent(runtime.clone()).unwrap();
        let mut a = DeviceBuffer::new(runtime.clone(), 4096).unwrap();
        let mut b = DeviceBuffer::new(runtime, 4096).unwrap();
        let done = d.on_stream(&StreamRef::of(&stream), |io| {
            let first = io.read(&data, &mut a, 0).unwrap();
            let second = io.read(&data, &mut b, 0).unwrap();
            (first.wait().unwrap(), second.wait().unwrap())
        });
        assert_eq!(done, (4096, 4096));
    }
    drop(d);
    let text = std::fs::read_to_string(&debug).unwrap();
    let info = lines_at(&text, "INFO");
    let dbg = lines_at(&text, "DEBUG");
    assert!(
        has(&info, "driver open: platform Sim")
            && has(
                &info,
                "backends in offer order: fastpath (direct), fallback (staged)"
            )
            && has(&info, "log level DEBUG"),
        "{text}"
    );
    assert!(
        has(
            &info,
            "fastpath started but declines every request: the platform has no P2P driver"
        ),
        "{text}"
    );
    assert!(has(&info, "driver closed"), "{text}");
    assert!(
        has(
            &dbg,
            "read of 4096 bytes at file offset 0: fastpath declines: the platform has no P2P driver"
        ) && has(&dbg, "read of 4096 bytes at file offset 0: fallback runs it (staged)")
            && has(&dbg, "write of 4096 bytes at file offset 0: fallback runs it"),
        "{text}"
    );
    let timed: Vec<&String> = dbg
        .iter()
        .filter(|l| l.contains("stream-ordered read of 4096 bytes on stream"))
        .collect();
    assert_eq!(timed.len(), 2, "{text}");
    assert!(
        timed
            .iter()
            .all(|l| l.contains("us after the stream's previous op ended") && l.ends_with(" us")),
        "{text}"
    );
    assert!(lines_at(&text, "WARN").is_empty(), "{text}");

    // INFO, with the fastpath's first DMA failing with ENODEV: the failover is a warning, and
    // the request paths (DEBUG) stay out.
    let info_log = dir.path().join("info.log");
    let gpu = sim(true);
    let d = driver(&gpu, LogLevel::Info, &info_log);
    gpu.p2p_faults().fail_call(1, libc::ENODEV);
    roundtrip(&gpu, &d, dir.path());
    // Failures returned to the caller, synchronous and batched: writes through a read-only
    // descriptor.
    let read_only = OpenOptions::new()
        .read(true)
        .open(dir.path().join("data"))
        .unwrap();
    let read_only = d.register_file(&read_only).unwrap();
    let src = DeviceBuffer::new(gpu.clone(), 4096).unwrap();
    assert!(read_only.write(&src, 8192).is_err());
    let events = d
        .batch(1, |batch| {
            let entry = BatchRequest::write(&read_only, &src, 0)
                .unwrap()
                .cookie(0x2a);
            batch.submit([entry]).unwrap();
            batch.wait(1, 1, None).unwrap()
        })
        .unwrap();
    assert_eq!(events[0].status, BatchStatus::Failed);
    drop(read_only);
    // A stream-ordered read whose DMA fails with EIO (no failover for that).
    let data = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("data"))
        .unwrap();
    let data = d.register_file(&data).unwrap();
    let runtime: Arc<dyn GpuRuntime> = gpu.clone();
    let stream = OwnedStream::new_independent(runtime.clone()).unwrap();
    let mut dst = DeviceBuffer::new(runtime, 4096).unwrap();
    gpu.p2p_faults().fail_call(1, libc::EIO);
    let streamed = d.on_stream(&StreamRef::of(&stream), |io| {
        io.read(&data, &mut dst, 0).unwrap().wait()
    });
    assert!(streamed.is_err(), "{streamed:?}");
    drop(data);
    drop(d);
    let text = std::fs::read_to_string(&info_log).unwrap();
    assert!(has(&lines_at(&text, "INFO"), "driver open"), "{text}");
    assert!(
        has(
            &lines_at(&text, "WARN"),
            "write of 4096 bytes at file offset 0: fastpath failed"
        ) && has(&lines_at(&text, "WARN"), "the next backend takes it over"),
        "{text}"
    );
    assert!(
        has(
            &lines_at(&text, "WARN"),
            "write of 4096 bytes at file offset 8192 failed"
        ) && has(&lines_at(&text, "WARN"), "batch entry (cookie 0x2a) failed")
            && has(&lines_at(&text, "WARN"), "stream-ordered read on stream"),
        "{text}"
    );
    assert!(lines_at(&text, "DEBUG").is_empty(), "{text}");
    assert!(!has(
        &lines_at(&text, "INFO"),
        "fastpath started but declines"
    ));

    // Compat mode disallowed: the fallback starts but will serve nothing, and says so.
    let no_compat = dir.path().join("no-compat.log");
    let gpu = sim(true);
    let d = driver_with(
        &gpu,
        LogLevel::Info,
        &no_compat,
        Settings {
            allow_compat_mode: Some(false),
            ..Settings::default()
        },
    );
    drop(d);
    let text = std::fs::read_to_string(&no_compat).unwrap();
    assert!(
        has(
            &lines_at(&text, "INFO"),
            "fallback started but declines every request: compat mode is disallowed"
        ),
        "{text}"
    );

    // Back to off with the sink installed (still writing to the last file): silent again.
    let before = std::fs::read_to_string(&no_compat).unwrap();
    let gpu = sim(true);
    let d = driver(&gpu, LogLevel::Off, &no_compat);
    roundtrip(&gpu, &d, dir.path());
    drop(d);
    assert_eq!(std::fs::read_to_string(&no_compat).unwrap(), before);
    assert_eq!(log::max_level(), log::LevelFilter::Off);

    // The C parameters: a level name or number, read back by name, and live at once.
    let c_log = dir.path().join("c.log");
    let c_path = std::ffi::CString::new(c_log.to_str().unwrap()).unwrap();
    let path_param = hipFileParamEnvLogfilePath;
    let level_param = hipFileParamLoggingLevel;
    assert_eq!(get_string(level_param), "OFF");
    assert_eq!(set_string(path_param, &c_path).err, hipFileSuccess);
    assert_eq!(get_string(path_param), c_log.to_str().unwrap());
    assert_eq!(set_string(level_param, c"warning").err, hipFileSuccess);
    assert_eq!(get_string(level_param), "WARN");
    assert_eq!(log::max_level(), log::LevelFilter::Warn);
    assert_eq!(set_string(level_param, c"4").err, hipFileSuccess);
    assert_eq!(get_string(level_param), "DEBUG");
    assert_eq!(log::max_level(), log::LevelFilter::Debug);
    assert_eq!(set_string(level_param, c"loud").err, hipFileInvalidValue);
    assert_eq!(
        get_string(level_param),
        "DEBUG",
        "a bad value changes nothing"
    );
    log::debug!(target: "hipfile::test", "written through the parameters");
    assert!(std::fs::read_to_string(&c_log)
        .unwrap()
        .contains("written through the parameters"));
    assert_eq!(set_string(level_param, c"off").err, hipFileSuccess);
    assert_eq!(log::max_level(), log::LevelFilter::Off);
}
