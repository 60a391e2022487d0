//! `hipfile stats`: the live counters of a running process.
//!
//! A process whose driver counts statistics (`HIPFILE_STATS_LEVEL` 1 to 3) answers on the
//! abstract Unix socket `hipfile-stats-<pid>` with one JSON document of its counters
//! ([`hipfile_core::stats_server`]). `hipfile stats -p PID` reads it every second and shows
//! throughput per backend (and its path: direct via which P2P driver, staged through the page
//! cache or O_DIRECT), operations, errors, declines by reason and failovers; `--once` reads once,
//! `--json` prints each document as it came, one per line. `hipfile stats -- PROGRAM ARGS` runs
//! the program (with `HIPFILE_STATS_LEVEL=3` unless it is set), reads its socket every 100 ms
//! while it runs, and prints a summary when it exits: the counters its driver sent when it
//! closed (to the socket `HIPFILE_STATS_REPORT` names, which this command listens on), or, for a
//! program that exited with its driver open, the last counters read.

use std::fmt::Write as _;
use std::io::{IsTerminal, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// `hipfile stats` arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "program"])))]
pub struct StatsArgs {
    /// The process to watch.
    #[arg(short = 'p', long = "pid")]
    pub pid: Option<u32>,
    /// Read the counters once and exit.
    #[arg(long)]
    pub once: bool,
    /// Print the counters as the process sent them: one JSON document per line.
    #[arg(long)]
    pub json: bool,
    /// Seconds between two reads with `-p`.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// A program to run and watch, with its arguments (after `--`).
    #[arg(last = true)]
    pub program: Vec<String>,
}

/// Read the counters of process `pid` once: its document, or why there is none.
pub fn fetch(pid: u32) -> Result<Value, String> {
    let address = hipfile_core::stats_server::socket_address(pid)
        .map_err(|e| format!("the socket name of process {pid}: {e}"))?;
    let mut stream = UnixStream::connect_addr(&address).map_err(|e| {
        format!(
            "process {pid} serves no statistics ({e}): is it running with a driver open and \
             HIPFILE_STATS_LEVEL set to 1 or more?"
        )
    })?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|e| format!("reading the statistics of process {pid}: {e}"))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("process {pid} sent no statistics document: {e}"))?;
    if let Some(why) = doc.get("error").and_then(Value::as_str) {
        return Err(format!("process {pid} refused: {why}"));
    }
    match doc.get("version").and_then(Value::as_u64) {
        Some(hipfile_core::stats_server::PROTOCOL_VERSION) => Ok(doc),
        other => Err(format!(
            "process {pid} speaks statistics version {other:?}, this tool {}",
            hipfile_core::stats_server::PROTOCOL_VERSION
        )),
    }
}

/// Run `hipfile stats`.
pub fn run(args: &StatsArgs) -> Result<bool, String> {
    let mut out = std::io::stdout().lock();
    match args.pid {
        Some(pid) => watch(pid, args, &mut out),
        None => run_program(args, &mut out),
    }
}

fn write_out(out: &mut dyn Write, text: &str) -> Result<(), String> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing the report: {e}"))
}

