//! What the hostile tests share: re-running this test binary as a child process for one test
//! (so that a test may be killed, limited, signalled or moved to a mount namespace of its own
//! without touching the other tests of the binary), seeded random numbers, the process counts
//! that leak checks compare, the race of many threads under a watchdog that the stress tests
//! run, and the few system calls the tests need that have no safe wrapper in the workspace
//! (signal dispositions, `tgkill`, `unshare`, `mount`, `setrlimit`).
//!
//! A test that needs a child calls [`as_child`] first: in the child (the environment variable
//! [`ROLE_VAR`] names the test) it runs the child's part and returns true; in the parent it
//! returns false and the test goes on to spawn [`child_command`] and judge what came back.
//! Children print their figures through [`figure`]; [`ChildRun::echo_figures`] repeats them in
//! the parent's output, where `--nocapture` shows them.

use std::ffi::CString;
use std::fmt::Debug;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfile::{Driver, DriverOptions, Settings};
use hipfile_hip::GpuRuntime;

/// Names the test a re-executed test binary runs as a child.
pub const ROLE_VAR: &str = "HIPFILE_IT_CHILD";

/// A directory a parent hands to its child.
pub const DIR_VAR: &str = "HIPFILE_IT_DIR";

/// A seed a parent hands to its child.
pub const SEED_VAR: &str = "HIPFILE_IT_SEED";

/// Seconds the concurrency tests run (default: a CI-sized few).
pub const SECONDS_VAR: &str = "HIPFILE_STRESS_SECS";

const DONE_MARK: &str = "[child-done]";
const FIGURE_MARK: &str = "[figures]";

/// The libtest name of test `function` in the module `module_path!()` names (the binary's own
/// crate name is not part of it).
pub fn test_name(module_path: &str, function: &str) -> String {
    let module = module_path
        .split_once("::")
        .map_or("", |(_crate, rest)| rest);
    if module.is_empty() {
        function.to_string()
    } else {
        format!("{module}::{function}")
    }
}

/// In a child started for `test`, run `body`, mark the run complete and return true; anywhere
/// else return false at once.
pub fn as_child(test: &str, body: impl FnOnce()) -> bool {
    if std::env::var(ROLE_VAR).ok().as_deref() != Some(test) {
        return false;
    }
    body();
    println!("{DONE_MARK} {test}");
    true
}

/// Print one line of figures (the parent repeats them).
pub fn figure(line: impl AsRef<str>) {
    println!("{FIGURE_MARK} {}", line.as_ref());
}

/// The environment variable `name` of a child, which its parent must have set.
pub fn child_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("the parent did not set {name}"))
}

