//! Allocated but unused: a GPU or MIG instance that a pod or Slurm job holds by allocation (the
//! `holders` columns, history format version 3) while nothing runs on it — the most common waste
//! on Kubernetes and Slurm (a notebook pod that requested a GPU and never started a process, a
//! job holding four GPUs and using one). Distinct from idle-loaded models, which need memory
//! held: here nothing is loaded at all, and the GPU is not free either (the scheduler cannot
//! place work there; the off-peak profile counts it as taken).
//!
//! A row of a held device (`holders` ≥ 1) is **unused** when no process row of the device ends
//! inside its interval, its memory used is known and below `--idle.min-memory` (the driver's
//! reserve stays under it), and its activity (SM activity, else busy ratio, on the interval max)
//! is absent or ≤ `--idle.max-activity`. Unused rows in a row, with no gap that breaks a span
//! (`super::breaks_span`, as idle-loaded), for ≥ `--idle.min-duration` make an unused span. A
//! device and owner with unused spans is a finding of kind `unused` (warning); one held for
//! ≥ `--idle.min-duration` and used, but whose mean activity over its held rows is below
//! [`LOW_USE`], is a milder finding of kind `low_use` (info). The owner is the holder the rows
//! name (`holder_namespace`/`holder_pod`, or `holder_slurm_job_id`); a change of owner starts
//! another finding. Whole GPUs are judged on `gpu` rows outside MIG mode, MIG instances on `mig`
//! rows.
//!
//! Rows of a held device without memory (occupancy-only data) cannot be judged and are counted
//! in a note; data without holders (no kubelet, Slurm or occupancy source) yields no finding and
//! says so.
//!
//! This module does not act on a finding (releasing a pod or cancelling a job is the owner's
//! call) and does not price it (the report does).

mod device;

use std::collections::BTreeMap;

use polars::prelude::*;

use super::evidence::{AllocatedEvidence, AllocatedSpanEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity,
    breaks_span, finding_id, hours, r3, unbox,
};
use crate::frames::Frames;
use crate::frames::columns::{self, ts_ms};
use crate::times::fmt_ms;
use device::{OwnerRef, device_columns, new_device};

/// Mean activity over the held rows below which a held, used device is `low_use` (10%).
pub const LOW_USE: f64 = 0.10;

/// The detector.
pub struct AllocatedUnused;

/// One device and owner: what the detector measured (the partial).
#[derive(Debug, Clone)]
pub struct HeldDevice {
    entity: Entity,
    /// Share of the GPU (MIG compute slices / 7; 1 for a whole GPU).
    share: f64,
    held_ms: i64,
    /// Σ activity × time over held rows with activity, and that time.
    act_ms: f64,
    act_known_ms: i64,
    /// Unused spans, (start, end) unix ms.
    spans: Vec<(i64, i64)>,
}

/// What one partition gives: its held devices, rows held but not judged (no memory), the held
/// time of every device (GPU-hours, weighted by share), and whether any row had holders known.
type Part = (Vec<HeldDevice>, u64, f64, bool);

/// One device's rows, collected.
struct DeviceRows<'a> {
    kind: &'static str,
    df: &'a DataFrame,
    rows: Vec<usize>,
}

fn str_col(df: &DataFrame, name: &str) -> Result<columns::Strs, AdvisorError> {
    Ok(columns::strs(df, name)?)
}

