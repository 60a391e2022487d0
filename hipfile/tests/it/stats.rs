//! Statistics on the sim with known workloads: per-direction counters, size histograms, per-GPU
//! figures, declines by reason, failovers between backends, and the levels.

use std::sync::Arc;
use std::time::Duration;

use hipfile::{ApiOp, DeclineReason, Driver, DriverOptions, IoPath};
use hipfile_core::{DirectIoPolicy, EnvConfig, PosixIo, Settings};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::GpuRuntime;
use hipfile_testkit::conformance::pattern;

use crate::harness::scratch_dir;

const KIB: usize = 1024;

/// A driver on a fresh sim with both built-in backends, at statistics level `level`.
fn driver(level: u8, env: EnvConfig) -> (Arc<SimRuntime>, Driver) {
    driver_with(level, env, Settings::default())
}

fn driver_with(level: u8, env: EnvConfig, settings: Settings) -> (Arc<SimRuntime>, Driver) {
    let sim = Arc::new(SimRuntime::default());
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let options = DriverOptions {
        backends: Some(hipfile::backends()),
        selection: None,
        io: Arc::new(PosixIo),
        env: EnvConfig {
            stats_level: Some(level),
            ..env
        },
        settings,
        ..DriverOptions::with_runtime(gpu)
    };
    (
        sim,
        Driver::with_options(options).expect("a driver on the sim"),
    )
}

