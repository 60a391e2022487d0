//! cuFile's configuration file (`cufile.json`), for the cuFile door (`libcufile.so.0`).
//!
//! cuFile reads a JSON file with `//` and `/* */` comments: the file `CUFILE_ENV_PATH_JSON`
//! names, else `/etc/cufile.json`. A driver reads it only when its [`DriverOptions`] carry a
//! [`CufileJsonSource`] ([`DriverOptions::with_cufile_json`]); the hipFile door never does, as
//! upstream hipFile reads no such file. The file is read once, when the [`Driver`] is made, and
//! goes between the defaults and the environment:
//!
//! defaults < the file < `HIPFILE_*` variables that set the same thing < the parameter API
//! (`cuFileSetParameter*`, staged while the driver is closed).
//!
//! The keys that mean something to the engine land on [`Settings`] (the table [`MAPPED_KEYS`]
//! lists them; README.md says what each one does). Every other key (`fs.*`, `denylist.*`, the
//! RDMA keys, ...) is accepted and named once in a DEBUG record. So are the keys that tune
//! cuFile's own thread pool and bounce buffers ([`ENGINE_TUNING_KEYS`]:
//! `execution.max_io_threads`, `execution.max_request_parallelism`,
//! `execution.min_io_threshold_size_kb`, `execution.parallel_io`,
//! `properties.per_buffer_cache_size_kb`): the file on a CUDA machine holds NVIDIA's shipped
//! values for cuFile's engine, which would tune ours down for every application; their record
//! says which `HIPFILE_*` variable or parameter sets our equivalent. A missing file is no error:
//! the driver runs with the defaults (a `CUFILE_ENV_PATH_JSON` naming a missing file is said at
//! WARN).
//! A file that cannot be used fails every open of the driver with
//! [`ErrorKind::DriverInvalidProps`], naming the file and the line and column or the key: text
//! that is not JSON, a mapped key with a value of the wrong type, a log level cuFile does not
//! name. A value its setting cannot hold fails as the parameter API's would
//! ([`Settings::check`]: [`ErrorKind::DriverUnsupportedLimit`] above a ceiling).
//!
//! Comments are stripped by the `json_comments` crate (byte for byte into spaces, so serde_json's
//! line and column point into the file as written; newlines inside block comments are put back).
//!
//! ```
//! use std::path::Path;
//! use hipfile_core::cufile_config::CufileJson;
//! use hipfile_core::{EnvConfig, Settings};
//!
//! let text = br#"{
//!     // the largest single transfer, in KiB
//!     "properties": { "max_direct_io_size_kb": 8192, "rdma_dev_addr_list": [] },
//!     // the bound on queued work applies; the size of cuFile's own thread pool does not
//!     "execution": { "max_io_queue_depth": 32, "max_io_threads": 4 }
//! }"#;
//! let file = CufileJson::parse(Path::new("cufile.json"), text).unwrap();
//! let mut settings = Settings::default();
//! file.apply(&mut settings, &EnvConfig::default()).unwrap();
//! assert_eq!(settings.max_direct_io_size_kb, 8192);
//! assert_eq!(settings.io_queue_depth, 32);
//! assert_eq!(settings.max_io_threads, Settings::default().max_io_threads);
//! assert_eq!(
//!     file.unmapped_keys(),
//!     ["execution.max_io_threads", "properties.rdma_dev_addr_list"]
//! );
//! ```
//!
//! [`DriverOptions`]: crate::DriverOptions
//! [`DriverOptions::with_cufile_json`]: crate::DriverOptions::with_cufile_json
//! [`Driver`]: crate::Driver

use std::io::Read;
use std::path::{Path, PathBuf};

use json_comments::CommentSettings;
use serde_json::{Map, Value};

use crate::config::{limits, DirectIoPolicy, EnvConfig, Environment, Settings};
use crate::error::{Error, ErrorKind, Result};
use crate::logging::LogLevel;

pub use crate::config::CUFILE_JSON_PATH_ENV;

/// Where cuFile looks for its configuration file when `CUFILE_ENV_PATH_JSON` is not set.
pub const DEFAULT_CUFILE_JSON: &str = "/etc/cufile.json";

/// What a [`Mapping::Number`] key takes.
const NUMBER: &str = "a whole number, 0 or more";

