//! An application that installed its own `log` logger keeps it: the driver installs no sink,
//! sends its records to the application's logger, and a level configured for hipfile-rs only
//! raises the global maximum level. A test binary of its own: the logger is process-wide.

use std::sync::Arc;

use hipfile_core::logging::configure;
use hipfile_core::{Driver, DriverOptions, LogLevel, Settings};
use hipfile_hip::sim::SimRuntime;

mod support;
use support::{records, APP};

#[test]
fn the_applications_logger_is_kept_and_receives_the_records() {
    log::set_logger(&APP).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hipfile.log");

    // Off (the default) leaves the application's level alone: not lowered.
    configure(LogLevel::Off, file.to_str().unwrap());
    assert_eq!(log::max_level(), log::LevelFilter::Warn);
    // A lower level does not lower it either.
    configure(LogLevel::Error, file.to_str().unwrap());
    assert_eq!(log::max_level(), log::LevelFilter::Warn);

    // A driver asked to log at INFO raises the level; its records reach the application's
    // logger, and no log file is made (the application's logger decides where records go).
    let driver = Driver::new(DriverOptions {
        backends: Some(hipfile_core::RegistryBuilder::new()),
        selection: None,
        settings: Settings {
            logging_level: LogLevel::Info,
            log_file_path: file.to_str().unwrap().to_string(),
            ..Settings::default()
        },
        ..DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
    });
    driver.open().unwrap();
    driver.close().unwrap();
    assert_eq!(log::max_level(), log::LevelFilter::Info);
    assert!(
        !file.exists(),
        "a log file was made next to the application's logger"
    );
    let got = records();
    let open = got
        .iter()
        .find(|(_, _, message)| message.starts_with("driver open: platform Sim"))
        .unwrap_or_else(|| panic!("no driver open record in {got:?}"));
    assert_eq!(open.0, log::Level::Info);
    assert_eq!(open.1, "hipfile_core::driver");
    assert!(open.2.contains("backends in offer order: none"), "{open:?}");
    assert!(got
        .iter()
        .any(|(level, _, message)| *level == log::Level::Info && message == "driver closed"));
}