fn data_file(dir: &std::path::Path, len: usize) -> std::fs::File {
    let path = dir.join("data");
    std::fs::write(&path, pattern(3, 0, len)).unwrap();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// `n` reads of 4 KiB, one after the other from offset 0, of a 64 KiB file through `driver`.
fn read_4k_pieces(driver: &Driver, n: usize) {
    let dir = scratch_dir();
    let file = data_file(dir.path(), 64 * KIB);
    let handle = driver.register_file(&file).unwrap();
    let mut buf = driver.alloc(4 * KIB).unwrap();
    for i in 0..n {
        handle.read(&mut buf, (i * 4 * KIB) as u64).unwrap();
    }
}

#[test]
fn known_reads_give_exactly_their_counters_histogram_and_gpu_figures() {
    let (_sim, driver) = driver(3, EnvConfig::default());
    let dir = scratch_dir();
    let file = data_file(dir.path(), 256 * KIB);
    let handle = driver.register_file(&file).unwrap();
    let mut four = driver.alloc(4 * KIB).unwrap();
    let mut sixty_four = driver.alloc(64 * KIB).unwrap();
    let mut odd = driver.alloc(1000).unwrap();
    for i in 0..4 {
        assert_eq!(
            handle.read(&mut four, (i * 4 * KIB) as u64).unwrap(),
            4 * KIB
        );
    }
    for i in 0..2 {
        assert_eq!(
            handle.read(&mut sixty_four, (i * 64 * KIB) as u64).unwrap(),
            64 * KIB
        );
    }
    // Unaligned: the direct path declines, the staged path runs them.
    for i in 0..3 {
        assert_eq!(handle.read(&mut odd, 1 + (i * 1000) as u64).unwrap(), 1000);
    }
    assert_eq!(handle.write(&four, 0).unwrap(), 4 * KIB);
    let s = driver.stats().unwrap();
    assert_eq!(s.level, 3);
    assert_eq!((s.read.ok, s.read.err), (9, 0));
    assert_eq!(s.read.bytes, (4 * 4 + 2 * 64) as u64 * 1024 + 3000);
    assert_eq!((s.read.direct, s.read.staged, s.read.unaligned), (6, 3, 3));
    assert_eq!((s.write.ok, s.write.bytes, s.write.direct), (1, 4096, 1));
    let mut hist = [0u64; 32];
    hist[0] = 3; // 1000 bytes
    hist[2] = 4; // 4 KiB
    hist[6] = 2; // 64 KiB
    assert_eq!(s.read.size_kb_hist, hist);
    assert!(s.read.latency_sum_us >= s.read.latency_avg_us() * 9);
    assert!(s.read.window_us >= s.read.latency_avg_us());
    let fastpath = s.backend("fastpath").unwrap();
    assert_eq!((fastpath.ops, fastpath.errors), (7, 0));
    assert_eq!(fastpath.declined(DeclineReason::Misaligned), 3);
    let fallback = s.backend("fallback").unwrap();
    assert_eq!((fallback.ops, fallback.bytes), (3, 3000));
    assert!(fallback.declines.is_empty());
    assert_eq!(fastpath.mechanism, Some("sim"), "the sim's P2P driver");
    assert_eq!(
        fallback.counters,
        [
            ("page_cache_bytes", 3000),
            ("o_direct_bytes", 0),
            ("pinned_page_cache_bytes", 0),
            ("page_cache_pins", 0),
            ("page_cache_pins_evicted", 0)
        ],
        "unaligned pieces go through the page cache"
    );
    assert_eq!(s.ops_by(IoPath::Direct), 7);
    assert_eq!(s.gpus.len(), 1);
    let gpu = &s.gpus[0];
    assert_eq!(gpu.read, s.read, "one GPU ran every read");
    assert_eq!(gpu.write.bytes, 4096);
    assert_eq!(s.api(ApiOp::HandleRegister).ok, 1);
}

#[test]
fn buffer_registrations_are_counted_per_gpu() {
    let (_sim, driver) = driver(3, EnvConfig::default());
    let buf = driver.alloc(64 * KIB).unwrap();
    {
        let _registered = driver.register_buffer(&buf).unwrap();
        assert!(driver.register_buffer(&buf).is_err());
        let s = driver.stats().unwrap();
        assert_eq!(s.gpus[0].registered_bytes, 64 * KIB as u64);
        assert_eq!(s.api(ApiOp::BufRegister).ok, 1);
        assert_eq!(s.api(ApiOp::BufRegister).err, 1);
        assert_eq!(s.gpus[0].buf_register.err, 1);
    }
    let s = driver.stats().unwrap();
    assert_eq!(s.api(ApiOp::BufDeregister).ok, 1);
    assert_eq!(
        (s.gpus[0].buf_deregister, s.gpus[0].registered_bytes),
        (1, 0)
    );
}

#[test]
fn forced_compat_mode_is_counted_as_the_direct_paths_decline() {
    let forced = EnvConfig {
        force_compat_mode: Some(true),
        ..EnvConfig::default()
    };
    let (_sim, driver) = driver(1, forced);
    read_4k_pieces(&driver, 5);
    let s = driver.stats().unwrap();
    let fastpath = s.backend("fastpath").unwrap();
    assert_eq!(fastpath.declined(DeclineReason::CompatModeForced), 5);
    assert_eq!(fastpath.declines.len(), 1);
    assert_eq!((fastpath.ops, s.backend("fallback").unwrap().ops), (0, 5));
    assert_eq!(s.declined(DeclineReason::CompatModeForced), 5);
    assert_eq!((s.read.staged, s.read.direct), (5, 0));
    assert!(s.gpus.is_empty(), "per-GPU counters are level 3");
    assert_eq!(s.read.size_kb_hist, [0; 32], "histograms are level 2");
}

#[test]
fn a_direct_failure_taken_over_by_the_staged_path_is_a_failover() {
    let (sim, driver) = driver(1, EnvConfig::default());
    let dir = scratch_dir();
    let file = data_file(dir.path(), 64 * KIB);
    let handle = driver.register_file(&file).unwrap();
    let mut buf = driver.alloc(16 * KIB).unwrap();
    sim.p2p_faults().fail_call(1, libc::ENODEV);
    assert_eq!(handle.read(&mut buf, 0).unwrap(), 16 * KIB);
    assert_eq!(handle.read(&mut buf, 16 * KIB as u64).unwrap(), 16 * KIB);
    let s = driver.stats().unwrap();
    let fastpath = s.backend("fastpath").unwrap();
    assert_eq!((fastpath.errors, fastpath.ops), (1, 1));
    assert_eq!(fastpath.failed_over_to("fallback"), 1);
    assert_eq!(s.backend("fallback").unwrap().ops, 1);
    assert_eq!((s.read.ok, s.read.err), (2, 0));
}

#[test]
fn level_zero_counts_nothing() {
    let (_sim, driver) = driver(0, EnvConfig::default());
    let dir = scratch_dir();
    let file = data_file(dir.path(), 64 * KIB);
    let handle = driver.register_file(&file).unwrap();
    let mut buf = driver.alloc(1000).unwrap();
    handle.read(&mut buf, 1).unwrap();
    let s = driver.stats().unwrap();
    assert_eq!(s.level, 0);
    assert_eq!(s.read, Default::default());
    assert_eq!(s.declined(DeclineReason::Misaligned), 0);
    assert_eq!(s.api(ApiOp::HandleRegister).ok, 0);
}

#[test]
fn the_staged_path_counts_page_cache_and_o_direct_bytes() {
    let forced = EnvConfig {
        force_compat_mode: Some(true),
        ..EnvConfig::default()
    };
    for (policy, expected) in [
        (
            DirectIoPolicy::Never,
            [
                ("page_cache_bytes", 20480),
                ("o_direct_bytes", 0),
                ("pinned_page_cache_bytes", 0),
                ("page_cache_pins", 0),
                ("page_cache_pins_evicted", 0),
            ],
        ),
        (
            DirectIoPolicy::Always,
            [
                ("page_cache_bytes", 0),
                ("o_direct_bytes", 20480),
                ("pinned_page_cache_bytes", 0),
                ("page_cache_pins", 0),
                ("page_cache_pins_evicted", 0),
            ],
        ),
    ] {
        let settings = Settings {
            direct_io: policy,
            ..Settings::default()
        };
        let (_sim, driver) = driver_with(1, forced, settings);
        read_4k_pieces(&driver, 5);
        let s = driver.stats().unwrap();
        assert_eq!(
            s.backend("fallback").unwrap().counters,
            expected,
            "{policy:?}"
        );
    }
    // Statistics off: nothing counted.
    let (_sim, driver) = driver_with(0, forced, Settings::default());
    read_4k_pieces(&driver, 1);
    let s = driver.stats().unwrap();
    assert!(s
        .backend("fallback")
        .unwrap()
        .counters
        .iter()
        .all(|(_, n)| *n == 0));
}

const SERVED: &str = "stats::the_socket_serves_a_running_drivers_counters_until_it_closes";

/// In the child: a driver at level 3 on the sim, three 4 KiB reads and one unaligned read, then
/// wait (for the parent to read the socket) until stdin closes; close the driver and check that
/// the socket and its thread are gone.
fn serve_known_counters() {
    use std::io::Read;
    let (_sim, driver) = driver(3, EnvConfig::default());
    let dir = scratch_dir();
    let file = data_file(dir.path(), 64 * KIB);
    let handle = driver.register_file(&file).unwrap();
    let mut four = driver.alloc(4 * KIB).unwrap();
    for i in 0..3 {
        handle.read(&mut four, (i * 4 * KIB) as u64).unwrap();
    }
    let mut odd = driver.alloc(100).unwrap();
    handle.read(&mut odd, 1).unwrap();
    assert!(driver.core().session().unwrap().serves_stats());
    println!("[stats-ready]");
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
    drop((handle, four, odd));
    drop(driver);
    let address = hipfile_core::stats_server::socket_address(std::process::id()).unwrap();
    let gone = std::os::unix::net::UnixStream::connect_addr(&address).unwrap_err();
    assert_eq!(gone.kind(), std::io::ErrorKind::ConnectionRefused);
    let stats_threads = crate::harness::thread_ids()
        .into_iter()
        .filter(|&tid| crate::harness::thread_name(tid) == "hipfile-stats")
        .count();
    assert_eq!(
        stats_threads, 0,
        "the listener thread ended with the driver"
    );
}

#[test]
fn the_socket_serves_a_running_drivers_counters_until_it_closes() {
    use std::io::{BufRead, BufReader, Read};
    if crate::harness::as_child(SERVED, serve_known_counters) {
        return;
    }
    let mut cmd = crate::harness::child_command(SERVED);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("the child ended before it served: {seen}");
        }
        seen.push_str(&line);
        if line.contains("[stats-ready]") {
            break;
        }
    }
    let address = hipfile_core::stats_server::socket_address(child.id()).unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect_addr(&address).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["pid"], child.id());
    assert_eq!(doc["level"], 3);
    assert_eq!(doc["read"]["ok"], 4);
    assert_eq!(doc["read"]["bytes"], 3 * 4096 + 100);
    assert_eq!(doc["read"]["size_kb_hist"][2], 3);
    let backends = doc["backends"].as_array().unwrap();
    let fastpath = backends.iter().find(|b| b["name"] == "fastpath").unwrap();
    assert_eq!(fastpath["ops"], 3);
    assert_eq!(fastpath["mechanism"], "sim");
    assert_eq!(fastpath["declines"]["misaligned"], 1);
    assert_eq!(doc["gpus"][0]["read"]["ok"], 4);
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr).unwrap();
    }
    assert!(
        status.success() && rest.contains("[child-done]"),
        "the child failed ({status}):\n{seen}{rest}\n--- stderr\n{stderr}"
    );
}

