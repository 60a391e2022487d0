//! Logging: the library speaks through the [`log`] facade and is silent by default.
//!
//! Every crate of hipfile-rs writes its records with the `log` macros, under targets that start
//! with `hipfile` (the module paths). What is written where is decided when the driver opens
//! ([`configure`], called with the settings it opens with):
//!
//! - The level comes from `HIPFILE_LOG_LEVEL` or the `hipFileParamLoggingLevel` string parameter
//!   (the parameter wins): the names cuFile's `CUFILE_LOGGING_LEVEL` and `cufile.json`
//!   `logging.level` take (`ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`, any case, plus `NOTICE`,
//!   which is `INFO`, and `OFF`/`NONE`), or a number as `AMD_LOG_LEVEL` counts them (0 off,
//!   1 error, 2 warn, 3 info, 4 debug, 5 trace). Unset, or a value that does not parse, is off:
//!   nothing is printed.
//! - The sink is a small logger of this module: one line per record (UTC time, `hipfile[pid]`,
//!   level, thread name, target, message) on stderr, or appended to the file `HIPFILE_LOG_FILE` (or the `hipFileParamEnvLogfilePath` parameter) names. A file
//!   that cannot be opened is said once on stderr, and the records go to stderr instead.
//! - An application that installed its own `log` logger keeps it: the sink is only installed
//!   when no logger is set, and a level configured for hipfile-rs then only raises the global
//!   maximum level (never lowers what the application chose), so the application's logger sees
//!   hipfile-rs records under the `hipfile*` targets and filters them as it likes.
//! - The sink prints only `hipfile*` targets: installed by a library, it must not start
//!   printing what other crates of the process log.
//!
//! What is logged: at INFO the driver opening (platform, backends in offer order, the settings
//! in force) and closing, and a backend that started but will decline every request (the
//! fastpath without a P2P driver) and why; at WARN a request that fails over from one backend
//! to the next, and a failure returned to the caller with its cause; at DEBUG each request's
//! path (operation, size, file offset, each backend that declined it and why, the backend that
//! ran it). The `log` macros check the level before formatting anything, so a disabled level
//! costs one atomic load.
//!
//! ```
//! use hipfile_core::LogLevel;
//! assert_eq!(LogLevel::parse("warn"), Some(LogLevel::Warn));
//! assert_eq!(LogLevel::parse("4"), Some(LogLevel::Debug));
//! assert_eq!(LogLevel::default(), LogLevel::Off);
//! ```

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that sets the log level.
pub const LOG_LEVEL_ENV: &str = "HIPFILE_LOG_LEVEL";
/// The environment variable that names the file the log is appended to (default: stderr).
pub const LOG_FILE_ENV: &str = "HIPFILE_LOG_FILE";

/// How much the library logs. Ordered from silent to most verbose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Nothing (the default).
    #[default]
    Off,
    /// Failures only.
    Error,
    /// Failures, failovers and errors returned to the caller.
    Warn,
    /// Also the driver opening and closing and the backends that will not serve.
    Info,
    /// Also the path of every request.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// Parse a level: a name (`OFF`, `NONE`, `ERROR`, `WARN`, `WARNING`, `NOTICE`, `INFO`,
    /// `DEBUG`, `TRACE`, any case) or a number from 0 (off) to 5 (trace). Anything else is `None`.
    pub fn parse(text: &str) -> Option<LogLevel> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u8>() {
            return LogLevel::from_number(n);
        }
        Some(match text.to_ascii_uppercase().as_str() {
            "OFF" | "NONE" => LogLevel::Off,
            "ERROR" => LogLevel::Error,
            "WARN" | "WARNING" => LogLevel::Warn,
            "NOTICE" | "INFO" => LogLevel::Info,
            "DEBUG" => LogLevel::Debug,
            "TRACE" => LogLevel::Trace,
            _ => return None,
        })
    }

    /// Every level, from silent to most verbose: level `n` is the number `n`.
    pub const ALL: [LogLevel; 6] = [
        LogLevel::Off,
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
        LogLevel::Trace,
    ];

    /// The level of a number: 0 off, 1 error, 2 warn, 3 info, 4 debug, 5 trace.
    pub fn from_number(n: u8) -> Option<LogLevel> {
        LogLevel::ALL.get(usize::from(n)).copied()
    }

    /// The upper-case name (what `hipFileGetParameterString` reports).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "OFF",
            LogLevel::Error => "ERROR",
            LogLevel::Warn => "WARN",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
            LogLevel::Trace => "TRACE",
        }
    }

    /// The `log` crate's filter of this level.
    pub fn filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Off => log::LevelFilter::Off,
            LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the sink writes.
#[derive(Debug)]
enum Target {
    Stderr,
    File { path: String, file: File },
}

#[derive(Debug)]
struct Sink {
    target: Mutex<Target>,
}

static SINK: Sink = Sink {
    target: Mutex::new(Target::Stderr),
};

