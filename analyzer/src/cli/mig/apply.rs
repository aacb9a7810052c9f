//! `tessera mig apply`: change the node to match a plan (or the entry of a schedule in force):
//! prints the steps, changes nothing without `--yes`, journals each step and rolls back on a
//! failure (`tessera_core::mig::apply::Applier`); `--via mig-manager` hands the plan to the GPU
//! Operator instead ([`super::via_manager`]). Flags, choosing the backend, the plan and the
//! config, and printing.
//!
//! An `apply --yes` that stops before its first step — refused (processes in the way, the lock
//! held, an interrupted run that cannot be restored) or failed (a bad plan or schedule, a plan
//! naming no GPU of this node, a backend that does not open) — exits 2 and is journaled as one
//! `refused` record; a run that began journals its steps, rollback and end itself. So the cron
//! lines and units `tessera mig plan` writes (which run `apply --schedule FILE --yes`) fail
//! visibly, and leave a trace in the journal.
//!
//! Test hook (environment): `TESSERA_MIG_APPLY_ABORT_AFTER=N` aborts the process right after
//! step N is journaled (a crash in the middle of an apply).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use tessera::evidence::{self, EvidenceArgs, StaleError};
use tessera_core::mig::apply::{self, Applier, Journal};
use tessera_core::mig::plan::MigSchedule;

