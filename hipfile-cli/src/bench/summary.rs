//! The end of a run: each measurement given its checks and the figure it is read against, the
//! cold figures judged, the anchor's figures attached, and the report written: a table with its
//! head, notes and legend, or one JSON object per measurement and a summary.

use std::collections::BTreeSet;
use std::io::Write;

use hipfile_hip::Platform;
use serde_json::json;

use super::batch::BatchPhase;
use super::ceilings::Ceilings;
use super::cold;
use super::hot::HotReads;
use super::kvikio::Anchor;
use super::latency::LATENCY_SIZES;
use super::options::{BenchArgs, Phase};
use super::rig::Rig;
use super::stream::{overlap_versus, AsyncPhase};
use super::write::WriteTarget;
use crate::report::{anchor_table, compare, compare_also, legend, table, wrap, REPORT_COLUMNS};

/// What ran, as the report's head and summary tell it.
pub(super) struct Ran<'a> {
    pub(super) args: &'a BenchArgs,
    pub(super) phases: &'a BTreeSet<Phase>,
    pub(super) platform: Platform,
    /// How the platform was chosen, and why each other was passed over.
    pub(super) how: &'a str,
    pub(super) passed_over: &'a [String],
    pub(super) backends: &'a [&'static str],
    /// Whether the run made the file.
    pub(super) created: bool,
    /// Cores available (the threads of the parallel ceilings).
    pub(super) threads: usize,
    pub(super) hot: &'a HotReads,
    pub(super) write_target: Option<&'a WriteTarget>,
    pub(super) batch: &'a BatchPhase,
    pub(super) stream: &'a AsyncPhase,
    pub(super) ceilings: Option<&'a Ceilings>,
    pub(super) anchor: &'a Anchor,
}