/// The held rows of `lf` (`holders` ≥ 1), with the columns this detector reads, and whether
/// any row of `lf` has its holders known.
fn held_rows(lf: LazyFrame, mig: bool) -> Result<(DataFrame, bool), AdvisorError> {
    let act = if mig {
        col("sm_active_max")
    } else {
        when(col("sm_active_max").is_not_null())
            .then(col("sm_active_max"))
            .otherwise(col("busy_max"))
    };
    let mut cols = vec![
        col("node"),
        col("uuid"),
        col("gpu").cast(DataType::Int64),
        ts_ms().alias("t"),
        col("interval_ms").cast(DataType::Int64),
        col("holders").cast(DataType::Int64),
        col("holder_namespace"),
        col("holder_pod"),
        col("holder_slurm_job_id"),
        col("memory_used_max_bytes")
            .cast(DataType::Float64)
            .alias("mem"),
        act.cast(DataType::Float64).alias("act"),
    ];
    if mig {
        cols.extend([
            col("gpu_instance").cast(DataType::Int64),
            // The instance's key: its GPU instance id (dcgm-exporter's rows have no MIG uuid).
            col("gpu_instance").cast(DataType::String).alias("gi_key"),
            col("mig_uuid"),
            col("profile"),
        ]);
    } else {
        cols.extend([col("model"), col("mig_enabled")]);
    }
    let mut lf = lf;
    if lf.collect_schema()?.get("holders").is_none() {
        return Ok((DataFrame::empty(), false));
    }
    let known = lf
        .clone()
        .select([col("holders").is_not_null().any(true).alias("known")])
        .collect()?;
    let known = columns::bools(&known, "known")?.get(0).unwrap_or(false);
    if !known {
        return Ok((DataFrame::empty(), false));
    }
    let mut f = col("holders").gt(lit(0u32)).fill_null(lit(false));
    if !mig {
        f = f.and(col("mig_enabled").fill_null(lit(false)).not());
    }
    Ok((lf.filter(f).select(cols).collect()?, true))
}

/// A device's process rows: (node, uuid, gpu instance or -1) → their end times, sorted.
type ProcessEnds = BTreeMap<(String, String, i64), Vec<i64>>;

/// A device key: (node, uuid, gpu instance or -1).
type DeviceKey = (String, String, i64);

