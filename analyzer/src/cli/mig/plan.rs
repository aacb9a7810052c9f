//! `tessera mig plan`: flag parsing, file writing and printing for the MIG planner (a module of
//! the binary). Ingests the sources (the one range rule of `tessera::range`), builds a
//! `PlanRequest` for `tessera::mig_planner::run` (the workflow: demand, packing, night layout
//! and schedule), writes the tessera plan (`-o`), optionally the mig-parted config, the schedule
//! and its cron/systemd units, and prints the outcome's summary (table or JSON) on stdout.
//!
//! The units run `tessera mig apply --schedule FILE --yes` with this binary (or
//! `--schedule-tessera`) and the device flags given here (`--backend`, `--sim.*`, `--node`, …:
//! checked as the apply will check them, written with absolute paths), plus
//! `--allow-plan-outside` when the plan is not beside the schedule.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono_tz::Tz;
use clap::Args;
use tessera::mig_planner::schedule::ApplyCommand;
use tessera::mig_planner::{self, PlanRequest, PlanRunError, Progress, demand, export};
use tessera::output::{Format, TABLE_JSON};

use super::backend::BackendArgs;
use crate::cli::source::{
    OffpeakArgs, PartProgress, SourceArgs, load_parts, name_file, parse_tz, part_files,
};

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Where to write the tessera plan (tessera-plan v1, docs/plan.md).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
    /// Also write the layouts as an nvidia-mig-parted v1 config.
    #[arg(long = "mig-parted-config", value_name = "FILE")]
    mig_parted_config: Option<PathBuf>,
    /// Memory headroom on each workload's peak (0.2 = 20%).
    #[arg(long, default_value_t = 0.2)]
    headroom: f64,
    /// Quantile of SM activity (or busy ratio) that sets the compute need (0-1).
    #[arg(long, default_value_t = 0.95)]
    quantile: f64,
    /// Output format of the summary.
    #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
    format: Format,
    /// Write a day/night schedule (tessera-mig-schedule v1) here when a switch is proposed.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Time zone of the off-peak windows and the schedule (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Write tessera-mig-schedule.service/.timer and tessera-mig-schedule.cron into this folder
    /// (default: print them with the table summary when a switch is proposed).
    #[arg(long = "schedule-units", value_name = "DIR", requires = "schedule")]
    schedule_units: Option<PathBuf>,
    /// The tessera binary the cron lines and units run (default: this one).
    #[arg(long = "schedule-tessera", value_name = "FILE", requires = "schedule")]
    schedule_tessera: Option<PathBuf>,
    /// The device of the scheduled apply: these flags go into its cron lines and units (the
    /// plan itself reads only --source).
    #[command(flatten, next_help_heading = "Device of the scheduled apply")]
    apply: BackendArgs,
    /// The evidence rule of the scheduled apply (`--evidence.max-age`, default 7d, or
    /// `--allow-stale-evidence`): these flags go into its cron lines and units; past the age,
    /// a switch refuses until the plan is made again.
    #[command(flatten, next_help_heading = "Evidence of the scheduled apply")]
    evidence: tessera::evidence::EvidenceArgs,
    #[command(flatten)]
    offpeak: OffpeakArgs,
}

fn write(path: &Path, text: &str) -> Result<()> {
    Ok(tessera_core::files::replace(path, text.as_bytes())?)
}

