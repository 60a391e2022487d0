//! `hipfile stats`: the live counters of a running process.
//!
//! A process whose driver counts statistics (`HIPFILE_STATS_LEVEL` 1 to 3) answers on its socket
//! file `$XDG_RUNTIME_DIR/hipfile/stats-<pid>.sock` and on the abstract Unix socket
//! `hipfile-stats-<pid>` with one JSON document of its counters
//! ([`hipfile_core::stats_server`]). An answer is read only from the process asked for (its
//! socket's `SO_PEERCRED`), at most 4 MiB within 5 s, and the control characters of the strings
//! it holds are shown escaped, never sent to the terminal. `hipfile stats -p PID` reads it every
//! second and shows throughput per backend (and its path: direct via which P2P driver, staged
//! through the page cache or O_DIRECT), operations, errors, declines by reason and failovers;
//! `--once` reads once, `--json` prints each document as it came, one per line.
//! `hipfile stats -- PROGRAM ARGS` runs the program (with `HIPFILE_STATS_LEVEL=3` unless it is
//! set), reads its socket every 100 ms while it runs, and prints a summary when it exits: the
//! counters its driver sent when it closed (to the socket `HIPFILE_STATS_REPORT` names, which
//! this command listens on), or, for a program that exited with its driver open, the last
//! counters read.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::process::Command;
use std::time::{Duration, Instant};

use hipfile_core::stats_server::{self as protocol, RequestError};
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
    /// Seconds between two reads with `-p` (0.05 to 86400).
    #[arg(long, default_value = "1", value_parser = parse_interval, value_name = "SECONDS")]
    pub interval: Duration,
    /// A program to run and watch, with its arguments (after `--`).
    #[arg(last = true)]
    pub program: Vec<String>,
}

/// The shortest and longest `--interval`: faster reads show noise, not rates; a day between
/// two reads is already more than a watch.
const INTERVAL_SECONDS: (f64, f64) = (0.05, 86_400.0);

