//! `hipfile check`: can this machine do direct (P2P) IO between storage and GPU memory, and why not.
//!
//! It reports the platform and runtime, the devices, whether the platform has a P2P driver (AMD:
//! `hipAmdFileRead`/`hipAmdFileWrite` through `hipGetProcAddress` and the KFD device; NVIDIA: the
//! nvidia-fs driver and `libcufile.so.0`), and for every mounted filesystem the fastpath's verdict
//! (ext4 with data=ordered, xfs, or a block device, unless `HIPFILE_UNSUPPORTED_FILE_SYSTEMS=true`)
//! with an O_DIRECT probe where the mount is writable, FUSE and network filesystems named as such
//! (`fuse.ceph-fuse (FUSE, network)`, `nfs4 (network)`), and the mode a read of a file there gets
//! (P2P via the platform's driver, staged with O_DIRECT, or staged through the page cache only),
//! as NVIDIA's `gdscheck` reports per filesystem. The table's columns are as wide as their
//! content; a mount point too long for its column gets a line of its own. The exit status is 0
//! only when the fastpath is possible on at least one filesystem.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use hipfile_core::stats_server::StatsService;
use hipfile_core::{
    mount_table, CompatMode, DirectIoPolicy, Environment, FsFacts, FsKind, IoPath, IoPolicy,
    P2pMechanism, P2pMechanisms,
};
use hipfile_hip::{GpuRuntime, Platform};

use crate::platform::open_runtime;
use serde_json::{json, Value};

/// Arguments of `hipfile check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Platform to check: amd, nvidia or sim (default: what the library would pick).
    #[arg(long)]
    platform: Option<String>,
    /// List every mount, pseudo filesystems included.
    #[arg(long)]
    all: bool,
    /// When no GPU platform is found, list the loader's answer for every runtime library tried.
    #[arg(long)]
    verbose: bool,
}

/// What the check found.
#[derive(Debug)]
pub struct Findings {
    /// The platform, or why there is none (one line per platform tried).
    platform: Result<PlatformFacts, Vec<String>>,
    filesystems: Vec<FsFinding>,
    /// The private runtime directory statistics sockets go in, or why there is none
    /// ([`hipfile_core::stats_server::runtime_dir`]).
    stats_dir: Result<PathBuf, String>,
}

#[derive(Debug)]
struct PlatformFacts {
    platform: Platform,
    runtime_version: i32,
    library: String,
    devices: i32,
    p2p: Result<&'static str, String>,
    /// The backends a driver opened on this platform starts (with the environment's
    /// `HIPFILE_*` settings and `HIPFILE_BACKENDS`) and the settings that steer requests
    /// between them, or why it failed to open.
    backends: Result<Started, String>,
}

/// What a driver opened as an application would started, and how it routes requests.
#[derive(Debug)]
struct Started {
    backends: Vec<(&'static str, IoPath)>,
    /// Compat mode: whether the staged engine may run requests, and whether it must run all.
    compat: CompatMode,
    /// How the staged engine uses a file's O_DIRECT descriptor.
    direct_io: DirectIoPolicy,
    /// The page cache the staged engine may keep pinned for reads copied straight out of it
    /// (0: none, the budget is 0 or O_DIRECT is asked for every read).
    page_cache_pins: usize,
    /// Whether pins are made in a GPU context of the library's own (where the runtime has one).
    pin_own_context: bool,
    /// Where the driver serves its statistics, or why not.
    stats: StatsService,
    /// The policy file handles are registered with unless they name one (`HIPFILE_IO_POLICY`).
    default_policy: IoPolicy,
    /// The direct mechanisms the driver may use (`HIPFILE_P2P_MECHANISMS`).
    p2p_mechanisms: P2pMechanisms,
    /// Whether host memory may be used as IO buffers (`allow_system_memory`).
    host_memory: bool,
}

impl Started {
    /// The line that says whether host memory buffers are served, and by what.
    fn host_memory_line(&self) -> String {
        match (self.host_memory, self.has(IoPath::Host)) {
            (false, _) => "refused as hipFile does (HipMemoryTypeInvalid; HIPFILE_ALLOW_SYSTEM_MEMORY=true admits it)".into(),
            (true, true) => "served by the host backend: pread/pwrite straight between file and memory, O_DIRECT when aligned (HIPFILE_ALLOW_SYSTEM_MEMORY=true)".into(),
            (true, false) => "admitted (HIPFILE_ALLOW_SYSTEM_MEMORY=true) but no host backend started (HIPFILE_BACKENDS)".into(),
        }
    }

    /// The line that says whether cached reads read again are copied out of pinned page cache.
    fn pins_line(&self) -> String {
        if !self.has(IoPath::Staged) || !self.compat.allowed {
            "not used (no staged engine serves reads)".into()
        } else if self.page_cache_pins == 0 {
            "not pinned (HIPFILE_PAGE_CACHE_PINS_KB=0 or HIPFILE_DIRECT_IO=always)".into()
        } else {
            format!(
                "staged reads of cached, registered files are copied out of pinned page cache, up to {} MiB (HIPFILE_PAGE_CACHE_PINS_KB), {}",
                self.page_cache_pins >> 20,
                if self.pin_own_context {
                    "pinned in a GPU context of its own where the runtime has one (HIPFILE_PAGE_CACHE_PIN_CONTEXT=own)"
                } else {
                    "pinned in the primary GPU context while the engine is idle (HIPFILE_PAGE_CACHE_PIN_CONTEXT=shared)"
                }
            )
        }
    }

    fn has(&self, path: IoPath) -> bool {
        self.backends.iter().any(|(_, p)| *p == path)
    }

