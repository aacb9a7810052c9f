//! `tessera job`'s table (one screen per job) and `tessera report --by job`'s table of the worst
//! jobs (aligned text or Markdown), and a summary's verdict sentences. Formatting only; no
//! colour; control characters from data escaped.

use super::{ActivitySource, DeviceUse, JobSummary, Rating, pct};
use crate::output::{Col, Columns, Table};

/// The Time line, and a line per run when the id ran more than once.
fn time_lines(o: &mut String, s: &JobSummary) {
    use std::fmt::Write as _;
    if s.runs.len() > 1 {
        let _ = writeln!(
            o,
            "  Time      {} .. {}: {} runs of this id, {:.1} h running in all",
            s.start,
            s.end,
            s.runs.len(),
            s.duration_hours
        );
        for r in &s.runs {
            let _ = writeln!(
                o,
                "            run {} .. {} ({:.1} h)",
                r.start, r.end, r.hours
            );
        }
    } else {
        let _ = writeln!(
            o,
            "  Time      {} .. {} ({:.1} h)",
            s.start, s.end, s.duration_hours
        );
    }
}

/// The device table's columns.
const DEVICE_COLUMNS: [Col; 8] = [
    Col::left(16),
    Col::right(3),
    Col::right(3),
    Col::right(7),
    Col::right(5),
    Col::right(5),
    Col::right(14),
    Col::right(9),
];

/// One row per device the job held.
fn devices(s: &JobSummary) -> Table {
    let pct_or = |x: Option<f64>| x.map_or("-".to_string(), pct);
    let mut t = Table::with_header(&[
        "NODE",
        "GPU",
        "MIG",
        "HOURS",
        "MEAN",
        "P95",
        "MEMORY PEAK",
        "KWH",
    ]);
    for d in &s.devices {
        let mem = match (d.memory_peak_gib, d.memory_total_gib) {
            (Some(p), Some(t)) => format!("{p:.1}/{t:.0} GiB"),
            (Some(p), None) => format!("{p:.1} GiB"),
            _ => "-".to_string(),
        };
        t.push(vec![
            d.device.node.clone(),
            d.device.gpu.to_string(),
            d.device
                .gpu_instance
                .map_or("-".to_string(), |g| g.to_string()),
            format!("{:.1}", d.hours),
            pct_or(d.activity_mean),
            pct_or(d.activity_p95),
            mem,
            d.energy_kwh.map_or("-".to_string(), |e| format!("{e:.3}")),
        ]);
    }
    t
}

/// A count as the table shows it: digits grouped, decimals only for small figures.
fn count(x: f64) -> String {
    crate::report::render::thousands(x, if x.abs() >= 100.0 { 0 } else { 2 })
}

/// One Work line per unit, or one saying why there is none (nothing when not asked).
fn work_lines(o: &mut String, s: &JobSummary) {
    use std::fmt::Write as _;
    match (&s.work, &s.work_note) {
        (Some(list), _) if !list.is_empty() => {
            for w in list {
                let per = w.per_gpu_hour.map_or(
                    "per GPU-hour unknown (no GPU-hours in the runs it was counted in)".to_string(),
                    |p| format!("{} {} per GPU-hour", count(p), w.unit),
                );
                let _ = writeln!(
                    o,
                    "  Work      {} {}, {per} ({:.1} GPU-hours)",
                    count(w.work),
                    w.unit,
                    w.gpu_hours
                );
            }
        }
        (_, Some(note)) => {
            let _ = writeln!(o, "  Work      {note}");
        }
        _ => {}
    }
}

/// The summary as one screen of text (no colour).
pub fn render_table(s: &JobSummary) -> String {
    use std::fmt::Write as _;
    let pct_or = |x: Option<f64>| x.map_or("-".to_string(), pct);
    let mut o = String::new();
    let _ = writeln!(o, "Slurm job {}", s.job);
    let _ = writeln!(o, "  Owner     {}", s.owner.as_deref().unwrap_or("unknown"));
    time_lines(&mut o, s);
    let _ = writeln!(
        o,
        "  GPUs      {} ({:.1} GPU-hours)",
        s.devices.len(),
        s.gpu_hours
    );
    let source = match s.activity_source {
        Some(ActivitySource::ProcessSm) => "the job's processes' SM use",
        Some(ActivitySource::MigSmActive) => "the MIG instances' SM activity",
        Some(ActivitySource::GpuSmActive) => "the GPUs' SM activity",
        Some(ActivitySource::GpuBusy) => "the GPUs' busy ratio",
        None => "no activity metric",
    };
    let _ = writeln!(
        o,
        "  Activity  mean {}, p95 {} (from {source})",
        pct_or(s.activity_mean),
        pct_or(s.activity_p95)
    );
    let _ = writeln!(
        o,
        "  Memory    peak {}",
        s.memory_peak_gib
            .map_or("-".to_string(), |g| format!("{g:.1} GiB"))
    );
    let _ = writeln!(
        o,
        "  Energy    {}",
        s.energy_kwh
            .map_or(
                "unknown (the GPUs' energy, or the activity that splits it between their processes, is not in the data)".to_string(),
                |e| format!(
                "{e:.3} kWh (its share of the GPUs' energy by activity)"
            ))
    );
    let _ = writeln!(
        o,
        "  Idle      {:.1} h holding memory while idle ({} span(s))",
        s.idle_hours,
        s.idle_spans.len()
    );
    work_lines(&mut o, s);
    let _ = writeln!(o);
    o.push_str(&devices(s).columns(&Columns {
        indent: "  ",
        cols: &DEVICE_COLUMNS,
        trim_end: false,
    }));
    let _ = writeln!(o);
    let _ = writeln!(o, "Verdict: {}", s.rating.as_str());
    for line in &s.verdict {
        let _ = writeln!(o, "  - {line}");
    }
    // Names from data may hold control characters: shown escaped (crate::output::escape).
    crate::output::escape::printable_lines(&o).into_owned()
}

