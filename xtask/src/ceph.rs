//! `cargo xtask ceph up|down|status|test|install`: a single-node Ceph cluster for the tests of
//! remote storage, from the distribution's packages, run as plain background processes.
//!
//! The cluster lives in one private directory, `HIPFILE_CEPH_DIR` or `<target>/ceph`: its
//! `ceph.conf` and keyring, a data directory per daemon, `log/` (each daemon's log and what it
//! printed) and `run/` (pid files and admin sockets). No systemd unit, no `/etc/ceph`, no
//! `/var/lib/ceph` is touched. Every daemon is started with `-c <dir>/ceph.conf`, so the
//! processes of this cluster are told apart from any other by their command line.
//!
//! - one monitor `mon.a` on a free loopback port (messenger v2 only);
//! - one manager `mgr.x`;
//! - one OSD `osd.0` on `memstore`: an object store in the OSD's memory, capped at
//!   [`OSD_BYTES`]. A file-backed BlueStore would need a block file of several GiB on a disk
//!   that CI machines keep tight, a `mkfs` that writes it, and a cache sized for real disks;
//!   memstore starts at once and its data goes with the process, which is what a test cluster
//!   wants. Pools are size 1 (`mon_allow_pool_size_one`) with 8 placement groups each and
//!   autoscaling off, so one OSD holds every pool with the health at `HEALTH_OK`;
//! - a CephFS `cephfs` (pools `cephfs_metadata`, `cephfs_data`) served by `mds.a` and mounted
//!   with `ceph-fuse` at `<dir>/mnt`;
//! - a RADOS Gateway `client.rgw.x` (beast frontend) on a free loopback HTTP port, with an S3
//!   user `hipfile-test` made by `radosgw-admin user create`.
//!
//! `up` writes `<dir>/env`, `export` lines for a shell (`source target/ceph/env`) and for
//! `cargo xtask ceph test`: the S3 credentials and endpoint (`AWS_*`), the CephFS mount
//! (`HIPFILE_CEPHFS_DIR`), the cluster directory (`HIPFILE_CEPH_DIR`) and `CEPH_CONF`, so that
//! `ceph -s` works in that shell. `down` unmounts, stops every daemon (SIGTERM, then SIGKILL after
//! [`STOP_WAIT`]) and removes the directory.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::json;
use crate::workspace::{self, Workspace};

mod config;
mod env;

use config::{key_path, osd_uuid, write_config};
use env::{read_env, s3_keys, Env};

/// The Debian packages the cluster needs (`cargo xtask ceph install`).
pub const PACKAGES: &[&str] = &[
    "ceph-common",
    "ceph-mon",
    "ceph-mgr",
    "ceph-osd",
    "ceph-mds",
    "radosgw",
    "ceph-fuse",
];

/// The programs `up` runs, each with the package that brings it.
const PROGRAMS: &[(&str, &str)] = &[
    ("ceph", "ceph-common"),
    ("ceph-authtool", "ceph-common"),
    ("monmaptool", "ceph-common"),
    ("ceph-mon", "ceph-mon"),
    ("ceph-mgr", "ceph-mgr"),
    ("ceph-osd", "ceph-osd"),
    ("ceph-mds", "ceph-mds"),
    ("radosgw", "radosgw"),
    ("radosgw-admin", "radosgw"),
    ("ceph-fuse", "ceph-fuse"),
];

/// The OSD's memstore capacity.
pub const OSD_BYTES: u64 = 2 << 30;

/// How long a daemon has to stop after SIGTERM before it gets SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// How long `up` waits for any one stage.
const STAGE_WAIT: Duration = Duration::from_secs(120);

/// The S3 user `up` makes.
pub const S3_USER: &str = "hipfile-test";

/// The region written to the env file. RGW does not check the region of a request's signature,
/// and clients leave the location constraint out of a bucket creation in this one.
pub const S3_REGION: &str = "us-east-1";

/// The file that marks a directory as one `up` made, so `down` removes only such a directory.
const MARK: &str = ".hipfile-ceph";

const USAGE: &str = "usage: cargo xtask ceph up|down|status|test [CARGO TEST ARGS]|install";

/// `cargo xtask ceph ...`.
pub fn run(args: &[&str]) -> Result<(), String> {
    match args {
        ["up"] => up(&Cluster::locate()?),
        ["down"] => down(&Cluster::locate()?),
        ["status"] => status(&Cluster::locate()?),
        ["test", rest @ ..] => test(&Cluster::locate()?, rest),
        ["install"] => install(),
        _ => Err(format!("unknown arguments {args:?}\n{USAGE}")),
    }
}

