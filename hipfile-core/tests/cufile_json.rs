//! A driver told to read cuFile's configuration file: where its settings come from (defaults <
//! the file < the environment < the parameter API), a file it cannot use failing every open,
//! and each key no setting takes named once at DEBUG. A test binary of its own: it installs a
//! process-wide `log` logger to capture the records.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hipfile_core::{Driver, DriverOptions, Environment, ErrorKind, LogLevel, RegistryBuilder};
use hipfile_hip::sim::SimRuntime;

mod support;
use support::{records, APP};

/// Install the capturing logger before any driver of this binary could install the library's.
fn capture_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&APP).unwrap();
        log::set_max_level(log::LevelFilter::Trace);
    });
}

fn environment(pairs: &[(&str, &str)]) -> Environment {
    Environment::from_lookup(|name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
}

/// A fresh directory holding `cufile.json` with `text`: the directory and the file's path.
fn json_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cufile.json");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The environment of a process whose `CUFILE_ENV_PATH_JSON` names `path`, and nothing else.
fn pointing_at(path: &Path) -> Environment {
    environment(&[("CUFILE_ENV_PATH_JSON", path.to_str().unwrap())])
}

/// A driver on the simulated GPU, no backends, built from `environment` and reading the cuFile
/// configuration file it names.
fn cufile_driver(environment: &Environment) -> Driver {
    Driver::new(
        DriverOptions {
            backends: Some(RegistryBuilder::new()),
            ..DriverOptions::from_environment(environment)
        }
        .with_cufile_json(environment),
    )
}

fn sim_options(environment: &Environment) -> DriverOptions {
    DriverOptions {
        runtime: {
            let gpu = Arc::new(SimRuntime::default());
            Arc::new(move || Ok(gpu.clone() as Arc<dyn hipfile_hip::GpuRuntime>))
        },
        backends: Some(RegistryBuilder::new()),
        ..DriverOptions::from_environment(environment)
    }
}

#[test]
fn the_file_goes_between_the_defaults_and_the_environment_and_parameters_win_over_all() {
    capture_log();
    let (_dir, path) = json_file(
        r#"{
        // the file sets three things; the environment one of them, the parameter another
        "execution": { "max_io_queue_depth": 32 },
        "properties": { "max_direct_io_size_kb": 8192, "max_batch_io_timeout_msecs": 7 },
        "fs": { "generic": { "posix_unaligned_writes": false } },
        "denylist": { "mounts": [] },
        "properties_unknown_to_us": 1
    }"#,
    );
    let env = environment(&[
        ("CUFILE_ENV_PATH_JSON", path.to_str().unwrap()),
        ("HIPFILE_MAX_DIRECT_IO_KB", "2048"),
    ]);

    // The hipFile door reads no such file, whatever the environment says.
    let hipfile_door = Driver::new(DriverOptions::from_environment(&env));
    assert!(DriverOptions::from_environment(&env).cufile_json.is_none());
    assert_eq!(hipfile_door.settings().batch_io_timeout_ms, 0);
    assert_eq!(hipfile_door.settings().io_queue_depth, 128);
    assert_eq!(hipfile_door.settings().max_direct_io_size_kb, 2048);

    let driver = cufile_driver(&env);
    let s = driver.settings();
    assert_eq!(
        s.max_direct_io_size_kb, 2048,
        "the environment over the file"
    );
    assert_eq!(s.batch_io_timeout_ms, 7, "the file over the default");
    assert_eq!(s.io_queue_depth, 32);
    assert_eq!(
        s.max_batch_io_size, 128,
        "the default where nothing else says"
    );
    driver
        .stage_settings(|s| {
            s.batch_io_timeout_ms = 5;
            s.max_direct_io_size_kb = 1024;
        })
        .unwrap();
    let s = driver.settings();
    assert_eq!(s.batch_io_timeout_ms, 5, "the parameter over the file");
    assert_eq!(
        s.max_direct_io_size_kb, 1024,
        "the parameter over the environment"
    );
    assert_eq!(s.io_queue_depth, 32);

    // Each key no setting takes is named once, at DEBUG, under the core's target.
    let got = records();
    for key in [
        "fs.generic.posix_unaligned_writes",
        "denylist.mounts",
        "properties_unknown_to_us",
    ] {
        let named: Vec<_> = got
            .iter()
            .filter(|(_, _, message)| message.contains(&format!(": {key} is accepted")))
            .collect();
        assert_eq!(named.len(), 1, "{key} in {got:?}");
        assert_eq!(named[0].0, log::Level::Debug);
        assert_eq!(named[0].1, "hipfile_core::cufile_config");
        assert!(named[0].2.contains(path.to_str().unwrap()), "{named:?}");
    }
    for mapped in [
        "max_io_queue_depth",
        "max_direct_io_size_kb",
        "max_batch_io_timeout_msecs",
    ] {
        assert!(
            !got.iter()
                .any(|(_, _, m)| m.contains(&format!(".{mapped} is accepted"))),
            "{mapped} logged as unknown: {got:?}"
        );
    }

    // The file's logging.level configures the log; the parameter API still wins at open.
    std::fs::write(&path, r#"{ "logging": { "level": "INFO" } }"#).unwrap();
    let env = pointing_at(&path);
    let driver = Driver::new(sim_options(&env).with_cufile_json(&env));
    assert_eq!(driver.settings().logging_level, LogLevel::Info);
    driver.open().unwrap();
    assert!(records()
        .iter()
        .any(|(level, _, m)| *level == log::Level::Info && m.starts_with("driver open")));
    driver.close().unwrap();
}

#[test]
fn a_file_the_driver_cannot_use_fails_every_open_naming_the_file() {
    capture_log();
    let (_dir, path) =
        json_file("{\n  \"execution\": {\n    \"max_io_queue_depth\": \"four\"\n  }\n}\n");
    let env = pointing_at(&path);
    let driver = Driver::new(sim_options(&env).with_cufile_json(&env));
    for _ in 0..2 {
        let e = driver.open().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
        assert!(e.context().contains(path.to_str().unwrap()), "{e}");
        assert!(e.context().contains("execution.max_io_queue_depth"), "{e}");
        assert_eq!(driver.use_count(), 0);
    }
    // The same options without the file open.
    let plain = Driver::new(sim_options(&env));
    plain.open().unwrap();
    plain.close().unwrap();

    // Not JSON: the line and column.
    std::fs::write(
        &path,
        "{\n  // fine\n  \"logging\": { \"level\": \"ERROR\" },,\n}\n",
    )
    .unwrap();
    let driver = Driver::new(sim_options(&env).with_cufile_json(&env));
    let e = driver.open().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
    assert!(e.context().contains("line 3 column"), "{e}");
}

#[test]
fn nvidias_tuning_of_cufiles_own_engine_is_named_and_not_applied_and_the_parameter_api_still_sets_it(
) {
    capture_log();
    // The values NVIDIA ships for cuFile's thread pool and bounce buffers.
    let (_dir, path) = json_file(
        r#"{
        "execution": {
            "max_io_queue_depth": 128,
            "max_io_threads": 4,
            "parallel_io": true,
            "min_io_threshold_size_kb": 8192,
            "max_request_parallelism": 4
        },
        "properties": { "per_buffer_cache_size_kb": 1024 }
    }"#,
    );
    let env = pointing_at(&path);
    let driver = Driver::new(sim_options(&env).with_cufile_json(&env));
    assert_eq!(driver.settings(), env.settings, "the engine's defaults");

    let got = records();
    for key in [
        "execution.max_io_threads",
        "execution.parallel_io",
        "execution.min_io_threshold_size_kb",
        "execution.max_request_parallelism",
        "properties.per_buffer_cache_size_kb",
    ] {
        let named: Vec<_> = got
            .iter()
            .filter(|(_, _, m)| m.contains(path.to_str().unwrap()))
            .filter(|(_, _, m)| m.contains(&format!(": {key} is accepted and not applied")))
            .collect();
        assert_eq!(named.len(), 1, "{key} in {got:?}");
        assert_eq!(named[0].0, log::Level::Debug);
        assert!(named[0].2.contains("CUFILE_PARAM_"), "{named:?}");
    }
    assert!(!got
        .iter()
        .any(|(_, _, m)| m.contains(path.to_str().unwrap())
            && m.contains("max_io_queue_depth is accepted")));

    // An application that asks through the parameter API gets what it asks for.
    driver
        .stage_settings(|s| {
            s.max_io_threads = 4;
            s.per_buffer_cache_size_kb = 1024;
            s.min_io_threshold_kb = 8192;
            s.max_request_parallelism = 4;
        })
        .unwrap();
    let s = driver.settings();
    assert_eq!(
        (
            s.max_io_threads,
            s.per_buffer_cache_size_kb,
            s.min_io_threshold_kb,
            s.max_request_parallelism
        ),
        (4, 1024, 8192, 4)
    );
    driver.open().unwrap();
    assert_eq!(driver.settings().max_io_threads, 4);
    driver.close().unwrap();
}

#[test]
fn a_missing_file_is_the_defaults() {
    capture_log();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.json");
    let env = pointing_at(&path);
    let driver = Driver::new(sim_options(&env).with_cufile_json(&env));
    assert_eq!(driver.settings(), env.settings);
    driver.open().unwrap();
    driver.close().unwrap();
}