/// Finish the measurements of `rig` and write the report to `out`; whether every check passed.
pub(super) fn write(ran: &Ran<'_>, rig: &mut Rig<'_>, out: &mut dyn Write) -> Result<bool, String> {
    let (args, size) = (ran.args, rig.size);
    // Read after the measurements: a backend may have grown its pools on demand.
    let held = rig.driver.resources();
    let mut measurements = std::mem::take(&mut rig.rows.0);
    for m in &mut measurements {
        // A submission row's checks are those of the run it was measured in.
        let key = match m.key.strip_prefix("async_submit_") {
            Some(streams) => format!("async_{streams}"),
            None => m.key.clone(),
        };
        m.checked = rig.ledger.get(&key).cloned();
    }
    let (cold_key, cold_ceiling_key) = (&ran.batch.cold_key, &ran.batch.cold_ceiling_key);
    // Each batch is read against the synchronous reads of its size from as many threads (at
    // most 16), the batch of large reads against the hot read, the cold batch against the
    // O_DIRECT ceiling at its depth.
    let mut pairs = ran.batch.pairs();
    pairs.push(("batch_large".into(), "read_hot".into()));
    pairs.push(("read_hot_again".into(), "ceiling_h2d_pinned".into()));
    for (_, name) in LATENCY_SIZES {
        pairs.push((format!("latency_{name}"), format!("latency_floor_{name}")));
    }
    pairs.push((cold_key.clone(), cold_ceiling_key.clone()));
    pairs.extend(AsyncPhase::versus_hot());
    compare(&mut measurements, &pairs);
    compare_also(&mut measurements, &AsyncPhase::versus_replay());
    let overlap = overlap_versus(&mut measurements);
    // A cold figure is judged against the O_DIRECT ceiling of the same run, in its unit.
    let read_ceiling = cold::judge(
        &mut measurements,
        &rig.cold_starts,
        (cold_key, cold_ceiling_key),
    );
    let notes = &mut rig.notes;
    if rig.cold_starts.most().is_some() && read_ceiling.is_none() {
        notes.push(
            "cold figures are not checked against an O_DIRECT ceiling: none was measured in this \
             run (the ceilings phase measures it)"
                .into(),
        );
    }
    ran.anchor.attach(
        &mut measurements,
        size,
        read_ceiling.as_ref().map(|(k, v)| (k.as_str(), *v)),
        &rig.cold_starts,
        notes,
    );
    if let Some(pinned) = ran.hot.again_pinned {
        notes.push(format!(
            "read_hot_again: {} MiB of the file's page cache pinned by the engine when it ran",
            pinned >> 20
        ));
    }
    let odirect_cold = ran.ceilings.map_or(true, |c| c.odirect_cold);
    if !odirect_cold && measurements.iter().any(|m| m.key == "ceiling_odirect_read") {
        notes.push(
            "ceiling_odirect_read: the page cache was not dropped before it (as root it is)".into(),
        );
    }
    let verified = rig.ledger.all_passed();
    let scratch = ran.write_target.map(|t| &t.scratch);
    let write_target = match scratch {
        Some(s) => format!("scratch file {} (removed at the end)", s.path().display()),
        None => "none".to_string(),
    };
    let (how, passed_over, backends, path, threads) = (
        ran.how,
        ran.passed_over,
        ran.backends,
        &rig.path,
        ran.threads,
    );
    let ledger = &rig.ledger;
    let anchor = ran.anchor;

    if args.json {
        for m in &measurements {
            writeln!(out, "{}", m.to_json()).map_err(|e| e.to_string())?;
        }
        let summary = json!({
            "type": "summary",
            "platform": ran.platform.to_string(),
            "platform_choice": how,
            "platforms_passed_over": passed_over,
            "backends": backends,
            "file": path.display().to_string(),
            "file_created": ran.created,
            "file_access": "read-only",
            "write_target": scratch.map(|s| s.path().display().to_string()),
            "bytes": size,
            "repetitions": args.repeat.max(1),
            "threads_available": threads,
            "verified": verified,
            "verification": ledger.to_json(),
            "not_checked": measurements
                .iter()
                .filter(|m| m.checked.is_none())
                .map(|m| m.key.clone())
                .collect::<Vec<_>>(),
            "cold": rig.cold_ok,
            "cold_start_pinned_bytes": rig.cold_starts.most(),
            "not_cold": measurements
                .iter()
                .flat_map(|m| {
                    let who = if m.key.starts_with("kvikio_") { "kvikio" } else { "ours" };
                    let ours = m.not_cold.as_ref().map(|why| json!({
                        "key": m.key, "who": who, "why": why,
                    }));
                    let anchor = m.anchor.as_ref().and_then(|a| a.not_cold.as_ref()).map(|why| {
                        json!({"key": m.key, "who": "kvikio", "why": why})
                    });
                    ours.into_iter().chain(anchor)
                })
                .collect::<Vec<_>>(),
            "anchor": args.kvikio.as_ref().map(|p| p.display().to_string()),
            "anchor_threads": args.kvikio.as_ref().map(|_| anchor.threads.clone()),
            "anchor_task_size": args.kvikio.as_ref().and(anchor.task_size),
            "anchor_latency_ops": args.kvikio.as_ref().map(|_| args.latency_ops),
            "batch": ran.phases.contains(&Phase::Batch).then(|| ran.batch.summary(rig.cold_ok)),
            "async": ran.phases.contains(&Phase::Async).then(|| ran.stream.summary(overlap)),
            "keys": measurements.iter().map(|m| m.key.clone()).collect::<Vec<_>>(),
            "notes": notes,
            "resources": held
                .iter()
                .map(|(name, r)| (name.to_string(), json!({
                    "pinned_bytes": r.pinned_bytes,
                    "io_threads": r.io_threads,
                    "page_cache_pinned_bytes": r.page_cache_pinned_bytes,
                    "own_contexts": r.own_contexts,
                })))
                .collect::<serde_json::Map<_, _>>(),
        });
        writeln!(out, "{summary}").map_err(|e| e.to_string())?;
    } else {
        let mut head = vec![format!("hipfile bench: {how}")];
        head.extend(passed_over.iter().map(|l| format!("  {l}")));
        head.push(format!("backends: {}", backends.join(", ")));
        head.push(format!(
            "held: {}",
            held.iter()
                .map(|(name, r)| format!(
                    "{name} {} MiB pinned, {} IO threads, {} MiB of page cache pinned{}",
                    r.pinned_bytes >> 20,
                    r.io_threads,
                    r.page_cache_pinned_bytes >> 20,
                    match r.own_contexts {
                        0 => String::new(),
                        n => format!(", {n} GPU context(s) of its own (page-cache pinning)"),
                    }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        head.push(format!(
            "file: {} ({}, read-only), {} MiB, {} repetitions (median), {threads} cores available",
            path.display(),
            if ran.created {
                "created"
            } else {
                "taken as it is"
            },
            size >> 20,
            args.repeat.max(1),
        ));
        head.push(format!("writes: {write_target}"));
        head.extend(ledger.text().lines().map(str::to_string));
        head.extend(notes.iter().map(|n| format!("note: {n}")));
        let mut text: String = head.iter().map(|l| wrap(l, REPORT_COLUMNS)).collect();
        text.push('\n');
        text.push_str(&table(&measurements));
        let anchored = anchor_table(&measurements);
        if !anchored.is_empty() {
            text.push_str("\nagainst KvikIO (kvikio_anchor.py, run between our repetitions)\n");
            text.push_str(&anchored);
        }
        text.push('\n');
        text.push_str(&legend(&measurements));
        out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(verified)
}
