//! One run of a C program under a time limit that stretches with the machine's load: what
//! [`Invocation::run`] starts, how long it may take ([`TimeLimit`]) and what it left
//! ([`Finished`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{CLEARED_VARS, RUN_TIMEOUT};

/// The most a run's time limit is stretched on a loaded machine.
pub(super) const MAX_LOAD_STRETCH: f64 = 5.0;

pub(super) struct Finished {
    pub(super) stdout: String,
    pub(super) stderr: String,
    /// Why the run counts as failed by its exit, or `None` for a clean exit 0.
    pub(super) exit: Option<String>,
    /// The exit code, when the program exited (rather than being killed by a signal or the timeout).
    pub(super) code: Option<i32>,
    /// Set when the run outlasted its base time limit and only the load's stretch let it finish.
    pub(super) stretched: Option<String>,
}

/// The time limit of one run: its base, stretched on a loaded machine by the load per core (the
/// 1-minute load average of `/proc/loadavg` over the cores this process may use), at least 1x and
/// at most [`MAX_LOAD_STRETCH`]x. The load is read when the run starts and again whenever the
/// run reaches its limit, and the largest stretch seen holds: a run on a machine that got busy
/// after it started gets more time, and a hang is still killed, at the latest at 5x its base.
/// Wall time, not the run's CPU time: a deadlocked program uses no CPU at all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct TimeLimit {
    pub(super) base: Duration,
    /// The largest stretch seen, and the load and cores it came from.
    pub(super) stretch: f64,
    pub(super) load: f64,
    pub(super) cores: usize,
}

impl TimeLimit {
    pub(super) fn new(base: Duration) -> TimeLimit {
        TimeLimit {
            base,
            stretch: 1.0,
            load: 0.0,
            cores: 1,
        }
    }

    /// Takes a reading of the load (`None`: unknown, which stretches nothing); returns whether
    /// the limit grew.
    pub(super) fn observe(&mut self, load: Option<f64>, cores: usize) -> bool {
        let Some(load) = load else {
            return false;
        };
        let stretch = load_stretch(load, cores);
        if stretch <= self.stretch {
            return false;
        }
        *self = TimeLimit {
            stretch,
            load,
            cores,
            ..*self
        };
        true
    }

    pub(super) fn allowed(&self) -> Duration {
        self.base.mul_f64(self.stretch)
    }

    /// The limit and where it came from, for the log.
    pub(super) fn describe(&self) -> String {
        let base = self.base.as_secs_f64();
        if self.stretch > 1.0 {
            format!(
                "{:.0}s (the {base:.0}s limit stretched x{:.1} for load {:.1} on {} core(s))",
                self.allowed().as_secs_f64(),
                self.stretch,
                self.load,
                self.cores
            )
        } else {
            format!("{base:.0}s")
        }
    }
}

/// How much a run's time limit stretches on a machine with 1-minute load average `load` on
/// `cores` cores: the load per core, from 1 to [`MAX_LOAD_STRETCH`].
pub(super) fn load_stretch(load: f64, cores: usize) -> f64 {
    let per_core = load / cores.max(1) as f64;
    if per_core.is_nan() {
        1.0
    } else {
        per_core.clamp(1.0, MAX_LOAD_STRETCH)
    }
}

/// The 1-minute load average, where `/proc/loadavg` says it.
pub(super) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The cores this process may run on.
pub(super) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Run a whole program under one variant: scratch `scratch/<name>-<variant>`, output in
/// `logs/<name>-<variant>.{out,err}`.
pub(super) fn execute(
    binary: &Path,
    name: &str,
    variant: &str,
    env: &[(&str, &str)],
    lib_dir: &Path,
    out_dir: &Path,
) -> Result<Finished, String> {
    let scratch = out_dir.join("scratch").join(format!("{name}-{variant}"));
    let logs = out_dir.join("logs");
    let log = logs.join(format!("{name}-{variant}"));
    let run = Invocation {
        binary,
        args: &[scratch.as_os_str()],
        env,
        lib_dir,
        timeout: RUN_TIMEOUT,
    };
    run.execute(&scratch, &log)
}

/// One start of a C program.
pub(super) struct Invocation<'a> {
    pub(super) binary: &'a Path,
    pub(super) args: &'a [&'a OsStr],
    pub(super) env: &'a [(&'a str, &'a str)],
    pub(super) lib_dir: &'a Path,
    pub(super) timeout: Duration,
}

impl Invocation<'_> {
    /// Run with a fresh `scratch` directory; stdout and stderr go to `<log>.out` and `<log>.err`.
    pub(super) fn execute(&self, scratch: &Path, log: &Path) -> Result<Finished, String> {
        self.execute_under(scratch, log, || (load_average(), cores()))
    }

    /// [`Invocation::execute`] with the machine's load and cores read by `machine`.
    pub(super) fn execute_under(
        &self,
        scratch: &Path,
        log: &Path,
        machine: impl Fn() -> (Option<f64>, usize),
    ) -> Result<Finished, String> {
        let _ = std::fs::remove_dir_all(scratch);
        std::fs::create_dir_all(scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let stdout_path = with_suffix(log, ".out");
        let stderr_path = with_suffix(log, ".err");
        let create =
            |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));

        let mut command = Command::new(self.binary);
        command
            .args(self.args)
            .env("LD_LIBRARY_PATH", self.lib_dir)
            .stdin(Stdio::null())
            .stdout(create(&stdout_path)?)
            .stderr(create(&stderr_path)?);
        for var in CLEARED_VARS {
            command.env_remove(var);
        }
        for (key, value) in self.env {
            command.env(key, value);
        }
        let mut limit = TimeLimit::new(self.timeout);
        let (load, cores) = machine();
        limit.observe(load, cores);
        let mut child = command.spawn().map_err(|e| format!("cannot start: {e}"))?;
        let started = Instant::now();
        // Most runs end within milliseconds: poll often at first, then back off.
        let mut pause = Duration::from_millis(1);
        let mut timed_out = false;
        let (exit, code) = loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break (None, Some(0)),
                Ok(Some(status)) => break (Some(format!("exited with {status}")), status.code()),
                Ok(None) if started.elapsed() > limit.allowed() => {
                    let (load, cores) = machine();
                    if limit.observe(load, cores) {
                        continue;
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    timed_out = true;
                    let why = format!("timed out after {} and was killed", limit.describe());
                    break (Some(why), None);
                }
                Ok(None) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => break (Some(format!("cannot wait: {e}")), None),
            }
        };
        let took = started.elapsed();
        let stretched = (!timed_out && took > self.timeout).then(|| {
            format!(
                "took {:.1}s: past its {}s limit, within {}",
                took.as_secs_f64(),
                self.timeout.as_secs(),
                limit.describe()
            )
        });
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        Ok(Finished {
            stdout: read(&stdout_path),
            stderr: read(&stderr_path),
            exit,
            code,
            stretched,
        })
    }
}

/// `path` with `suffix` appended to its last component.
pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