#[test]
fn the_stats_level_setting_counts_as_the_environment_does() {
    // `hipFileParamProfileStats` sets `stats_level`; the higher of it and the environment's wins.
    let settings = Settings {
        stats_level: 2,
        ..Settings::default()
    };
    let (_sim, driver) = driver_with(0, EnvConfig::default(), settings);
    read_4k_pieces(&driver, 1);
    let s = driver.stats().unwrap();
    assert_eq!(s.level, 2);
    assert_eq!((s.read.ok, s.read.size_kb_hist[2]), (1, 1));
    assert!(s.gpus.is_empty());
}

/// A fresh runtime directory of this user's alone (mode 700), as `$XDG_RUNTIME_DIR` would be.
fn private_runtime_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// A child in role `test`, its stdin and stdout piped, with `runtime` as its
/// `$XDG_RUNTIME_DIR` (`None`: unset, so only the abstract name can serve).
struct SocketChild {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    seen: String,
}

impl SocketChild {
    fn spawn(test: &str, runtime: Option<&std::path::Path>) -> SocketChild {
        let mut cmd = crate::harness::child_command(test);
        cmd.stdin(std::process::Stdio::piped());
        match runtime {
            Some(dir) => cmd.env("XDG_RUNTIME_DIR", dir),
            None => cmd.env_remove("XDG_RUNTIME_DIR"),
        };
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        SocketChild {
            child,
            stdin,
            stdout,
            seen: String::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn say(&mut self, line: &str) {
        use std::io::Write;
        writeln!(self.stdin.as_mut().unwrap(), "{line}").unwrap();
    }

    /// Read the child's output up to its line `[stats-ready]`.
    fn wait_ready(&mut self) {
        use std::io::BufRead;
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                let _ = self.child.kill();
                let mut stderr = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
                }
                panic!(
                    "the child ended before it was ready: {}\n--- stderr\n{stderr}",
                    self.seen
                );
            }
            self.seen.push_str(&line);
            if line.contains("[stats-ready]") {
                return;
            }
        }
    }

    /// Close its stdin (the child's cue to end) and check that it passed.
    fn finish(mut self) {
        use std::io::Read;
        drop(self.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).unwrap();
        }
        assert!(
            status.success() && rest.contains("[child-done]"),
            "the child failed ({status}):\n{}{rest}\n--- stderr\n{stderr}",
            self.seen
        );
    }
}