/// `--interval`: seconds, finite and in [`INTERVAL_SECONDS`].
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let (least, most) = INTERVAL_SECONDS;
    let refuse = || format!("expected seconds from {least} to {most}, got `{text}`");
    let secs: f64 = text.trim().parse().map_err(|_| refuse())?;
    if !(least..=most).contains(&secs) {
        return Err(refuse());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Read the counters of process `pid` once: its document, or why there is none (a document
/// that refuses, or speaks another version, is a [`RequestError::BadAnswer`]).
pub fn fetch(pid: u32) -> Result<Value, RequestError> {
    let doc = protocol::request(pid)?;
    if let Some(why) = doc.get("error").and_then(Value::as_str) {
        return Err(RequestError::BadAnswer(format!(
            "process {pid} refused: {}",
            printable(why)
        )));
    }
    match doc.get("version").and_then(Value::as_u64) {
        Some(protocol::PROTOCOL_VERSION) => Ok(doc),
        other => Err(RequestError::BadAnswer(format!(
            "process {pid} speaks statistics version {other:?}, this tool {}",
            protocol::PROTOCOL_VERSION
        ))),
    }
}

/// `text` with every control character (C0, DEL, C1) and bidirectional-text control written as
/// a Rust escape (`\u{1b}`): strings a process sent are shown, never obeyed by the terminal.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if unprintable(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `doc` as one line of JSON, with the control characters that JSON lets through raw (DEL, C1,
/// bidirectional-text controls) escaped as well: the same document, safe on a terminal.
pub fn json_line(doc: &Value) -> String {
    let mut line = String::new();
    for c in doc.to_string().chars() {
        if unprintable(c) {
            let _ = write!(line, "\\u{:04x}", u32::from(c));
        } else {
            line.push(c);
        }
    }
    line.push('\n');
    line
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
    let clear = !args.json && !args.once && std::io::stdout().is_terminal();
    let mut previous: Option<(Value, Instant)> = None;
    loop {
        let doc = match fetch(pid) {
            Ok(doc) => doc,
            // The process went away after at least one read: the view ends there.
            Err(e @ RequestError::NotServed(_)) if previous.is_some() => {
                write_out(
                    out,
                    &format!("hipfile stats: {}\n", printable(&e.to_string())),
                )?;
                return Ok(true);
            }
            Err(e) => return Err(printable(&e.to_string()).into_owned()),
        };
        let now = Instant::now();
        let text = if args.json {
            json_line(&doc)
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
        std::thread::sleep(args.interval);
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
    let mut warned = String::new();
    let status = loop {
        match fetch(child.id()) {
            Ok(doc) => last = Some(doc),
            // Not serving yet (or any more): the program's own business.
            Err(RequestError::NotServed(_)) => {}
            // Someone else holds its address, or it answers nonsense: say so, once.
            Err(e) => {
                let e = printable(&e.to_string()).into_owned();
                if e != warned {
                    eprintln!("hipfile stats: {e}");
                    warned = e;
                }
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    };
    // A driver that closed sent its final counters: they hold everything, the last poll may not.
    // Only the program's own: processes it started inherit the report's name too.
    let own = u64::from(child.id());
    if let Some(doc) = reports
        .collect()
        .into_iter()
        .rfind(|doc| doc["pid"].as_u64() == Some(own))
    {
        last = Some(doc);
    }
    let text = match (&last, args.json) {
        (Some(doc), true) => json_line(doc),
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
        // Another user could have bound a name guessed from this pid: a fresh one is tried then.
        let mut attempt = 0;
        loop {
            let nonce = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("hipfile-stats-report-{}-{nonce:08x}", std::process::id());
            let bound = SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|address| UnixListener::bind_addr(&address))
                .and_then(|listener| listener.set_nonblocking(true).map(|()| listener));
            match bound {
                Ok(listener) => return Ok(FinalReports { name, listener }),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < 8 => attempt += 1,
                Err(e) => {
                    return Err(format!(
                        "listening for the program's final counters on {name}: {e}"
                    ))
                }
            }
        }
    }

    /// The documents the program (or a process it started: they inherit the environment) sent,
    /// in the order their drivers closed. The program has exited: what it sent waits in the
    /// socket's queue. Only processes of this user (or root) are heard, each for at most a
    /// second and [`protocol::MAX_DOCUMENT_BYTES`].
    fn collect(&self) -> Vec<Value> {
        let own_uid = rustix::process::geteuid().as_raw();
        let mut docs = Vec::new();
        while let Ok((mut stream, _)) = self.listener.accept() {
            let allowed = hipfile_hip::os::peer_credentials(stream.as_fd())
                .is_ok_and(|c| protocol::peer_allowed(c.uid, own_uid));
            if !allowed || stream.set_nonblocking(false).is_err() {
                continue;
            }
            let limit = Duration::from_secs(1);
            let read = protocol::read_document(&mut stream, Instant::now() + limit, limit);
            let doc = read
                .ok()
                .and_then(|text| serde_json::from_slice::<Value>(&text).ok());
            match doc {
                Some(doc) if doc.get("error").is_none() => docs.push(doc),
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
    // Requests by path (synchronous and stream-ordered), named as the backends' paths are.
    let by_path: Vec<String> = hipfile_core::IoPath::ALL
        .iter()
        .map(|p| {
            let name = p.name();
            format!(
                "{name} {}/{}",
                u(doc, &["read", name]),
                u(doc, &["write", name])
            )
        })
        .collect();
    let _ = writeln!(s, "paths (read/write ops): {}", by_path.join(", "));
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
        let path = printable(b.get("path").and_then(Value::as_str).unwrap_or("?"));
        let via = match b.get("mechanism").and_then(Value::as_str) {
            Some(m) => format!("{path} via {}", printable(m)),
            None => path.into_owned(),
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
            "  {} ({via}): {} ops, {}{throughput}, {} errors",
            printable(name),
            u(b, &["ops"]),
            human_bytes(bytes),
            u(b, &["errors"]),
        );
        let listed = |key: &str| -> Option<String> {
            let map = b.get(key)?.as_object()?;
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{} {}", printable(k), counter(k, v)))
                .collect();
            (!parts.is_empty()).then(|| parts.join(", "))
        };
        if let Some(line) = listed("counters") {
            let _ = writeln!(s, "    moved: {line}");
        }
        if let Some(line) = listed("declines") {
            let _ = writeln!(s, "    declined: {line}");
        }
        if let Some(line) = listed("failovers") {
            let _ = writeln!(s, "    failed over to: {line}");
        }
    }
    // Paths beside the backends (remote objects): what a front door moved itself.
    for p in doc
        .get("side_paths")
        .and_then(Value::as_array)
        .unwrap_or(&none)
    {
        let name = printable(p.get("name").and_then(Value::as_str).unwrap_or("?"));
        let counters: Vec<String> = p
            .get("counters")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{} {}", printable(k), counter(k, v)))
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(s, "  {name} (beside the backends): {}", counters.join(", "));
    }
    if let Some(line) = policy_line(doc) {
        let _ = writeln!(s, "{line}");
    }
    if let Some(api) = doc.get("api").and_then(Value::as_object) {
        let calls: Vec<String> = api
            .iter()
            .filter(|(_, c)| u(c, &["ok"]) + u(c, &["err"]) > 0)
            .map(|(name, c)| format!("{} {}/{}", printable(name), u(c, &["ok"]), u(c, &["err"])))
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
    if let Some(line) = socket_line(doc) {
        let _ = writeln!(s, "{line}");
    }
    s
}

/// The direct mechanisms the driver may use and the requests a direct-only file handle
/// refused; `None` for a document of a driver that reports neither.
fn policy_line(doc: &Value) -> Option<String> {
    let mechanisms = doc.get("p2p_mechanisms").and_then(Value::as_array);
    let refused = doc.get("refused_by_policy").and_then(Value::as_u64);
    if mechanisms.is_none() && refused.is_none() {
        return None;
    }
    let allowed = match mechanisms {
        Some(list) if list.is_empty() => "none".to_string(),
        Some(list) => list
            .iter()
            .map(|m| printable(m.as_str().unwrap_or("?")).into_owned())
            .collect::<Vec<_>>()
            .join(", "),
        None => "?".to_string(),
    };
    Some(format!(
        "direct mechanisms allowed: {allowed}; refused by a direct-only policy: {}",
        refused.unwrap_or(0)
    ))
}

/// A backend's counter in words: bytes for the ones named so (`..._bytes`), a count for the
/// others (`page_cache_pins` counts pins).
fn counter(name: &str, value: &Value) -> String {
    let n = value.as_u64().unwrap_or(0);
    if name.ends_with("_bytes") {
        human_bytes(n)
    } else {
        n.to_string()
    }
}

/// What the document says of the driver's statistics sockets, when something is amiss: an
/// address it could not take (another process holds it), or none at all (its counters reached
/// this tool only as its last word).
fn socket_line(doc: &Value) -> Option<String> {
    let socket = doc.get("socket")?;
    let strings = |key: &str| -> Vec<String> {
        socket
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|t| printable(t).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let missed = strings("missed");
    match socket.get("state").and_then(Value::as_str) {
        Some("not_served") => Some(format!(
            "statistics socket: requested but not served: {}",
            missed.join("; ")
        )),
        Some("served") if !missed.is_empty() => Some(format!(
            "statistics socket: served at {}; {}",
            strings("served_at").join(", "),
            missed.join("; ")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(read_bytes: u64, fastpath_bytes: u64) -> Value {
        serde_json::json!({
            "version": 1, "pid": 42, "level": 3, "uptime_us": 2_000_000,
            "read": {"ok": 4, "err": 1, "bytes": read_bytes, "latency_sum_us": 400,
                     "window_us": 1_000_000, "direct": 3, "staged": 1, "host": 0},
            "write": {"ok": 2, "err": 0, "bytes": 0, "host": 2},
            "backends": [
                {"name": "fastpath", "path": "direct", "mechanism": "sim", "ops": 3,
                 "bytes": fastpath_bytes, "errors": 1,
                 "declines": {"misaligned": 2}, "failovers": {"fallback": 1}, "counters": {}},
                {"name": "fallback", "path": "staged", "mechanism": null, "ops": 1, "bytes": 7,
                 "errors": 0, "declines": {}, "failovers": {},
                 "counters": {"page_cache_bytes": 7, "o_direct_bytes": 0,
                              "page_cache_pins": 8, "page_cache_pins_evicted": 1}}
            ],
            "side_paths": [{"name": "remote", "counters": {"requests": 9, "read_bytes": 2048}}],
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
            view.contains("remote (beside the backends): read_bytes 2.0 KiB, requests 9"),
            "{view}"
        );
        assert!(
            view.contains("paths (read/write ops): direct 3/0, staged 1/0, host 0/2"),
            "{view}"
        );
        assert!(
            view.contains(
                "moved: o_direct_bytes 0 B, page_cache_bytes 7 B, page_cache_pins 8, \
                 page_cache_pins_evicted 1"
            ),
            "pins are counted, not bytes: {view}"
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
    fn the_view_shows_the_mechanisms_allowed_and_the_policy_refusals() {
        let mut now = doc(4_000_000, 3_000_000);
        assert!(
            !render(&now, None).contains("direct mechanisms"),
            "a document without them shows no such line"
        );
        now["p2p_mechanisms"] = serde_json::json!(["amd_kfd", "sim"]);
        now["refused_by_policy"] = serde_json::json!(3);
        let view = render(&now, None);
        assert!(
            view.contains(
                "direct mechanisms allowed: amd_kfd, sim; refused by a direct-only policy: 3"
            ),
            "{view}"
        );
        now["p2p_mechanisms"] = serde_json::json!([]);
        let view = render(&now, None);
        assert!(view.contains("direct mechanisms allowed: none;"), "{view}");
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
        assert!(matches!(e, RequestError::NotServed(_)), "{e:?}");
        assert!(e.to_string().contains("serves no statistics"), "{e}");
    }

    /// A document whose strings carry terminal escapes: clear the screen, set the window
    /// title, ring the bell, and a C1 control sequence introducer (which JSON lets through raw).
    fn forged() -> Value {
        serde_json::json!({
            "version": 1, "pid": 42, "level": 1,
            "backends": [{"name": "\u{1b}[2Jevil", "path": "\u{9b}31m", "mechanism": "\u{7}",
                          "ops": 1, "bytes": 0, "errors": 0,
                          "declines": {"\u{1b}]0;title\u{7}": 1}, "failovers": {},
                          "counters": {"x\u{202e}_bytes": 1}}],
            "api": {"\u{1b}[31mred": {"ok": 1, "err": 0}},
            "socket": {"state": "served", "served_at": ["\u{1b}[H"], "missed": ["\u{85}"]}
        })
    }

    fn raw_controls(text: &str) -> Vec<char> {
        text.chars()
            .filter(|&c| c != '\n' && (c.is_control() || c == '\u{202e}'))
            .collect()
    }

    #[test]
    fn strings_a_process_sent_reach_the_terminal_escaped() {
        let view = render(&forged(), None);
        assert_eq!(raw_controls(&view), Vec::<char>::new(), "{view:?}");
        assert!(
            view.contains("\\u{1b}[2Jevil (\\u{9b}31m via \\u{7})"),
            "{view}"
        );
        assert!(view.contains("declined: \\u{1b}]0;title\\u{7} 1"), "{view}");
        assert!(view.contains("\\u{1b}[31mred 1/0"), "{view}");
        assert!(view.contains("served at \\u{1b}[H; \\u{85}"), "{view}");
        let line = json_line(&forged());
        assert_eq!(raw_controls(&line), Vec::<char>::new(), "{line:?}");
        assert!(line.contains("\\u009b31m"), "{line}");
        let again: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(again, forged(), "the escaped line is the same document");
        assert_eq!(printable("plain"), "plain");
    }

    #[test]
    fn the_interval_is_seconds_within_bounds() {
        assert_eq!(parse_interval("1").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_interval("0.05").unwrap(), Duration::from_millis(50));
        assert_eq!(
            parse_interval("86400").unwrap(),
            Duration::from_secs(86_400)
        );
        for bad in [
            "inf", "-inf", "NaN", "-1", "0", "0.01", "1e12", "86401", "", "soon",
        ] {
            let e = parse_interval(bad).unwrap_err();
            assert!(e.contains("seconds from 0.05 to 86400"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_socket_not_served_is_said_in_the_view() {
        let mut d = doc(1, 1);
        d["socket"] = serde_json::json!({"state": "not_served", "served_at": [],
            "missed": ["@hipfile-stats-42 is held by process 7 of user 1001"]});
        let view = render(&d, None);
        assert!(
            view.contains("requested but not served: @hipfile-stats-42 is held by process 7"),
            "{view}"
        );
        d["socket"] = serde_json::json!({"state": "served", "served_at": ["/run/x.sock"],
            "missed": []});
        assert!(!render(&d, None).contains("statistics socket"));
    }
}