use super::backend::{BackendArgs, env_u64, load, open};

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// A tessera plan (tessera-mig-plan v1) or an nvidia-mig-parted v1 config.
    #[arg(required_unless_present = "schedule", conflicts_with = "schedule")]
    plan: Option<PathBuf>,
    /// Config label in the plan (required when it has several).
    #[arg(long, value_name = "LABEL", conflicts_with = "schedule")]
    config: Option<String>,
    /// A tessera-mig-schedule v1 file: apply the config its switches make active now.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Let a schedule's plan: name a file outside the schedule's folder (an absolute path or
    /// ..); by default it must be beside the schedule.
    #[arg(long, requires = "schedule")]
    allow_plan_outside: bool,
    /// The instant for --schedule and for the age of the plan's evidence, RFC 3339 (default:
    /// the clock).
    #[arg(long, value_name = "TIME")]
    now: Option<DateTime<Utc>>,
    /// `--evidence.max-age` (default 7d: a tessera plan whose data window ended longer ago is
    /// refused with --yes; plan again, the weekly flow) and `--allow-stale-evidence`. Hand-written
    /// layouts and mig-parted files carry no evidence and are not checked.
    #[command(flatten)]
    evidence: EvidenceArgs,
    /// Change the node. Without it, only print the steps.
    #[arg(long)]
    yes: bool,
    /// Lock file (default: /run/tessera/mig-apply.lock; with --backend sim, STATE.lock).
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Journal file (default: /var/lib/tessera/mig-apply.journal; with --backend sim,
    /// STATE.journal).
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    #[command(flatten)]
    kube: super::via_manager::KubeArgs,
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The plan to apply: its path, the config label (when chosen) and the file; `what` is updated
/// with what has been read so far (for the journal when the run stops).
fn resolve(
    args: &ApplyArgs,
    what: &mut String,
) -> Result<(PathBuf, Option<String>, apply::LayoutFile)> {
    match &args.schedule {
        Some(s) => {
            let schedule = MigSchedule::from_file(s)?;
            let now = args.now.unwrap_or_else(Utc::now);
            let active = schedule.active_at(now).with_context(|| {
                format!("schedule {}: no switch at or before {now}", s.display())
            })?;
            eprintln!(
                "tessera: schedule {}: config {} is active since {} (at {now})",
                s.display(),
                active.config,
                active.since
            );
            let path = schedule.plan_path(s, args.allow_plan_outside)?;
            *what = format!(
                "{} config {} (schedule {})",
                path.display(),
                active.config,
                s.display()
            );
            // Named by another file: its errors never quote it.
            let plan = apply::read_plan_named(&path, s)?;
            Ok((path, Some(active.config), plan))
        }
        None => {
            let path = args
                .plan
                .clone()
                .expect("clap requires PLAN without --schedule");
            let plan = apply::read_plan(&path)?;
            Ok((path, args.config.clone(), plan))
        }
    }
}

/// The default of `--evidence.max-age` for `mig apply`: a week, the span of the weekly plan.
pub const MAX_EVIDENCE_AGE_MS: i64 = 7 * 86_400_000;

/// The age of the evidence a tessera plan was made from (its window's end) against `--now` or
/// the clock; a file without a window (hand-written, mig-parted) is not evidence.
fn check_evidence(
    args: &ApplyArgs,
    plan: &apply::LayoutFile,
    path: &Path,
) -> Result<(), StaleError> {
    let apply::LayoutFile::Tessera(p) = plan else {
        return Ok(());
    };
    let (Some(w), Some(max)) = (&p.window, args.evidence.max_age(MAX_EVIDENCE_AGE_MS)) else {
        return Ok(());
    };
    let now = args
        .now
        .map_or_else(evidence::now_ms, |t| t.timestamp_millis());
    evidence::check_plan_window(&w.until, path, now, max)
}

/// Refuse a `--yes` on stale evidence; a dry run says it would.
fn fresh_or_refuse(args: &ApplyArgs, plan: &apply::LayoutFile, path: &Path) -> Result<()> {
    match check_evidence(args, plan, path) {
        Ok(()) => Ok(()),
        Err(e) if args.yes => bail!(
            "{}: {e}; nothing was changed (plan again from current data: tessera mig plan)",
            path.display()
        ),
        Err(e) => {
            eprintln!(
                "tessera: warning: {}: apply --yes would refuse: {e}",
                path.display()
            );
            Ok(())
        }
    }
}

/// What the command was asked to apply, before anything is read.
fn asked(args: &ApplyArgs) -> String {
    match (&args.schedule, &args.plan, &args.config) {
        (Some(s), _, _) => format!("schedule {}", s.display()),
        (None, Some(p), Some(c)) => format!("{} config {c}", p.display()),
        (None, Some(p), None) => p.display().to_string(),
        (None, None, _) => String::new(),
    }
}

pub fn apply(args: ApplyArgs) -> Result<u8> {
    if args.kube.via == super::via_manager::Via::MigManager {
        let (plan_path, label, plan) = resolve(&args, &mut String::new())?;
        fresh_or_refuse(&args, &plan, &plan_path)?;
        let b = &args.backend;
        super::via_manager::check_flags(&[
            ("--backend sim", b.is_sim()),
            ("--nvml.lib-path", b.spec.nvml_lib_path.is_some()),
            (
                "--sim.*",
                b.spec.sim_scenario.is_some() || b.spec.sim_node.is_some() || b.sim_state.is_some(),
            ),
            ("--lock", args.lock.is_some()),
            ("--journal", args.journal.is_some()),
        ])?;
        return super::via_manager::apply(
            &args.kube,
            plan,
            &plan_path,
            label,
            b.node.clone(),
            args.yes,
        );
    }
    let sim_state = args.backend.sim_state.as_deref();
    let lock = args.lock.clone().unwrap_or_else(|| match sim_state {
        Some(s) if args.backend.is_sim() => with_suffix(s, ".lock"),
        _ => PathBuf::from("/run/tessera/mig-apply.lock"),
    });
    let journal = args.journal.clone().unwrap_or_else(|| match sim_state {
        Some(s) if args.backend.is_sim() => with_suffix(s, ".journal"),
        _ => PathBuf::from("/var/lib/tessera/mig-apply.journal"),
    });
    if !args.yes {
        return dry_run(&args, &journal);
    }
    let mut what = asked(&args);
    let mut run = None;
    let result = apply_yes(&args, &lock, &journal, &mut what, &mut run);
    if let Err(e) = &result {
        journal_refusal(&lock, &journal, run, &what, e);
    }
    result
}

/// A run of `apply --yes` that failed: unless it journaled a `begin` (its steps, rollback and
/// end are in the journal then), journal it as `refused`, so that a scheduled apply that never
/// applies leaves a trace too. A journal that cannot be written is a warning: the error itself
/// is what the caller reports.
fn journal_refusal(
    lock: &Path,
    journal: &Path,
    run: Option<String>,
    what: &str,
    e: &anyhow::Error,
) {
    let j = Journal::new(journal);
    let began = run.as_deref().is_some_and(|run| {
        j.records()
            .is_ok_and(|rs| rs.iter().any(|r| r.run == run && r.event == "begin"))
    });
    if began {
        return;
    }
    let run = run.unwrap_or_else(apply::new_run_id);
    let what = (!what.is_empty()).then_some(what);
    match j.refused(lock, &run, what, &format!("{e:#}")) {
        Ok(()) => eprintln!(
            "tessera: nothing was applied; the journal {} records the refusal (run {run})",
            journal.display()
        ),
        Err(je) => eprintln!("tessera: warning: could not journal the refusal: {je}"),
    }
}

fn dry_run(args: &ApplyArgs, journal: &Path) -> Result<u8> {
    let (plan_path, label, plan) = resolve(args, &mut String::new())?;
    fresh_or_refuse(args, &plan, &plan_path)?;
    let mut ctrl = open(&args.backend)?;
    if let Ok(Some(i)) = Journal::new(journal).interrupted() {
        eprintln!(
            "tessera: warning: the journal {} records an interrupted apply ({} at {}); apply --yes first restores its checkpoint",
            journal.display(),
            i.run,
            i.started
        );
    }
    let (state, label, targets) = load(ctrl.as_mut(), &plan, &plan_path, label.as_deref())?;
    let d = apply::diff(&state, &targets)?;
    print_plan(&d, &state.node, &plan_path, &label);
    for p in d.pending() {
        eprintln!("tessera: pending: {p}");
    }
    let busy = d.busy();
    if !busy.is_empty() {
        eprintln!(
            "tessera: apply --yes would refuse: processes run where the layout changes:\n{}",
            busy.join("\n")
        );
    }
    if !d.steps().is_empty() {
        eprintln!("tessera: dry run: nothing was changed; add --yes to apply these steps");
    }
    Ok(0)
}

/// `apply --yes`; `what` and `run` say how far it got (the plan read, the session's run id).
fn apply_yes(
    args: &ApplyArgs,
    lock: &Path,
    journal: &Path,
    what: &mut String,
    run: &mut Option<String>,
) -> Result<u8> {
    let (plan_path, label, plan) = resolve(args, what)?;
    fresh_or_refuse(args, &plan, &plan_path)?;
    if args.schedule.is_none() {
        *what = match &label {
            Some(l) => format!("{} config {l}", plan_path.display()),
            None => plan_path.display().to_string(),
        };
    }
    let mut ctrl = open(&args.backend)?;
    if args.backend.is_sim() && args.backend.sim_state.is_none() {
        bail!(
            "--sim.state FILE is required to apply on the simulated backend (the simulated node's MIG state must persist between calls)"
        );
    }
    let mut applier = Applier::open(lock, journal)?;
    *run = Some(applier.run().to_string());
    applier.abort_after_step = env_u64("TESSERA_MIG_APPLY_ABORT_AFTER")?;
    if let Some(t) = &applier.torn_tail {
        eprintln!("tessera: warning: {t}");
    }
    if let Some(r) = applier.recover(ctrl.as_mut())? {
        eprintln!(
            "tessera: recovered the interrupted apply {} (started {}, plan {}): restored its checkpoint in {} steps",
            r.run,
            r.started,
            r.plan.as_deref().unwrap_or("?"),
            r.steps
        );
    }
    let (state, label, targets) = load(ctrl.as_mut(), &plan, &plan_path, label.as_deref())?;
    if args.schedule.is_none() {
        *what = format!("{} config {label}", plan_path.display());
    }
    let d = apply::diff(&state, &targets)?;
    print_plan(&d, &state.node, &plan_path, &label);
    let done = applier.execute(
        ctrl.as_mut(),
        &state,
        &targets,
        &d,
        &format!("{} config {label}", plan_path.display()),
    )?;
    let mut steps = tessera::output::Table::default();
    for (i, s) in done.steps.iter().enumerate() {
        let step = format!("GPU {}: {}: {}", s.step.gpu(), s.step, s.result);
        steps.push(vec![format!("{}.", i + 1), step]);
    }
    print!(
        "{}",
        steps.columns(&tessera::output::Columns {
            indent: "",
            cols: &[
                tessera::output::Col::right(4),
                tessera::output::Col::left(0)
            ],
            trim_end: false,
        })
    );
    for p in &done.pending {
        eprintln!("tessera: pending: {p}");
    }
    if !done.steps.is_empty() {
        println!(
            "applied {} steps; node {} now matches {} config {label}{}",
            done.steps.len(),
            state.node,
            plan_path.display(),
            if done.pending.is_empty() {
                ""
            } else {
                " except MIG mode changes pending a GPU reset"
            }
        );
    }
    Ok(0)
}

fn print_plan(d: &apply::Diff, node: &str, plan: &Path, label: &str) {
    let steps = d.render_steps();
    if d.matches() {
        println!(
            "node {node} matches {} config {label}: nothing to do",
            plan.display()
        );
    } else if steps.is_empty() {
        println!(
            "node {node} differs from {} config {label}, but nothing can be done before a GPU reset:",
            plan.display()
        );
        print!("{}", d.render());
    } else {
        println!(
            "node {node}: {} steps to match {} config {label}:",
            d.steps().len(),
            plan.display()
        );
        print!("{steps}");
    }
}