pub fn run(args: PlanArgs) -> Result<()> {
    if !(args.headroom.is_finite() && args.headroom >= 0.0) {
        bail!(
            "bad --headroom {}: expected a share ≥ 0 such as 0.2",
            args.headroom
        );
    }
    for (name, v) in [("--quantile", args.quantile)] {
        if !(0.0..=1.0).contains(&v) {
            bail!("bad {name} {v}: expected a ratio in 0–1");
        }
    }
    let offpeak = args.offpeak.params()?;
    if args.apply.given() && args.schedule.is_none() {
        bail!(
            "the device flags (--backend, --nvml.lib-path, --sim.*, --node) are for the scheduled apply's cron lines and units: add --schedule FILE"
        );
    }
    args.apply.check_for_apply()?;
    let (parts, range, gpu_rows) = load_parts(&args.src)?;
    if range.is_none() {
        bail!("no rows in the sources for the chosen range: nothing to plan");
    }
    let files = part_files(&parts);
    // One node partition at a time: memory holds one node's rows, not the fleet's.
    let frames: Vec<&tessera::frames::Frames> = parts.iter().map(|p| &p.frames).collect();
    let schedule_path = args
        .schedule
        .clone()
        .unwrap_or_else(|| PathBuf::from("schedule.yaml"));
    let request = PlanRequest {
        demand: demand::DemandParams {
            headroom: args.headroom,
            quantile: args.quantile,
            ..demand::DemandParams::default()
        },
        offpeak,
        tz: args.tz,
        sources: args.src.sources.iter().map(|s| s.to_string()).collect(),
        plan_ref: relative_plan(&schedule_path, &args.out),
        range,
    };
    let bar = PartProgress::new(parts.len(), gpu_rows);
    let outcome = mig_planner::run(&frames, &request, &|p| match p {
        Progress::Phase(phase, n) => bar.set(phase, n),
        Progress::Note(n) => eprintln!("tessera: note: {n}"),
        Progress::Done => bar.finish(),
    })
    .map_err(|e| match e {
        PlanRunError::Demand(e) => name_file(e.into(), &files),
        PlanRunError::FreeHours(e) => name_file(e.into(), &files),
        e => e.into(),
    })?;
    let units = match &args.schedule {
        Some(path) => outcome.units(&apply_command(&args, path, &request.plan_ref)?),
        None => None,
    };

    write(&args.out, &outcome.file.to_yaml())?;
    if let Some(path) = &args.mig_parted_config {
        write(path, &export::mig_parted(&outcome.file.configs))?;
    }
    match (&outcome.night, &args.schedule) {
        (Ok(p), Some(path)) => write(path, &p.schedule.to_yaml())?,
        (Err(why), Some(_)) => eprintln!("tessera: no schedule written: {why}"),
        _ => {}
    }
    if let (Some(dir), Some(u)) = (&args.schedule_units, &units) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write(&dir.join("tessera-mig-schedule.cron"), &u.cron)?;
        write(&dir.join("tessera-mig-schedule.service"), &u.service)?;
        write(&dir.join("tessera-mig-schedule.timer"), &u.timer)?;
    }
    let plan_file = args.out.display().to_string();
    match args.format {
        Format::Json => print!(
            "{}",
            tessera::output::json::document(&outcome.json(&plan_file))?
        ),
        _ => print!(
            "{}",
            outcome.table(units.as_ref(), args.schedule_units.is_none(), &plan_file)
        ),
    }
    Ok(())
}

/// The scheduled apply: the tessera binary, the schedule (absolute: cron and systemd run
/// elsewhere), the device flags, and `--allow-plan-outside` when the schedule names its plan
/// by an absolute path (not beside it).
fn apply_command(args: &PlanArgs, schedule: &Path, plan_ref: &str) -> Result<ApplyCommand> {
    let tessera = match &args.schedule_tessera {
        Some(p) => std::path::absolute(p)
            .with_context(|| format!("--schedule-tessera {}", p.display()))?,
        None => std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .context("cannot find the path of this tessera binary: name the one the schedule runs with --schedule-tessera FILE")?,
    };
    let schedule = std::path::absolute(schedule)
        .with_context(|| format!("--schedule {}", schedule.display()))?;
    let utf8 = |p: &Path, what: &str| -> Result<String> {
        p.to_str().map(str::to_string).with_context(|| {
            format!(
                "{what} {}: not UTF-8, so no cron line or unit can name it",
                p.display()
            )
        })
    };
    let mut extra = args.apply.apply_args()?;
    if let Some(ms) = args.evidence.max_age_ms {
        extra.extend(["--evidence.max-age".into(), format!("{ms}ms")]);
    }
    if args.evidence.allow_stale {
        extra.push("--allow-stale-evidence".into());
    }
    if Path::new(plan_ref).is_absolute() {
        extra.push("--allow-plan-outside".into());
    }
    Ok(ApplyCommand::new(
        &utf8(&tessera, "the tessera binary")?,
        &utf8(&schedule, "--schedule")?,
        &extra,
    ))
}

/// The plan path as the schedule should name it: relative to the schedule's folder when both
/// are in the same folder, else absolute.
fn relative_plan(schedule: &Path, plan: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (schedule, plan) = (abs(schedule), abs(plan));
    if schedule.parent() == plan.parent()
        && let Some(name) = plan.file_name()
    {
        return name.to_string_lossy().into_owned();
    }
    plan.display().to_string()
}