    /// The line that says which direct mechanisms the driver may use, which one this platform
    /// has (`p2p`: its P2P driver), and whether the mask leaves it out.
    fn mechanisms_line(&self, p2p: &Result<&'static str, String>) -> String {
        let available = match p2p {
            Ok(driver) => P2pMechanism::of_driver(driver).map_or(*driver, P2pMechanism::name),
            Err(_) => "none",
        };
        let masked = match p2p {
            Ok(driver) if !self.p2p_mechanisms.allows_driver(driver) => {
                " (not allowed: the fastpath declines every request)"
            }
            _ => "",
        };
        format!(
            "allowed {} (HIPFILE_P2P_MECHANISMS); available here: {available}{masked}",
            self.p2p_mechanisms
        )
    }

    /// The line that says what a file handle's requests get unless its registration names a
    /// policy.
    fn policy_line(&self) -> String {
        match self.default_policy {
            IoPolicy::Fallback => "fallback: the staged engine runs what the direct path \
                                   declines (HIPFILE_IO_POLICY)"
                .to_string(),
            IoPolicy::DirectOnly => "direct_only: requests the direct path declines fail with \
                                     hipFileIONotSupported (HIPFILE_IO_POLICY)"
                .to_string(),
        }
    }

    /// Whether the mask lets the platform's P2P driver named `driver` serve.
    fn allows(&self, driver: &str) -> bool {
        self.p2p_mechanisms.allows_driver(driver)
    }
}

#[derive(Debug)]
struct FsFinding {
    facts: FsFacts,
    verdict: Result<(), String>,
    o_direct: Option<Result<(), String>>,
}

impl Findings {
    /// Whether a driver opened here starts the staged fallback.
    pub fn fallback_available(&self) -> bool {
        matches!(&self.platform, Ok(p) if p.backends.as_ref().is_ok_and(|b| b.has(IoPath::Staged)))
    }

    /// Whether the fastpath can serve IO somewhere on this machine.
    pub fn fastpath_possible(&self) -> bool {
        let p2p = matches!(&self.platform, Ok(p) if p.p2p.as_ref().is_ok_and(|driver| {
            p.backends.as_ref().map_or(true, |started| started.allows(driver))
        }));
        let fs_ok = self
            .filesystems
            .iter()
            .any(|f| f.verdict.is_ok() && !matches!(f.o_direct, Some(Err(_))));
        p2p && fs_ok
    }
}

fn p2p_reason(rt: &dyn GpuRuntime) -> Result<&'static str, String> {
    if let Some(driver) = rt.p2p() {
        return Ok(driver.name());
    }
    Err(match rt.info().platform {
        Platform::Nvidia => match hipfile_hip::p2p::cufile::cufile_probe(
            Environment::process().platform.cufile_force,
        ) {
            Ok(()) => "cuFile is loadable but the runtime offered no driver".to_string(),
            Err(why) => why,
        },
        Platform::Amd => {
            let kfd = if Path::new("/dev/kfd").exists() {
                "present"
            } else {
                "absent"
            };
            format!(
                "the HIP runtime does not resolve hipAmdFileRead/hipAmdFileWrite through \
                 hipGetProcAddress (ROCm without file IO support); /dev/kfd is {kfd}"
            )
        }
        Platform::Sim => "the simulated P2P driver is off (HIPFILE_SIM_P2P=false)".to_string(),
    })
}

fn platform_facts(platform: Option<&str>, verbose: bool) -> Result<PlatformFacts, Vec<String>> {
    let rt = open_runtime(platform, verbose)?;
    let info = rt.info();
    let devices = rt.device_count().map_err(|e| vec![e.to_string()])?;
    Ok(PlatformFacts {
        platform: info.platform,
        runtime_version: info.runtime_version,
        library: info.library,
        devices,
        p2p: p2p_reason(&*rt),
        backends: started_backends(rt),
    })
}

/// Open a driver on `rt` as an application would and name the backends it started; a backend
/// that fails to start fails the open, and the reason is the answer.
fn started_backends(rt: Arc<dyn GpuRuntime>) -> Result<Started, String> {
    let driver = hipfile::Driver::with_options(hipfile::DriverOptions::with_runtime(rt))
        .map_err(|e| e.to_string())?;
    let session = driver
        .core()
        .session()
        .ok_or("the driver closed as it opened")?;
    let settings = session.settings();
    Ok(Started {
        backends: driver.backend_paths(),
        compat: settings.compat_mode(session.env()),
        direct_io: settings.direct_io,
        page_cache_pins: if settings.direct_io == DirectIoPolicy::Always {
            0
        } else {
            settings.page_cache_pin_bytes()
        },
        pin_own_context: settings.page_cache_pin_own_context,
        stats: session.stats_service(),
        default_policy: settings.default_io_policy,
        p2p_mechanisms: settings.p2p_mechanisms,
        host_memory: settings.allow_system_memory,
    })
}

/// Mounts that can hold files for GPU IO: backed by a device, one of the filesystems the
/// fastpath knows, a FUSE or a network filesystem; pseudo filesystems (proc, sysfs, cgroup,
/// ...) are left out unless `all`.
fn interesting(f: &FsFacts, all: bool) -> bool {
    all || f.source.starts_with("/dev/")
        || matches!(
            f.kind,
            FsKind::Ext4 { .. } | FsKind::Xfs | FsKind::BlockDevice
        )
        || matches!(&f.kind, FsKind::Other(t) if matches!(t.as_str(), "tmpfs" | "overlay" | "btrfs" | "zfs"))
        || FsClass::of(&f.kind) != FsClass::Local
}

/// Where a filesystem's files live, as far as the mount type tells: the fastpath takes only
/// local filesystems, and a read of a FUSE or network filesystem goes through a daemon or the
/// network whatever the engine, which the table says next to the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FsClass {
    /// A local filesystem (or one the type does not place).
    Local,
    /// A filesystem in user space (type `fuse`, `fuseblk` or `fuse.<daemon>`) whose daemon
    /// keeps the files locally, as far as its name tells.
    Fuse,
    /// A FUSE daemon of a network filesystem (`fuse.ceph-fuse`, `fuse.sshfs`, ...).
    NetworkFuse,
    /// A network filesystem in the kernel (`nfs4`, `ceph`, `cifs`, ...).
    Network,
}