/// How the value of a mapped key reaches the settings. The [`EnvConfig`] is the environment's
/// switches: a key whose setting one of them sets gives way to it.
#[derive(Clone, Copy)]
pub enum Mapping {
    /// A whole number, 0 or more.
    Number(fn(&mut Settings, &EnvConfig, u64)),
    /// `true` or `false`.
    Switch(fn(&mut Settings, &EnvConfig, bool)),
    /// A string; `Err` says what the setting takes when it takes no such value.
    Text(fn(&mut Settings, &str) -> std::result::Result<(), &'static str>),
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mapping::Number(_) => "Number",
            Mapping::Switch(_) => "Switch",
            Mapping::Text(_) => "Text",
        })
    }
}

/// The keys of cuFile's configuration file that land on [`Settings`], by their dotted path.
/// Applied in this order, so where two keys set one setting the later one wins
/// (`properties.max_batch_io_size` over `properties.io_batchsize` over `profile.io_batchsize`,
/// `properties.allow_compat_mode` over its older name `properties.use_compat_mode`).
pub const MAPPED_KEYS: &[(&str, Mapping)] = &[
    (
        "properties.max_direct_io_size_kb",
        Mapping::Number(|s, _, v| s.max_direct_io_size_kb = v),
    ),
    (
        "properties.max_device_cache_size_kb",
        Mapping::Number(|s, _, v| s.max_device_cache_size_kb = v),
    ),
    // cuFile's bound is on pinned GPU memory (its shipped file says 32 GiB); it bounds the pinned
    // host memory the engine stages through, which cannot exceed the machine's memory.
    (
        "properties.max_device_pinned_mem_size_kb",
        Mapping::Number(|s, _, v| s.max_pinned_mem_size_kb = v.min(limits::physical_memory_kb())),
    ),
    (
        "properties.use_poll_mode",
        Mapping::Switch(|s, _, v| s.poll_mode = v),
    ),
    (
        "properties.poll_mode_max_size_kb",
        Mapping::Number(|s, _, v| s.poll_thresh_size_kb = v),
    ),
    (
        "properties.use_compat_mode",
        Mapping::Switch(allow_compat_mode),
    ),
    (
        "properties.allow_compat_mode",
        Mapping::Switch(allow_compat_mode),
    ),
    (
        "properties.force_compat_mode",
        Mapping::Switch(|s, env, v| {
            if env.force_compat_mode.is_none() {
                s.force_compat_mode = Some(v);
            }
        }),
    ),
    (
        "profile.io_batchsize",
        Mapping::Number(|s, _, v| s.max_batch_io_size = v),
    ),
    (
        "properties.io_batchsize",
        Mapping::Number(|s, _, v| s.max_batch_io_size = v),
    ),
    (
        "properties.max_batch_io_size",
        Mapping::Number(|s, _, v| s.max_batch_io_size = v),
    ),
    (
        "properties.max_batch_io_timeout_msecs",
        Mapping::Number(|s, _, v| s.batch_io_timeout_ms = v),
    ),
    (
        "properties.allow_system_memory",
        Mapping::Switch(|s, _, v| s.allow_system_memory = v),
    ),
    (
        "properties.use_pci_p2pdma",
        Mapping::Switch(|s, _, v| s.use_pci_p2pdma = v),
    ),
    (
        "properties.force_odirect_mode",
        Mapping::Switch(|s, _, v| {
            s.direct_io = if v {
                DirectIoPolicy::Always
            } else {
                DirectIoPolicy::Auto
            }
        }),
    ),
    (
        "properties.prefer_iouring",
        Mapping::Switch(|s, _, v| s.prefer_io_uring = v),
    ),
    (
        "execution.max_io_queue_depth",
        Mapping::Number(|s, _, v| s.io_queue_depth = v),
    ),
    (
        "logging.dir",
        Mapping::Text(|s, dir| {
            s.log_dir = dir.to_string();
            Ok(())
        }),
    ),
    (
        "logging.level",
        Mapping::Text(|s, name| {
            s.logging_level = LogLevel::parse(name)
                .ok_or("a level cuFile names (NOTICE, ERROR, WARN, INFO, DEBUG, TRACE)")?;
            Ok(())
        }),
    ),
    (
        "profile.cufile_stats",
        Mapping::Number(|s, env, v| {
            if env.stats_level.is_none() {
                s.stats_level = v;
            }
        }),
    ),
    ("profile.nvtx", Mapping::Switch(|s, _, v| s.nvtx = v)),
    (
        "miscellaneous.api_check_aggressive",
        Mapping::Switch(|s, _, v| s.api_check_aggressive = v),
    ),
    (
        "miscellaneous.skip_topology_detection",
        Mapping::Switch(|s, _, v| s.skip_topology_detection = v),
    ),
    (
        "miscellaneous.stream_memops_bypass",
        Mapping::Switch(|s, _, v| s.stream_memops_bypass = v),
    ),
];

