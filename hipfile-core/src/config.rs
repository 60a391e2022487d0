//! Configuration: environment switches and the driver settings of the parameter API.
//!
//! Environment switches follow upstream hipFile exactly: a value counts only when it is `true` or
//! `false` (any case); anything else leaves the switch unset. The process environment is read in
//! one place, [`Environment::process`]: once, at first use, every `HIPFILE_*` variable hipfile-rs
//! knows, cached for the life of the process. Settings ([`Settings`]) are what the cuFile-style
//! parameter API stages while the driver is closed and what the open driver runs with.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

pub use hipfile_hip::EventWait;
use hipfile_hip::PlatformOptions;

use crate::logging::{LogLevel, LOG_FILE_ENV, LOG_LEVEL_ENV};
use crate::policy::{IoPolicy, P2pMechanisms};

/// The environment variable that selects and orders the backends (comma separated names).
pub const BACKENDS_ENV: &str = "HIPFILE_BACKENDS";

/// The environment variable that names cuFile's configuration file (else `/etc/cufile.json`),
/// read only by a driver told to ([`crate::cufile_config`]).
pub const CUFILE_JSON_PATH_ENV: &str = "CUFILE_ENV_PATH_JSON";

/// Everything hipfile-rs takes from the environment, as plain data read through one lookup: the
/// switches upstream hipFile reads ([`EnvConfig`]), the backend selection (`HIPFILE_BACKENDS`),
/// the staged engine's knobs (applied to the default [`Settings`]) and the options that pick and
/// configure the GPU platform ([`PlatformOptions`]: `HIPFILE_PLATFORM`, the runtime libraries,
/// the simulated GPU).
///
/// [`Environment::process`] is the only place that reads the process environment; the driver's
/// defaults ([`crate::DriverOptions::default`]), the facade and the tools take what they need
/// from it, and tests build one from a lookup closure instead of changing the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    /// The switches upstream hipFile reads.
    pub switches: EnvConfig,
    /// `HIPFILE_BACKENDS`, as given (see [`crate::RegistryBuilder::build`]).
    pub backends: Option<String>,
    /// The default settings with the staged engine's knobs applied ([`Settings::from_lookup`]).
    pub settings: Settings,
    /// Which GPU platform to open and how ([`PlatformOptions::from_lookup`]).
    pub platform: PlatformOptions,
    /// `CUFILE_ENV_PATH_JSON`: the cuFile configuration file to read in place of
    /// `/etc/cufile.json`, for a driver told to read one ([`crate::cufile_config`]).
    pub cufile_json_path: Option<String>,
    /// The variables [`Settings::from_lookup`] found set, as (name, value), in the order it read
    /// them: replayed over cuFile's configuration file so that they win over it
    /// ([`Settings::with_lookup`]).
    pub settings_variables: Vec<(String, String)>,
}

impl Environment {
    /// Read every part through `lookup` (a variable's name to its value, `None` when unset).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let found = RefCell::new(Vec::new());
        let settings = Settings::from_lookup(|name| {
            let value = lookup(name);
            if let Some(v) = &value {
                found.borrow_mut().push((name.to_string(), v.clone()));
            }
            value
        });
        Environment {
            switches: EnvConfig::from_lookup(&lookup),
            backends: lookup(BACKENDS_ENV),
            settings,
            platform: PlatformOptions::from_lookup(&lookup),
            cufile_json_path: lookup(CUFILE_JSON_PATH_ENV),
            settings_variables: found.into_inner(),
        }
    }

    /// `settings` with the variables of this environment that set them applied over them, as
    /// [`Settings::from_lookup`] applies them over the defaults.
    pub fn settings_over(&self, settings: Settings) -> Settings {
        settings.with_lookup(|name| {
            self.settings_variables
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        })
    }

    /// The process environment, read at the first call and cached for the life of the process
    /// (a value that is not UTF-8 is read lossily, and then parses as nothing it names).
    pub fn process() -> &'static Environment {
        static CACHE: OnceLock<Environment> = OnceLock::new();
        CACHE.get_or_init(|| {
            Environment::from_lookup(|name| {
                std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
            })
        })
    }
}

/// The environment switches upstream hipFile reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvConfig {
    /// `HIPFILE_ALLOW_COMPAT_MODE`.
    pub allow_compat_mode: Option<bool>,
    /// `HIPFILE_FORCE_COMPAT_MODE`.
    pub force_compat_mode: Option<bool>,
    /// `HIPFILE_UNSUPPORTED_FILE_SYSTEMS`.
    pub unsupported_file_systems: Option<bool>,
    /// `HIPFILE_STATS_LEVEL`: the statistics level, 0 (off) to 3 ([`parse_stats_level`]).
    pub stats_level: Option<u8>,
}

/// Parse `HIPFILE_STATS_LEVEL`: a level `0` to `3` as upstream's `profile.cufile_stats` (a
/// higher number is level 3, every counter), or the older switch form, `true` (level 1) and
/// `false` (0) in any case. Anything else is unset.
pub fn parse_stats_level(value: &str) -> Option<u8> {
    match parse_switch(value) {
        Some(on) => Some(u8::from(on)),
        None => value
            .trim()
            .parse::<u64>()
            .ok()
            .map(|n| n.min(limits::MAX_STATS_LEVEL) as u8),
    }
}

/// Parse a switch: `true`/`false` in any case; anything else is unset.
pub fn parse_switch(value: &str) -> Option<bool> {
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

impl EnvConfig {
    /// Read the switches through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let switch = |name: &str| lookup(name).as_deref().and_then(parse_switch);
        EnvConfig {
            allow_compat_mode: switch("HIPFILE_ALLOW_COMPAT_MODE"),
            force_compat_mode: switch("HIPFILE_FORCE_COMPAT_MODE"),
            unsupported_file_systems: switch("HIPFILE_UNSUPPORTED_FILE_SYSTEMS"),
            stats_level: lookup("HIPFILE_STATS_LEVEL")
                .as_deref()
                .and_then(parse_stats_level),
        }
    }

    /// The switches of the process environment ([`Environment::process`]).
    pub fn cached() -> EnvConfig {
        Environment::process().switches
    }
}

