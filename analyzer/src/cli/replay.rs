//! `tessera replay`: flag parsing, plan reading and output for the replay (a module of the
//! binary; docs/replay.md). Reads the plan (`--plan`; a mig-parted config or an old
//! `tessera-mig-plan` without workloads is refused, exit 2), ingests the sources over the range
//! (the one range rule), calls [`tessera::replay::run`] and prints a table, Markdown, HTML or the
//! versioned JSON to stdout or `--out` (HTML to a terminal is refused, exit 2, naming `--out`). `--write-prediction` writes the replay's figures into the
//! plan's `prediction` block. Out of sample: `--train RANGE --test RANGE` makes the plan from the
//! first range (`--kind mig`: the MIG planner; `--kind consolidation`: the advisor's
//! consolidation moves) and replays it on the second.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono_tz::Tz;
use clap::{Args, ValueEnum};
use tessera::frames::Frames;
use tessera::ingest;
use tessera::output::Format;
use tessera::range::{RangeRequest, TimeRange};
use tessera::replay::{self, ReplayRequest, train};
use tessera::report;
use tessera_core::mig::parted::PartedFile;
use tessera_core::mig::plan::{MIG_PLAN_KIND, PLAN_KIND, TesseraPlan};

use super::source::{SourceArgs, load, name_file, parse_tz, part_files};

/// `--kind`: which planner makes the plan of `--train`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanKind {
    /// MIG layouts (`tessera mig plan`).
    Mig,
    /// Consolidation moves (`tessera analyze --plan-out`).
    Consolidation,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// The plan to replay (tessera-plan v1, docs/plan.md).
    #[arg(long, value_name = "FILE", required_unless_present = "train")]
    plan: Option<PathBuf>,
    /// A queue plan's teams of the GPUs Slurm jobs hold: their accounts, from `sacct` (else
    /// those GPUs count for no team).
    #[arg(long = "slurm-accounts")]
    slurm_accounts: bool,
    /// Replay this config all the time instead of following the plan's schedule.
    #[arg(long, value_name = "LABEL")]
    config: Option<String>,
    /// Output format.
    #[arg(long, value_parser = tessera::output::DOCUMENT, default_value_t = Format::Table)]
    format: Format,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write the replay's figures into the plan's `prediction` block (the --plan file, or with
    /// --train the --plan-out file).
    #[arg(long)]
    write_prediction: bool,
    /// Price of one GPU-hour (default 2.00, as the report's).
    #[arg(long = "price.gpu-hour", value_name = "PRICE")]
    price_gpu_hour: Option<f64>,
    /// Report config (TOML) with `[price] gpu_hour`, `kwh`, `currency`, as `tessera report`'s.
    #[arg(long = "prices", value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Out of sample: make the plan from this range (`SINCE..UNTIL`, each an RFC 3339 time, a
    /// date or a duration back from now) and replay it on --test.
    #[arg(long, value_name = "RANGE", requires = "test", conflicts_with_all = ["plan", "since", "until"])]
    train: Option<String>,
    /// Out of sample: the range the --train plan is replayed on (`SINCE..UNTIL`).
    #[arg(long, value_name = "RANGE", requires = "train")]
    test: Option<String>,
    /// Which plan --train makes.
    #[arg(long, value_enum, default_value_t = PlanKind::Mig)]
    kind: PlanKind,
    /// With --train: also write the plan it made here.
    #[arg(long = "plan-out", value_name = "FILE", requires = "train")]
    plan_out: Option<PathBuf>,
    /// Time zone of the --train MIG plan's off-peak windows and schedule (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
}

/// Reads the plan; a mig-parted file and an old MIG-only plan get their own refusal (naming the
/// command that makes a tessera plan of `sources`).
fn read_plan(path: &Path, sources: &[String]) -> Result<TesseraPlan> {
    match TesseraPlan::from_file(path) {
        Ok(p) => Ok(p),
        Err(e) => {
            // A file of another tessera kind says so at its top level.
            let text = tessera_core::input_limits::read_to_string(
                path,
                tessera_core::input_limits::MAX_YAML_BYTES,
            )
            .unwrap_or_default();
            let kind = text.lines().find_map(|l| {
                l.strip_prefix("kind:")
                    .map(|v| v.trim().trim_matches(['"', '\'']).to_string())
            });
            if let Some(k) = kind.filter(|k| k != PLAN_KIND && k != MIG_PLAN_KIND) {
                bail!(
                    "{} is not a tessera plan: it is kind {k:?}; replay reads kind {PLAN_KIND} (docs/plan.md)",
                    path.display()
                );
            }
            if PartedFile::from_file(path).is_ok() {
                bail!(
                    "{} is an nvidia-mig-parted config: it names no workloads, so there is nothing to replay (tessera does not guess where each workload would go); make a tessera plan with `{}` and replay that",
                    path.display(),
                    tessera::commands::mig_plan(sources, &[], "plan.yaml")
                );
            }
            Err(anyhow::Error::new(e).context(format!(
                "{} is not a tessera plan (kind: tessera-plan, docs/plan.md)",
                path.display()
            )))
        }
    }
}