/// Keys that tune cuFile's own engine (its POSIX thread pool and its per-buffer GPU bounce
/// buffers), which ours does not share: accepted and not applied, each with what sets our
/// equivalent. The file on a CUDA machine is mostly NVIDIA's shipped defaults (4 threads, 1 MiB
/// buffers, requests up to 8 MiB on one thread); applied, they would tune down the engine of every
/// application that never asked (on the H200: 1 MiB chunks read hot at 42 GB/s against 50 with
/// 4 MiB; 4 workers about a third of the hot throughput). The parameter API keeps setting them: a
/// call is the application's own choice.
pub const ENGINE_TUNING_KEYS: &[(&str, &str)] = &[
    (
        "execution.max_io_threads",
        "HIPFILE_IO_THREADS or CUFILE_PARAM_EXECUTION_MAX_IO_THREADS sets our IO workers",
    ),
    (
        "execution.max_request_parallelism",
        "CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM sets the most threads on one request",
    ),
    (
        "execution.min_io_threshold_size_kb",
        "HIPFILE_INLINE_KB or CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB sets the largest \
         request kept on the caller's thread",
    ),
    (
        "execution.parallel_io",
        "our engine always spreads large requests; CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM \
         = 1 stops it",
    ),
    (
        "properties.per_buffer_cache_size_kb",
        "HIPFILE_CHUNK_KB or CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB sets our staging \
         chunk",
    ),
];

/// `HIPFILE_ALLOW_COMPAT_MODE` set in the environment wins over the file.
fn allow_compat_mode(s: &mut Settings, env: &EnvConfig, allowed: bool) {
    if env.allow_compat_mode.is_none() {
        s.allow_compat_mode = Some(allowed);
    }
}

/// A cuFile configuration file, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct CufileJson {
    path: PathBuf,
    root: Map<String, Value>,
}