/// Whether requests may be staged through host memory when the direct path declines
/// (`ALLOW_COMPAT_MODE`) and whether they must be (`FORCE_COMPAT_MODE`).
///
/// Forcing compat mode keeps the fallback on even when compat mode is disallowed: a user who
/// forces the fallback wants IO to work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompatMode {
    /// The fallback may run requests.
    pub allowed: bool,
    /// Every request goes to the fallback.
    pub forced: bool,
}

/// How the staged engine uses a file's O_DIRECT descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectIoPolicy {
    /// Reads: a chunk that is in the page cache is read from it; an aligned chunk that is not
    /// is read with O_DIRECT (cold data skips the page cache copy). Writes go through the page
    /// cache (pwrite semantics).
    Auto,
    /// Never use O_DIRECT.
    Never,
    /// Aligned chunks always use O_DIRECT, reads and writes; unaligned heads and tails go through
    /// the buffered descriptor.
    Always,
}

impl DirectIoPolicy {
    /// Parse `auto`, `never` or `always` (any case).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(DirectIoPolicy::Auto),
            "never" => Some(DirectIoPolicy::Never),
            "always" => Some(DirectIoPolicy::Always),
            _ => None,
        }
    }
}

/// Everything an open driver runs with. Sizes in KiB follow cuFile's parameter units.
///
/// Each field says what it changes; the ones that change nothing say why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Largest single transfer a backend issues, in KiB: bounds the staging chunk of the fallback
    /// and the size of one direct IO. Default 16384 (16 MiB).
    pub max_direct_io_size_kb: u64,
    /// Bound on pinned host memory the staging pool may hold, in KiB. Default 262144 (256 MiB).
    pub max_pinned_mem_size_kb: u64,
    /// cuFile's GPU bounce-buffer budget, in KiB. Reported by the driver properties; hipfile-rs
    /// stages in pinned host memory, never in GPU bounce buffers, so it bounds nothing. Default 131072.
    pub max_device_cache_size_kb: u64,
    /// Size of one staging chunk of the staged engine, in KiB (cuFile's per-buffer cache size:
    /// the unit a request is cut into and staged through). Default 4096: measured on an H200
    /// host (PCIe Gen5), the host-to-device copies of 4 MiB pieces from ten threads' streams
    /// reach 53 GB/s, 0.96 of one large copy, where 512 KiB pieces stop at 43 and 8 MiB ones
    /// lose the overlap between threads (hot read: 30 / 42 / 48 / 50 / 41 GB/s for 0.5 / 1 / 2 /
    /// 4 / 8 MiB); cold, 4 MiB O_DIRECT reads keep the disk's queue full.
    pub per_buffer_cache_size_kb: u64,
    /// Poll mode (`hipFileDriverSetPollMode`). Reported by the driver properties. Every request
    /// completes synchronously on the calling thread or the IO workers, so there is no interrupt
    /// to replace with polling: accepted, changes no behaviour.
    pub poll_mode: bool,
    /// Poll threshold in KiB; reported, as `poll_mode`. Default 4.
    pub poll_thresh_size_kb: u64,
    /// IO worker threads of the staged engine (0: sized from the machine, see
    /// [`Settings::io_threads`]). Fixed when the driver opens.
    pub max_io_threads: u64,
    /// Compat mode as set through the parameter API (`None`: the environment decides).
    pub allow_compat_mode: Option<bool>,
    /// Forced compat mode as set through the parameter API (`None`: the environment decides).
    pub force_compat_mode: Option<bool>,
    /// The largest batch capacity `hipFileBatchIOSetUp` accepts (the driver properties'
    /// `max_batch_io_count`). Default 128.
    pub max_batch_io_size: u64,
    /// How long a batch entry may run before `hipFileBatchIOGetStatus` reports it as timed out,
    /// in ms (the driver properties' `max_batch_io_timeout_msecs`; 0: never). Default 0.
    pub batch_io_timeout_ms: u64,
    /// Statistics level (`hipFileParamProfileStats`): above 0 turns the counters on, as
    /// `HIPFILE_STATS_LEVEL=true` does.
    pub stats_level: u64,
    /// Most queued requests (batch entries) a backend works on at once: the IO workers it
    /// starts on demand for them (the staged engine also stops at the staging lanes its pinned
    /// bound holds and at the cores). Default 128.
    pub io_queue_depth: u64,
    /// Requests up to this size (KiB) run inline on the caller's thread, with no hand-off to the
    /// IO workers. Default 64.
    pub min_io_threshold_kb: u64,
    /// Most threads (workers plus the caller) that work on one request (0: all workers).
    pub max_request_parallelism: u64,
    /// Smallest piece (KiB) a request is cut into when it is spread over several threads: below
    /// it, waking another thread costs more than the bytes it would move. Default 256.
    pub min_piece_kb: u64,
    /// Most page-cache memory the staged engine keeps pinned, in KiB, so that reads of cached
    /// file ranges are copied to the device straight out of the page cache
    /// (`HIPFILE_PAGE_CACHE_PINS_KB`; 0 turns it off). `None`: an eighth of the memory the
    /// process may use, at most 16 GiB ([`Settings::page_cache_pin_bytes`]). Pinned page cache
    /// cannot be reclaimed until it is unpinned; each process keeps its own budget.
    pub page_cache_pins_kb: Option<u64>,
    /// How long a file must have stayed unchanged (its change time that far in the past) before
    /// its pages are pinned, in ms (`HIPFILE_PAGE_CACHE_PIN_SETTLE_MS`). A change within the
    /// same timestamp tick as the one before leaves the file's stamp as it was on kernels with
    /// coarse timestamps; once the last change lies a tick in the past, any later one shows.
    /// Default 1000.
    pub page_cache_pin_settle_ms: u64,
    /// Whether page cache is pinned in a GPU context of the library's own
    /// (`HIPFILE_PAGE_CACHE_PIN_CONTEXT`: `own`, the default, or `shared`). Pinning holds its
    /// context's lock for milliseconds: in a context of its own it runs beside reads and beside
    /// the application's GPU calls, at the price of that context's device memory (~0.5 GiB on the
    /// H200). Shared (and on runtimes without such contexts), windows are pinned in the device's
    /// primary context, only while the engine is idle.
    pub page_cache_pin_own_context: bool,
    /// Extra argument checks. Stored and reported: every argument is always checked.
    pub api_check_aggressive: bool,
    /// Parallel IO (cuFile's switch). Stored and reported: the staged engine always splits
    /// large requests across its workers; `max_request_parallelism` = 1 turns that off.
    pub parallel_io: bool,
    /// NVTX ranges. Stored and reported: hipfile-rs emits no profiler ranges.
    pub nvtx: bool,
    /// Host memory as IO buffers: pinned or registered host memory and ordinary pageable memory
    /// may be registered and used for IO (synchronous, batch and stream-ordered), served by the
    /// `host` backend with `pread`/`pwrite` straight between the file and that memory, no GPU
    /// copy. Off by default, as in upstream hipFile: host memory is then
    /// [`crate::ErrorKind::HipMemoryTypeInvalid`]. `HIPFILE_ALLOW_SYSTEM_MEMORY=true|false`, or
    /// the parameter `hipFileParamPropertiesAllowSystemMemory`.
    pub allow_system_memory: bool,
    /// PCI P2P DMA. Stored and reported: the direct path goes through the platform's P2P driver
    /// (KFD, nvidia-fs), never through PCI P2PDMA on its own.
    pub use_pci_p2pdma: bool,
    /// io_uring. Stored and reported: IO is `pread`/`pwrite`.
    pub prefer_io_uring: bool,
    /// How the staged engine uses the O_DIRECT descriptor (`hipFileParamForceOdirectMode`
    /// true selects [`DirectIoPolicy::Always`]).
    pub direct_io: DirectIoPolicy,
    /// How the staged engine waits for its copies (`HIPFILE_EVENT_WAIT`: `yield`, the default,
    /// polls and yields the core; `sync` uses the runtime's blocking wait).
    pub event_wait: EventWait,
    /// Skip topology detection. Stored and reported: hipfile-rs probes no topology.
    pub skip_topology_detection: bool,
    /// Stream memops bypass (`HIPFILE_STREAM_MEMOPS_BYPASS`, cuFile's
    /// `properties.stream_memops_bypass`): stream-ordered ops hold the application's stream with
    /// a host function that waits for the op's flag word instead of a stream memory operation
    /// (`hipStreamWaitValue32`), as on devices without stream memory operations.
    pub stream_memops_bypass: bool,
    /// How much the library logs (`HIPFILE_LOG_LEVEL`, `hipFileParamLoggingLevel`; default
    /// off). Applied when the driver opens ([`crate::logging::configure`]).
    pub logging_level: LogLevel,
    /// The file the log is appended to (`HIPFILE_LOG_FILE`, `hipFileParamEnvLogfilePath`;
    /// empty: stderr).
    pub log_file_path: String,
    /// cuFile's log directory. Stored and reported: the log goes to `log_file_path` or stderr.
    pub log_dir: String,
    /// The direct (P2P) mechanisms the driver may use (`HIPFILE_P2P_MECHANISMS`, a comma
    /// separated list of `amd_kfd`, `nvidia_fs`, `sim`, or `all`/`none`; cuFile's
    /// `cuFileDriverSetP2PFlags` through [`P2pMechanisms::from_cufile_flags`]). Default: all.
    /// The fastpath declines when the platform's mechanism is not in the set.
    pub p2p_mechanisms: P2pMechanisms,
    /// The policy a file handle is registered with unless its registration names one
    /// (`HIPFILE_IO_POLICY`: `fallback`, the default, or `direct_only`).
    pub default_io_policy: IoPolicy,
}

