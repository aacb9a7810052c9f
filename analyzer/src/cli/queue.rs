//! `tessera queue`: the queue plan (team quotas and off-peak windows, docs/queues.md) made from
//! history (`plan`), a plan a platform team edited checked again (`check`), applied to Kueue or
//! Volcano (`apply`, dry run unless `--yes`), re-applied at a window edge (`edge`, what the
//! CronJobs of `schedule` run) and removed (`undo`). Glue only: the plan is `tessera::queues`,
//! the workflow `tessera::queues::apply`; the file is `tessera_core`'s plan format.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Args, Subcommand};
use tessera::evidence::{self, EvidenceArgs};
use tessera::kubernetes::batch::Scheduler;
use tessera::kubernetes::{Connection, Kube};
use tessera::output::{Format, TABLE_JSON};
use tessera::queues::apply::Mode;
use tessera::queues::{self, QueueParams};
use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::plan_queues::{DemandClass, EndOfWindow};
use tessera_core::mig::plan_sections::PlanWindow;

use super::source::{OffpeakArgs, SourceArgs, load_parts, name_file, parse_tz, part_files};

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Team quotas (a guarantee and a limit per GPU model) from measured demand, and the
    /// off-peak windows of deferred training, as a plan file's queues section.
    Plan(Box<PlanArgs>),
    /// Check a plan file's queues section (after editing it): every rule, or the first broken.
    Check(CheckArgs),
    /// Apply the queue plan to Kueue (ResourceFlavors, ClusterQueues in the cohort and
    /// LocalQueues), Volcano (Queues) or Slurm (QOS limits) (a dry run unless --yes; only
    /// tessera's objects change).
    Apply(Box<KueueArgs>),
    /// Set the queues a window edge changes to the window state of now (what the window-edge
    /// CronJobs run).
    Edge(Box<KueueArgs>),
    /// Remove every tessera-owned queue object of a cohort (a dry run unless --yes).
    Undo(Box<UndoArgs>),
    /// Print what runs `queue edge` at each window edge, in the plan's time zone: CronJob
    /// manifests (Kueue, Volcano) or a systemd service and timer (Slurm).
    Schedule(ScheduleArgs),
}

#[derive(Debug, Args)]
pub struct KueueArgs {
    /// The plan file (a tessera-plan with a queues section).
    plan: PathBuf,
    /// The batch scheduler whose queues enforce the plan (slurm: QOS limits through sacctmgr).
    #[arg(long, value_enum, default_value_t = Target::Kueue)]
    scheduler: Target,
    #[command(flatten)]
    slurm: SlurmTools,
    #[command(flatten)]
    conn: Connection,
    /// The instant whose window state is applied, RFC 3339, and the clock for the age of the
    /// plan's evidence (default: the clock).
    #[arg(long, value_name = "TIME")]
    now: Option<DateTime<Utc>>,
    /// `--evidence.max-age` (default 30d for `apply`: quotas from a month-old week are refused
    /// with --yes; plan again) and `--allow-stale-evidence`. `edge` does not check it: it
    /// re-applies the window state of a plan already applied.
    #[command(flatten)]
    evidence: EvidenceArgs,
    /// Change the cluster. Without it, only print the changes.
    #[arg(long)]
    yes: bool,
}

#[derive(Debug, Args)]
pub struct UndoArgs {
    /// The cohort whose objects are removed.
    #[arg(long, default_value = "tessera")]
    cohort: String,
    /// The batch scheduler whose queues are removed.
    #[arg(long, value_enum, default_value_t = Target::Kueue)]
    scheduler: Target,
    #[command(flatten)]
    slurm: SlurmTools,
    #[command(flatten)]
    conn: Connection,
    /// Change the cluster. Without it, only print the changes.
    #[arg(long)]
    yes: bool,
}

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The plan file.
    plan: PathBuf,
    /// The namespace of the CronJobs.
    #[arg(long, default_value = "tessera")]
    namespace: String,
    /// The image that runs `tessera queue edge` (Kueue, Volcano).
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// The batch scheduler whose queues change at the edges: kueue and volcano get CronJob
    /// manifests, slurm a systemd service and timer.
    #[arg(long, value_enum, default_value_t = Target::Kueue)]
    scheduler: Target,
}

/// The Slurm programs `--scheduler slurm` runs.
#[derive(Debug, Args)]
pub struct SlurmTools {
    /// The sacctmgr to run (--scheduler slurm).
    #[arg(long, value_name = "PATH", default_value = "sacctmgr")]
    sacctmgr: PathBuf,
    /// The scontrol of the weekly reservations (--scheduler slurm, Slurm 23.02 and later).
    #[arg(long, value_name = "PATH", default_value = "scontrol")]
    scontrol: PathBuf,
}

/// The schedulers `queue` applies plans to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    Kueue,
    Volcano,
    Slurm,
}

impl Target {
    /// The Kubernetes scheduler, or `None` for Slurm.
    fn kube(self) -> Option<Scheduler> {
        match self {
            Target::Kueue => Some(Scheduler::Kueue),
            Target::Volcano => Some(Scheduler::Volcano),
            Target::Slurm => None,
        }
    }
}