/// The worst jobs as one table (`tessera report --by job`).
pub fn render_worst(list: &[JobSummary], markdown: bool) -> String {
    let pct_or = |x: Option<f64>| x.map_or("-".to_string(), pct);
    let head = [
        "JOB",
        "GPUS",
        "GPU-HOURS",
        "MEAN",
        "P95",
        "IDLE H",
        "UNUSED GPU-H",
        "KWH",
        "RATING",
        "START",
    ];
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.job.clone(),
                s.devices.len().to_string(),
                format!("{:.1}", s.gpu_hours),
                pct_or(s.activity_mean),
                pct_or(s.activity_p95),
                format!("{:.1}", s.idle_hours),
                s.unused_gpu_hours
                    .map_or("unknown".to_string(), |u| format!("{u:.1}")),
                s.energy_kwh.map_or("-".to_string(), |e| format!("{e:.3}")),
                s.rating.as_str().to_string(),
                s.start.clone(),
            ]
        })
        .collect();
    let t = Table {
        header: head.map(String::from).to_vec(),
        rows,
    };
    if markdown {
        return t.pipes();
    }
    t.columns(&Columns {
        indent: "",
        cols: &[Col::fit().after("  "); 10],
        trim_end: true,
    })
}

/// The advice for a summary, one sentence per observation.
pub(super) fn verdict(s: &JobSummary) -> Vec<String> {
    let mut out = Vec::new();
    if s.runs.len() > 1 {
        out.push(format!(
            "This job id ran {} times (an id reused, e.g. resubmitted daily): {:.1} h running in all between {} and {}; the figures below are over every run.",
            s.runs.len(),
            s.duration_hours,
            s.start,
            s.end
        ));
    }
    let n = s.devices.len();
    match (s.activity_mean, s.activity_p95) {
        (Some(m), Some(p)) => out.push(match s.rating {
            Rating::Good => format!(
                "The job kept its {n} GPU(s) busy: mean activity {}, p95 {}.",
                pct(m),
                pct(p)
            ),
            Rating::Underused => format!(
                "The job used its {n} GPU(s) at mean activity {} (p95 {}): it could share a GPU \
                 or run on fewer.",
                pct(m),
                pct(p)
            ),
            Rating::Idle => format!(
                "The job's {n} GPU(s) were mostly idle: mean activity {} (p95 {}). Check for \
                 stalls (data loading, waiting on other jobs) or request fewer GPUs.",
                pct(m),
                pct(p)
            ),
            Rating::Unknown => format!(
                "The job's use of its {n} GPU(s) is unknown: mean activity {}, p95 {}.",
                pct(m),
                pct(p)
            ),
        }),
        _ => out.push(
            "Unknown: no activity was measured for the job's GPUs (neither SM activity nor the \
             busy ratio is in the data: NVML utilization or GPM, DCGM's GPU_UTIL or \
             PROF_SM_ACTIVE), so its use is not judged."
                .to_string(),
        ),
    }
    let held: Vec<&DeviceUse> = s.devices.iter().filter(|d| d.held_only).collect();
    if !held.is_empty() {
        out.push(format!(
            "It held {} of its {n} GPU(s) without ever running anything on them ({:.1} \
             GPU-hours): request only the GPUs the job uses.",
            held.len(),
            held.iter().map(|d| d.hours).sum::<f64>()
        ));
    }
    if s.idle_hours > 0.0 {
        out.push(format!(
            "It held GPU memory while doing nothing for {:.1} h of {:.1} GPU-hours ({} span(s) \
             of an hour or more): free the GPU when idle, or end the job sooner.",
            s.idle_hours,
            s.gpu_hours,
            s.idle_spans.len()
        ));
    }
    let cap = s
        .devices
        .iter()
        .filter_map(|d| d.memory_total_gib)
        .reduce(f64::min);
    if let (Some(peak), Some(cap)) = (s.memory_peak_gib, cap)
        && cap > 0.0
        && peak < 0.25 * cap
        && s.devices.iter().all(|d| d.device.gpu_instance.is_none())
    {
        out.push(format!(
            "Its peak memory, {peak:.1} GiB of {cap:.0} GiB, would fit a MIG instance: a smaller \
             slice would leave the rest of the GPU to others."
        ));
    }
    out
}