/// In a child: wait until stdin closes.
fn until_stdin_closes() {
    use std::io::Read;
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
}

const SQUATTED: &str = "stats::an_address_another_process_holds_is_reported_and_its_holder_refused";

/// In the child: once the parent has bound this process's abstract name (and says `go`), open
/// a driver at level 3, read twice, and check what the driver says of its sockets: not served
/// at all without a runtime directory, served at the socket file alone with one; each time
/// naming the parent as the holder of the abstract name.
fn serve_beside_a_squatter() {
    use hipfile_core::stats_server::{socket_path, StatsService};
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let (_sim, driver) = driver(3, EnvConfig::default());
    read_4k_pieces(&driver, 2);
    let pid = std::process::id();
    let held = format!(
        "@hipfile-stats-{pid} is held by process {} of user ",
        std::os::unix::process::parent_id()
    );
    let service = driver.stats_service().unwrap();
    match std::env::var_os("XDG_RUNTIME_DIR") {
        None => {
            let StatsService::NotServed { why } = &service else {
                panic!("{service:?}");
            };
            assert_eq!(why.len(), 2, "{why:?}");
            assert!(why[0].contains("$XDG_RUNTIME_DIR is not set"), "{why:?}");
            assert!(why[1].starts_with(&held), "{why:?}");
            assert!(!driver.core().session().unwrap().serves_stats());
        }
        Some(dir) => {
            let StatsService::Served { at, missed } = &service else {
                panic!("{service:?}");
            };
            let file = socket_path(std::path::Path::new(&dir), pid);
            assert_eq!(at, &[file.display().to_string()]);
            assert_eq!(missed.len(), 1, "{missed:?}");
            assert!(missed[0].starts_with(&held), "{missed:?}");
        }
    }
    println!("[stats-ready]");
    until_stdin_closes();
}