/// The most IO workers started by default. A worker copies page-cache data into staging memory
/// at about 6 GB/s; on the H200 host (PCIe Gen5 x16, 55 GB/s host-to-device) 9 workers and the
/// caller read hot files at the same rate as 15 (50.5 against 49.1 GB/s), with 9.7 cores busy
/// instead of 15.1: more threads only spend CPU.
pub const DEFAULT_MAX_IO_WORKERS: usize = 9;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_direct_io_size_kb: 16 * 1024,
            max_pinned_mem_size_kb: 256 * 1024,
            max_device_cache_size_kb: 128 * 1024,
            per_buffer_cache_size_kb: 4096,
            poll_mode: false,
            poll_thresh_size_kb: 4,
            max_io_threads: 0,
            allow_compat_mode: None,
            force_compat_mode: None,
            max_batch_io_size: 128,
            batch_io_timeout_ms: 0,
            stats_level: 0,
            io_queue_depth: 128,
            min_io_threshold_kb: 64,
            max_request_parallelism: 0,
            min_piece_kb: 256,
            page_cache_pins_kb: None,
            page_cache_pin_settle_ms: 1000,
            page_cache_pin_own_context: true,
            api_check_aggressive: false,
            parallel_io: false,
            nvtx: false,
            allow_system_memory: false,
            use_pci_p2pdma: false,
            prefer_io_uring: false,
            direct_io: DirectIoPolicy::Auto,
            event_wait: EventWait::Yield,
            skip_topology_detection: false,
            stream_memops_bypass: false,
            logging_level: LogLevel::Off,
            log_file_path: String::new(),
            log_dir: String::new(),
            p2p_mechanisms: P2pMechanisms::ALL,
            default_io_policy: IoPolicy::Fallback,
        }
    }
}

