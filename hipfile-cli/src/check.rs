//! `hipfile check`: can this machine do direct (P2P) IO between storage and GPU memory, and why not.
//!
//! It reports the platform and runtime, the devices, whether the platform has a P2P driver (AMD:
//! `hipAmdFileRead`/`hipAmdFileWrite` through `hipGetProcAddress` and the KFD device; NVIDIA: the
//! nvidia-fs driver and `libcufile.so.0`), and for every mounted filesystem the fastpath's verdict
//! (ext4 with data=ordered, xfs, or a block device, unless `HIPFILE_UNSUPPORTED_FILE_SYSTEMS=true`)
//! with an O_DIRECT probe where the mount is writable. The exit status is 0 only when the fastpath
//! is possible on at least one filesystem.

use std::path::Path;
use std::sync::Arc;

use clap::Args;
use hipfile_core::{mount_table, Environment, FsFacts, FsKind, IoPath};
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
}

#[derive(Debug)]
struct PlatformFacts {
    platform: Platform,
    runtime_version: i32,
    library: String,
    devices: i32,
    p2p: Result<&'static str, String>,
    /// The backends a driver opened on this platform starts (with the environment's
    /// `HIPFILE_*` settings and `HIPFILE_BACKENDS`), or why it failed to open.
    backends: Result<Vec<(&'static str, IoPath)>, String>,
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
        matches!(&self.platform, Ok(p) if p.backends.as_ref().is_ok_and(|b| b.iter().any(|(_, path)| *path == IoPath::Staged)))
    }

    /// Whether the fastpath can serve IO somewhere on this machine.
    pub fn fastpath_possible(&self) -> bool {
        let p2p = matches!(&self.platform, Ok(p) if p.p2p.is_ok());
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
fn started_backends(rt: Arc<dyn GpuRuntime>) -> Result<Vec<(&'static str, IoPath)>, String> {
    let driver = hipfile::Driver::with_options(hipfile::DriverOptions::with_runtime(rt))
        .map_err(|e| e.to_string())?;
    Ok(driver.backend_paths())
}

/// Mounts that can hold files for GPU IO: backed by a device, or one of the filesystems the
/// fastpath knows; pseudo filesystems (proc, sysfs, cgroup, ...) are left out unless `all`.
fn interesting(f: &FsFacts, all: bool) -> bool {
    all || f.source.starts_with("/dev/")
        || matches!(
            f.kind,
            FsKind::Ext4 { .. } | FsKind::Xfs | FsKind::BlockDevice
        )
        || matches!(&f.kind, FsKind::Other(t) if matches!(t.as_str(), "tmpfs" | "overlay" | "nfs" | "nfs4" | "btrfs" | "zfs" | "lustre" | "beegfs" | "virtiofs" | "9p"))
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
    }
}

fn fs_name(kind: &FsKind) -> String {
    match kind {
        FsKind::BlockDevice => "block device".into(),
        FsKind::Ext4 { ordered: true } => "ext4 (data=ordered)".into(),
        FsKind::Ext4 { ordered: false } => "ext4 (not data=ordered)".into(),
        FsKind::Xfs => "xfs".into(),
        FsKind::Other(name) => name.clone(),
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
            "backends": p.backends.as_ref().ok().map(|b| b.iter().map(|(name, _)| *name).collect::<Vec<_>>()),
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
                "fastpath_filesystem": fs.verdict.is_ok(),
                "declined_because": fs.verdict.as_ref().err(),
                "o_direct": fs.o_direct.as_ref().map(|r| r.is_ok()),
                "o_direct_error": fs.o_direct.as_ref().and_then(|r| r.as_ref().err()),
            })
        })
        .collect();
    json!({
        "platform": platform,
        "filesystems": filesystems,
        "fastpath_possible": f.fastpath_possible(),
        "fallback_available": f.fallback_available(),
    })
}

fn print_table(f: &Findings) {
    match &f.platform {
        Ok(p) => {
            println!(
                "platform:     {} (runtime version {}, {})",
                p.platform, p.runtime_version, p.library
            );
            println!("devices:      {}", p.devices);
            match &p.p2p {
                Ok(name) => println!("P2P driver:   {name}"),
                Err(why) => println!("P2P driver:   none: {why}"),
            }
            match &p.backends {
                Ok(backends) => {
                    let named: Vec<String> = backends
                        .iter()
                        .map(|(name, path)| format!("{name} ({})", path.name()))
                        .collect();
                    println!("backends:     {}", named.join(", "));
                }
                Err(why) => println!("backends:     the driver does not open: {why}"),
            }
        }
        Err(why) => {
            println!("platform:     none");
            for line in why {
                println!("              {line}");
            }
            println!(
                "              (`--platform sim` checks against the simulated GPU; `--verbose` \
                 lists every library tried)"
            );
        }
    }
    println!();
    println!(
        "{:<28} {:<26} {:<10} fastpath",
        "mount point", "filesystem", "O_DIRECT"
    );
    for fs in &f.filesystems {
        let odirect = match &fs.o_direct {
            Some(Ok(())) => "yes".to_string(),
            Some(Err(_)) => "no".to_string(),
            None => "not probed".to_string(),
        };
        let verdict = match (&fs.verdict, &fs.o_direct) {
            (Err(why), _) => format!("declines: {why}"),
            (Ok(()), Some(Err(why))) => format!("declines: {why}"),
            (Ok(()), _) => "accepts".to_string(),
        };
        println!(
            "{:<28} {:<26} {:<10} {}",
            fs.facts.mount_point,
            fs_name(&fs.facts.kind),
            odirect,
            verdict
        );
    }
    println!();
    if f.fastpath_possible() {
        println!("verdict: the fastpath (P2P DMA) is possible on the filesystems it accepts above");
    } else if f.fallback_available() {
        println!("verdict: only the fallback (staged through pinned host memory) is available");
    } else if f.platform.is_ok() {
        println!("verdict: no backend can serve IO here (see the backends line)");
    } else {
        println!("verdict: no GPU platform; hipfile-rs can run only on the simulated GPU here");
    }
}

/// Run the check; `Ok(true)` when the fastpath is possible.
pub fn run(args: &CheckArgs) -> Result<bool, String> {
    let findings = examine(args.platform.as_deref(), args.all, args.verbose);
    if args.json {
        println!("{}", to_json(&findings));
    } else {
        print_table(&findings);
    }
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
    }

    #[test]
    fn without_a_platform_only_the_sim_is_offered_and_the_fastpath_is_impossible() {
        let f = Findings {
            platform: Err(vec!["AMD: no device".into()]),
            filesystems: Vec::new(),
        };
        assert!(!f.fastpath_possible());
        assert_eq!(to_json(&f)["fallback_available"], false);
    }
}