/// The cluster's private directory and the paths in it.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub dir: PathBuf,
}

impl Cluster {
    /// `HIPFILE_CEPH_DIR`, else `ceph/` under the workspace's target directory. The directory
    /// is made absolute: daemons and the env file must not depend on a working directory.
    fn locate() -> Result<Cluster, String> {
        let dir = match std::env::var_os("HIPFILE_CEPH_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => Workspace::load()?.target_dir.join("ceph"),
        };
        let dir = if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir()
                .map_err(|e| format!("the working directory: {e}"))?
                .join(dir)
        };
        Ok(Cluster { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn conf(&self) -> PathBuf {
        self.path("ceph.conf")
    }

    fn keyring(&self) -> PathBuf {
        self.path("keyring")
    }

    fn mount_point(&self) -> PathBuf {
        self.path("mnt")
    }

    fn env_file(&self) -> PathBuf {
        self.path("env")
    }

    fn log(&self, name: &str) -> PathBuf {
        self.path("log").join(name)
    }

    /// `program -c <conf> args`, its output captured; the error carries what it printed.
    fn tool(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let output = Command::new(program)
            .arg("-c")
            .arg(self.conf())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{program} {} failed ({}):\n{stdout}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// The `ceph` command line tool, with a bounded wait for the monitor.
    fn ceph(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["--connect-timeout", "30"];
        all.extend_from_slice(args);
        self.tool("ceph", &all)
    }

    /// Starts a daemon that forks into the background: `program -c <conf> args`, what it prints
    /// going to `log/<name>.out`. Returns when its foreground process exits, which Ceph's
    /// daemons do once the background one is running.
    fn start(&self, name: &str, program: &str, args: &[&str]) -> Result<(), String> {
        let out_path = self.log(&format!("{name}.out"));
        let out =
            std::fs::File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", out_path.display()))?;
        let status = Command::new(program)
            .arg("-c")
            .arg(self.conf())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {} failed ({status}); see {} and {}",
                args.join(" "),
                out_path.display(),
                self.log(&format!("{name}.log")).display()
            ))
        }
    }

    /// The processes of this cluster: those whose command line names its `ceph.conf`.
    fn processes(&self) -> Vec<u32> {
        let conf = self.conf();
        let needle = conf.as_os_str().as_encoded_bytes();
        let me = std::process::id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me && alive(pid))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmd| cmd.split(|&b| b == 0).any(|arg| arg == needle))
            })
            .collect();
        pids.sort_unstable();
        pids
    }
}

/// Whether `pid` runs (a zombie waiting for its parent to reap it does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold anything.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// A free TCP port on the loopback address (free when asked; the daemon binds it moments later).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// Calls `ready` every 250 ms until it says yes, for at most [`STAGE_WAIT`].
fn wait_for(
    what: &str,
    see: &Path,
    mut ready: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < STAGE_WAIT {
        match ready() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(why) => last = why,
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!(
        "waited {} s for {what}; see {}{}",
        STAGE_WAIT.as_secs(),
        see.display(),
        if last.is_empty() {
            String::new()
        } else {
            format!("\nlast error: {last}")
        }
    ))
}

/// The stages of `up`, timed.
struct Stages {
    start: Instant,
    stage: Instant,
}

impl Stages {
    fn new() -> Stages {
        let now = Instant::now();
        Stages {
            start: now,
            stage: now,
        }
    }

    fn done(&mut self, name: &str) {
        println!(
            "ceph up: {name:<34} {:>6.1} s",
            self.stage.elapsed().as_secs_f64()
        );
        self.stage = Instant::now();
    }
}

/// `cargo xtask ceph up`.
fn up(cluster: &Cluster) -> Result<(), String> {
    check_programs()?;
    if cluster.dir.exists() || mounted(&cluster.mount_point()) {
        if cluster.env_file().is_file() && health(cluster).is_ok() {
            println!(
                "ceph up: the cluster at {} is already up; its environment is in {}",
                cluster.dir.display(),
                cluster.env_file().display()
            );
            return Ok(());
        }
        println!(
            "ceph up: {} holds a cluster that is not (fully) up: taking it down first",
            cluster.dir.display()
        );
        down(cluster)?;
    }
    let started = Instant::now();
    match start_cluster(cluster) {
        Ok(()) => {
            println!(
                "ceph up: the cluster is up in {:.1} s; `source {}` for its environment",
                started.elapsed().as_secs_f64(),
                cluster.env_file().display()
            );
            Ok(())
        }
        Err(why) => {
            // Nothing may keep running, but the logs stay for reading; the next `up` or `down`
            // removes them.
            let stopped = stop(cluster);
            Err(format!(
                "{why}\nceph up failed; its daemons are stopped{} and the logs kept in {}",
                stopped
                    .err()
                    .map_or(String::new(), |e| format!(" (not all of them: {e})")),
                cluster.path("log").display()
            ))
        }
    }
}