impl CufileJson {
    /// Read and parse the file at `path`; `Ok(None)` when there is no such file.
    pub fn read(path: &Path) -> Result<Option<CufileJson>> {
        match std::fs::read(path) {
            Ok(text) => CufileJson::parse(path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(invalid(path, format!(" cannot be read: {e}"))),
        }
    }

    /// Parse `text`, the contents of the file at `path` (named in errors): JSON with `//` and
    /// `/* */` comments, holding one object.
    pub fn parse(path: &Path, text: &[u8]) -> Result<CufileJson> {
        let json = strip_comments(text).map_err(|offset| {
            let (line, column) = line_and_column(text, offset);
            invalid(
                path,
                format!(
                    ": line {line}, column {column}: a '/' that starts no comment, \
                     or a comment or string that does not end"
                ),
            )
        })?;
        match serde_json::from_slice::<Value>(&json) {
            Ok(Value::Object(root)) => Ok(CufileJson {
                path: path.to_path_buf(),
                root,
            }),
            Ok(other) => Err(invalid(
                path,
                format!(" must hold one JSON object, not {}", kind_of(&other)),
            )),
            Err(e) => Err(invalid(path, format!(" is not valid JSON: {e}"))),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Apply the file's [`MAPPED_KEYS`] onto `settings`, each checked as the parameter API
    /// checks a value ([`Settings::check`]); a key whose setting `env` sets is left to the
    /// environment. On an error `settings` is left as it was.
    pub fn apply(&self, settings: &mut Settings, env: &EnvConfig) -> Result<()> {
        let mut next = settings.clone();
        for (key, mapping) in MAPPED_KEYS {
            let Some(value) = self.lookup(key)? else {
                continue;
            };
            let mut with_key = next.clone();
            let taken = match (mapping, value) {
                (Mapping::Number(apply), Value::Number(n)) => n
                    .as_u64()
                    .map(|v| apply(&mut with_key, env, v))
                    .ok_or(NUMBER),
                (Mapping::Number(_), _) => Err(NUMBER),
                (Mapping::Switch(apply), Value::Bool(b)) => {
                    apply(&mut with_key, env, *b);
                    Ok(())
                }
                (Mapping::Switch(_), _) => Err("true or false"),
                (Mapping::Text(apply), Value::String(text)) => apply(&mut with_key, text),
                (Mapping::Text(_), _) => Err("a string"),
            };
            if let Err(expected) = taken {
                return Err(self.invalid(format!(": {key} must be {expected}, not {value}")));
            }
            with_key.check().map_err(|e| {
                Error::new(
                    e.kind(),
                    format!(
                        "cuFile configuration file {}: {key} = {value}: {}",
                        self.path.display(),
                        e.context()
                    ),
                )
            })?;
            next = with_key;
        }
        *settings = next;
        Ok(())
    }

    /// The keys of the file no setting of hipfile-rs takes, by dotted path (objects are walked
    /// down to their members; arrays and empty objects are one key).
    pub fn unmapped_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        unmapped(&self.root, "", &mut keys);
        keys
    }

    /// The value at a dotted `key`; an error when a section on the way is not an object.
    fn lookup(&self, key: &str) -> Result<Option<&Value>> {
        let mut sections = key.split('.');
        let mut object = &self.root;
        let mut walked = String::new();
        let last = sections.next_back().unwrap_or(key);
        for section in sections {
            walked = if walked.is_empty() {
                section.to_string()
            } else {
                format!("{walked}.{section}")
            };
            match object.get(section) {
                None => return Ok(None),
                Some(Value::Object(inner)) => object = inner,
                Some(other) => {
                    return Err(self.invalid(format!(": {walked} must be an object, not {other}")))
                }
            }
        }
        Ok(object.get(last))
    }

    fn invalid(&self, what: String) -> Error {
        invalid(&self.path, what)
    }
}

/// An error naming the file at `path`: `what` follows its name (starting with ": " or a word).
fn invalid(path: &Path, what: String) -> Error {
    Error::new(
        ErrorKind::DriverInvalidProps,
        format!("cuFile configuration file {}{what}", path.display()),
    )
}

fn unmapped(object: &Map<String, Value>, prefix: &str, keys: &mut Vec<String>) {
    for (name, value) in object {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match value {
            Value::Object(inner) if !inner.is_empty() => unmapped(inner, &key, keys),
            _ if MAPPED_KEYS.iter().any(|(k, _)| *k == key) => {}
            _ => keys.push(key),
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `text` with its comments turned into spaces, byte for byte, newlines kept; `Err(offset)` of
/// the byte where a '/' starts no comment or where an unfinished comment or string stops.
fn strip_comments(text: &[u8]) -> std::result::Result<Vec<u8>, usize> {
    // One byte per read, so that a failure is at a known offset.
    struct ByteAtATime<'a>(&'a [u8]);
    impl Read for ByteAtATime<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((&b, rest)), Some(slot)) => {
                    *slot = b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }
    let mut stripped = Vec::with_capacity(text.len());
    let mut reader = CommentSettings::c_style().strip_comments(ByteAtATime(text));
    let mut byte = [0u8; 1];
    loop {
        match reader.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => stripped.push(byte[0]),
            Err(_) => return Err(stripped.len().saturating_sub(1)),
        }
    }
    // Block comments become spaces newlines and all: put the newlines back so that line
    // numbers stay those of the file.
    for (out, &original) in stripped.iter_mut().zip(text) {
        if original == b'\n' {
            *out = b'\n';
        }
    }
    Ok(stripped)
}

/// The 1-based line and column of byte `offset` of `text`.
fn line_and_column(text: &[u8], offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.len()
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1)
        + 1;
    (line, column)
}

/// Where a driver reads cuFile's configuration file, and the environment that wins over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CufileJsonSource {
    path: PathBuf,
    named_by_environment: bool,
    environment: Environment,
}