/// End times of the process rows of the `wanted` devices only (the devices with a row that
/// could be unused): a fleet whose held devices all hold memory reads no process row at all.
fn process_ends(
    frames: &Frames,
    wanted: &std::collections::BTreeSet<DeviceKey>,
) -> Result<ProcessEnds, AdvisorError> {
    let mut out = ProcessEnds::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    // Rows without a pid (dcgm-exporter's pod-labelled series become per-pod rows) say who
    // holds the device, not that a process runs there.
    let df = frames
        .process
        .clone()
        .filter(col("pid").is_not_null())
        .select([
            col("node"),
            col("uuid"),
            col("gpu_instance")
                .cast(DataType::Int64)
                .fill_null(lit(-1i64)),
            ts_ms().alias("t"),
        ])
        .collect()?;
    let (node, uuid) = (str_col(&df, "node")?, str_col(&df, "uuid")?);
    let (node_ids, uuid_ids) = (node.ids(), uuid.ids());
    let (gi, t) = (
        columns::i64s(&df, "gpu_instance")?,
        columns::i64s(&df, "t")?,
    );
    // Whether a (node id, uuid id, instance) is wanted, decided once per distinct key.
    let mut is_wanted: columns::FastMap<(u32, u32, i64), bool> = columns::FastMap::default();
    for i in 0..df.height() {
        let (Some(n), Some(u), Some(t)) = (node_ids.at(i), uuid_ids.at(i), t.get(i)) else {
            continue;
        };
        let g = gi.get(i).unwrap_or(-1);
        let want = *is_wanted.entry((n, u, g)).or_insert_with(|| {
            wanted.contains(&(
                node_ids.strings[n as usize].to_string(),
                uuid_ids.strings[u as usize].to_string(),
                g,
            ))
        });
        if want {
            out.entry((
                node_ids.strings[n as usize].to_string(),
                uuid_ids.strings[u as usize].to_string(),
                g,
            ))
            .or_default()
            .push(t);
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    Ok(out)
}

/// The devices of `df` (held rows) with a row that could be unused: under the memory
/// threshold, activity absent or at most the idle one.
fn candidates(
    df: &DataFrame,
    mig: bool,
    p: &Params,
    into: &mut std::collections::BTreeSet<DeviceKey>,
) -> Result<(), AdvisorError> {
    if df.height() == 0 {
        return Ok(());
    }
    let (node, uuid) = (str_col(df, "node")?, str_col(df, "uuid")?);
    let (node_ids, uuid_ids) = (node.ids(), uuid.ids());
    let (mem, act) = (columns::f64s(df, "mem")?, columns::f64s(df, "act")?);
    let gi = if mig {
        Some(columns::i64s(df, "gpu_instance")?)
    } else {
        None
    };
    let mut seen: columns::FastSet<(u32, u32, i64)> = columns::FastSet::default();
    for i in 0..df.height() {
        let quiet = mem.get(i).is_some_and(|m| m < p.idle.min_memory_bytes)
            && act.get(i).is_none_or(|a| a <= p.idle.max_activity);
        if quiet && let (Some(n), Some(u)) = (node_ids.at(i), uuid_ids.at(i)) {
            let g = gi.as_ref().and_then(|g| g.get(i)).unwrap_or(-1);
            if seen.insert((n, u, g)) {
                into.insert((
                    node_ids.strings[n as usize].to_string(),
                    uuid_ids.strings[u as usize].to_string(),
                    g,
                ));
            }
        }
    }
    Ok(())
}

/// Judges one device's rows (sorted by ts), one finding candidate per owner.
fn judge(
    d: &DeviceRows,
    procs: &ProcessEnds,
    p: &Params,
    out: &mut Part,
) -> Result<(), AdvisorError> {
    let c = device_columns(d)?;
    let first = d.rows[0];
    let (n0, u0) = (
        c.node.get(first).unwrap_or("").to_string(),
        c.uuid.get(first).unwrap_or("").to_string(),
    );
    let gi0 = c.gi.as_ref().and_then(|g| g.get(first));
    let share = crate::frames::mig_profile_share(c.profile.as_ref().and_then(|p| p.get(first)));
    let ends = procs.get(&(n0.clone(), u0.clone(), gi0.unwrap_or(-1)));
    let busy_at = |start: i64, end: i64| {
        ends.is_some_and(|v| {
            let k = v.partition_point(|&x| x <= start);
            k < v.len() && v[k] <= end
        })
    };
    let ip = &p.idle;
    // The device's owners in order of appearance (a device has one or a few), the current
    // one's index, and the unused run in progress (owner index, start, end).
    let mut owners: Vec<(OwnerRef, HeldDevice)> = Vec::new();
    let mut run: Option<(usize, i64, i64)> = None;
    let mut prev: Option<(i64, usize)> = None;
    let close = |run: &mut Option<(usize, i64, i64)>, owners: &mut Vec<(OwnerRef, HeldDevice)>| {
        if let Some((o, s, e)) = run.take()
            && e - s >= ip.min_duration_ms
        {
            owners[o].1.spans.push((s, e));
        }
    };
    for &i in &d.rows {
        let (Some(ts), Some(n)) = (c.t.get(i), c.holders.get(i)) else {
            continue;
        };
        let iv = c.iv.get(i).unwrap_or(0).max(1);
        if n < 1 {
            close(&mut run, &mut owners);
            prev = None;
            continue;
        }
        let owner: OwnerRef = (c.ns.get(i), c.pod.get(i), c.job.get(i));
        let o = match prev {
            Some((_, o)) if owners[o].0 == owner => o,
            _ => match owners.iter().position(|(k, _)| *k == owner) {
                Some(o) => o,
                None => {
                    owners.push((owner, new_device(d, &c, (gi0, share), owner)));
                    owners.len() - 1
                }
            },
        };
        if let Some((pt, po)) = prev
            && (breaks_span(ts - pt, iv, ip.max_gap_intervals) || po != o)
        {
            close(&mut run, &mut owners);
        }
        prev = Some((ts, o));
        let h = &mut owners[o].1;
        h.held_ms += iv;
        out.2 += hours(iv) * share;
        let a = c.act.get(i);
        if let Some(a) = a {
            h.act_ms += a * iv as f64;
            h.act_known_ms += iv;
        }
        let Some(m) = c.mem.get(i) else {
            out.1 += 1;
            close(&mut run, &mut owners);
            continue;
        };
        let unused = m < ip.min_memory_bytes
            && a.is_none_or(|a| a <= ip.max_activity)
            && !busy_at(ts - iv, ts);
        if unused {
            match &mut run {
                Some((_, _, e)) => *e = ts,
                None => run = Some((o, ts - iv, ts)),
            }
        } else {
            close(&mut run, &mut owners);
        }
    }
    close(&mut run, &mut owners);
    out.0.extend(
        owners
            .into_iter()
            .map(|(_, h)| h)
            .filter(|h| h.held_ms >= ip.min_duration_ms),
    );
    Ok(())
}

/// Every held device's measurements in one partition.
fn held_devices(frames: &Frames, p: &Params) -> Result<Part, AdvisorError> {
    let mut out: Part = (Vec::new(), 0, 0.0, false);
    let (gpu, gpu_known) = held_rows(frames.gpu.clone(), false)?;
    let (mig, mig_known) = held_rows(frames.mig.clone(), true)?;
    out.3 = gpu_known || mig_known;
    if gpu.height() == 0 && mig.height() == 0 {
        return Ok(out);
    }
    let mut wanted = std::collections::BTreeSet::new();
    candidates(&gpu, false, p, &mut wanted)?;
    candidates(&mig, true, p, &mut wanted)?;
    let procs = process_ends(frames, &wanted)?;
    for (kind, df) in [("gpu", &gpu), ("mig", &mig)] {
        if df.height() == 0 {
            continue;
        }
        let (node, uuid) = (str_col(df, "node")?, str_col(df, "uuid")?);
        let t = columns::i64s(df, "t")?;
        let mut keys = vec![&node, &uuid];
        let gk;
        if kind == "mig" {
            gk = str_col(df, "gi_key")?;
            keys.push(&gk);
        }
        for rows in columns::groups(&keys, &t, df.height()) {
            if rows.is_empty() {
                continue;
            }
            judge(&DeviceRows { kind, df, rows }, &procs, p, &mut out)?;
        }
    }
    Ok(out)
}

impl Detector for AllocatedUnused {
    fn id(&self) -> &'static str {
        AllocatedEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Allocated but unused"
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(held_devices(frames, params)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let ip = &params.idle;
        let mut devices = Vec::new();
        let (mut unjudged, mut held_gpu_hours, mut known) = (0u64, 0.0f64, false);
        for (d, u, h, k) in unbox::<Part>(self.id(), parts)? {
            devices.extend(d);
            unjudged += u;
            held_gpu_hours += h;
            known |= k;
        }
        let mut out = DetectorOutput::default();
        if !known {
            out.summary = "no allocation data: which pod or job holds each GPU is unknown (needs the exporter's kubelet source, Slurm, or an occupancy source: docs/frames.md)".into();
            out.data = serde_json::json!({ "allocation_known": false });
            return Ok(out);
        }
        if unjudged > 0 {
            out.notes.push(format!(
                "{unjudged} row(s) of held devices have no memory value (occupancy-only data): whether they were used cannot be judged there"
            ));
        }
        let (mut unused_gpu_h, mut low_gpu_h) = (0.0, 0.0);
        let mut found: Vec<(f64, Finding)> = Vec::new();
        for d in &devices {
            let unused_ms: i64 = d.spans.iter().map(|(s, e)| e - s).sum();
            let act_mean = (d.act_known_ms > 0).then(|| d.act_ms / d.act_known_ms as f64);
            let kind = if unused_ms > 0 {
                "unused"
            } else if act_mean.is_some_and(|a| a < LOW_USE) && d.act_known_ms * 2 >= d.held_ms {
                "low_use"
            } else {
                continue;
            };
            let wasted = if kind == "unused" {
                hours(unused_ms) * d.share
            } else {
                hours(d.held_ms) * d.share * (1.0 - act_mean.unwrap_or(0.0))
            };
            if kind == "unused" {
                unused_gpu_h += wasted;
            } else {
                low_gpu_h += wasted;
            }
            let e = &d.entity;
            let (severity, summary, action) = finding_text(d, kind, (unused_ms, act_mean), params);
            let ident = device_ident(e);
            let evidence = AllocatedEvidence {
                activity_mean: act_mean.map(r3),
                held_hours: r3(hours(d.held_ms)),
                kind: kind.into(),
                spans: span_evidence(&d.spans),
                unused_hours: r3(hours(unused_ms)),
                wasted_gpu_hours: r3(wasted),
            };
            found.push((
                evidence.wasted_gpu_hours,
                Finding::new(
                    finding_id(self.id(), &ident),
                    severity,
                    e.clone(),
                    summary,
                    action,
                    evidence,
                ),
            ));
        }
        // Unused before low use, then most GPU-hours wasted, then by id (stable).
        found.sort_by(|a, b| {
            a.1.severity
                .cmp(&b.1.severity)
                .reverse()
                .then(b.0.total_cmp(&a.0))
                .then(a.1.id.cmp(&b.1.id))
        });
        let unused = found
            .iter()
            .filter(|(_, f)| f.severity == Severity::Warning)
            .count();
        out.summary = format!(
            "{unused} allocated device(s) unused: {:.1} GPU-hours allocated and unused of {:.1} held; {} held with low use (< {:.0}% mean activity, {:.1} GPU-hours) (no process, < {:.1} GiB, activity ≤ {:.0}%, ≥ {} min)",
            unused_gpu_h,
            held_gpu_hours,
            found.len() - unused,
            LOW_USE * 100.0,
            low_gpu_h,
            ip.min_memory_bytes / (1u64 << 30) as f64,
            ip.max_activity * 100.0,
            ip.min_duration_ms / 60_000
        );
        out.data = serde_json::json!({
            "allocation_known": true,
            "held_gpu_hours": r3(held_gpu_hours),
            "unused_gpu_hours": r3(unused_gpu_h),
            "low_use_gpu_hours": r3(low_gpu_h),
        });
        out.findings = found.into_iter().map(|(_, f)| f).collect();
        Ok(out)
    }
}

/// A finding's severity, text and action for device `d` of `kind` (`unused`, `low_use`), with
/// its unused time and mean activity: where it is and who holds it, and what to do.
fn finding_text(
    d: &HeldDevice,
    kind: &str,
    (unused_ms, act_mean): (i64, Option<f64>),
    params: &Params,
) -> (Severity, String, String) {
    let ip = &params.idle;
    let e = &d.entity;
    let owner = match (&e.namespace, &e.pod, &e.slurm_job) {
        (Some(ns), Some(p), _) => format!("pod {ns}/{p}"),
        (None, Some(p), _) => format!("pod {p}"),
        (_, _, Some(j)) => format!("Slurm job {j}"),
        _ => "an unnamed holder".into(),
    };
    let place = match e.gpu_instance {
        Some(gi) => format!(
            "{}/GPU{}/GI{gi}",
            e.node.as_deref().unwrap_or(""),
            e.gpu.unwrap_or(0)
        ),
        None => format!(
            "{}/GPU{}",
            e.node.as_deref().unwrap_or(""),
            e.gpu.unwrap_or(0)
        ),
    };
    if kind == "unused" {
        (
            Severity::Warning,
            format!(
                "{place} was allocated to {owner} for {:.1} h and unused for {:.1} h in {} span(s): no process, under {:.1} GiB held, activity ≤ {:.0}%",
                hours(d.held_ms),
                hours(unused_ms),
                d.spans.len(),
                ip.min_memory_bytes / (1u64 << 30) as f64,
                ip.max_activity * 100.0
            ),
            format!(
                "release it: {owner} held the device with nothing running; end the pod or job (or scale its workload to zero) so the scheduler can place other work there"
            ),
        )
    } else {
        (
            Severity::Info,
            format!(
                "{place} was allocated to {owner} for {:.1} h at {:.1}% mean activity",
                hours(d.held_ms),
                act_mean.unwrap_or(0.0) * 100.0
            ),
            "share the GPU (time-slicing or MPS) with other light work, or move the workload to a MIG slice".to_string(),
        )
    }
}

/// What identifies a held device's finding: its kind, node, uuids and holder.
fn device_ident(e: &Entity) -> [&str; 7] {
    [
        e.kind.as_str(),
        e.node.as_deref().unwrap_or(""),
        e.uuid.as_deref().unwrap_or(""),
        e.mig_uuid.as_deref().unwrap_or(""),
        e.namespace.as_deref().unwrap_or(""),
        e.pod.as_deref().unwrap_or(""),
        e.slurm_job.as_deref().unwrap_or(""),
    ]
}

/// Each unused span as evidence: start, end and minutes.
fn span_evidence(spans: &[(i64, i64)]) -> Vec<AllocatedSpanEvidence> {
    spans
        .iter()
        .map(|&(s, e)| AllocatedSpanEvidence {
            start: fmt_ms(s),
            end: fmt_ms(e),
            minutes: r3((e - s) as f64 / 60_000.0),
        })
        .collect()
}

#[cfg(test)]
mod tests;