/// The replay of a plan that holds only a queue plan (docs/queues.md, "Replay").
fn queue_replay(
    args: &ReplayArgs,
    plan: &TesseraPlan,
    parts: &[Frames],
    range: TimeRange,
) -> Result<()> {
    let Some(queues) = &plan.queues else {
        bail!("the plan has no queues section");
    };
    if args.write_prediction || args.config.is_some() || args.format == Format::Html {
        bail!(
            "the replay of a queue plan is a table, Markdown or JSON, without --config or --write-prediction"
        );
    }
    let refs: Vec<&Frames> = parts.iter().collect();
    let accounts = if args.slurm_accounts {
        super::source::job_accounts(&refs)
    } else {
        Default::default()
    };
    let r = tessera::queues::replay_parts(
        &refs,
        queues,
        (
            tessera::times::fmt_ms(range.since),
            tessera::times::fmt_ms(range.until),
        ),
        &accounts,
    )?;
    let (head, sections) = tessera::queues::replay_sections(&r);
    let text = match args.format {
        Format::Json => tessera::output::json::document(&r)?,
        Format::Markdown => tessera::output::section::to_markdown(&head[0], &head[1..], &sections),
        _ => tessera::output::section::to_text(&head, &sections, false),
    };
    match &args.out {
        Some(p) => {
            tessera_core::files::replace(p, text.as_bytes())?;
            eprintln!("tessera: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// `SINCE..UNTIL`.
fn parse_range(flag: &str, s: &str) -> Result<RangeRequest> {
    let Some((a, b)) = s.split_once("..") else {
        bail!("bad {flag} {s:?}: expected SINCE..UNTIL, e.g. 2026-11-09..2026-11-16");
    };
    let now = chrono::Utc::now().timestamp_millis();
    let r = RangeRequest::parse(Some(a), Some(b), now).with_context(|| format!("bad {flag}"))?;
    Ok(r)
}

/// The range of `req` over the data (the one range rule), printing its lines.
fn resolve(req: &RangeRequest, data: (i64, i64), parts: &[ingest::Part]) -> Result<TimeRange> {
    let resolved = req.resolve(
        data.0,
        data.1,
        || -> Result<i64> {
            Ok(ingest::first_row_start(parts)
                .map_err(|e| name_file(e.into(), &part_files(parts)))?
                .unwrap_or(data.0))
        },
        "replaying",
    )?;
    for m in resolved.messages.iter().chain(&resolved.past_data) {
        eprintln!("tessera: {m}");
    }
    Ok(resolved.range)
}

/// Whether `a` and `b` name the same file (also when neither exists yet).
fn same_file(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| -> Option<PathBuf> {
        if let Ok(c) = std::fs::canonicalize(p) {
            return Some(c);
        }
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
    };
    match (canon(a), canon(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Refuses outputs that cannot be written: `--out` naming the plan replayed or written, and
/// HTML to a terminal.
fn refuse_outputs(args: &ReplayArgs) -> Result<()> {
    // The report must never overwrite the plan it replays (or the plan it writes).
    if let Some(out) = &args.out {
        for (flag, plan) in [("--plan", &args.plan), ("--plan-out", &args.plan_out)] {
            if let Some(plan) = plan
                && same_file(out, plan)
            {
                bail!(
                    "--out {} is the same file as {flag} {}: the replay would overwrite the plan; give another --out",
                    out.display(),
                    plan.display()
                );
            }
        }
    }
    if args.format == Format::Html
        && args.out.is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
    {
        bail!(
            "--format html writes a page, not terminal text: give --out replay.html (or redirect: > replay.html)"
        );
    }
    Ok(())
}

/// Out of sample: makes the plan on the `--train` range and returns it with the `--test`
/// range's frames, that range, and the trained range with the planner's kind.
#[allow(clippy::type_complexity)]
fn train_and_test(
    args: &ReplayArgs,
    train: &str,
    test: &str,
    sources: &[String],
) -> Result<(
    TesseraPlan,
    Vec<Frames>,
    TimeRange,
    Option<(TimeRange, String)>,
)> {
    let train = parse_range("--train", train)?;
    let test = parse_range("--test", test)?;
    let lo = train.since.min(test.since);
    let hi = train.until.max(test.until);
    let (parts, report) = args.src.ingest_bounds((lo, hi), true)?;
    let Some(data) = report.time_range() else {
        bail!("no rows in the sources for --train and --test: nothing to replay");
    };
    let train_range = resolve(&train, data, &parts)?;
    let test_range = resolve(&test, data, &parts)?;
    let within = |r: TimeRange| -> Vec<Frames> {
        parts
            .iter()
            .map(|p| p.frames.within(r.since, r.until))
            .collect()
    };
    let kind = match args.kind {
        PlanKind::Mig => train::PlanKind::Mig,
        PlanKind::Consolidation => train::PlanKind::Consolidation,
    };
    let plan = train::make_plan(
        &within(train_range),
        train_range,
        kind,
        args.tz,
        sources,
        &|n| eprintln!("tessera: note: {n}"),
    )
    .map_err(|e| name_file(e.into(), &part_files(&parts)))
    .context("making the --train plan")?;
    let kind = kind.as_str();
    let test_parts = within(test_range);
    Ok((
        plan,
        test_parts,
        test_range,
        Some((train_range, kind.to_string())),
    ))
}

pub fn run(args: ReplayArgs) -> Result<()> {
    refuse_outputs(&args)?;
    let config = match &args.prices {
        Some(p) => Some((p.as_path(), report::ReportConfig::load(p)?)),
        None => None,
    };
    let prices = report::prices(
        config.as_ref().map(|(p, c)| (*p, c)),
        args.price_gpu_hour,
        None,
    )?;
    let sources: Vec<String> = args.src.sources.iter().map(|s| s.to_string()).collect();
    let (plan, parts, range, trained) = match (&args.train, &args.test, &args.plan) {
        (Some(train), Some(test), _) => train_and_test(&args, train, test, &sources)?,
        (None, None, Some(path)) => {
            let plan = read_plan(path, &sources)?;
            let loaded = load(&args.src, false, "replaying")?;
            let Some(range) = loaded.range else {
                bail!("no rows in the sources for the chosen range: nothing to replay");
            };
            if plan.queues.is_some() && plan.configs.is_empty() && plan.consolidation.is_empty() {
                let parts: Vec<Frames> = loaded.parts.into_iter().map(|p| p.frames).collect();
                return queue_replay(&args, &plan, &parts, range);
            }
            (
                plan,
                loaded.parts.into_iter().map(|p| p.frames).collect(),
                range,
                None,
            )
        }
        _ => bail!("give --plan FILE, or --train RANGE and --test RANGE"),
    };
    let request = ReplayRequest {
        range,
        plan_file: args.plan.as_ref().map(|p| p.display().to_string()),
        config: args.config.clone(),
        prices,
        sources,
        trained,
    };
    let refs: Vec<&Frames> = parts.iter().collect();
    let r = replay::run(&refs, &plan, &request)?;
    let mut plan = plan;
    if args.write_prediction || args.plan_out.is_some() {
        if args.write_prediction {
            plan.prediction = Some(replay::prediction(&r));
        }
        let path = args.plan_out.as_ref().or(args.plan.as_ref());
        match path {
            Some(path) => {
                tessera_core::files::replace(path, plan.to_yaml().as_bytes())?;
                eprintln!("tessera: wrote {}", path.display());
            }
            None => bail!("--write-prediction with --train needs --plan-out FILE"),
        }
    }
    let text = match args.format {
        Format::Table | Format::Text => replay::render::render_table(&r),
        Format::Markdown => replay::render::render_markdown(&r),
        Format::Html => replay::html::render_html(&r),
        Format::Json => tessera::output::json::document(&r)?,
    };
    match &args.out {
        Some(p) => {
            tessera_core::files::replace(p, text.as_bytes())?;
            eprintln!("tessera: wrote {}", p.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}