/// The seconds a concurrency test runs: [`SECONDS_VAR`], else `default`.
pub fn run_seconds(default: f64) -> Duration {
    let secs = std::env::var(SECONDS_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(default);
    Duration::from_secs_f64(secs)
}

/// What a racer of [`race`] returns: counts that add up over the threads.
pub trait Merge: Default + Send {
    /// Add `other`'s counts to these.
    fn merge(&mut self, other: Self);
}

/// Run `racer(t)` on `threads` threads `t` of a scope for `run_for`, then set `stop`, wait for
/// every racer to end and return what they returned, merged, and how long the race took. A
/// racer's panic is resumed here once all of them have ended. The racers must return soon after
/// `stop` is set.
///
/// A watchdog thread guards the race: if the racers have not all ended `hang_after` past the
/// run, it prints, for each thread `t`, what `describe(t)` says of it (the operation in
/// progress, the operations done) in a message naming the race `what`, and aborts the process,
/// so that a hang ends with the stuck threads named instead of a silent kill.
pub fn race<T: Merge, S: Debug>(
    what: &str,
    threads: usize,
    run_for: Duration,
    hang_after: Duration,
    stop: &AtomicBool,
    racer: impl Fn(usize) -> T + Sync,
    describe: impl Fn(usize) -> (S, u64) + Sync,
) -> (T, Duration) {
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let joined: Vec<_> = thread::scope(|s| {
        let racers: Vec<_> = (0..threads)
            .map(|t| {
                let racer = &racer;
                s.spawn(move || racer(t))
            })
            .collect();
        let (describe, finished) = (&describe, &finished);
        s.spawn(move || {
            let deadline = started + run_for + hang_after;
            while !finished.load(Ordering::Acquire) {
                if Instant::now() > deadline {
                    let states: Vec<String> = (0..threads)
                        .map(|t| {
                            let (doing, done) = describe(t);
                            format!("{t}:{doing:?}#{done}")
                        })
                        .collect();
                    eprintln!(
                        "watchdog: the {what} did not end within {hang_after:?} after its run; \
                         threads (operation in progress # operations done): {}",
                        states.join(" ")
                    );
                    std::process::abort();
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
        let joined: Vec<_> = racers.into_iter().map(|r| r.join()).collect();
        finished.store(true, Ordering::Release);
        joined
    });
    let mut merged = T::default();
    for r in joined {
        match r {
            Ok(tally) => merged.merge(tally),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    (merged, started.elapsed())
}

/// This test binary, set up to run only `test`, in the child role, with its output piped.
pub fn child_command(test: &str) -> Command {
    let exe = std::env::current_exe().expect("the path of the running test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What a child left behind.
#[derive(Debug)]
pub struct ChildRun {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl ChildRun {
    /// Repeat the child's figures in this process's output.
    pub fn echo_figures(&self) {
        // A first figure may share its line with libtest's "test ... " prefix.
        for line in self
            .stdout
            .lines()
            .filter_map(|l| l.find(FIGURE_MARK).map(|i| &l[i..]))
        {
            println!("{line}");
        }
    }

    /// Whether the child ran `test` to its end.
    pub fn completed(&self, test: &str) -> bool {
        self.stdout
            .lines()
            .filter_map(|l| l.find(DONE_MARK).map(|i| &l[i + DONE_MARK.len()..]))
            .any(|rest| rest.trim() == test)
    }

    /// Panic, showing the child's output, unless it exited successfully having run `test` to
    /// its end (a filter that matched no test would also exit successfully).
    #[track_caller]
    pub fn assert_passed(&self, test: &str) {
        self.echo_figures();
        assert!(
            self.status.success() && self.completed(test),
            "the child running {test} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// Collect the output of `child` while it runs; kill it if it is still running after `limit`
/// (a hang) and panic with what it printed.
pub fn wait_with_limit(mut child: Child, limit: Duration, what: &str) -> ChildRun {
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait().expect("waiting for a child") {
            Some(status) => break status,
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let status = child.wait().expect("reaping a killed child");
                panic!(
                    "{what}: the child did not finish within {limit:?} (a hang), killed ({status}):\n\
                     --- stdout\n{}\n--- stderr\n{}",
                    stdout.join().unwrap_or_default(),
                    stderr.join().unwrap_or_default()
                );
            }
            None => thread::sleep(Duration::from_millis(10)),
        }
    };
    ChildRun {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Spawn `cmd` and wait for it with [`wait_with_limit`].
pub fn run_child(mut cmd: Command, limit: Duration, what: &str) -> ChildRun {
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start the child: {e}"));
    wait_with_limit(child, limit, what)
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            // A read error leaves what was read so far, which is all a report can show.
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// A driver of its own on `gpu`, the environment's settings changed by `tune`.
pub fn driver_on(gpu: &Arc<dyn GpuRuntime>, tune: impl FnOnce(&mut Settings)) -> Driver {
    let mut options = DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(Arc::clone(gpu))
    };
    tune(&mut options.settings);
    Driver::with_options(options).expect("opening a driver")
}

/// The options of a driver on `gpu` with the built-in backends over the kernel's IO (no
/// selection from the environment), counting statistics at level 1.
pub fn counting_options(gpu: &Arc<dyn GpuRuntime>) -> DriverOptions {
    DriverOptions {
        backends: Some(hipfile::backends()),
        selection: None,
        io: Arc::new(hipfile_core::PosixIo),
        env: hipfile_core::EnvConfig {
            stats_level: Some(1),
            ..hipfile_core::EnvConfig::default()
        },
        ..DriverOptions::with_runtime(Arc::clone(gpu))
    }
}

/// A seeded generator (the testkit's SplitMix64), so every run of a test makes the same
/// choices.
#[derive(Clone, Debug)]
pub struct Rng(hipfile_testkit::fuzz::SplitMix64);

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(hipfile_testkit::fuzz::SplitMix64::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `[lo, hi)`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo < hi, "empty range {lo}..{hi}");
        lo + self.next_u64() % (hi - lo)
    }

    /// A size in `[lo, hi)`.
    pub fn size(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64) as usize
    }

    /// True `percent` times out of a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// A fresh directory on the build's filesystem (ext4 or xfs where these tests run, so the direct
/// path serves aligned requests), or, where the build's directory does not exist (test binaries
/// carried to a GPU machine), in the working directory, which the GPU bundle points at its
/// scratch folder.
pub fn scratch_dir() -> tempfile::TempDir {
    let build = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let root = if build.is_dir() {
        build.to_path_buf()
    } else {
        std::env::current_dir().expect("the working directory")
    };
    tempfile::tempdir_in(&root)
        .unwrap_or_else(|e| panic!("a scratch directory in {}: {e}", root.display()))
}

/// The position of the first byte where `actual` and `expected` differ, if any (lengths
/// included).
pub fn first_difference(actual: &[u8], expected: &[u8]) -> Option<usize> {
    if actual == expected {
        return None;
    }
    Some(
        actual
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(actual.len().min(expected.len())),
    )
}

// ---------------------------------------------------------------------------------------------
// Process counts

/// Open descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("listing /proc/self/fd")
        .count()
        .saturating_sub(1)
}

/// Threads of this process, by id.
pub fn thread_ids() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .expect("listing /proc/self/task")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The name of thread `tid` of this process (empty once it is gone).
pub fn thread_name(tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The calling thread's id.
pub fn current_thread_id() -> i32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .expect("reading /proc/thread-self")
}

/// Resident memory of this process in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

// ---------------------------------------------------------------------------------------------
// System calls without a safe wrapper in the workspace

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Start `cmd` in a mount namespace of its own whose mounts propagate nowhere, so whatever the
/// child mounts vanishes with it. The namespace is entered between fork and exec, while the
/// child is still single-threaded, so that every thread of the child (and `/proc/self`, which
/// follows the main thread) sees its mounts.
pub fn in_private_mount_namespace(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe
    // system calls (`unshare`, `mount`) with static strings; building an `io::Error` from errno
    // does not allocate.
    unsafe {
        cmd.pre_exec(|| {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                c"none".as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))
        });
    }
}

/// Mount a tmpfs of `bytes` bytes on `dir`.
pub fn mount_tmpfs(dir: &Path, bytes: u64) -> io::Result<()> {
    let target = CString::new(dir.as_os_str().as_bytes())?;
    let options = CString::new(format!("size={bytes}"))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            options.as_ptr().cast(),
        )
    })
}

/// Limit the size of files this process writes to `bytes` (`RLIMIT_FSIZE`, soft and hard).
pub fn limit_file_size(bytes: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: `limit` is a valid rlimit that outlives the call.
    check(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) })
}

/// Ignore signal `sig` in this process.
pub fn ignore_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_IGN is a valid disposition; no handler code runs.
    if unsafe { libc::signal(sig, libc::SIG_IGN) } == libc::SIG_ERR {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

static HANDLED_SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_signal(_sig: libc::c_int) {
    // A lock-free atomic add is async-signal-safe.
    HANDLED_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Handle `sig` in this process with a handler that only counts, installed without
/// `SA_RESTART`: a system call the signal interrupts fails with `EINTR` instead of restarting.
pub fn count_signal_without_restart(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero sigaction is a valid value to fill in (empty flags, no handler yet).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = 0;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
    check(unsafe { libc::sigemptyset(&mut action.sa_mask) })?;
    // SAFETY: `action` names a handler that only touches an atomic, which is async-signal-safe;
    // the old action is not asked for.
    check(unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) })
}

/// Signals the handler of [`count_signal_without_restart`] has run for.
pub fn handled_signals() -> u64 {
    HANDLED_SIGNALS.load(Ordering::Relaxed)
}

/// Send `sig` to thread `tid` of this process.
pub fn signal_thread(tid: i32, sig: libc::c_int) -> io::Result<()> {
    let pid = i32::try_from(std::process::id()).expect("a pid fits in pid_t");
    // SAFETY: tgkill takes plain integers; a thread that is gone answers ESRCH.
    check(unsafe { libc::tgkill(pid, tid, sig) })
}
