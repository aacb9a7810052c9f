//! `tessera report`: flag parsing, range selection and output for the weekly report (a module
//! of the binary). Ingests the sources (reaching one period further back for week-over-week),
//! builds a [`ReportRequest`] for [`tessera::report::run`] (the workflow: the advisor with its
//! default thresholds, the tallies, the MIG section) and writes the
//! [`tessera::report::Report`] as a table, Markdown, HTML or JSON to stdout or `--out` (HTML to
//! a terminal is refused, exit 2, naming `--out`). Colour only for a table on a terminal without `NO_COLOR`; a spinner on a terminal
//! while it works; warnings on stderr.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono_tz::Tz;
use clap::{Args, ValueEnum};
use tessera::advisor::Params;
use tessera::ingest::{fmt_ms, parse_time};
use tessera::report::{self, ReportConfig, ReportRequest, html, render};

use super::source::{
    PartProgress, SourceArgs, load_parts, load_reaching, name_file, parse_tz, part_files,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Markdown,
    Html,
    Json,
}

/// `--by`: what the report is broken down by instead of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// Slurm jobs (processes' `slurm_job_id`): the worst of the period, most unused GPU-hours
    /// first.
    Job,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of the hour-of-week heatmap and the off-peak windows (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    format: ReportFormat,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE", conflicts_with = "archive")]
    out: Option<PathBuf>,
    /// Keep the report on a schedule: write its HTML page and its JSON into this folder as
    /// tessera-report-<end>.html and .json (instead of --format/--out), removing the oldest
    /// beyond --keep.
    #[arg(long, value_name = "DIR")]
    archive: Option<PathBuf>,
    /// With --archive: how many reports to keep.
    #[arg(long, value_name = "N", default_value_t = 8, requires = "archive")]
    keep: usize,
    /// Report config (TOML): `[price] gpu_hour = 2.5, kwh = 0.3, currency = "EUR"`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Price of one GPU-hour (overrides the config file; default 2.00).
    #[arg(long = "price.gpu-hour", value_name = "PRICE")]
    price_gpu_hour: Option<f64>,
    /// Price of one kWh (overrides the config file; default 0.15).
    #[arg(long = "price.kwh", value_name = "PRICE")]
    price_kwh: Option<f64>,
    /// How many idle-loaded models (with --by job: jobs) to list.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// The time of a layout change to compare equal periods around (RFC 3339 or YYYY-MM-DD,
    /// inside the range), instead of the changes found in the data.
    #[arg(long = "change-at", value_name = "TIME")]
    change_at: Option<String>,
    /// Instead of the fleet report, the worst Slurm jobs of the period (docs/jobs.md): table,
    /// Markdown or JSON.
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Also make the report's plans (consolidation moves, MIG layouts) from the previous period
    /// and replay them on this one (`tessera replay`, docs/replay.md): verdict, failures, GPUs
    /// freed. Off by default: it plans and replays once more.
    #[arg(long = "out-of-sample")]
    out_of_sample: bool,
    /// The plan (tessera-plan v1) that made a change in the range, with the `prediction` block
    /// `tessera replay --write-prediction` wrote: the report sets the prediction beside what
    /// the change realized and explains a large difference (docs/report.md, "Changes").
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Leave the plan actions unreplayed: by default the consolidation moves and the MIG layout
    /// the Actions propose are replayed on the reported period (`tessera replay`'s model) and
    /// each action carries the verdict (safe, tight, unsafe); this saves that time.
    #[arg(long = "no-replay")]
    no_replay: bool,
    /// The weeks the trend shows, ending at the report's end (idle-loaded and unused GPU-hours,
    /// work utilization and cost per week, and what layout changes saved); 0 leaves it out.
    /// Ingest reads that far back.
    #[arg(long = "trend.weeks", value_name = "N", default_value_t = report::trend::DEFAULT_WEEKS)]
    trend_weeks: usize,
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

pub fn run(args: ReportArgs) -> Result<()> {
    let tz: Tz = args.tz;
    let config = match &args.config {
        Some(p) => Some((p.as_path(), ReportConfig::load(p)?)),
        None => None,
    };
    let prices = report::prices(
        config.as_ref().map(|(p, c)| (*p, c)),
        args.price_gpu_hour,
        args.price_kwh,
    )?;
    if args.top == 0 {
        bail!("bad --top 0: expected at least 1");
    }
    if args.format == ReportFormat::Html
        && args.out.is_none()
        && args.archive.is_none()
        && std::io::stdout().is_terminal()
    {
        bail!(
            "--format html writes a page, not terminal text: give --out report.html (or redirect: > report.html)"
        );
    }
    if args.by == Some(By::Job) {
        if args.change_at.is_some() {
            bail!("--change-at compares the fleet around a change; it does not apply to --by job");
        }
        return by_job(&args);
    }
    let plan = match &args.plan {
        Some(p) => {
            let file = p.display().to_string();
            let parsed = tessera_core::mig::plan::TesseraPlan::from_file(p)?;
            Some(
                tessera::changes::predicted::PlanPrediction::from_plan(
                    &parsed,
                    &file,
                    &args
                        .src
                        .sources
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>(),
                )
                .map_err(anyhow::Error::msg)?,
            )
        }
        None => None,
    };
    let change_at = match &args.change_at {
        Some(v) => Some(
            parse_time(v, chrono::Utc::now().timestamp_millis())
                .with_context(|| format!("bad --change-at {v:?}"))?,
        ),
        None => None,
    };

    // One range rule for every command (tessera::range); ingest reaches one period further
    // back so the previous period can be compared, and the frames stay whole for it.
    if args.trend_weeks > report::trend::MAX_WEEKS {
        bail!(
            "bad --trend.weeks {}: expected 0 to {}",
            args.trend_weeks,
            report::trend::MAX_WEEKS
        );
    }
    let loaded = load_reaching(
        &args.src,
        args.trend_weeks as i64 * report::trend::WEEK_MS,
        "reporting",
    )?;
    let Some(range) = loaded.range else {
        bail!("no rows in the sources for the chosen range: nothing to report");
    };
    let gpu_rows = loaded.gpu_rows();
    let (parts, ingest_report) = (loaded.parts, loaded.report);
    let files = part_files(&parts);
    let named = |e: anyhow::Error| name_file(e, &files);
    let frames: Vec<&tessera::frames::Frames> = parts.iter().map(|p| &p.frames).collect();
    let bar = PartProgress::new(parts.len(), gpu_rows);
    bar.set("analysing", 0);
    // The apply journals beside history sources: evidence of layout changes.
    let mut journal = Vec::new();
    for src in &args.src.sources {
        if let tessera::ingest::Source::History(dir) = src {
            let (runs, warnings) = tessera::changes::journal::beside(std::path::Path::new(dir));
            journal.extend(runs);
            for w in warnings {
                eprintln!("tessera: warning: {w}");
            }
        }
    }
    let request = ReportRequest {
        range,
        ingest: &ingest_report,
        sources: args.src.sources.iter().map(|s| s.to_string()).collect(),
        prices,
        tz,
        top: args.top,
        change_at,
        journal,
        plan,
        trend_weeks: args.trend_weeks,
        first_ts: ingest_report.time_range().map(|(first, _)| first),
        range_flags: args.src.range_flags(),
    };
    let sources: Vec<String> = request.sources.clone();
    let prices_for_replay = request.prices.clone();
    let mut r = report::run(&frames, request, &|phase, n| bar.set(phase, n))
        .map_err(|e| named(e.into()))?;
    if !args.no_replay && !args.out_of_sample && !r.plans.is_empty() {
        // The plan actions' verdicts: their plans replayed on the reported period.
        bar.set("replaying the plans", 0);
        let checks = tessera::replay::train::in_sample(
            &frames,
            range,
            &r.plans,
            &sources,
            &prices_for_replay,
        );
        tessera::report::verdicts_from_replays(&mut r.actions, &checks);
    }
    if args.out_of_sample {
        bar.set("replaying the plans", 0);
        r.out_of_sample = Some(tessera::replay::train::out_of_sample(
            &frames,
            range.previous(),
            range,
            &[
                tessera::replay::train::PlanKind::Consolidation,
                tessera::replay::train::PlanKind::Mig,
            ],
            tz,
            &sources,
            &prices_for_replay,
        ));
        // The plans' actions carry the verdicts of their replays on the reported period.
        if let Some(checks) = &r.out_of_sample {
            tessera::report::verdicts_from_replays(&mut r.actions, checks);
        }
    }
    bar.finish();
    if let Some(dir) = &args.archive {
        let json = serde_json::to_string_pretty(&r)? + "\n";
        let a = report::archive::write(dir, &r.until, &html::render_html(&r), &json, args.keep)?;
        eprintln!(
            "tessera: wrote {} and {}{}",
            a.html.display(),
            a.json.display(),
            if a.removed.is_empty() {
                String::new()
            } else {
                format!("; removed {} older file(s)", a.removed.len())
            }
        );
        return Ok(());
    }
    let color = args.format == ReportFormat::Table
        && args.out.is_none()
        && std::io::stdout().is_terminal()
        && !no_color();
    let text = match args.format {
        ReportFormat::Table => render::render_table(&r, color),
        ReportFormat::Markdown => render::render_markdown(&r),
        ReportFormat::Html => html::render_html(&r),
        ReportFormat::Json => serde_json::to_string_pretty(&r)? + "\n",
    };
    write_out(args.out.as_deref(), &text)
}

/// `--by job`: every job of the range summarised (`tessera::jobs`), the worst `--top` printed.
fn by_job(args: &ReportArgs) -> Result<()> {
    if args.archive.is_some() {
        bail!("--by job prints the worst jobs; --archive keeps the weekly report: not together");
    }
    if args.format == ReportFormat::Html {
        bail!("--by job writes a table, Markdown or JSON (--format table|markdown|json), not HTML");
    }
    let (parts, range, _) = load_parts(&args.src)?;
    let Some(range) = range else {
        bail!("no rows in the sources for the chosen range: no job to report");
    };
    let (from, to) = (fmt_ms(range.since), fmt_ms(range.until));
    let files = part_files(&parts);
    let params = Params::default();
    let mut jobs = std::collections::BTreeMap::new();
    for p in &parts {
        let part = tessera::jobs::rows_by_job(&p.frames, None, &params)
            .map_err(|e| name_file(e.into(), &files))?;
        tessera::jobs::merge_jobs(&mut jobs, part);
    }
    let total = jobs.len();
    let worst = tessera::jobs::worst(&jobs, args.top);
    let text = match args.format {
        ReportFormat::Json => {
            serde_json::to_string_pretty(&serde_json::json!({
                "version": tessera::jobs::JOB_JSON_VERSION,
                "by": "job",
                "range": { "from": from, "to": to },
                "jobs_seen": total,
                "jobs": worst,
            }))? + "\n"
        }
        ReportFormat::Markdown => format!(
            "# Worst Slurm jobs, {from} .. {to}\n\n{total} job(s) with GPU processes; the {} \
             with the most unused GPU-hours:\n\n{}",
            worst.len(),
            tessera::jobs::render_worst(&worst, true)
        ),
        _ => format!(
            "Worst Slurm jobs, {from} .. {to}: {total} job(s) with GPU processes\n\n{}",
            tessera::jobs::render_worst(&worst, false)
        ),
    };
    write_out(args.out.as_deref(), &text)
}

/// Writes the report to `--out` (saying so on stderr) or to stdout.
fn write_out(out: Option<&std::path::Path>, text: &str) -> Result<()> {
    match out {
        Some(p) => {
            tessera_core::files::replace(p, text.as_bytes())?;
            eprintln!("tessera: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