impl Settings {
    /// The statistics level a driver counts at: the higher of `HIPFILE_STATS_LEVEL` (`env`)
    /// and this `stats_level` setting, at most [`limits::MAX_STATS_LEVEL`].
    pub fn effective_stats_level(&self, env: &EnvConfig) -> u8 {
        u64::from(env.stats_level.unwrap_or(0))
            .max(self.stats_level)
            .min(limits::MAX_STATS_LEVEL) as u8
    }

    /// Refuse settings no engine can run with. Below the floor (a pinned bound below one lane of
    /// two 4 KiB halves, a transfer or chunk below one 4 KiB page) is `InvalidValue`; above a
    /// ceiling in [`limits`] is `DriverUnsupportedLimit`, cuFile's answer to a property value it
    /// cannot honour, so an impossible value fails where it is set instead of opening a driver
    /// whose staging memory cannot be allocated.
    pub fn check(&self) -> crate::Result<()> {
        let refuse = |what: &str| {
            Err(crate::Error::new(
                crate::ErrorKind::InvalidValue,
                what.to_string(),
            ))
        };
        if self.max_pinned_mem_size_kb < 8 {
            return refuse("the pinned memory bound must be at least 8 KiB (one staging lane)");
        }
        if self.max_direct_io_size_kb < 4 || self.per_buffer_cache_size_kb < 4 {
            return refuse("transfer and chunk sizes must be at least 4 KiB");
        }
        let ceilings = [
            (
                "max_direct_io_size_kb",
                self.max_direct_io_size_kb,
                limits::MAX_TRANSFER_KB,
            ),
            (
                "per_buffer_cache_size_kb",
                self.per_buffer_cache_size_kb,
                limits::MAX_CHUNK_KB,
            ),
            (
                "max_device_pinned_mem_size_kb",
                self.max_pinned_mem_size_kb,
                limits::physical_memory_kb(),
            ),
            (
                "max_device_cache_size_kb",
                self.max_device_cache_size_kb,
                limits::MAX_REPORTED_KB,
            ),
            (
                "poll_thresh_size_kb",
                self.poll_thresh_size_kb,
                limits::MAX_TRANSFER_KB,
            ),
            (
                "min_io_threshold_kb",
                self.min_io_threshold_kb,
                limits::MAX_TRANSFER_KB,
            ),
            ("min_piece_kb", self.min_piece_kb, limits::MAX_CHUNK_KB),
            (
                "max_io_threads",
                self.max_io_threads,
                limits::MAX_IO_THREADS,
            ),
            (
                "max_request_parallelism",
                self.max_request_parallelism,
                limits::MAX_IO_THREADS + 1,
            ),
            ("io_queue_depth", self.io_queue_depth, limits::MAX_COUNT),
            (
                "max_batch_io_size",
                self.max_batch_io_size,
                limits::MAX_COUNT,
            ),
            (
                "batch_io_timeout_ms",
                self.batch_io_timeout_ms,
                limits::MAX_COUNT,
            ),
            ("stats_level", self.stats_level, limits::MAX_STATS_LEVEL),
        ];
        for (name, value, ceiling) in ceilings {
            if value > ceiling {
                return Err(crate::Error::new(
                    crate::ErrorKind::DriverUnsupportedLimit,
                    format!("{name} = {value} is above the largest supported value, {ceiling}"),
                ));
            }
        }
        Ok(())
    }