fn sacctmgr(tools: &SlurmTools, conn: &Connection) -> tessera::queues::slurm_apply::Sacctmgr {
    tessera::queues::slurm_apply::Sacctmgr {
        program: tools.sacctmgr.clone(),
        scontrol: tools.scontrol.clone(),
        timeout: tessera::queues::slurm_apply::TIMEOUT,
        audit_log: conn
            .audit_log
            .clone()
            .or_else(tessera::kubernetes::audit::default_path),
    }
}

/// The default of `--evidence.max-age` for `queue apply`: quotas move slowly; a month.
pub const MAX_EVIDENCE_AGE_MS: i64 = 30 * 86_400_000;

/// The RBAC a cluster command of `queue` needs, named in permission errors.
const RBAC: &str = "docs/queues.md (\"Kueue\" and \"Volcano\": RBAC)";

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    src: SourceArgs,
    /// Where to write the plan (a tessera-plan with a queues section).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
    /// A serving team's guarantee: this quantile of its hourly demand (0-1).
    #[arg(long = "guarantee-quantile", default_value_t = 0.05)]
    guarantee_quantile: f64,
    /// Every team's limit: this quantile of its hourly demand (0-1).
    #[arg(long = "limit-quantile", default_value_t = 0.95)]
    limit_quantile: f64,
    /// A team is serving when it holds GPUs in at least this share of the hours (0-1).
    #[arg(long = "serving-share", default_value_t = 0.9)]
    serving_share: f64,
    /// A team's class set by hand, repeatable: TEAM=serving or TEAM=job-like.
    #[arg(long = "class", value_name = "TEAM=CLASS", value_parser = parse_class)]
    classes: Vec<(String, DemandClass)>,
    /// The cohort of the teams' queues.
    #[arg(long, default_value = "tessera")]
    cohort: String,
    /// The teams of the GPUs Slurm jobs hold: their accounts, from `sacct` (else those GPUs
    /// count for no team).
    #[arg(long = "slurm-accounts")]
    slurm_accounts: bool,
    /// The deferred-training queue's name.
    #[arg(long = "offpeak-queue", default_value = "tessera-offpeak")]
    offpeak_queue: String,
    /// Training still running when a window closes: finish (runs to its end, no work lost),
    /// max-runtime:HOURS (stopped that long after the close) or drain:MINUTES (evicted after a
    /// notice).
    #[arg(long = "end-of-window", default_value = "finish", value_parser = parse_end)]
    end: EndOfWindow,
    /// Time zone of the windows' days and hours (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    #[command(flatten)]
    offpeak: OffpeakArgs,
    /// Output format.
    #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The plan file.
    plan: PathBuf,
}

fn parse_class(s: &str) -> Result<(String, DemandClass), String> {
    let (team, class) = s
        .split_once('=')
        .ok_or_else(|| format!("bad --class {s:?}: expected TEAM=serving or TEAM=job-like"))?;
    let class = match class {
        "serving" => DemandClass::Serving,
        "job-like" => DemandClass::JobLike,
        _ => {
            return Err(format!(
                "bad --class {s:?}: the class is serving or job-like"
            ));
        }
    };
    Ok((team.to_string(), class))
}

fn parse_end(s: &str) -> Result<EndOfWindow, String> {
    let bad = || {
        format!("bad --end-of-window {s:?}: expected finish, max-runtime:HOURS or drain:MINUTES")
    };
    let number = |v: &str| v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(bad);
    match s.split_once(':') {
        None if s == "finish" => Ok(EndOfWindow::Finish),
        Some(("max-runtime", h)) => Ok(EndOfWindow::MaxRuntime { hours: number(h)? }),
        Some(("drain", m)) => Ok(EndOfWindow::Drain {
            notice_minutes: number(m)?,
        }),
        _ => Err(bad()),
    }
}

pub fn run(cmd: QueueCommand) -> Result<()> {
    match cmd {
        QueueCommand::Plan(args) => plan(*args),
        QueueCommand::Check(args) => check(args),
        QueueCommand::Apply(args) => kueue_apply(*args, Mode::All),
        QueueCommand::Edge(args) => kueue_apply(*args, Mode::Edge),
        QueueCommand::Undo(args) => undo(*args),
        QueueCommand::Schedule(args) => schedule(args),
    }
}