/// Kernel filesystems whose files live on other machines.
const NETWORK_TYPES: &[&str] = &[
    "nfs",
    "nfs4",
    "ceph",
    "cifs",
    "smb3",
    "lustre",
    "beegfs",
    "gpfs",
    "9p",
    "virtiofs",
    "afs",
    "glusterfs",
];

/// FUSE daemons that serve network filesystems (the part of `fuse.<daemon>` after the dot).
const NETWORK_FUSE_DAEMONS: &[&str] = &[
    "ceph-fuse",
    "glusterfs",
    "sshfs",
    "s3fs",
    "gcsfuse",
    "goofys",
    "rclone",
    "juicefs",
    "beegfs",
    "lustre",
];

impl FsClass {
    fn of(kind: &FsKind) -> FsClass {
        let FsKind::Other(name) = kind else {
            return FsClass::Local;
        };
        match name.split_once('.') {
            Some(("fuse" | "fuseblk", daemon)) if NETWORK_FUSE_DAEMONS.contains(&daemon) => {
                FsClass::NetworkFuse
            }
            Some(("fuse" | "fuseblk", _)) => FsClass::Fuse,
            None if name == "fuse" || name == "fuseblk" => FsClass::Fuse,
            _ if NETWORK_TYPES.contains(&name.as_str()) => FsClass::Network,
            _ => FsClass::Local,
        }
    }

    fn is_fuse(self) -> bool {
        matches!(self, FsClass::Fuse | FsClass::NetworkFuse)
    }

    fn is_network(self) -> bool {
        matches!(self, FsClass::Network | FsClass::NetworkFuse)
    }

    /// What the table adds after the type name.
    fn note(self) -> &'static str {
        match self {
            FsClass::Local => "",
            FsClass::Fuse => " (FUSE)",
            FsClass::NetworkFuse => " (FUSE, network)",
            FsClass::Network => " (network)",
        }
    }
}

/// Create and remove a file opened with O_DIRECT in `dir`; `None` when the mount cannot be
/// written (nothing to probe without changing it).
fn probe_o_direct(dir: &Path) -> Option<Result<(), String>> {
    let name = dir.join(format!(".hipfile-check-{}", std::process::id()));
    let flags = rustix::fs::OFlags::CREATE
        | rustix::fs::OFlags::EXCL
        | rustix::fs::OFlags::WRONLY
        | rustix::fs::OFlags::DIRECT
        | rustix::fs::OFlags::CLOEXEC;
    let result = match rustix::fs::open(&name, flags, rustix::fs::Mode::from_raw_mode(0o600)) {
        Ok(fd) => {
            drop(fd);
            Some(Ok(()))
        }
        Err(rustix::io::Errno::INVAL) => Some(Err("O_DIRECT is refused (EINVAL)".to_string())),
        Err(_) => {
            // Not writable (or the name exists): the flag cannot be probed without touching data.
            let plain =
                rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL | rustix::fs::OFlags::WRONLY;
            match rustix::fs::open(&name, plain, rustix::fs::Mode::from_raw_mode(0o600)) {
                Ok(_) => Some(Err(
                    "O_DIRECT open failed where a plain open succeeds".to_string()
                )),
                Err(_) => None,
            }
        }
    };
    let _ = std::fs::remove_file(&name);
    result
}

/// Look at the machine.
pub fn examine(platform: Option<&str>, all: bool, verbose: bool) -> Findings {
    let env = Environment::process().switches;
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    let filesystems = mount_table(&text)
        .into_iter()
        .filter(|f| interesting(f, all) && seen.insert(f.mount_point.clone()))
        .map(|facts| {
            let verdict =
                hipfile_fastpath::filesystem_verdict(&facts.kind, &env).map_err(|d| d.to_string());
            let o_direct = probe_o_direct(Path::new(&facts.mount_point));
            FsFinding {
                facts,
                verdict,
                o_direct,
            }
        })
        .collect();
    Findings {
        platform: platform_facts(platform, verbose),
        filesystems,
        stats_dir: hipfile_core::stats_server::runtime_dir(),
    }
}

/// The line that says where a driver serves its statistics to `hipfile stats`: where this
/// check's driver serves them when they are on (and which address another process holds), or
/// where one would serve them.
fn stats_line(service: Option<&StatsService>, dir: &Result<PathBuf, String>) -> String {
    let abstract_only = |why: &str| {
        format!(
            "only at the abstract name hipfile-stats-<pid>, which another local user can take \
             first ({why})"
        )
    };
    match service {
        Some(StatsService::Off) | None => match dir {
            Ok(dir) => format!(
                "off (HIPFILE_STATS_LEVEL unset or 0); when on, served at {} and \
                 @hipfile-stats-<pid>",
                dir.join("hipfile/stats-<pid>.sock").display()
            ),
            Err(why) => format!(
                "off (HIPFILE_STATS_LEVEL unset or 0); when on, served {}",
                abstract_only(why)
            ),
        },
        Some(service) => service.to_string(),
    }
}

fn fs_name(kind: &FsKind) -> String {
    match kind {
        FsKind::BlockDevice => "block device".into(),
        FsKind::Ext4 { ordered: true } => "ext4 (data=ordered)".into(),
        FsKind::Ext4 { ordered: false } => "ext4 (not data=ordered)".into(),
        FsKind::Xfs => "xfs".into(),
        FsKind::Other(name) => format!("{name}{}", FsClass::of(kind).note()),
    }
}