    /// The defaults with the staged engine's environment overrides applied, read through
    /// `lookup`: `HIPFILE_IO_THREADS`, `HIPFILE_CHUNK_KB`, `HIPFILE_INLINE_KB`,
    /// `HIPFILE_MIN_PIECE_KB`, `HIPFILE_PINNED_KB`, `HIPFILE_MAX_DIRECT_IO_KB` (numbers),
    /// `HIPFILE_DIRECT_IO` (`auto`, `never`, `always`), `HIPFILE_EVENT_WAIT` (`yield`, `sync`),
    /// `HIPFILE_PAGE_CACHE_PIN_CONTEXT` (`own`, `shared`), `HIPFILE_STREAM_MEMOPS_BYPASS` and
    /// `HIPFILE_ALLOW_SYSTEM_MEMORY` (switches), `HIPFILE_P2P_MECHANISMS` and `HIPFILE_IO_POLICY`,
    /// and the log's `HIPFILE_LOG_LEVEL` (see
    /// [`LogLevel::parse`]) and `HIPFILE_LOG_FILE`. Values that do not parse are ignored. The
    /// parameter API changes these settings further before the driver opens.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        Settings::default().with_lookup(lookup)
    }

    /// These settings with the environment's overrides read through `lookup` applied over them,
    /// as [`Settings::from_lookup`] applies them over the defaults.
    pub fn with_lookup(self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut s = self;
        let number = |name: &str| lookup(name).and_then(|v| v.trim().parse::<u64>().ok());
        type Apply = fn(&mut Settings, u64);
        let knobs: [(&str, Apply); 6] = [
            ("HIPFILE_IO_THREADS", |s, v| s.max_io_threads = v),
            ("HIPFILE_CHUNK_KB", |s, v| s.per_buffer_cache_size_kb = v),
            ("HIPFILE_INLINE_KB", |s, v| s.min_io_threshold_kb = v),
            ("HIPFILE_MIN_PIECE_KB", |s, v| s.min_piece_kb = v),
            ("HIPFILE_PINNED_KB", |s, v| s.max_pinned_mem_size_kb = v),
            ("HIPFILE_MAX_DIRECT_IO_KB", |s, v| {
                s.max_direct_io_size_kb = v
            }),
        ];
        for (name, apply) in knobs {
            if let Some(v) = number(name) {
                // A value the settings cannot hold (below a floor, above a ceiling) is ignored
                // like one that does not parse: the environment never stops a driver opening.
                let mut next = s.clone();
                apply(&mut next, v);
                if next.check().is_ok() {
                    s = next;
                }
            }
        }
        if let Some(kb) = number("HIPFILE_PAGE_CACHE_PINS_KB") {
            s.page_cache_pins_kb = Some(kb);
        }
        if let Some(ms) = number("HIPFILE_PAGE_CACHE_PIN_SETTLE_MS") {
            s.page_cache_pin_settle_ms = ms;
        }
        match lookup("HIPFILE_PAGE_CACHE_PIN_CONTEXT")
            .as_deref()
            .map(str::trim)
        {
            Some("own") => s.page_cache_pin_own_context = true,
            Some("shared") => s.page_cache_pin_own_context = false,
            _ => {}
        }
        if let Some(p) = lookup("HIPFILE_DIRECT_IO")
            .as_deref()
            .and_then(DirectIoPolicy::parse)
        {
            s.direct_io = p;
        }
        match lookup("HIPFILE_EVENT_WAIT").as_deref().map(str::trim) {
            Some("sync") => s.event_wait = EventWait::Runtime,
            Some("yield") => s.event_wait = EventWait::Yield,
            _ => {}
        }
        if let Some(bypass) = lookup("HIPFILE_STREAM_MEMOPS_BYPASS")
            .as_deref()
            .and_then(parse_switch)
        {
            s.stream_memops_bypass = bypass;
        }
        if let Some(allow) = lookup("HIPFILE_ALLOW_SYSTEM_MEMORY")
            .as_deref()
            .and_then(parse_switch)
        {
            s.allow_system_memory = allow;
        }
        if let Some(level) = lookup(LOG_LEVEL_ENV).as_deref().and_then(LogLevel::parse) {
            s.logging_level = level;
        }
        if let Some(file) = lookup(LOG_FILE_ENV) {
            s.log_file_path = file;
        }
        if let Some(set) = lookup("HIPFILE_P2P_MECHANISMS")
            .as_deref()
            .and_then(P2pMechanisms::parse)
        {
            s.p2p_mechanisms = set;
        }
        if let Some(policy) = lookup("HIPFILE_IO_POLICY")
            .as_deref()
            .and_then(IoPolicy::from_name)
        {
            s.default_io_policy = policy;
        }
        s
    }

    /// The staging chunk in bytes: the per-buffer size, bounded by the largest single transfer
    /// and by a quarter of the pinned memory bound (so at least two lanes fit), never below 4 KiB.
    pub fn chunk_bytes(&self) -> usize {
        let kb = self
            .per_buffer_cache_size_kb
            .min(self.max_direct_io_size_kb)
            .min(self.max_pinned_mem_size_kb / 4);
        usize::try_from(kb.saturating_mul(1024))
            .unwrap_or(usize::MAX)
            .max(4096)
            & !4095
    }

    /// The page-cache pin budget in bytes ([`Settings::page_cache_pins_kb`]): the setting, else
    /// an eighth of the memory this process may use (the machine's `MemTotal`, or its memory
    /// cgroup's limit where that is lower), at most 16 GiB (0 where neither can be read).
    pub fn page_cache_pin_bytes(&self) -> usize {
        let kb = self.page_cache_pins_kb.unwrap_or_else(|| {
            static TOTAL_KB: OnceLock<u64> = OnceLock::new();
            let total = *TOTAL_KB.get_or_init(|| {
                let read = |path: &str| std::fs::read_to_string(path).ok();
                let machine = read("/proc/meminfo")
                    .and_then(|text| mem_total_kb(&text))
                    .unwrap_or(0);
                let group = read("/proc/self/cgroup")
                    .and_then(|text| cgroup_limit_kb(&text, read))
                    .unwrap_or(u64::MAX);
                machine.min(group)
            });
            (total / 8).min(16 << 20)
        });
        usize::try_from(kb.saturating_mul(1024)).unwrap_or(usize::MAX)
    }

    /// The smallest piece of a request spread over several threads, in bytes (4 KiB multiples).
    pub fn min_piece_bytes(&self) -> usize {
        usize::try_from(self.min_piece_kb.saturating_mul(1024))
            .unwrap_or(usize::MAX)
            .max(4096)
            & !4095
    }

    /// Requests up to this many bytes run inline on the caller's thread.
    pub fn inline_bytes(&self) -> usize {
        usize::try_from(self.min_io_threshold_kb.saturating_mul(1024)).unwrap_or(usize::MAX)
    }

    /// IO worker threads to start: the setting, else one per available core besides the
    /// caller's, at most [`DEFAULT_MAX_IO_WORKERS`].
    pub fn io_threads(&self) -> usize {
        match self.max_io_threads {
            0 => std::thread::available_parallelism()
                .map_or(4, |n| n.get())
                .saturating_sub(1)
                .clamp(1, DEFAULT_MAX_IO_WORKERS),
            n => usize::try_from(n).unwrap_or(usize::MAX).min(256),
        }
    }
    /// Compat mode in force, combining these settings with the environment (settings win).
    pub fn compat_mode(&self, env: &EnvConfig) -> CompatMode {
        let forced = self
            .force_compat_mode
            .or(env.force_compat_mode)
            .unwrap_or(false);
        let allowed = self
            .allow_compat_mode
            .or(env.allow_compat_mode)
            .unwrap_or(true);
        CompatMode {
            allowed: allowed || forced,
            forced,
        }
    }

    /// The largest single transfer in bytes (at least one 4 KiB page).
    pub fn max_direct_io_bytes(&self) -> usize {
        usize::try_from(self.max_direct_io_size_kb.saturating_mul(1024))
            .unwrap_or(usize::MAX)
            .max(4096)
    }

    /// The pinned memory bound in bytes.
    pub fn max_pinned_bytes(&self) -> usize {
        usize::try_from(self.max_pinned_mem_size_kb.saturating_mul(1024)).unwrap_or(usize::MAX)
    }
}