fn plan(args: PlanArgs) -> Result<()> {
    let mut params = QueueParams {
        classes: args.classes.iter().cloned().collect(),
        cohort: args.cohort.clone(),
        offpeak_queue: args.offpeak_queue.clone(),
        end: args.end,
        offpeak: args.offpeak.params()?,
        tz: args.tz,
        ..QueueParams::default()
    };
    params.rules.guarantee_quantile = args.guarantee_quantile;
    params.rules.limit_quantile = args.limit_quantile;
    params.rules.serving_share = args.serving_share;
    let (parts, range, _) = load_parts(&args.src)?;
    let Some(range) = range else {
        bail!("no rows in the sources for the chosen range: nothing to plan");
    };
    let files = part_files(&parts);
    let frames: Vec<&tessera::frames::Frames> = parts.iter().map(|p| &p.frames).collect();
    if args.slurm_accounts {
        params.accounts = super::source::job_accounts(&frames);
    }
    let outcome = queues::run(&frames, &params).map_err(|e| match e {
        queues::QueueError::Polars(e) => name_file(e.into(), &files),
        e => e.into(),
    })?;
    let mut file = TesseraPlan::new();
    file.window = Some(PlanWindow {
        from: tessera::times::fmt_ms(range.since),
        until: tessera::times::fmt_ms(range.until),
        sources: args.src.sources.iter().map(|s| s.to_string()).collect(),
    });
    file.queues = Some(outcome.plan.clone());
    // The rules were the user's: a plan that breaks one (a quantile out of range) is refused.
    file.validate("the queue plan")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    tessera_core::files::replace(&args.out, file.to_yaml().as_bytes())
        .with_context(|| format!("writing {}", args.out.display()))?;
    let plan_file = args.out.display().to_string();
    match args.format {
        Format::Json => print!(
            "{}",
            tessera::output::json::document(&queues::json(&outcome, &plan_file))?
        ),
        _ => print!("{}", queues::table(&outcome, &plan_file)),
    }
    Ok(())
}

fn check(args: CheckArgs) -> Result<()> {
    let (_, q) = queues_of(&args.plan)?;
    println!(
        "{}: queues ok: {} team(s), {}",
        args.plan.display(),
        q.teams.len(),
        q.offpeak
            .as_ref()
            .map_or("no off-peak queue".to_string(), |o| format!(
                "off-peak queue {} with {} window line(s)",
                o.queue,
                o.windows.len()
            ))
    );
    Ok(())
}

/// The plan file and its queues section (taken out of it), or why there is none.
fn queues_of(
    path: &std::path::Path,
) -> Result<(TesseraPlan, tessera_core::mig::plan_queues::QueuePlan)> {
    let mut file = TesseraPlan::from_file(path)?;
    match file.queues.take() {
        Some(q) => Ok((file, q)),
        None => bail!(
            "{}: no queues section (make one with tessera queue plan)",
            path.display()
        ),
    }
}

fn kueue_apply(args: KueueArgs, mode: Mode) -> Result<()> {
    let (file, plan) = queues_of(&args.plan)?;
    let plan = &plan;
    let now = args.now.unwrap_or_else(Utc::now);
    if mode == Mode::All {
        let max = args.evidence.max_age(MAX_EVIDENCE_AGE_MS);
        if let (Some(w), Some(max), true) = (&file.window, max, args.yes) {
            evidence::check_plan_window(&w.until, &args.plan, now.timestamp_millis(), max)
                .map_err(|e| {
                    anyhow::anyhow!(
                        "{}: {e}; nothing was changed (plan again from current data: tessera queue plan)",
                        args.plan.display()
                    )
                })?;
        }
    }
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let Some(s) = args.scheduler.kube() else {
        let s = sacctmgr(&args.slurm, &args.conn);
        tessera::queues::slurm_apply::apply(&s, plan, now, mode, args.yes, &mut out, &mut err)?;
        return Ok(());
    };
    let k = Kube::connect(&args.conn, RBAC)?;
    tessera::queues::apply::apply(&k, s, plan, now, mode, args.yes, &mut out, &mut err)?;
    Ok(())
}

fn undo(args: UndoArgs) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let Some(s) = args.scheduler.kube() else {
        let s = sacctmgr(&args.slurm, &args.conn);
        tessera::queues::slurm_apply::undo(&s, &args.cohort, args.yes, &mut out, &mut err)?;
        return Ok(());
    };
    let k = Kube::connect(&args.conn, RBAC)?;
    tessera::queues::apply::undo(&k, s, &args.cohort, args.yes, &mut out, &mut err)?;
    Ok(())
}

fn schedule(args: ScheduleArgs) -> Result<()> {
    let (_, plan) = queues_of(&args.plan)?;
    let shown = |e: String| anyhow::anyhow!("{}: {e}", args.plan.display());
    let Some(s) = args.scheduler.kube() else {
        let path = std::fs::canonicalize(&args.plan)
            .with_context(|| format!("reading {}", args.plan.display()))?;
        let exe = std::env::current_exe().context("the path of this tessera")?;
        let quote =
            |p: &std::path::Path| tessera::commands::quote(&p.display().to_string()).into_owned();
        let units =
            tessera::queues::slurm::timers(&plan, &quote(&path), &quote(&exe)).map_err(shown)?;
        print!("{units}");
        return Ok(());
    };
    let Some(image) = args.image else {
        bail!("--image is needed: the CronJobs run `tessera queue edge` in that image");
    };
    let text = std::fs::read_to_string(&args.plan)
        .with_context(|| format!("reading {}", args.plan.display()))?;
    let params = tessera::queues::objects::ScheduleParams {
        namespace: args.namespace,
        image,
        plan_text: text,
    };
    let yaml = tessera::queues::objects::schedule(s, &plan, &params).map_err(shown)?;
    print!("{yaml}");
    Ok(())
}