/// Show process `pid`'s counters every interval (once with `--once`) until it stops serving.
fn watch(pid: u32, args: &StatsArgs, out: &mut dyn Write) -> Result<bool, String> {
    let interval = Duration::from_secs_f64(args.interval.max(0.05));
    let clear = !args.json && !args.once && std::io::stdout().is_terminal();
    let mut previous: Option<(Value, Instant)> = None;
    loop {
        let doc = match fetch(pid) {
            Ok(doc) => doc,
            // The process went away after at least one read: the view ends there.
            Err(e) if previous.is_some() => {
                write_out(out, &format!("hipfile stats: {e}\n"))?;
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        let text = if args.json {
            format!("{doc}\n")
        } else {
            let since = previous
                .as_ref()
                .map(|(prev, at)| (prev, now.duration_since(*at)));
            let body = render(&doc, since);
            if clear {
                format!("\x1b[H\x1b[2J{body}")
            } else {
                format!("{body}\n")
            }
        };
        write_out(out, &text)?;
        if args.once {
            return Ok(true);
        }
        previous = Some((doc, now));
        std::thread::sleep(interval);
    }
}

/// Run the program, read its counters while it runs, print the last ones when it exits. The
/// exit status follows the program's.
fn run_program(args: &StatsArgs, out: &mut dyn Write) -> Result<bool, String> {
    let (program, rest) = args
        .program
        .split_first()
        .ok_or("name a program after `--`")?;
    let reports = FinalReports::listen()?;
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env(hipfile_core::stats_server::REPORT_ENV, &reports.name);
    if std::env::var_os("HIPFILE_STATS_LEVEL").is_none() {
        cmd.env("HIPFILE_STATS_LEVEL", "3");
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {program}: {e}"))?;
    let started = Instant::now();
    let mut last: Option<Value> = None;
    let status = loop {
        if let Ok(doc) = fetch(child.id()) {
            last = Some(doc);
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    // A driver that closed sent its final counters: they hold everything, the last poll may not.
    if let Some(doc) = reports.collect().pop() {
        last = Some(doc);
    }
    let text = match (&last, args.json) {
        (Some(doc), true) => format!("{doc}\n"),
        (Some(doc), false) => format!(
            "{}{program} ran {:.1} s and exited ({status})\n",
            render(doc, None),
            started.elapsed().as_secs_f64()
        ),
        (None, _) => format!(
            "hipfile stats: {program} served no statistics while it ran (it exited: {status})\n"
        ),
    };
    write_out(out, &text)?;
    Ok(status.success())
}

/// The socket a program's closing drivers send their final counters to.
struct FinalReports {
    /// Its abstract name, for the program's environment.
    name: String,
    listener: UnixListener,
}

impl FinalReports {
    fn listen() -> Result<FinalReports, String> {
        let name = format!("hipfile-stats-report-{}", std::process::id());
        let listener = SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|address| UnixListener::bind_addr(&address))
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .map_err(|e| format!("listening for the program's final counters on {name}: {e}"))?;
        Ok(FinalReports { name, listener })
    }

    /// The documents the program (or a process it started: they inherit the environment) sent,
    /// in the order their drivers closed. The program has exited: what it sent waits in the
    /// socket's queue.
    fn collect(&self) -> Vec<Value> {
        let own_uid = rustix::process::geteuid().as_raw();
        let mut docs = Vec::new();
        while let Ok((mut stream, _)) = self.listener.accept() {
            let allowed = rustix::net::sockopt::socket_peercred(&stream)
                .is_ok_and(|c| hipfile_core::stats_server::peer_allowed(c.uid.as_raw(), own_uid));
            let mut text = String::new();
            let read = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_read_timeout(Some(Duration::from_secs(1))))
                .and_then(|()| stream.read_to_string(&mut text));
            let doc = serde_json::from_str::<Value>(text.trim()).ok();
            match doc {
                Some(doc) if allowed && read.is_ok() && doc.get("error").is_none() => {
                    docs.push(doc)
                }
                _ => {}
            }
        }
        docs
    }
}

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, key| v.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Bytes in a short human form (binary units).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A rate of `bytes` over `over` (MB/s, decimal), or the whole-run rate when `over` is `None`.
fn rate(bytes: u64, over: Duration) -> String {
    let secs = over.as_secs_f64();
    if secs <= 0.0 {
        return "-".to_string();
    }
    format!("{:.1} MB/s", bytes as f64 / secs / 1e6)
}

/// The view of one document; with the previous document and the time between, rates are over
/// that time, else over each direction's whole window.
pub fn render(doc: &Value, previous: Option<(&Value, Duration)>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "hipfile stats: pid {}, level {}, up {:.1} s",
        u(doc, &["pid"]),
        u(doc, &["level"]),
        u(doc, &["uptime_us"]) as f64 / 1e6
    );
    let _ = writeln!(
        s,
        "{:<12} {:>10} {:>8} {:>12} {:>14} {:>12}",
        "", "ops", "errors", "bytes", "throughput", "avg latency"
    );
    for (label, key) in [
        ("read", "read"),
        ("write", "write"),
        ("batch read", "batch_read"),
        ("batch write", "batch_write"),
    ] {
        let ok = u(doc, &[key, "ok"]);
        let bytes = u(doc, &[key, "bytes"]);
        let throughput = match previous {
            Some((prev, over)) => rate(bytes.saturating_sub(u(prev, &[key, "bytes"])), over),
            None => rate(bytes, Duration::from_micros(u(doc, &[key, "window_us"]))),
        };
        let latency = u(doc, &[key, "latency_sum_us"])
            .checked_div(ok)
            .map_or("-".to_string(), |us| format!("{us} us"));
        let _ = writeln!(
            s,
            "{label:<12} {ok:>10} {:>8} {:>12} {throughput:>14} {latency:>12}",
            u(doc, &[key, "err"]),
            human_bytes(bytes),
        );
    }
    let _ = writeln!(s, "backends:");
    let none = Vec::new();
    let previous_backends = previous
        .and_then(|(p, _)| p.get("backends"))
        .and_then(Value::as_array)
        .unwrap_or(&none);
    for b in doc
        .get("backends")
        .and_then(Value::as_array)
        .unwrap_or(&none)
    {
        let name = b.get("name").and_then(Value::as_str).unwrap_or("?");
        let path = b.get("path").and_then(Value::as_str).unwrap_or("?");
        let via = match b.get("mechanism").and_then(Value::as_str) {
            Some(m) => format!("{path} via {m}"),
            None => path.to_string(),
        };
        let bytes = u(b, &["bytes"]);
        let throughput = match previous {
            Some((_, over)) => {
                let before = previous_backends
                    .iter()
                    .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
                    .map_or(0, |p| u(p, &["bytes"]));
                format!(", {}", rate(bytes.saturating_sub(before), over))
            }
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "  {name} ({via}): {} ops, {}{throughput}, {} errors",
            u(b, &["ops"]),
            human_bytes(bytes),
            u(b, &["errors"]),
        );
        let listed = |key: &str, bytes: bool| -> Option<String> {
            let map = b.get(key)?.as_object()?;
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    let n = v.as_u64().unwrap_or(0);
                    if bytes {
                        format!("{k} {}", human_bytes(n))
                    } else {
                        format!("{k} {n}")
                    }
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join(", "))
        };
        if let Some(line) = listed("counters", true) {
            let _ = writeln!(s, "    moved: {line}");
        }
        if let Some(line) = listed("declines", false) {
            let _ = writeln!(s, "    declined: {line}");
        }
        if let Some(line) = listed("failovers", false) {
            let _ = writeln!(s, "    failed over to: {line}");
        }
    }
    if let Some(api) = doc.get("api").and_then(Value::as_object) {
        let calls: Vec<String> = api
            .iter()
            .filter(|(_, c)| u(c, &["ok"]) + u(c, &["err"]) > 0)
            .map(|(name, c)| format!("{name} {}/{}", u(c, &["ok"]), u(c, &["err"])))
            .collect();
        if !calls.is_empty() {
            let _ = writeln!(s, "calls (ok/failed): {}", calls.join(", "));
        }
    }
    for g in doc.get("gpus").and_then(Value::as_array).unwrap_or(&none) {
        let _ = writeln!(
            s,
            "gpu {}: read {} in {} ops ({} direct, {} staged, {} unaligned), written {}, registered {}",
            u(g, &["device"]),
            human_bytes(u(g, &["read", "bytes"])),
            u(g, &["read", "ok"]),
            u(g, &["read", "direct"]),
            u(g, &["read", "staged"]),
            u(g, &["read", "unaligned"]),
            human_bytes(u(g, &["write", "bytes"])),
            human_bytes(u(g, &["registered_bytes"])),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(read_bytes: u64, fastpath_bytes: u64) -> Value {
        serde_json::json!({
            "version": 1, "pid": 42, "level": 3, "uptime_us": 2_000_000,
            "read": {"ok": 4, "err": 1, "bytes": read_bytes, "latency_sum_us": 400,
                     "window_us": 1_000_000},
            "write": {"ok": 0, "err": 0, "bytes": 0},
            "backends": [
                {"name": "fastpath", "path": "direct", "mechanism": "sim", "ops": 3,
                 "bytes": fastpath_bytes, "errors": 1,
                 "declines": {"misaligned": 2}, "failovers": {"fallback": 1}, "counters": {}},
                {"name": "fallback", "path": "staged", "mechanism": null, "ops": 1, "bytes": 7,
                 "errors": 0, "declines": {}, "failovers": {},
                 "counters": {"page_cache_bytes": 7, "o_direct_bytes": 0}}
            ],
            "api": {"handle_register": {"ok": 1, "err": 0}, "batch_setup": {"ok": 0, "err": 0}},
            "gpus": [{"device": 0, "read": {"ok": 4, "bytes": read_bytes, "direct": 3,
                      "staged": 1, "unaligned": 1}, "write": {"bytes": 0},
                      "registered_bytes": 4096}]
        })
    }

    #[test]
    fn the_view_shows_paths_declines_failovers_and_rates() {
        let now = doc(4_000_000, 3_000_000);
        let view = render(&now, None);
        assert!(view.contains("pid 42, level 3"), "{view}");
        assert!(view.contains("4.0 MB/s"), "whole-window rate: {view}");
        assert!(view.contains("100 us"), "{view}");
        assert!(view.contains("fastpath (direct via sim): 3 ops"), "{view}");
        assert!(view.contains("declined: misaligned 2"), "{view}");
        assert!(view.contains("failed over to: fallback 1"), "{view}");
        assert!(view.contains("fallback (staged): 1 ops"), "{view}");
        assert!(
            view.contains("moved: o_direct_bytes 0 B, page_cache_bytes 7 B"),
            "{view}"
        );
        assert!(
            view.contains("calls (ok/failed): handle_register 1/0"),
            "{view}"
        );
        assert!(!view.contains("batch_setup"), "{view}");
        assert!(
            view.contains("gpu 0: read 3.8 MiB in 4 ops (3 direct, 1 staged"),
            "{view}"
        );
        let before = doc(2_000_000, 1_000_000);
        let view = render(&now, Some((&before, Duration::from_secs(2))));
        assert!(
            view.contains("1.0 MB/s"),
            "rate since the last read: {view}"
        );
        assert!(
            view.contains("3 ops, 2.9 MiB, 1.0 MB/s, 1 errors"),
            "{view}"
        );
    }

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn a_process_without_statistics_is_a_clear_error() {
        // Process 1 (init) opens no hipfile driver, and no test runs as pid 1.
        let e = fetch(1).unwrap_err();
        assert!(e.contains("serves no statistics"), "{e}");
    }
}