/// `MemTotal` of `/proc/meminfo` text, in KiB.
fn mem_total_kb(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The memory limit of this process's cgroup in KiB, from `/proc/self/cgroup` text and the
/// files `read` answers: cgroup v2's `memory.max`, else v1's `memory.limit_in_bytes`, at the
/// group's path under the mount and, where that is not there (a cgroup namespace), at the
/// mount's root. `None` when there is no limit (`max`, or v1's near-`i64::MAX` unlimited).
fn cgroup_limit_kb(proc_cgroup: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let limit = |dir: &str, file: &str, path: &str| {
        [format!("{dir}{path}/{file}"), format!("{dir}/{file}")]
            .iter()
            .find_map(|f| read(f))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&bytes| bytes < 1 << 62)
            .map(|bytes| bytes / 1024)
    };
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_end_matches('/');
        if id == "0" && controllers.is_empty() {
            limit("/sys/fs/cgroup", "memory.max", path)
        } else if controllers.split(',').any(|c| c == "memory") {
            limit("/sys/fs/cgroup/memory", "memory.limit_in_bytes", path)
        } else {
            None
        }
    })
}

/// Ceilings of the settings ([`Settings::check`]).
pub mod limits {
    /// Largest single transfer, in KiB: what one `read(2)`/`write(2)` moves at most
    /// ([`super::MAX_RW_COUNT`]).
    pub const MAX_TRANSFER_KB: u64 = (super::MAX_RW_COUNT / 1024) as u64;
    /// Largest staging chunk (and smallest piece), in KiB: 256 MiB. Every IO thread holds two
    /// chunks of pinned memory; past a few MiB larger chunks only lose overlap between threads.
    pub const MAX_CHUNK_KB: u64 = 256 * 1024;
    /// Largest value of a size that is only reported (the GPU bounce-buffer budget), in KiB:
    /// 4 TiB, beyond any GPU's memory.
    pub const MAX_REPORTED_KB: u64 = 1 << 32;
    /// Most IO worker threads.
    pub const MAX_IO_THREADS: u64 = 256;
    /// Largest count or time a C property holds (`unsigned int`).
    pub const MAX_COUNT: u64 = u32::MAX as u64;
    /// Highest statistics level (0 to 3, as upstream).
    pub const MAX_STATS_LEVEL: u64 = 3;

    /// The machine's physical memory in KiB: pinned memory beyond it cannot exist.
    pub fn physical_memory_kb() -> u64 {
        let info = rustix::system::sysinfo();
        (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1))) / 1024
    }
}

/// Largest transfer of one call, as Linux caps `read(2)`/`write(2)` (`MAX_RW_COUNT`).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// Settings that may change while the driver is open (`hipFileDriverSet*`). Requests take a
/// snapshot at their start.
#[derive(Debug, Default)]
pub struct LiveSettings(RwLock<Arc<Settings>>);