fn start_cluster(cluster: &Cluster) -> Result<(), String> {
    let mut stages = Stages::new();
    let ports = (free_port()?, free_port()?);
    write_config(cluster, ports)?;
    stages.done("config and keys");

    let monmap = cluster.path("monmap");
    let monmap = monmap
        .to_str()
        .ok_or("the cluster directory is not UTF-8")?;
    cluster.tool(
        "ceph-mon",
        &[
            "-i",
            "a",
            "--mkfs",
            "--monmap",
            monmap,
            "--keyring",
            &key_path(cluster)?,
        ],
    )?;
    cluster.start("mon.a", "ceph-mon", &["-i", "a"])?;
    wait_for("the monitor", &cluster.log("mon.a.log"), || {
        cluster.ceph(&["mon", "stat"]).map(|_| true)
    })?;
    stages.done("monitor");

    cluster.start("mgr.x", "ceph-mgr", &["-i", "x"])?;
    let uuid = osd_uuid()?;
    cluster.ceph(&["osd", "new", &uuid, "0"])?;
    cluster.tool("ceph-osd", &["-i", "0", "--mkfs", "--osd-uuid", &uuid])?;
    cluster.start("osd.0", "ceph-osd", &["-i", "0"])?;
    wait_for("osd.0 to be up", &cluster.log("osd.0.log"), || {
        let stat = json::parse(&cluster.ceph(&["osd", "stat", "-f", "json"])?)?;
        Ok(matches!(stat.get("num_up_osds"), Some(json::Value::Number(n)) if n == "1"))
    })?;
    stages.done("manager and OSD");

    // The gateway makes its pools as it starts, which takes a while: it does so while the
    // filesystem comes up.
    cluster.start("client.rgw.x", "radosgw", &["-n", "client.rgw.x"])?;
    for pool in ["cephfs_metadata", "cephfs_data"] {
        cluster.ceph(&["osd", "pool", "create", pool, "8"])?;
    }
    cluster.ceph(&["fs", "new", "cephfs", "cephfs_metadata", "cephfs_data"])?;
    cluster.ceph(&["fs", "set", "cephfs", "standby_count_wanted", "0"])?;
    cluster.start("mds.a", "ceph-mds", &["-i", "a"])?;
    let mnt = cluster.mount_point();
    let mnt_arg = mnt.to_str().ok_or("the cluster directory is not UTF-8")?;
    // ceph-fuse gives up at once when no MDS is active.
    wait_for("mds.a to be active", &cluster.log("mds.a.log"), || {
        Ok(cluster.ceph(&["mds", "stat"])?.contains("up:active"))
    })?;
    cluster.start("client.fuse", "ceph-fuse", &["--id", "fuse", mnt_arg])?;
    wait_for("the CephFS mount", &cluster.log("client.fuse.log"), || {
        Ok(mounted(&mnt))
    })?;
    check_mount(&mnt)?;
    stages.done("CephFS (mds.a, ceph-fuse)");

    let endpoint = format!("127.0.0.1:{}", ports.1);
    wait_for(
        "the RADOS Gateway to answer HTTP",
        &cluster.log("client.rgw.x.log"),
        || http_status(&endpoint).map(|code| code == 200),
    )?;
    stages.done("RADOS Gateway");

    let user = cluster.tool(
        "radosgw-admin",
        &[
            "user",
            "create",
            "--uid",
            S3_USER,
            "--display-name",
            "hipfile-rs tests",
        ],
    )?;
    let (access, secret) = s3_keys(&user)?;
    let env = Env {
        access,
        secret,
        endpoint: format!("http://{endpoint}"),
        cephfs: mnt,
        dir: cluster.dir.clone(),
        conf: cluster.conf(),
    };
    std::fs::write(cluster.env_file(), env.to_shell())
        .map_err(|e| format!("{}: {e}", cluster.env_file().display()))?;
    stages.done("S3 user and env file");

    let health = cluster.ceph(&["health"])?;
    println!("ceph up: health {}", health.trim());
    if !health.starts_with("HEALTH_OK") {
        println!(
            "{}",
            cluster.ceph(&["health", "detail"]).unwrap_or_default()
        );
    }
    println!(
        "ceph up: total {:>6.1} s",
        stages.start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every program `up` runs is on the PATH, or an error naming the packages to install.
fn check_programs() -> Result<(), String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut missing: Vec<&str> = PROGRAMS
        .iter()
        .filter(|(program, _)| !std::env::split_paths(&path).any(|d| d.join(program).is_file()))
        .map(|(_, package)| *package)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Ceph is not installed: missing package(s) {} (`cargo xtask ceph install` runs \
             apt-get install {})",
            missing.join(" "),
            PACKAGES.join(" ")
        ))
    }
}