/// The findings as JSON.
pub fn to_json(f: &Findings) -> Value {
    let platform = match &f.platform {
        Ok(p) => json!({
            "platform": p.platform.name(),
            "runtime_version": p.runtime_version,
            "library": p.library,
            "devices": p.devices,
            "p2p_driver": p.p2p.as_ref().ok(),
            "p2p_missing_because": p.p2p.as_ref().err(),
            "backends": p.backends.as_ref().ok().map(|b| b.backends.iter().map(|(name, _)| *name).collect::<Vec<_>>()),
            "page_cache_pin_budget_bytes": p.backends.as_ref().ok().map(|b| b.page_cache_pins),
            "host_memory_allowed": p.backends.as_ref().ok().map(|b| b.host_memory),
            "stats_socket": p.backends.as_ref().ok().map(|b| b.stats.to_json()),
            "default_io_policy": p.backends.as_ref().ok().map(|b| b.default_policy.name()),
            "p2p_mechanisms_allowed": p.backends.as_ref().ok().map(|b| b.p2p_mechanisms.names()),
            "p2p_mechanism_available": p.p2p.as_ref().ok().map(|driver| {
                P2pMechanism::of_driver(driver).map_or(*driver, P2pMechanism::name)
            }),
            "driver_open_error": p.backends.as_ref().err(),
        }),
        Err(why) => json!({ "platform": null, "error": why.join("; "), "passed_over": why }),
    };
    let filesystems: Vec<Value> = f
        .filesystems
        .iter()
        .map(|fs| {
            json!({
                "mount_point": fs.facts.mount_point,
                "source": fs.facts.source,
                "filesystem": fs_name(&fs.facts.kind),
                "fuse": FsClass::of(&fs.facts.kind).is_fuse(),
                "network": FsClass::of(&fs.facts.kind).is_network(),
                "fastpath_filesystem": fs.verdict.is_ok(),
                "declined_because": fs.verdict.as_ref().err(),
                "o_direct": fs.o_direct.as_ref().map(|r| r.is_ok()),
                "o_direct_error": fs.o_direct.as_ref().and_then(|r| r.as_ref().err()),
                "read_mode": read_mode(&f.platform, fs).label(),
            })
        })
        .collect();
    json!({
        "platform": platform,
        "filesystems": filesystems,
        "fastpath_possible": f.fastpath_possible(),
        "fallback_available": f.fallback_available(),
        "stats_socket_dir": f.stats_dir.as_ref().ok(),
        "stats_socket_dir_unusable_because": f.stats_dir.as_ref().err(),
    })
}

/// What a read of a file on one filesystem would get, as NVIDIA's `gdscheck` reports per
/// filesystem: the backend that would serve it and, when staged, how the staged engine would
/// reach the file. Said for a read the fastpath can take at all (device memory, offsets and
/// size on the direct IO alignment); others are staged wherever the staged engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadMode {
    /// P2P DMA between storage and GPU memory through this driver.
    P2p(&'static str),
    /// Staged through pinned host memory.
    Staged(StagedAccess),
    /// No backend would serve it, for this reason.
    Refused(&'static str),
}

/// How the staged engine reaches a file on one filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StagedAccess {
    /// O_DIRECT for data not in the page cache, the page cache for the rest (policy `Auto`).
    ODirectWhenCold,
    /// O_DIRECT for every aligned piece (policy `Always`).
    ODirect,
    /// The page cache only: O_DIRECT is refused here, or turned off.
    PageCache,
    /// O_DIRECT could not be probed (the mount is not writable).
    Unprobed,
}

impl ReadMode {
    fn label(self) -> String {
        match self {
            ReadMode::P2p(driver) => format!("P2P via {driver}"),
            ReadMode::Staged(StagedAccess::ODirectWhenCold) => {
                "staged, O_DIRECT when cold".to_string()
            }
            ReadMode::Staged(StagedAccess::ODirect) => "staged, O_DIRECT".to_string(),
            ReadMode::Staged(StagedAccess::PageCache) => "staged, page cache only".to_string(),
            ReadMode::Staged(StagedAccess::Unprobed) => "staged, O_DIRECT not probed".to_string(),
            ReadMode::Refused(why) => format!("none: {why}"),
        }
    }
}

/// The mode a read on `fs` gets from a driver opened on `platform`.
fn read_mode(platform: &Result<PlatformFacts, Vec<String>>, fs: &FsFinding) -> ReadMode {
    let Ok(p) = platform else {
        return ReadMode::Refused("no GPU platform");
    };
    let Ok(started) = &p.backends else {
        return ReadMode::Refused("the driver does not open");
    };
    let direct_fs = fs.verdict.is_ok() && !matches!(fs.o_direct, Some(Err(_)));
    if let Ok(driver) = p.p2p {
        if direct_fs
            && started.has(IoPath::Direct)
            && !started.compat.forced
            && started.allows(driver)
        {
            return ReadMode::P2p(driver);
        }
    }
    if started.default_policy == IoPolicy::DirectOnly {
        return ReadMode::Refused("the default policy is direct only");
    }
    if !started.has(IoPath::Staged) {
        return ReadMode::Refused("no staged backend started");
    }
    if !started.compat.allowed {
        return ReadMode::Refused("compat mode is off");
    }
    ReadMode::Staged(match (started.direct_io, &fs.o_direct) {
        (DirectIoPolicy::Never, _) | (_, Some(Err(_))) => StagedAccess::PageCache,
        (_, None) => StagedAccess::Unprobed,
        (DirectIoPolicy::Always, Some(Ok(()))) => StagedAccess::ODirect,
        (DirectIoPolicy::Auto, Some(Ok(()))) => StagedAccess::ODirectWhenCold,
    })
}

/// A first-column cell longer than this gets a line of its own (see [`render_table`]).
const MOUNT_POINT_WIDTH: usize = 40;