impl LiveSettings {
    /// Start with `settings`.
    pub fn new(settings: Settings) -> Self {
        LiveSettings(RwLock::new(Arc::new(settings)))
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Change the settings for requests that start from now on.
    pub fn update(&self, change: impl FnOnce(&mut Settings)) {
        let mut guard = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = (**guard).clone();
        change(&mut next);
        *guard = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_of_the_process_cgroup_is_read_in_either_version() {
        let files = |entries: &'static [(&'static str, &'static str)]| {
            move |path: &str| {
                entries
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, v)| v.to_string())
            }
        };
        // v2: the group's own memory.max; "max" is no limit.
        let v2 = "0::/jobs/a\n";
        let read = files(&[("/sys/fs/cgroup/jobs/a/memory.max", "8589934592\n")]);
        assert_eq!(cgroup_limit_kb(v2, read), Some(8 << 20));
        let read = files(&[("/sys/fs/cgroup/jobs/a/memory.max", "max\n")]);
        assert_eq!(cgroup_limit_kb(v2, read), None);
        // v1, where the group is not under the mount (a namespace): the mount's root.
        let v1 = "9:name=systemd:/\n4:memory:/process_api/x\n0::/\n";
        let read = files(&[(
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "2147483648\n",
        )]);
        assert_eq!(cgroup_limit_kb(v1, read), Some(2 << 20));
        let read = files(&[(
            "/sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes",
            "9223372036854771712\n",
        )]);
        assert_eq!(cgroup_limit_kb(v1, read), None, "v1's unlimited");
        assert_eq!(cgroup_limit_kb(v1, |_| None), None);
    }

    #[test]
    fn the_page_cache_pin_budget_is_the_setting_else_an_eighth_of_memory() {
        let set = Settings {
            page_cache_pins_kb: Some(3),
            ..Settings::default()
        };
        assert_eq!(set.page_cache_pin_bytes(), 3072);
        let auto = Settings::default().page_cache_pin_bytes();
        let machine = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| mem_total_kb(&t))
            .unwrap();
        assert!(auto > 0 && auto as u64 <= (machine / 8) * 1024 && auto <= 16 << 30);
        assert_eq!(
            Settings::from_lookup(|k| (k == "HIPFILE_PAGE_CACHE_PINS_KB").then(|| "0".into()))
                .page_cache_pin_bytes(),
            0
        );
    }

    fn env(pairs: &[(&str, &str)]) -> EnvConfig {
        EnvConfig::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    fn lookup<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_direct_mechanisms_and_the_default_policy_come_from_the_environment() {
        let s = Settings::from_lookup(lookup(&[]));
        assert_eq!(s.p2p_mechanisms, P2pMechanisms::ALL);
        assert_eq!(s.default_io_policy, IoPolicy::Fallback);
        let s = Settings::from_lookup(lookup(&[
            ("HIPFILE_P2P_MECHANISMS", "amd_kfd, nvidia_fs"),
            ("HIPFILE_IO_POLICY", "direct_only"),
        ]));
        assert_eq!(s.p2p_mechanisms.names(), ["amd_kfd", "nvidia_fs"]);
        assert_eq!(s.default_io_policy, IoPolicy::DirectOnly);
        let s = Settings::from_lookup(lookup(&[
            ("HIPFILE_P2P_MECHANISMS", "sim,bogus"),
            ("HIPFILE_IO_POLICY", "sometimes"),
        ]));
        assert_eq!(
            s.p2p_mechanisms,
            P2pMechanisms::ALL,
            "a bad list is ignored"
        );
        assert_eq!(s.default_io_policy, IoPolicy::Fallback);
    }

    #[test]
    fn one_lookup_gives_every_part_of_the_environment() {
        let pairs = [
            ("HIPFILE_BACKENDS", "fallback,fastpath"),
            ("HIPFILE_FORCE_COMPAT_MODE", "true"),
            ("HIPFILE_STATS_LEVEL", "false"),
            ("HIPFILE_CHUNK_KB", "1024"),
            ("HIPFILE_EVENT_WAIT", "sync"),
            ("HIPFILE_PLATFORM", "sim"),
            ("HIPFILE_SIM_DEVICES", "3"),
            ("HIPFILE_CUFILE_FORCE", "true"),
        ];
        let e = Environment::from_lookup(lookup(&pairs));
        assert_eq!(e.backends.as_deref(), Some("fallback,fastpath"));
        assert_eq!(e.switches, EnvConfig::from_lookup(lookup(&pairs)));
        assert_eq!(e.switches.force_compat_mode, Some(true));
        assert_eq!(e.switches.stats_level, Some(0));
        assert_eq!(e.settings, Settings::from_lookup(lookup(&pairs)));
        assert_eq!(e.settings.per_buffer_cache_size_kb, 1024);
        assert_eq!(e.settings.event_wait, EventWait::Runtime);
        assert_eq!(e.platform, PlatformOptions::from_lookup(lookup(&pairs)));
        assert_eq!(
            e.platform.platform,
            hipfile_hip::PlatformChoice::Named(hipfile_hip::Platform::Sim)
        );
        assert_eq!(e.platform.sim.devices, 3);
        assert!(e.platform.cufile_force);
        // Nothing set is the defaults of every part.
        assert_eq!(Environment::from_lookup(|_| None), Environment::default());
    }

    #[test]
    fn the_environments_settings_variables_apply_again_over_other_settings() {
        let e = Environment::from_lookup(lookup(&[
            ("HIPFILE_CHUNK_KB", "1024"),
            ("HIPFILE_INLINE_KB", "junk"),
            ("HIPFILE_BACKENDS", "fallback"),
            ("CUFILE_ENV_PATH_JSON", "/tmp/c.json"),
        ]));
        assert_eq!(e.cufile_json_path.as_deref(), Some("/tmp/c.json"));
        assert!(e
            .settings_variables
            .iter()
            .any(|(n, v)| n == "HIPFILE_CHUNK_KB" && v == "1024"));
        assert!(
            !e.settings_variables
                .iter()
                .any(|(n, _)| n == "HIPFILE_BACKENDS"),
            "only what the settings read"
        );
        let over = e.settings_over(Settings {
            per_buffer_cache_size_kb: 64,
            min_io_threshold_kb: 8,
            max_io_threads: 2,
            ..Settings::default()
        });
        assert_eq!(over.per_buffer_cache_size_kb, 1024);
        assert_eq!(
            over.min_io_threshold_kb, 8,
            "a value that does not parse sets nothing"
        );
        assert_eq!(over.max_io_threads, 2);
        assert_eq!(e.settings_over(Settings::default()), e.settings);
    }

    #[test]
    fn switches_accept_only_true_and_false_in_any_case() {
        assert_eq!(parse_switch("TRUE"), Some(true));
        assert_eq!(parse_switch("False"), Some(false));
        assert_eq!(parse_switch("1"), None);
        assert_eq!(parse_switch("yes"), None);
        assert_eq!(parse_switch(" true"), None);
        let e = env(&[
            ("HIPFILE_ALLOW_COMPAT_MODE", "0"),
            ("HIPFILE_STATS_LEVEL", "tRuE"),
        ]);
        assert_eq!(e.allow_compat_mode, None);
        assert_eq!(e.stats_level, Some(1));
    }

    #[test]
    fn the_stats_level_is_a_number_up_to_3_or_a_switch() {
        assert_eq!(parse_stats_level("0"), Some(0));
        assert_eq!(parse_stats_level("2"), Some(2));
        assert_eq!(parse_stats_level(" 3 "), Some(3));
        assert_eq!(parse_stats_level("9"), Some(3));
        assert_eq!(parse_stats_level("TRUE"), Some(1));
        assert_eq!(parse_stats_level("false"), Some(0));
        assert_eq!(parse_stats_level("-1"), None);
        assert_eq!(parse_stats_level("lots"), None);
        assert_eq!(env(&[("HIPFILE_STATS_LEVEL", "2")]).stats_level, Some(2));
    }

    #[test]
    fn forcing_compat_mode_keeps_the_fallback_on_even_when_disallowed() {
        let s = Settings::default();
        let e = env(&[
            ("HIPFILE_ALLOW_COMPAT_MODE", "false"),
            ("HIPFILE_FORCE_COMPAT_MODE", "true"),
        ]);
        assert_eq!(
            s.compat_mode(&e),
            CompatMode {
                allowed: true,
                forced: true
            }
        );
        let e = env(&[("HIPFILE_ALLOW_COMPAT_MODE", "false")]);
        assert!(!s.compat_mode(&e).allowed);
        assert!(s.compat_mode(&EnvConfig::default()).allowed);
    }

    #[test]
    fn engine_settings_come_from_the_environment_and_stay_sane() {
        let s = Settings::from_lookup(|name| {
            [
                ("HIPFILE_IO_THREADS", "3"),
                ("HIPFILE_CHUNK_KB", "1024"),
                ("HIPFILE_DIRECT_IO", "Never"),
                ("HIPFILE_INLINE_KB", "junk"),
                ("HIPFILE_EVENT_WAIT", "sync"),
                ("HIPFILE_PAGE_CACHE_PIN_CONTEXT", "shared"),
            ]
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
        });
        assert_eq!(s.io_threads(), 3);
        assert_eq!(s.chunk_bytes(), 1 << 20);
        assert_eq!(s.direct_io, DirectIoPolicy::Never);
        assert_eq!(s.event_wait, EventWait::Runtime);
        assert_eq!(Settings::default().event_wait, EventWait::Yield);
        assert!(!s.page_cache_pin_own_context);
        assert!(Settings::default().page_cache_pin_own_context);
        assert_eq!(s.inline_bytes(), Settings::default().inline_bytes());
        let tiny = Settings {
            max_pinned_mem_size_kb: 64,
            ..Settings::default()
        };
        assert_eq!(
            tiny.chunk_bytes(),
            16 << 10,
            "two lanes of two chunks fit the pinned bound"
        );
        let small_io = Settings {
            max_direct_io_size_kb: 5,
            ..Settings::default()
        };
        assert_eq!(small_io.chunk_bytes(), 4096);
    }

    #[test]
    fn settings_no_engine_can_run_with_are_refused() {
        assert!(Settings::default().check().is_ok());
        let tiny_pool = Settings {
            max_pinned_mem_size_kb: 4,
            ..Settings::default()
        };
        assert_eq!(
            tiny_pool.check().unwrap_err().kind(),
            crate::ErrorKind::InvalidValue
        );
        let tiny_chunk = Settings {
            per_buffer_cache_size_kb: 1,
            ..Settings::default()
        };
        assert!(tiny_chunk.check().is_err());
    }

    #[test]
    fn values_no_machine_can_honour_are_an_unsupported_limit() {
        let unsupported = |s: Settings| {
            s.check()
                .is_err_and(|e| e.kind() == crate::ErrorKind::DriverUnsupportedLimit)
        };
        let gib16 = 16 * 1024 * 1024;
        assert!(unsupported(Settings {
            max_direct_io_size_kb: gib16,
            ..Settings::default()
        }));
        assert!(unsupported(Settings {
            per_buffer_cache_size_kb: gib16,
            ..Settings::default()
        }));
        assert!(unsupported(Settings {
            max_pinned_mem_size_kb: limits::physical_memory_kb() + 1,
            ..Settings::default()
        }));
        assert!(unsupported(Settings {
            stats_level: 4,
            ..Settings::default()
        }));
        // Every size_t parameter at SIZE_MAX.
        let all_max = Settings {
            max_direct_io_size_kb: u64::MAX,
            max_pinned_mem_size_kb: u64::MAX,
            max_device_cache_size_kb: u64::MAX,
            per_buffer_cache_size_kb: u64::MAX,
            poll_thresh_size_kb: u64::MAX,
            max_io_threads: u64::MAX,
            max_batch_io_size: u64::MAX,
            batch_io_timeout_ms: u64::MAX,
            stats_level: u64::MAX,
            io_queue_depth: u64::MAX,
            min_io_threshold_kb: u64::MAX,
            max_request_parallelism: u64::MAX,
            min_piece_kb: u64::MAX,
            ..Settings::default()
        };
        assert!(unsupported(all_max));
        // Each ceiling itself is accepted.
        assert!(Settings {
            max_direct_io_size_kb: limits::MAX_TRANSFER_KB,
            per_buffer_cache_size_kb: limits::MAX_CHUNK_KB,
            max_io_threads: limits::MAX_IO_THREADS,
            stats_level: limits::MAX_STATS_LEVEL,
            ..Settings::default()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn environment_values_the_settings_cannot_hold_are_ignored() {
        let s = Settings::from_lookup(|name| {
            [
                ("HIPFILE_CHUNK_KB", "99999999999"),
                ("HIPFILE_PINNED_KB", "2"),
                ("HIPFILE_IO_THREADS", "100000"),
                ("HIPFILE_MAX_DIRECT_IO_KB", "8192"),
            ]
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
        });
        let d = Settings::default();
        assert_eq!(s.per_buffer_cache_size_kb, d.per_buffer_cache_size_kb);
        assert_eq!(s.max_pinned_mem_size_kb, d.max_pinned_mem_size_kb);
        assert_eq!(s.max_io_threads, d.max_io_threads);
        assert_eq!(s.max_direct_io_size_kb, 8192);
    }

    #[test]
    fn host_memory_is_refused_unless_the_environment_allows_it() {
        let with = |value: &'static str| {
            Settings::from_lookup(|name| {
                (name == "HIPFILE_ALLOW_SYSTEM_MEMORY").then(|| value.to_string())
            })
            .allow_system_memory
        };
        assert!(
            !Settings::default().allow_system_memory,
            "hipFile's default"
        );
        assert!(with("true") && with("TRUE"));
        assert!(!with("false"));
        assert!(!with("1"), "a switch is true or false, as the others");
    }

    #[test]
    fn the_log_is_off_unless_the_environment_sets_a_level_it_can_parse() {
        assert_eq!(Settings::default().logging_level, LogLevel::Off);
        assert_eq!(Settings::default().log_file_path, "");
        let s = Settings::from_lookup(lookup(&[
            ("HIPFILE_LOG_LEVEL", "debug"),
            ("HIPFILE_LOG_FILE", "/tmp/hipfile.log"),
        ]));
        assert_eq!(s.logging_level, LogLevel::Debug);
        assert_eq!(s.log_file_path, "/tmp/hipfile.log");
        let s = Settings::from_lookup(lookup(&[("HIPFILE_LOG_LEVEL", "2")]));
        assert_eq!(s.logging_level, LogLevel::Warn);
        let s = Settings::from_lookup(lookup(&[("HIPFILE_LOG_LEVEL", "loud")]));
        assert_eq!(s.logging_level, LogLevel::Off);
    }

    #[test]
    fn parameters_override_the_environment() {
        let s = Settings {
            allow_compat_mode: Some(true),
            ..Settings::default()
        };
        let e = env(&[("HIPFILE_ALLOW_COMPAT_MODE", "false")]);
        assert!(s.compat_mode(&e).allowed);
    }
}