/// Whether [`SINK`] is the process's logger.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Serializes [`configure`]; holds the last log file that could not be opened (said once).
static CONFIGURE: Mutex<Option<String>> = Mutex::new(None);

impl log::Log for Sink {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level() && metadata.target().starts_with("hipfile")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let thread = std::thread::current();
        // One buffer, one write: lines of several threads (or processes appending to one file)
        // never interleave.
        let line = format!(
            "{}.{:06}Z hipfile[{}] {:<5} {} {}: {}\n",
            utc(now.as_secs()),
            now.subsec_micros(),
            std::process::id(),
            record.level(),
            thread.name().unwrap_or("-"),
            record.target(),
            record.args()
        );
        let mut target = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        // A log line that cannot be written is dropped: logging never fails a request.
        let _ = match &mut *target {
            Target::Stderr => std::io::stderr().write_all(line.as_bytes()),
            Target::File { file, .. } => file.write_all(line.as_bytes()),
        };
    }

    fn flush(&self) {
        let mut target = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = match &mut *target {
            Target::Stderr => std::io::stderr().flush(),
            Target::File { file, .. } => file.flush(),
        };
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) of `secs` seconds since the Unix epoch.
fn utc(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rest = secs % 86_400;
    // Days to a civil date in the proleptic Gregorian calendar, counting 400-year eras from
    // 0000-03-01 so that a leap day ends each year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Apply a level and a log file (empty: stderr). The driver calls this when it opens, and the
/// parameter API when it changes either.
///
/// Level off installs nothing and leaves an installed sink silent. Another level installs the
/// sink if no logger is set yet and sets the global maximum level to it; when the
/// application's own logger is set, the maximum level is only raised to it, never lowered, and
/// the file is not used (the application's logger decides where records go).
pub fn configure(level: LogLevel, file: &str) {
    let mut failed_file = CONFIGURE.lock().unwrap_or_else(PoisonError::into_inner);
    if !INSTALLED.load(Ordering::Acquire) {
        if level == LogLevel::Off {
            return;
        }
        if log::set_logger(&SINK).is_ok() {
            INSTALLED.store(true, Ordering::Release);
        } else {
            if level.filter() > log::max_level() {
                log::set_max_level(level.filter());
            }
            return;
        }
    }
    if level == LogLevel::Off {
        log::set_max_level(log::LevelFilter::Off);
        return;
    }
    let mut target = SINK.target.lock().unwrap_or_else(PoisonError::into_inner);
    let current = match &*target {
        Target::Stderr => "",
        Target::File { path, .. } => path.as_str(),
    };
    if current != file {
        *target = if file.is_empty() {
            Target::Stderr
        } else {
            match OpenOptions::new().create(true).append(true).open(file) {
                Ok(f) => {
                    *failed_file = None;
                    Target::File {
                        path: file.to_string(),
                        file: f,
                    }
                }
                Err(e) => {
                    if failed_file.as_deref() != Some(file) {
                        eprintln!(
                            "hipfile: cannot open the log file {file:?} ({e}); logging to stderr"
                        );
                        *failed_file = Some(file.to_string());
                    }
                    Target::Stderr
                }
            }
        };
    }
    log::set_max_level(level.filter());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_from_cufile_names_and_numbers() {
        for (text, level) in [
            ("ERROR", LogLevel::Error),
            ("warn", LogLevel::Warn),
            ("Warning", LogLevel::Warn),
            ("NOTICE", LogLevel::Info),
            (" info ", LogLevel::Info),
            ("DEBUG", LogLevel::Debug),
            ("trace", LogLevel::Trace),
            ("OFF", LogLevel::Off),
            ("none", LogLevel::Off),
            ("0", LogLevel::Off),
            ("1", LogLevel::Error),
            ("2", LogLevel::Warn),
            ("3", LogLevel::Info),
            ("4", LogLevel::Debug),
            ("5", LogLevel::Trace),
        ] {
            assert_eq!(LogLevel::parse(text), Some(level), "{text:?}");
        }
        for bad in ["", "6", "-1", "verbose", "true", "256"] {
            assert_eq!(LogLevel::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timestamps_are_utc_civil_time() {
        assert_eq!(utc(0), "1970-01-01T00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(utc(1_796_365_908), "2026-12-04T06:31:48");
        assert_eq!(utc(4_102_444_799), "2099-12-31T23:59:59");
    }

    #[test]
    fn names_parse_back_and_order_from_silent_to_verbose() {
        let all = LogLevel::ALL;
        for (n, level) in all.iter().enumerate() {
            assert_eq!(LogLevel::parse(level.name()), Some(*level));
            assert_eq!(LogLevel::from_number(n as u8), Some(*level));
            assert_eq!(level.to_string(), level.name());
        }
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert!(all.windows(2).all(|w| w[0].filter() < w[1].filter()));
        assert_eq!(LogLevel::from_number(6), None);
    }
}