/// `rows` under `header`, each column as wide as its widest cell and the last one unpadded.
/// A first-column cell longer than `max_first` characters is written on a line of its own and
/// its row goes on under it, so one long mount point does not push every row to the right.
fn render_table(header: &[&str], rows: &[Vec<String>], max_first: usize) -> String {
    let len = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| len(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < header.len() && (i > 0 || len(cell) <= max_first) {
                widths[i] = widths[i].max(len(cell));
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let text: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        format!("{}\n", text.join(" ").trim_end())
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        if len(&row[0]) > widths[0] {
            out.push_str(&row[0]);
            out.push('\n');
            out.push_str(&line(
                &mut std::iter::once("").chain(row[1..].iter().map(String::as_str)),
            ));
        } else {
            out.push_str(&line(&mut row.iter().map(String::as_str)));
        }
    }
    out
}

/// The filesystem table: one row per mount, with the mode a read there gets.
fn filesystem_table(f: &Findings) -> String {
    let rows: Vec<Vec<String>> = f
        .filesystems
        .iter()
        .map(|fs| {
            let odirect = match &fs.o_direct {
                Some(Ok(())) => "yes",
                Some(Err(_)) => "no",
                None => "not probed",
            };
            let verdict = match (&fs.verdict, &fs.o_direct) {
                (Err(why), _) => format!("declines: {why}"),
                (Ok(()), Some(Err(why))) => format!("declines: {why}"),
                (Ok(()), _) => "accepts".to_string(),
            };
            vec![
                fs.facts.mount_point.clone(),
                fs_name(&fs.facts.kind),
                odirect.to_string(),
                read_mode(&f.platform, fs).label(),
                verdict,
            ]
        })
        .collect();
    render_table(
        &[
            "mount point",
            "filesystem",
            "O_DIRECT",
            "read mode",
            "fastpath",
        ],
        &rows,
        MOUNT_POINT_WIDTH,
    )
}

/// The findings as the table `hipfile check` prints.
fn table_text(f: &Findings) -> String {
    let mut out = String::new();
    let mut say = |line: String| {
        out.push_str(&line);
        out.push('\n');
    };
    match &f.platform {
        Ok(p) => {
            say(format!(
                "platform:     {} (runtime version {}, {})",
                p.platform, p.runtime_version, p.library
            ));
            say(format!("devices:      {}", p.devices));
            match &p.p2p {
                Ok(name) => say(format!("P2P driver:   {name}")),
                Err(why) => say(format!("P2P driver:   none: {why}")),
            }
            match &p.backends {
                Ok(started) => {
                    let named: Vec<String> = started
                        .backends
                        .iter()
                        .map(|(name, path)| format!("{name} ({})", path.name()))
                        .collect();
                    say(format!("backends:     {}", named.join(", ")));
                    say(format!("page cache:   {}", started.pins_line()));
                    say(format!("direct:       {}", started.mechanisms_line(&p.p2p)));
                    say(format!("IO policy:    {}", started.policy_line()));
                    say(format!("host memory:  {}", started.host_memory_line()));
                    say(format!(
                        "statistics:   {}",
                        stats_line(Some(&started.stats), &f.stats_dir)
                    ));
                }
                Err(why) => say(format!("backends:     the driver does not open: {why}")),
            }
        }
        Err(why) => {
            say("platform:     none".to_string());
            for line in why {
                say(format!("              {line}"));
            }
            say(
                "              (`--platform sim` checks against the simulated GPU; `--verbose` \
                 lists every library tried)"
                    .to_string(),
            );
        }
    }
    say(String::new());
    say(filesystem_table(f).trim_end().to_string());
    say(String::new());
    say(if f.fastpath_possible() {
        "verdict: the fastpath (P2P DMA) is possible on the filesystems it accepts above"
    } else if f.fallback_available() {
        "verdict: only the fallback (staged through pinned host memory) is available"
    } else if f.platform.is_ok() {
        "verdict: no backend can serve IO here (see the backends line)"
    } else {
        "verdict: no GPU platform; hipfile-rs can run only on the simulated GPU here"
    }
    .to_string());
    out
}

/// Run the check; `Ok(true)` when the fastpath is possible.
pub fn run(args: &CheckArgs) -> Result<bool, String> {
    let findings = examine(args.platform.as_deref(), args.all, args.verbose);
    let text = if args.json {
        format!("{}\n", to_json(&findings))
    } else {
        table_text(&findings)
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| format!("writing the report: {e}"))?;
    Ok(findings.fastpath_possible())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_has_a_p2p_driver_and_this_machine_a_writable_filesystem() {
        let f = examine(Some("sim"), false, false);
        let p = f.platform.as_ref().unwrap();
        assert_eq!(p.platform, Platform::Sim);
        assert!(p.p2p.is_ok());
        assert!(f.fallback_available(), "{:?}", p.backends);
        let root = f
            .filesystems
            .iter()
            .find(|fs| fs.facts.mount_point == "/")
            .unwrap();
        assert!(
            root.o_direct.is_some(),
            "root is writable here, so O_DIRECT is probed"
        );
        let v = to_json(&f);
        assert_eq!(v["platform"]["platform"], "sim");
        assert!(v["platform"]["backends"]
            .as_array()
            .unwrap()
            .contains(&json!("fallback")));
        assert!(v["filesystems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|fs| fs["mount_point"] == "/"));
        assert_eq!(
            v["fastpath_possible"].as_bool().unwrap(),
            f.fastpath_possible()
        );
        let budget = v["platform"]["page_cache_pin_budget_bytes"]
            .as_u64()
            .unwrap();
        assert_eq!(
            budget as usize,
            hipfile_core::Settings::from_lookup(|k| std::env::var(k).ok()).page_cache_pin_bytes()
        );
    }

    #[test]
    fn the_page_cache_line_says_whether_and_how_much_is_pinned() {
        let mut started = Started {
            backends: BOTH.to_vec(),
            compat: COMPAT_ON,
            direct_io: DirectIoPolicy::Auto,
            page_cache_pins: 2 << 30,
            pin_own_context: true,
            stats: StatsService::Off,
            default_policy: IoPolicy::Fallback,
            p2p_mechanisms: P2pMechanisms::ALL,
            host_memory: false,
        };
        assert!(started.pins_line().contains("up to 2048 MiB"));
        assert!(started.pins_line().contains("PIN_CONTEXT=own"));
        started.pin_own_context = false;
        assert!(started.pins_line().contains("PIN_CONTEXT=shared"));
        started.page_cache_pins = 0;
        assert!(started.pins_line().starts_with("not pinned"));
        started.backends = vec![("fastpath", IoPath::Direct)];
        assert!(started.pins_line().starts_with("not used"));
    }

    #[test]
    fn the_host_memory_line_says_whether_host_buffers_are_served() {
        let mut started = Started {
            backends: BOTH.to_vec(),
            compat: COMPAT_ON,
            direct_io: DirectIoPolicy::Auto,
            page_cache_pins: 0,
            pin_own_context: false,
            stats: StatsService::Off,
            default_policy: IoPolicy::Fallback,
            p2p_mechanisms: P2pMechanisms::ALL,
            host_memory: false,
        };
        assert!(started.host_memory_line().starts_with("refused"));
        started.host_memory = true;
        assert!(started.host_memory_line().contains("no host backend"));
        started.backends.push(("host", IoPath::Host));
        assert!(started
            .host_memory_line()
            .starts_with("served by the host backend"));
    }

    #[test]
    fn the_statistics_line_says_where_they_are_served_or_why_not() {
        let private = Ok(PathBuf::from("/run/user/1000"));
        let line = stats_line(Some(&StatsService::Off), &private);
        assert!(line.starts_with("off"), "{line}");
        assert!(
            line.contains("/run/user/1000/hipfile/stats-<pid>.sock"),
            "{line}"
        );
        let none = Err("$XDG_RUNTIME_DIR is not set".to_string());
        let line = stats_line(Some(&StatsService::Off), &none);
        assert!(
            line.contains("another local user can take first ($XDG_RUNTIME_DIR is not set)"),
            "{line}"
        );
        let squatted = StatsService::NotServed {
            why: vec![
                "$XDG_RUNTIME_DIR is not set".into(),
                "@hipfile-stats-7 is held by process 9 of user 1001".into(),
            ],
        };
        let line = stats_line(Some(&squatted), &none);
        assert!(
            line.starts_with("requested but not served: $XDG_RUNTIME_DIR"),
            "{line}"
        );
        assert!(line.contains("held by process 9 of user 1001"), "{line}");
        let half = StatsService::Served {
            at: vec!["/run/user/1000/hipfile/stats-7.sock".into()],
            missed: vec!["@hipfile-stats-7 is held by process 9 of user 1001".into()],
        };
        let line = stats_line(Some(&half), &private);
        assert!(
            line.ends_with("stats-7.sock; @hipfile-stats-7 is held by process 9 of user 1001"),
            "{line}"
        );
    }

    #[test]
    fn without_a_platform_only_the_sim_is_offered_and_the_fastpath_is_impossible() {
        let f = Findings {
            platform: Err(vec!["AMD: no device".into()]),
            filesystems: Vec::new(),
            stats_dir: Err("$XDG_RUNTIME_DIR is not set".into()),
        };
        assert!(!f.fastpath_possible());
        assert_eq!(to_json(&f)["fallback_available"], false);
    }

    /// A mount of `kind` at `mount_point`, as the fastpath judges it, with O_DIRECT as probed.
    fn mount(mount_point: &str, kind: FsKind, o_direct: Option<Result<(), String>>) -> FsFinding {
        let verdict = hipfile_fastpath::filesystem_verdict(&kind, &Default::default())
            .map_err(|d| d.to_string());
        FsFinding {
            facts: FsFacts {
                kind,
                mount_point: mount_point.into(),
                source: "/dev/nvme0n1p1".into(),
            },
            verdict,
            o_direct,
        }
    }

    /// A platform with `p2p` as its P2P driver and a driver that started both backends, unless
    /// `backends` says otherwise.
    fn platform(
        p2p: Option<&'static str>,
        backends: &[(&'static str, IoPath)],
        compat: CompatMode,
        direct_io: DirectIoPolicy,
    ) -> Result<PlatformFacts, Vec<String>> {
        Ok(PlatformFacts {
            platform: Platform::Amd,
            runtime_version: 70_000_000,
            library: "libamdhip64.so.7".into(),
            devices: 8,
            p2p: p2p.ok_or_else(|| "no driver".to_string()),
            backends: Ok(Started {
                backends: backends.to_vec(),
                compat,
                direct_io,
                page_cache_pins: 16 << 30,
                pin_own_context: true,
                stats: StatsService::Off,
                default_policy: IoPolicy::Fallback,
                p2p_mechanisms: P2pMechanisms::ALL,
                host_memory: false,
            }),
        })
    }

    const BOTH: [(&str, IoPath); 2] = [("fastpath", IoPath::Direct), ("fallback", IoPath::Staged)];
    const COMPAT_ON: CompatMode = CompatMode {
        allowed: true,
        forced: false,
    };

    fn started(p: &mut Result<PlatformFacts, Vec<String>>) -> &mut Started {
        p.as_mut().unwrap().backends.as_mut().unwrap()
    }

    #[test]
    fn the_mask_and_the_default_policy_decide_the_read_mode_and_are_listed() {
        let xfs = mount("/data", FsKind::Xfs, Some(Ok(())));
        let mut amd = platform(Some("amd-kfd"), &BOTH, COMPAT_ON, DirectIoPolicy::Auto);
        let findings = |platform| Findings {
            platform,
            filesystems: vec![mount("/data", FsKind::Xfs, Some(Ok(())))],
            stats_dir: Err("none".into()),
        };
        assert_eq!(read_mode(&amd, &xfs), ReadMode::P2p("amd-kfd"));
        started(&mut amd).p2p_mechanisms = P2pMechanisms::of(&[P2pMechanism::NvidiaFs]);
        assert_eq!(
            read_mode(&amd, &xfs),
            ReadMode::Staged(StagedAccess::ODirectWhenCold)
        );
        started(&mut amd).default_policy = IoPolicy::DirectOnly;
        assert_eq!(
            read_mode(&amd, &xfs).label(),
            "none: the default policy is direct only"
        );
        let text = table_text(&findings(amd));
        assert!(
            text.contains(
                "direct:       allowed nvidia_fs (HIPFILE_P2P_MECHANISMS); available here: \
                 amd_kfd (not allowed: the fastpath declines every request)"
            ),
            "{text}"
        );
        assert!(text.contains("IO policy:    direct_only: "), "{text}");
        assert!(findings(platform(
            Some("amd-kfd"),
            &BOTH,
            COMPAT_ON,
            DirectIoPolicy::Auto
        ))
        .fastpath_possible());
        let mut masked = platform(Some("amd-kfd"), &BOTH, COMPAT_ON, DirectIoPolicy::Auto);
        started(&mut masked).p2p_mechanisms = P2pMechanisms::NONE;
        let masked = findings(masked);
        assert!(
            !masked.fastpath_possible(),
            "a masked mechanism serves nothing"
        );
        let json = to_json(&masked);
        assert_eq!(json["platform"]["default_io_policy"], "fallback");
        assert_eq!(
            json["platform"]["p2p_mechanisms_allowed"],
            serde_json::json!([])
        );
        assert_eq!(json["platform"]["p2p_mechanism_available"], "amd_kfd");
        let text = table_text(&findings(platform(
            Some("sim"),
            &BOTH,
            COMPAT_ON,
            DirectIoPolicy::Auto,
        )));
        assert!(
            text.contains(
                "allowed amd_kfd,nvidia_fs,sim (HIPFILE_P2P_MECHANISMS); available here: sim\n"
            ),
            "{text}"
        );
        assert!(text.contains("IO policy:    fallback: "), "{text}");
    }

    #[test]
    fn the_read_mode_is_p2p_only_where_the_fastpath_takes_the_filesystem() {
        let amd = platform(Some("amd-kfd"), &BOTH, COMPAT_ON, DirectIoPolicy::Auto);
        let xfs = mount("/data", FsKind::Xfs, Some(Ok(())));
        let ext4_writeback = mount("/scratch", FsKind::Ext4 { ordered: false }, Some(Ok(())));
        let tmpfs = mount(
            "/dev/shm",
            FsKind::Other("tmpfs".into()),
            Some(Err("EINVAL".into())),
        );
        let read_only = mount("/ro", FsKind::Other("nfs".into()), None);
        let xfs_refusing = mount("/odd", FsKind::Xfs, Some(Err("EINVAL".into())));
        assert_eq!(read_mode(&amd, &xfs), ReadMode::P2p("amd-kfd"));
        assert_eq!(read_mode(&amd, &xfs).label(), "P2P via amd-kfd");
        assert_eq!(
            read_mode(&amd, &ext4_writeback),
            ReadMode::Staged(StagedAccess::ODirectWhenCold)
        );
        assert_eq!(read_mode(&amd, &tmpfs).label(), "staged, page cache only");
        assert_eq!(
            read_mode(&amd, &read_only).label(),
            "staged, O_DIRECT not probed"
        );
        assert_eq!(
            read_mode(&amd, &xfs_refusing),
            ReadMode::Staged(StagedAccess::PageCache)
        );
        // No P2P driver, or compat mode forced: staged everywhere.
        let no_p2p = platform(None, &BOTH, COMPAT_ON, DirectIoPolicy::Auto);
        assert_eq!(
            read_mode(&no_p2p, &xfs).label(),
            "staged, O_DIRECT when cold"
        );
        let forced = CompatMode {
            allowed: true,
            forced: true,
        };
        let amd_forced = platform(Some("amd-kfd"), &BOTH, forced, DirectIoPolicy::Always);
        assert_eq!(read_mode(&amd_forced, &xfs).label(), "staged, O_DIRECT");
        let never = platform(Some("amd-kfd"), &BOTH, COMPAT_ON, DirectIoPolicy::Never);
        assert_eq!(
            read_mode(&never, &ext4_writeback).label(),
            "staged, page cache only"
        );
    }

    #[test]
    fn the_read_mode_says_why_no_backend_serves_a_read() {
        let off = CompatMode {
            allowed: false,
            forced: false,
        };
        let ext4 = mount("/scratch", FsKind::Ext4 { ordered: false }, Some(Ok(())));
        let xfs = mount("/data", FsKind::Xfs, Some(Ok(())));
        let compat_off = platform(Some("amd-kfd"), &BOTH, off, DirectIoPolicy::Auto);
        assert_eq!(
            read_mode(&compat_off, &ext4).label(),
            "none: compat mode is off"
        );
        assert_eq!(read_mode(&compat_off, &xfs), ReadMode::P2p("amd-kfd"));
        let fastpath_only = platform(Some("amd-kfd"), &BOTH[..1], COMPAT_ON, DirectIoPolicy::Auto);
        assert_eq!(
            read_mode(&fastpath_only, &ext4).label(),
            "none: no staged backend started"
        );
        let fallback_only = platform(Some("amd-kfd"), &BOTH[1..], COMPAT_ON, DirectIoPolicy::Auto);
        assert_eq!(
            read_mode(&fallback_only, &xfs),
            ReadMode::Staged(StagedAccess::ODirectWhenCold)
        );
        assert_eq!(
            read_mode(&Err(vec!["AMD: none".into()]), &xfs).label(),
            "none: no GPU platform"
        );
    }

    /// The character column at which each of `cells` starts on `line`.
    fn starts(line: &str, cells: &[&str]) -> Vec<usize> {
        cells
            .iter()
            .map(|c| {
                let byte = line
                    .find(c)
                    .unwrap_or_else(|| panic!("{c:?} not on {line:?}"));
                line[..byte].chars().count()
            })
            .collect()
    }

    #[test]
    fn columns_are_as_wide_as_their_content_and_long_mount_points_get_their_own_line() {
        let long = format!("/mnt/{}", "very-long-directory-name/".repeat(4));
        let findings = Findings {
            platform: platform(Some("amd-kfd"), &BOTH, COMPAT_ON, DirectIoPolicy::Auto),
            filesystems: vec![
                mount("/", FsKind::Ext4 { ordered: true }, Some(Ok(()))),
                mount(&long, FsKind::Xfs, Some(Ok(()))),
                mount("/mnt/données", FsKind::Other("tmpfs".into()), None),
            ],
            stats_dir: Err("$XDG_RUNTIME_DIR is not set".into()),
        };
        let table = filesystem_table(&findings);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        let header = starts(
            lines[0],
            &[
                "mount point",
                "filesystem",
                "O_DIRECT",
                "read mode",
                "fastpath",
            ],
        );
        // The widest short mount point sets the first column: "/mnt/données" (12 characters,
        // 13 bytes), so the columns are counted in characters.
        assert_eq!(header[1], "/mnt/données".chars().count() + 1, "{table}");
        assert_eq!(
            starts(
                lines[1],
                &[
                    "/",
                    "ext4 (data=ordered)",
                    "yes",
                    "P2P via amd-kfd",
                    "accepts"
                ]
            ),
            header,
            "{table}"
        );
        assert_eq!(lines[2], long, "the long mount point alone on its line");
        assert_eq!(
            starts(lines[3], &["xfs", "yes", "P2P via amd-kfd", "accepts"]),
            header[1..],
            "{table}"
        );
        assert!(lines[3][..header[1]].trim().is_empty(), "{table}");
        assert_eq!(
            starts(
                lines[4],
                &[
                    "/mnt/données",
                    "tmpfs",
                    "not probed",
                    "staged, O_DIRECT not probed",
                    "declines"
                ]
            ),
            header,
            "{table}"
        );
        assert!(table.lines().all(|l| l == l.trim_end()), "{table}");
        assert_eq!(
            to_json(&findings)["filesystems"][1]["read_mode"],
            "P2P via amd-kfd"
        );
    }

    #[test]
    fn a_mount_point_up_to_the_limit_stays_on_its_row() {
        let edge = format!("/{}", "m".repeat(MOUNT_POINT_WIDTH - 1));
        let rows = vec![vec![edge.clone(), "xfs".to_string(), "ok".to_string()]];
        let table = render_table(
            &["mount point", "filesystem", "note"],
            &rows,
            MOUNT_POINT_WIDTH,
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        assert_eq!(lines[1], format!("{edge} xfs        ok"));
        assert_eq!(starts(lines[0], &["filesystem"]), [MOUNT_POINT_WIDTH + 1]);
    }

    #[test]
    fn fuse_and_network_filesystems_are_listed_and_named_as_such() {
        let facts = |kind: &str, source: &str| FsFacts {
            kind: FsKind::Other(kind.into()),
            mount_point: "/mnt/x".into(),
            source: source.into(),
        };
        let cases = [
            (
                "fuse.ceph-fuse",
                "ceph-fuse",
                "fuse.ceph-fuse (FUSE, network)",
                true,
                true,
            ),
            (
                "fuse.sshfs",
                "me@host:",
                "fuse.sshfs (FUSE, network)",
                true,
                true,
            ),
            ("fuse.mergerfs", "a:b", "fuse.mergerfs (FUSE)", true, false),
            ("fuseblk", "/dev/sdb1", "fuseblk (FUSE)", true, false),
            ("ceph", "10.0.0.1:/", "ceph (network)", false, true),
            ("nfs4", "server:/export", "nfs4 (network)", false, true),
            ("tmpfs", "tmpfs", "tmpfs", false, false),
        ];
        for (kind, source, name, fuse, network) in cases {
            let f = facts(kind, source);
            assert!(interesting(&f, false), "{kind} is listed");
            assert_eq!(fs_name(&f.kind), name);
            let class = FsClass::of(&f.kind);
            assert_eq!(
                (class.is_fuse(), class.is_network()),
                (fuse, network),
                "{kind}"
            );
        }
        for pseudo in ["fusectl", "proc", "cgroup2"] {
            assert!(!interesting(&facts(pseudo, "none"), false), "{pseudo}");
        }
        assert_eq!(FsClass::of(&FsKind::Xfs), FsClass::Local);

        // The table and the JSON say so, and the fastpath declines it by its type name.
        let mut cephfs = mount(
            "/mnt/cephfs",
            FsKind::Other("fuse.ceph-fuse".into()),
            Some(Ok(())),
        );
        cephfs.facts.source = "ceph-fuse".into();
        let f = Findings {
            platform: platform(Some("nvidia-fs"), &BOTH, COMPAT_ON, DirectIoPolicy::Auto),
            filesystems: vec![cephfs],
            stats_dir: Err("none".into()),
        };
        let table = filesystem_table(&f);
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.starts_with("/mnt/cephfs")
                && row.contains("fuse.ceph-fuse (FUSE, network) yes")
                && row.contains("staged, O_DIRECT when cold")
                && row.ends_with("declines: filesystem fuse.ceph-fuse is not supported"),
            "{table}"
        );
        let fs = &to_json(&f)["filesystems"][0];
        assert_eq!(fs["filesystem"], "fuse.ceph-fuse (FUSE, network)");
        assert_eq!(
            (fs["fuse"].as_bool(), fs["network"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(fs["read_mode"], "staged, O_DIRECT when cold");
    }
}