#[test]
fn an_address_another_process_holds_is_reported_and_its_holder_refused() {
    use hipfile_core::stats_server::{request_from, socket_address, RequestError};
    if crate::harness::as_child(SQUATTED, serve_beside_a_squatter) {
        return;
    }
    for private in [false, true] {
        let runtime = private_runtime_dir();
        let mut child = SocketChild::spawn(SQUATTED, private.then(|| runtime.path()));
        // This process takes the child's abstract name before the child opens its driver.
        let squatter =
            std::os::unix::net::UnixListener::bind_addr(&socket_address(child.pid()).unwrap())
                .unwrap();
        child.say("go");
        child.wait_ready();
        let dirs = [runtime.path().to_path_buf()];
        let answer = request_from(child.pid(), Some(&dirs), Duration::from_secs(5));
        let holder = format!("held by process {} of user", std::process::id());
        if private {
            // The socket file serves the child's own counters; the document says who holds
            // the abstract name.
            let doc = answer.unwrap();
            assert_eq!(doc["pid"], child.pid());
            assert_eq!(doc["read"]["ok"], 2);
            assert_eq!(doc["socket"]["state"], "served");
            assert!(
                doc["socket"]["missed"][0]
                    .as_str()
                    .unwrap()
                    .contains(&holder),
                "{}",
                doc["socket"]
            );
        } else {
            // Only the squatter is there: its answer is refused, never read.
            let e = answer.unwrap_err();
            assert!(matches!(e, RequestError::Impostor(_)), "{e:?}");
            assert!(e.to_string().contains(&holder), "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("not by process {} of user", child.pid())),
                "{e}"
            );
        }
        child.finish();
        drop(squatter);
    }
}

const FORKED: &str = "stats::a_forked_child_keeps_none_of_its_parents_addresses";

/// In the child: open a driver at level 3, fork a process that holds everything inherited and
/// waits to be killed, close the driver and open another, read twice with it, and check that it
/// serves at every address the first one did.
fn reopen_after_a_fork() {
    use hipfile_core::stats_server::{socket_path, StatsService};
    let pid = std::process::id();
    let name = format!("@hipfile-stats-{pid}");
    let expected = match std::env::var_os("XDG_RUNTIME_DIR") {
        None => vec![name],
        Some(dir) => vec![
            socket_path(std::path::Path::new(&dir), pid)
                .display()
                .to_string(),
            name,
        ],
    };
    let served_at = |service: Option<StatsService>| match service {
        Some(StatsService::Served { at, .. }) => at,
        other => panic!("{other:?}"),
    };
    let (_sim, first) = driver(3, EnvConfig::default());
    assert_eq!(served_at(first.stats_service()), expected);
    // SAFETY: getpid takes nothing.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the forked process makes only async-signal-safe calls until it is killed: it
    // never runs code of the multi-threaded process it was copied from.
    let holder = unsafe { libc::fork() };
    assert!(holder >= 0, "fork: {}", std::io::Error::last_os_error());
    if holder == 0 {
        // SAFETY: prctl, getppid, close, _exit and pause take no pointers. The holder dies
        // with the thread that forked it, and gives up stdout and stderr so that the test
        // reading them sees their end when this child ends, whatever became of the holder.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(0);
            }
            libc::close(1);
            libc::close(2);
            loop {
                libc::pause();
            }
        }
    }
    drop(first);
    let (_sim, second) = driver(3, EnvConfig::default());
    read_4k_pieces(&second, 2);
    let service = second.stats_service();
    assert_eq!(
        service,
        Some(StatsService::Served {
            at: expected.clone(),
            missed: if expected.len() == 1 {
                vec!["no socket file: $XDG_RUNTIME_DIR is not set".into()]
            } else {
                Vec::new()
            },
        })
    );
    println!("[stats-ready]");
    until_stdin_closes();
    // SAFETY: `holder` is this process's child; waitpid reaps it.
    unsafe {
        libc::kill(holder, libc::SIGKILL);
        libc::waitpid(holder, std::ptr::null_mut(), 0);
    }
}

#[test]
fn a_forked_child_keeps_none_of_its_parents_addresses() {
    use hipfile_core::stats_server::request_from;
    if crate::harness::as_child(FORKED, reopen_after_a_fork) {
        return;
    }
    for private in [false, true] {
        let runtime = private_runtime_dir();
        let mut child = SocketChild::spawn(FORKED, private.then(|| runtime.path()));
        child.wait_ready();
        // The abstract name, and the socket file where there is one, answer with the second
        // driver's counters.
        let file = [runtime.path().to_path_buf()];
        let mut places: Vec<&[std::path::PathBuf]> = vec![&[]];
        if private {
            places.push(&file);
        }
        for dirs in places {
            let doc = request_from(child.pid(), Some(dirs), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{dirs:?}: {e}"));
            assert_eq!(doc["pid"], child.pid());
            assert_eq!(doc["read"]["ok"], 2, "{dirs:?}");
        }
        child.finish();
    }
}