impl CufileJsonSource {
    /// The file cuFile reads under `environment`: `CUFILE_ENV_PATH_JSON` if set (and not
    /// empty), else `/etc/cufile.json`.
    pub fn from_environment(environment: &Environment) -> Self {
        let named = environment
            .cufile_json_path
            .as_deref()
            .filter(|p| !p.is_empty());
        CufileJsonSource {
            path: PathBuf::from(named.unwrap_or(DEFAULT_CUFILE_JSON)),
            named_by_environment: named.is_some(),
            environment: environment.clone(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the file and return the settings a driver starts from when it would have started
    /// from `base`: `base` with the file's keys applied, then the environment's variables that
    /// set the same things applied again, so that they win. Also returns the keys the file has
    /// that no setting takes. No file: `base` as it is.
    pub fn settings_over(&self, base: &Settings) -> Result<(Settings, Vec<String>)> {
        let Some(file) = CufileJson::read(&self.path)? else {
            if self.named_by_environment {
                log::warn!(
                    "{CUFILE_JSON_PATH_ENV} names {}, which does not exist: cuFile's defaults \
                     apply",
                    self.path.display()
                );
            }
            return Ok((base.clone(), Vec::new()));
        };
        let mut settings = base.clone();
        file.apply(&mut settings, &self.environment.switches)?;
        Ok((
            self.environment.settings_over(settings),
            file.unmapped_keys(),
        ))
    }
}

/// The settings a driver made with `source` starts from over `base`, and why it must refuse to
/// open if the file cannot be used (then `base` unchanged). Configures the log with the
/// resulting level and names each key of the file no setting takes, once, at DEBUG.
pub(crate) fn starting_settings(
    source: &CufileJsonSource,
    base: &Settings,
) -> (Settings, Option<Error>) {
    match source.settings_over(base) {
        Ok((settings, unmapped)) => {
            crate::logging::configure(settings.logging_level, &settings.log_file_path);
            log::debug!("cuFile configuration file {} read", source.path.display());
            for key in unmapped {
                match ENGINE_TUNING_KEYS.iter().find(|(tuning, _)| *tuning == key) {
                    Some((_, ours)) => log::debug!(
                        "cuFile configuration file {}: {key} is accepted and not applied: it \
                         tunes cuFile's own engine; {ours}",
                        source.path.display()
                    ),
                    None => log::debug!(
                        "cuFile configuration file {}: {key} is accepted; no setting of \
                         hipfile-rs takes it",
                        source.path.display()
                    ),
                }
            }
            (settings, None)
        }
        Err(e) => (base.clone(), Some(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIKE_NVIDIA: &[u8] = include_bytes!("../tests/data/cufile-like.json");

    fn parse(text: &str) -> Result<CufileJson> {
        CufileJson::parse(Path::new("/etc/test/cufile.json"), text.as_bytes())
    }

    /// The defaults with `{"section": {"name": value}}` applied, for `key` = `section.name`.
    fn with_key(key: &str, value: &str) -> Result<Settings> {
        let (section, name) = key.split_once('.').unwrap();
        let file = parse(&format!(r#"{{ "{section}": {{ "{name}": {value} }} }}"#))?;
        let mut s = Settings::default();
        file.apply(&mut s, &EnvConfig::default())?;
        Ok(s)
    }

    #[test]
    fn a_file_shaped_like_nvidias_with_comments_parses_and_lands_on_the_settings() {
        let file = CufileJson::parse(Path::new("cufile-like.json"), LIKE_NVIDIA).unwrap();
        let mut s = Settings::default();
        file.apply(&mut s, &EnvConfig::default()).unwrap();
        let expected = Settings {
            logging_level: LogLevel::Warn,
            nvtx: true,
            stats_level: 2,
            io_queue_depth: 64,
            max_direct_io_size_kb: 8192,
            max_device_cache_size_kb: 65536,
            max_pinned_mem_size_kb: 131072,
            poll_mode: true,
            poll_thresh_size_kb: 8,
            use_pci_p2pdma: true,
            allow_compat_mode: Some(false),
            max_batch_io_size: 32,
            api_check_aggressive: true,
            ..Settings::default()
        };
        assert_eq!(s, expected);
        assert_eq!(
            file.unmapped_keys(),
            [
                "denylist.devices",
                "denylist.drivers",
                "denylist.filesystems",
                "denylist.mounts",
                "execution.max_io_threads",
                "execution.max_request_parallelism",
                "execution.min_io_threshold_size_kb",
                "execution.parallel_io",
                "fs.generic.posix_unaligned_writes",
                "fs.gpfs.gds_async_support",
                "fs.gpfs.gds_write_support",
                "fs.lustre.posix_gds_min_kb",
                "properties.gds_rdma_write_support",
                "properties.io_priority",
                "properties.per_buffer_cache_size_kb",
                "properties.posix_pool_slab_count",
                "properties.posix_pool_slab_size_kb",
                "properties.rdma_dev_addr_list",
                "properties.rdma_dynamic_routing",
                "properties.rdma_dynamic_routing_order",
                "properties.rdma_load_balancing_policy",
            ]
        );
    }

    #[test]
    fn each_mapped_key_lands_on_its_setting() {
        let d = Settings::default();
        type Check = fn(&Settings) -> bool;
        let cases: &[(&str, &str, Check)] = &[
            ("properties.max_direct_io_size_kb", "4096", |s| {
                s.max_direct_io_size_kb == 4096
            }),
            ("properties.max_device_cache_size_kb", "1024", |s| {
                s.max_device_cache_size_kb == 1024
            }),
            ("properties.max_device_pinned_mem_size_kb", "4096", |s| {
                s.max_pinned_mem_size_kb == 4096
            }),
            ("properties.use_poll_mode", "true", |s| s.poll_mode),
            ("properties.poll_mode_max_size_kb", "16", |s| {
                s.poll_thresh_size_kb == 16
            }),
            ("properties.use_compat_mode", "false", |s| {
                s.allow_compat_mode == Some(false)
            }),
            ("properties.allow_compat_mode", "false", |s| {
                s.allow_compat_mode == Some(false)
            }),
            ("properties.force_compat_mode", "true", |s| {
                s.force_compat_mode == Some(true)
            }),
            ("profile.io_batchsize", "16", |s| s.max_batch_io_size == 16),
            ("properties.io_batchsize", "17", |s| {
                s.max_batch_io_size == 17
            }),
            ("properties.max_batch_io_size", "18", |s| {
                s.max_batch_io_size == 18
            }),
            ("properties.max_batch_io_timeout_msecs", "5", |s| {
                s.batch_io_timeout_ms == 5
            }),
            ("properties.allow_system_memory", "true", |s| {
                s.allow_system_memory
            }),
            ("properties.use_pci_p2pdma", "true", |s| s.use_pci_p2pdma),
            ("properties.force_odirect_mode", "true", |s| {
                s.direct_io == DirectIoPolicy::Always
            }),
            ("properties.prefer_iouring", "true", |s| s.prefer_io_uring),
            ("execution.max_io_queue_depth", "9", |s| {
                s.io_queue_depth == 9
            }),
            ("logging.dir", r#""/var/log/gds""#, |s| {
                s.log_dir == "/var/log/gds"
            }),
            ("logging.level", r#""NOTICE""#, |s| {
                s.logging_level == LogLevel::Info
            }),
            ("profile.cufile_stats", "3", |s| s.stats_level == 3),
            ("profile.nvtx", "true", |s| s.nvtx),
            ("miscellaneous.api_check_aggressive", "true", |s| {
                s.api_check_aggressive
            }),
            ("miscellaneous.skip_topology_detection", "true", |s| {
                s.skip_topology_detection
            }),
            ("miscellaneous.stream_memops_bypass", "true", |s| {
                s.stream_memops_bypass
            }),
        ];
        assert_eq!(
            cases.len(),
            MAPPED_KEYS.len(),
            "a case for every mapped key"
        );
        for (key, value, landed) in cases {
            assert!(MAPPED_KEYS.iter().any(|(k, _)| k == key), "{key} is mapped");
            assert!(
                !landed(&d),
                "{key}: the default already holds the test value"
            );
            let s = with_key(key, value).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(landed(&s), "{key} = {value} did not land: {s:?}");
            assert!(with_key(key, value).unwrap() != d);
        }
        // cuFile's level names reach the log levels.
        for (name, level) in [
            ("ERROR", LogLevel::Error),
            ("WARN", LogLevel::Warn),
            ("INFO", LogLevel::Info),
            ("DEBUG", LogLevel::Debug),
            ("TRACE", LogLevel::Trace),
        ] {
            let s = with_key("logging.level", &format!("{name:?}")).unwrap();
            assert_eq!(s.logging_level, level, "{name}");
        }
        assert_eq!(
            with_key("properties.force_odirect_mode", "false")
                .unwrap()
                .direct_io,
            DirectIoPolicy::Auto
        );
    }

    #[test]
    fn the_later_of_two_keys_for_one_setting_wins_whatever_their_order_in_the_file() {
        let file = parse(
            r#"{ "properties": { "max_batch_io_size": 20, "io_batchsize": 10,
                                  "allow_compat_mode": true, "use_compat_mode": false },
                 "profile": { "io_batchsize": 5 } }"#,
        )
        .unwrap();
        let mut s = Settings::default();
        file.apply(&mut s, &EnvConfig::default()).unwrap();
        assert_eq!(s.max_batch_io_size, 20);
        assert_eq!(s.allow_compat_mode, Some(true));
    }

    #[test]
    fn the_pinned_bound_is_at_most_the_machines_memory() {
        let s = with_key(
            "properties.max_device_pinned_mem_size_kb",
            "18014398509481980",
        )
        .unwrap();
        assert_eq!(s.max_pinned_mem_size_kb, limits::physical_memory_kb());
    }

    fn error_of(text: &str) -> Error {
        match parse(text).and_then(|f| f.apply(&mut Settings::default(), &EnvConfig::default())) {
            Ok(()) => panic!("{text} was taken"),
            Err(e) => e,
        }
    }

    #[test]
    fn text_that_is_not_json_is_an_error_naming_the_file_line_and_column() {
        let e = error_of("{\n  \"properties\": {\n    \"use_poll_mode\" true\n  }\n}");
        assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
        let text = e.context();
        assert!(text.contains("/etc/test/cufile.json"), "{text}");
        assert!(text.contains("line 3 column 21"), "{text}");

        // A block comment over several lines keeps the lines after it where they are.
        let e = error_of("{ /* one\n two\n three */\n \"a\": 1,\n}");
        assert!(e.context().contains("line 5 column 1"), "{}", e.context());

        // A '/' that starts no comment.
        let e = error_of("{\n  \"a\": 1 / 2\n}");
        assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
        assert!(
            e.context().contains(": line 2, column 10:"),
            "{}",
            e.context()
        );
        // A comment that never ends.
        let e = error_of("{ \"a\": 1 }\n/* open");
        assert!(
            e.context().contains(": line 2, column 7:"),
            "{}",
            e.context()
        );

        let e = error_of("[1, 2]");
        assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
        assert!(e
            .context()
            .contains("must hold one JSON object, not an array"));
        assert!(error_of("").context().contains("is not valid JSON"));
    }

    #[test]
    fn a_mapped_key_with_a_value_of_the_wrong_type_is_an_error_naming_the_key() {
        for (key, value, expected) in [
            (
                "execution.max_io_queue_depth",
                r#""4""#,
                "a whole number, 0 or more",
            ),
            (
                "execution.max_io_queue_depth",
                "-1",
                "a whole number, 0 or more",
            ),
            (
                "properties.max_direct_io_size_kb",
                "1024.5",
                "a whole number, 0 or more",
            ),
            ("properties.use_poll_mode", "1", "true or false"),
            ("properties.allow_compat_mode", r#""true""#, "true or false"),
            ("logging.dir", "false", "a string"),
            ("logging.level", r#""LOUD""#, "a level cuFile names"),
            ("profile.nvtx", "null", "true or false"),
        ] {
            let e = with_key(key, value).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::DriverInvalidProps, "{key}");
            let text = e.context();
            assert!(text.contains("/etc/test/cufile.json"), "{text}");
            assert!(
                text.contains(&format!(": {key} must be {expected}")),
                "{text}"
            );
        }
        let e = error_of(r#"{ "properties": 5 }"#);
        assert!(
            e.context()
                .contains(": properties must be an object, not 5"),
            "{}",
            e.context()
        );
        // A key no setting takes may hold anything.
        assert!(with_key("fs.anything", r#"{"x": [1, "y", null]}"#).is_ok());
    }

    #[test]
    fn a_value_the_setting_cannot_hold_is_refused_as_the_parameter_api_refuses_it() {
        let e = with_key("execution.max_io_queue_depth", "5000000000").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DriverUnsupportedLimit);
        assert!(
            e.context()
                .contains("execution.max_io_queue_depth = 5000000000"),
            "{}",
            e.context()
        );
        let e = with_key("properties.max_direct_io_size_kb", "1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(
            e.context().contains("max_direct_io_size_kb = 1"),
            "{}",
            e.context()
        );
        let e = with_key("profile.cufile_stats", "4").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DriverUnsupportedLimit);
        // Nothing of a refused file is applied.
        let file = parse(
            r#"{ "properties": { "max_direct_io_size_kb": 2048 },
                 "execution": { "max_io_queue_depth": 1e3 } }"#,
        )
        .unwrap();
        let mut s = Settings::default();
        assert!(file.apply(&mut s, &EnvConfig::default()).is_err());
        assert_eq!(s, Settings::default());
    }

    fn environment(pairs: &[(&str, &str)]) -> Environment {
        Environment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn the_file_is_the_one_the_environment_names_else_etc_cufile_json() {
        let named = environment(&[("CUFILE_ENV_PATH_JSON", "/tmp/mine.json")]);
        assert_eq!(
            CufileJsonSource::from_environment(&named).path(),
            Path::new("/tmp/mine.json")
        );
        for unset in [
            environment(&[]),
            environment(&[("CUFILE_ENV_PATH_JSON", "")]),
        ] {
            assert_eq!(
                CufileJsonSource::from_environment(&unset).path(),
                Path::new(DEFAULT_CUFILE_JSON)
            );
        }
    }

    #[test]
    fn a_missing_file_leaves_the_settings_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json");
        assert_eq!(CufileJson::read(&missing).unwrap(), None);
        let env = environment(&[("CUFILE_ENV_PATH_JSON", missing.to_str().unwrap())]);
        let base = Settings {
            max_io_threads: 2,
            ..Settings::default()
        };
        let (s, unmapped) = CufileJsonSource::from_environment(&env)
            .settings_over(&base)
            .unwrap();
        assert_eq!(s, base);
        assert!(unmapped.is_empty());
        // A path that is there but cannot be read as a file is an error.
        let e = CufileJson::read(dir.path()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DriverInvalidProps);
        assert!(e.context().contains("cannot be read"), "{}", e.context());
    }

    #[test]
    fn the_environment_wins_over_the_file_and_the_file_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cufile.json");
        std::fs::write(
            &path,
            r#"{
                // each of these is set by the environment too, but for max_io_queue_depth
                "execution": { "max_io_queue_depth": 32 },
                "properties": { "max_direct_io_size_kb": 8192,
                                "max_device_pinned_mem_size_kb": 131072,
                                "allow_compat_mode": false, "force_compat_mode": true },
                "profile": { "cufile_stats": 2 },
                "logging": { "level": "ERROR" }
            }"#,
        )
        .unwrap();
        let env = environment(&[
            ("CUFILE_ENV_PATH_JSON", path.to_str().unwrap()),
            ("HIPFILE_MAX_DIRECT_IO_KB", "4096"),
            ("HIPFILE_PINNED_KB", "not a number"),
            ("HIPFILE_ALLOW_COMPAT_MODE", "true"),
            ("HIPFILE_FORCE_COMPAT_MODE", "false"),
            ("HIPFILE_STATS_LEVEL", "1"),
            ("HIPFILE_LOG_LEVEL", "debug"),
        ]);
        let (s, _) = CufileJsonSource::from_environment(&env)
            .settings_over(&env.settings)
            .unwrap();
        assert_eq!(s.io_queue_depth, 32, "the file over the default");
        assert_eq!(
            s.max_direct_io_size_kb, 4096,
            "the environment over the file"
        );
        assert_eq!(
            s.max_pinned_mem_size_kb, 131072,
            "an environment value that does not parse sets nothing"
        );
        assert_eq!(s.logging_level, LogLevel::Debug);
        assert_eq!(s.max_batch_io_size, Settings::default().max_batch_io_size);
        let compat = s.compat_mode(&env.switches);
        assert!(compat.allowed, "HIPFILE_ALLOW_COMPAT_MODE over the file");
        assert!(!compat.forced, "HIPFILE_FORCE_COMPAT_MODE over the file");
        assert_eq!(s.effective_stats_level(&env.switches), 1);
        // Without the environment's switches the file decides.
        let plain = environment(&[("CUFILE_ENV_PATH_JSON", path.to_str().unwrap())]);
        let (s, _) = CufileJsonSource::from_environment(&plain)
            .settings_over(&plain.settings)
            .unwrap();
        assert_eq!(s.allow_compat_mode, Some(false));
        assert_eq!(s.force_compat_mode, Some(true));
        assert_eq!(s.effective_stats_level(&plain.switches), 2);
        assert_eq!(s.max_direct_io_size_kb, 8192);
    }

    #[test]
    fn nvidias_tuning_of_cufiles_own_engine_leaves_the_settings_at_their_defaults() {
        // The values NVIDIA ships for cuFile's thread pool and bounce buffers.
        let file = parse(
            r#"{
                "execution": { "max_io_queue_depth": 128, "max_io_threads": 4,
                               "parallel_io": true, "min_io_threshold_size_kb": 8192,
                               "max_request_parallelism": 4 },
                "properties": { "per_buffer_cache_size_kb": 1024 }
            }"#,
        )
        .unwrap();
        let mut s = Settings::default();
        file.apply(&mut s, &EnvConfig::default()).unwrap();
        assert_eq!(s, Settings::default());
        let mut tuning: Vec<_> = ENGINE_TUNING_KEYS.iter().map(|(k, _)| *k).collect();
        tuning.sort_unstable();
        assert_eq!(file.unmapped_keys(), tuning);
        for (key, ours) in ENGINE_TUNING_KEYS {
            assert!(
                !MAPPED_KEYS.iter().any(|(k, _)| k == key),
                "{key} is both mapped and not applied"
            );
            assert!(ours.contains("CUFILE_PARAM_"), "{key}: {ours}");
            // Not applied, so not checked: any value is accepted.
            assert_eq!(with_key(key, r#""four""#).unwrap(), Settings::default());
        }
        // The same values through the environment still land: that is a choice of the user's.
        let env = environment(&[
            ("HIPFILE_IO_THREADS", "4"),
            ("HIPFILE_CHUNK_KB", "1024"),
            ("HIPFILE_INLINE_KB", "8192"),
        ]);
        assert_eq!(env.settings.max_io_threads, 4);
        assert_eq!(env.settings.per_buffer_cache_size_kb, 1024);
        assert_eq!(env.settings.min_io_threshold_kb, 8192);
    }
}