/// Whether `path` is a mount point, from `/proc/self/mounts`.
fn mounted(path: &Path) -> bool {
    let Some(path) = path.to_str() else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|text| {
        text.lines()
            .filter_map(|line| line.split(' ').nth(1))
            .any(|point| unescape_mount_field(point) == path)
    })
}

/// A field of `/proc/self/mounts`, whose spaces, tabs, newlines and backslashes are written as
/// octal escapes (`\040`).
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A file written, read back and removed on the mount: the filesystem answers, not only the
/// mount table.
fn check_mount(mnt: &Path) -> Result<(), String> {
    let probe = mnt.join(".hipfile-ceph-probe");
    let text = format!("written by cargo xtask ceph up ({})\n", std::process::id());
    std::fs::write(&probe, &text).map_err(|e| format!("{}: {e}", probe.display()))?;
    let back = std::fs::read_to_string(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
    std::fs::remove_file(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
    if back == text {
        Ok(())
    } else {
        Err(format!("{} read back other bytes", probe.display()))
    }
}

/// The status code of `GET /` at `host:port`, by one HTTP/1.1 request.
fn http_status(endpoint: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(endpoint).map_err(|e| format!("{endpoint}: {e}"))?;
    let timeout = Some(Duration::from_secs(5));
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|e| format!("{endpoint}: {e}"))?;
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {endpoint}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{endpoint}: {e}"))?;
    let mut head = [0u8; 64];
    let mut len = 0;
    while len < 12 {
        match stream.read(&mut head[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) => return Err(format!("{endpoint}: {e}")),
        }
    }
    parse_status_line(&head[..len]).ok_or_else(|| {
        format!(
            "{endpoint} answered {:?}, not HTTP",
            String::from_utf8_lossy(&head[..len])
        )
    })
}

/// The status code of an HTTP/1.x status line.
fn parse_status_line(head: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(head.get(..12)?).ok()?;
    let code = text.strip_prefix("HTTP/1.")?.get(2..5)?;
    code.parse().ok()
}

/// `ceph health` answers and every part the tests use is there: `Ok` with the health line.
fn health(cluster: &Cluster) -> Result<String, String> {
    let mut problems = Vec::new();
    let health = cluster
        .ceph(&["health"])
        .map_err(|e| e.lines().next().unwrap_or("ceph health failed").to_string())?;
    if !mounted(&cluster.mount_point()) {
        problems.push(format!(
            "{} is not mounted",
            cluster.mount_point().display()
        ));
    }
    match std::fs::read_to_string(cluster.env_file()) {
        Ok(text) => {
            let vars = read_env(&text)?;
            let endpoint = vars
                .iter()
                .find(|(name, _)| name == "AWS_ENDPOINT_URL")
                .map(|(_, v)| v.trim_start_matches("http://").to_string())
                .ok_or("the env file has no AWS_ENDPOINT_URL")?;
            match http_status(&endpoint) {
                Ok(200) => {}
                Ok(code) => problems.push(format!("the gateway answers {code} at {endpoint}")),
                Err(why) => problems.push(format!("the gateway does not answer: {why}")),
            }
        }
        Err(e) => problems.push(format!("{}: {e}", cluster.env_file().display())),
    }
    if problems.is_empty() {
        Ok(health.trim().to_string())
    } else {
        Err(problems.join("; "))
    }
}

/// `cargo xtask ceph status`: the daemons, the mount, the gateway and `ceph -s`.
fn status(cluster: &Cluster) -> Result<(), String> {
    if !cluster.dir.exists() {
        return Err(format!(
            "no cluster at {} (`cargo xtask ceph up` starts one)",
            cluster.dir.display()
        ));
    }
    let pids = cluster.processes();
    println!(
        "ceph status: {} process(es) of {}: {pids:?}",
        pids.len(),
        cluster.conf().display()
    );
    if let Ok(text) = cluster.ceph(&["-s"]) {
        println!("{text}");
    }
    let verdict = health(cluster);
    match &verdict {
        Ok(line) => println!(
            "ceph status: up ({line}); CephFS at {}, environment in {}",
            cluster.mount_point().display(),
            cluster.env_file().display()
        ),
        Err(why) => println!("ceph status: NOT up: {why}"),
    }
    verdict.map(|_| ())
}

/// Unmounts the CephFS mount and stops every process of the cluster.
fn stop(cluster: &Cluster) -> Result<(), String> {
    let mnt = cluster.mount_point();
    if mounted(&mnt) {
        let tries: [(&str, &[&str]); 3] = [
            ("fusermount", &["-u"]),
            ("umount", &[]),
            ("umount", &["-l"]),
        ];
        for (program, flags) in tries {
            let done = Command::new(program)
                .args(flags)
                .arg(&mnt)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if done && !mounted(&mnt) {
                break;
            }
        }
        if mounted(&mnt) {
            return Err(format!("{} stays mounted", mnt.display()));
        }
    }
    let pids = cluster.processes();
    signal(&pids, "TERM");
    let start = Instant::now();
    while start.elapsed() < STOP_WAIT && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stubborn: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    if !stubborn.is_empty() {
        println!("ceph down: SIGKILL to {stubborn:?}, still running after SIGTERM");
        signal(&stubborn, "KILL");
        std::thread::sleep(Duration::from_millis(500));
    }
    let left = cluster.processes();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("processes {left:?} survived SIGKILL"))
    }
}

/// `kill -<sig>` to `pids`.
fn signal(pids: &[u32], sig: &str) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

/// `cargo xtask ceph down`.
fn down(cluster: &Cluster) -> Result<(), String> {
    let start = Instant::now();
    stop(cluster)?;
    if cluster.dir.exists() {
        if !cluster.path(MARK).exists() {
            return Err(format!(
                "{} was not made by `cargo xtask ceph up` (no {MARK} in it): not removing it",
                cluster.dir.display()
            ));
        }
        std::fs::remove_dir_all(&cluster.dir)
            .map_err(|e| format!("removing {}: {e}", cluster.dir.display()))?;
    }
    println!(
        "ceph down: no process left, {} removed ({:.1} s)",
        cluster.dir.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo xtask ceph test`: the CephFS tests with the env file's variables.
fn test(cluster: &Cluster, cargo_args: &[&str]) -> Result<(), String> {
    let text = std::fs::read_to_string(cluster.env_file()).map_err(|e| {
        format!(
            "{}: {e} (`cargo xtask ceph up` starts the cluster and writes it)",
            cluster.env_file().display()
        )
    })?;
    let vars = read_env(&text)?;
    health(cluster).map_err(|why| format!("the cluster is not up: {why}"))?;
    for (package, test) in TESTS {
        let mut args = vec!["test", "-p", package, "--features", "ceph", "--test", test];
        args.extend_from_slice(cargo_args);
        let shown = format!("cargo {}", args.join(" "));
        println!("$ {shown}");
        workspace::run_to_end(
            workspace::cargo().args(&args).envs(vars.iter().cloned()),
            "cargo",
            &shown,
        )?;
    }
    Ok(())
}

/// The test targets that need the cluster: (package, test target), each behind the package's
/// `ceph` feature.
pub const TESTS: &[(&str, &str)] = &[("hipfile", "ceph"), ("hipfile-cli", "ceph")];

/// `cargo xtask ceph install`: `apt-get install` of [`PACKAGES`].
fn install() -> Result<(), String> {
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend_from_slice(PACKAGES);
    let shown = format!("apt-get {}", args.join(" "));
    println!("$ {shown}");
    workspace::run_to_end(
        Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        "apt-get",
        &shown,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_and_status_lines_read() {
        assert_eq!(unescape_mount_field(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape_mount_field("/plain"), "/plain");
        assert_eq!(unescape_mount_field(r"/trailing\04"), r"/trailing\04");
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 403 Forbidden"), Some(403));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status_line(b"HTTP/1.1"), None);
    }
}
