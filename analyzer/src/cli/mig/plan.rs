//! `tessera mig plan`: flag parsing, file writing and printing for the MIG planner (a module of
//! the binary). Ingests the sources (last 7 days by default), extracts demand, plans, writes the
//! tessera plan (`-o`), optionally the mig-parted config, the schedule and its cron/systemd units,
//! and prints a summary (table or JSON) on stdout. The logic lives in `tessera::mig_planner`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono_tz::Tz;
use clap::Args;
use serde_json::json;
use tessera::advisor;
use tessera::mig_planner::{self, PlannerOptions, demand, export, schedule};
use tessera_core::mig::plan::TesseraPlan;

use crate::cli::source::{
    OffpeakArgs, OutputFormat, PartProgress, SourceArgs, load_parts, name_file, parse_tz,
    part_files,
};

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Where to write the tessera plan (tessera-mig-plan v1, docs/mig.md).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: PathBuf,
    /// Also write the layouts as an nvidia-mig-parted v1 config.
    #[arg(long = "mig-parted-config", value_name = "FILE")]
    mig_parted_config: Option<PathBuf>,
    /// Memory headroom on each workload's peak (0.2 = 20%).
    #[arg(long, default_value_t = 0.2)]
    headroom: f64,
    /// Quantile of SM activity (or busy ratio) that sets the compute need (0–1).
    #[arg(long, default_value_t = 0.95)]
    quantile: f64,
    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// Write a day/night schedule (tessera-mig-schedule v1) here when a switch is proposed.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Time zone of the off-peak windows and the schedule (IANA name).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Write tessera-mig-schedule.service/.timer and tessera-mig-schedule.cron into this folder
    /// (default: print them with the table summary when a switch is proposed).
    #[arg(long = "schedule-units", value_name = "DIR")]
    schedule_units: Option<PathBuf>,
    #[command(flatten)]
    offpeak: OffpeakArgs,
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
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
    let tz: Tz = args.tz;
    let offpeak = args.offpeak.params()?;
    let (parts, range, gpu_rows) = load_parts(&args.src)?;
    if range.is_none() {
        bail!("no rows in the sources for the chosen range: nothing to plan");
    }
    let files = part_files(&parts);
    // One node partition at a time: memory holds one node's rows, not the fleet's.
    let frames: Vec<&tessera::ingest::Frames> = parts.iter().map(|p| &p.frames).collect();
    let dp = demand::DemandParams {
        headroom: args.headroom,
        quantile: args.quantile,
        ..demand::DemandParams::default()
    };
    let bar = PartProgress::new(parts.len(), gpu_rows);
    let d = demand::extract_parts_with(&frames, &dp, &|n| bar.set("measuring demand", n))
        .map_err(|e| name_file(e.into(), &files))?;
    for n in &d.notes {
        eprintln!("tessera: note: {n}");
    }
    let plan = mig_planner::plan(&d.workloads, &d.fleet, &PlannerOptions::default())?;
    let before: BTreeSet<&str> = d
        .workloads
        .iter()
        .filter_map(|w| w.current_gpu.as_deref())
        .collect();

    let mut file = TesseraPlan::new();
    file.comment = Some(format!(
        "tessera mig plan {}: {} workload(s), {} GPU(s) used (lower bound {}), sources {}",
        env!("CARGO_PKG_VERSION"),
        d.workloads.len(),
        plan.gpus_used,
        plan.lower_bound,
        args.src
            .sources
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let day = export::config(&plan, &d.workloads);
    if day.is_empty() {
        bail!(
            "the sources show no GPU of a MIG-capable model tessera knows ({} GPU(s) seen): nothing to plan",
            d.fleet.len()
        );
    }
    file.configs.insert("day".into(), day.clone());

    // Schedules.
    let mut params = advisor::Params {
        tz,
        ..advisor::Params::default()
    };
    params.offpeak = offpeak;
    let mut free = advisor::offpeak::FreeGpus::default();
    for (i, f) in frames.iter().enumerate() {
        bar.set("finding free hours", i);
        free.merge(advisor::offpeak::free_gpus_per_hour(f, &params.offpeak)?);
    }
    bar.finish();
    let profile = advisor::offpeak::profile(&free, &params);
    let observed: BTreeSet<i64> = free.per_hour.keys().copied().collect();
    let schedule_path = args
        .schedule
        .clone()
        .unwrap_or_else(|| PathBuf::from("schedule.yaml"));
    let plan_ref = relative_plan(&schedule_path, &args.out);
    let proposal = schedule::propose(
        &day,
        &d.workloads,
        &d.measured,
        &d.fleet,
        &observed,
        &profile,
        tz,
        args.offpeak.min_share,
        &plan_ref,
    );
    let mut units = None;
    if let Ok(p) = &proposal {
        file.configs.insert("night".into(), p.night.clone());
        let sched_abs = std::path::absolute(&schedule_path).unwrap_or(schedule_path.clone());
        let sp = sched_abs.display().to_string();
        let cron = schedule::cron_lines(&p.schedule, "/usr/local/bin/tessera", &sp);
        let (service, timer) = schedule::systemd_units(&p.schedule, "/usr/local/bin/tessera", &sp);
        units = Some((cron, service, timer));
    }
    file.validate("the planned layouts")
        .context("internal error: the planner produced an invalid plan")?;
    write(&args.out, &file.to_yaml())?;
    if let Some(path) = &args.mig_parted_config {
        write(path, &export::mig_parted(&file.configs))?;
    }
    match (&proposal, &args.schedule) {
        (Ok(p), Some(path)) => write(path, &p.schedule.to_yaml())?,
        (Err(why), Some(_)) => eprintln!("tessera: no schedule written: {why}"),
        _ => {}
    }
    if let (Some(dir), Some((cron, service, timer))) = (&args.schedule_units, &units) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write(&dir.join("tessera-mig-schedule.cron"), cron)?;
        write(&dir.join("tessera-mig-schedule.service"), service)?;
        write(&dir.join("tessera-mig-schedule.timer"), timer)?;
    }

    let name = |i: usize| d.workloads[i].id.clone();
    match args.format {
        OutputFormat::Json => {
            let out = json!({
                "version": 1,
                "workloads": d.workloads.iter().zip(&d.measured).map(|(w, m)| json!({
                    "id": w.id, "node": w.node, "current_gpu": w.current_gpu,
                    "memory_need_bytes": w.memory_bytes, "compute_need_slices": w.compute_slices,
                    "measured": m,
                })).collect::<Vec<_>>(),
                "gpus_before": before.len(),
                "gpus_after": plan.gpus_used,
                "lower_bound": plan.lower_bound,
                "gap": plan.gap(),
                "method": plan.method,
                "per_model": plan.per_model,
                "unplaceable": plan.unplaceable,
                "non_mig_gpus": plan.non_mig_gpus,
                "mig_off_gpus": plan.gpus.iter().filter(|g| !g.mig_enabled).map(|g| json!({
                    "node": g.gpu.node, "index": g.gpu.index, "model": g.model,
                    "workloads": g.instances.iter().flat_map(|i| i.workloads.iter().map(|&w| name(w))).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "mig_off_reason": mig_planner::whole_gpu_sentence(&plan),
                "plan_file": args.out.display().to_string(),
                "schedule": match &proposal {
                    Ok(p) => json!({"proposed": true, "training_gpus": p.training_gpus,
                        "night_active_workloads": p.night_active, "switches": p.schedule.switches.len()}),
                    Err(why) => json!({"proposed": false, "reason": why.to_string()}),
                },
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        OutputFormat::Table => {
            println!(
                "MIG plan: {} workload(s) on {} GPU(s) before, {} after (lower bound {}, gap {:.1}%, {})",
                d.workloads.len(),
                before.len(),
                plan.gpus_used,
                plan.lower_bound,
                plan.gap() * 100.0,
                match plan.method {
                    mig_planner::Method::Exact => "optimal",
                    mig_planner::Method::ExactIncomplete => "exact search stopped at its budget",
                    mig_planner::Method::Heuristic => "heuristic",
                }
            );
            for m in &plan.per_model {
                println!(
                    "  {:<14} {:>4} workload(s) {:>4} GPU(s), bound {} ({} memory slices, {} compute slices)",
                    m.model,
                    m.workloads,
                    m.gpus_used,
                    m.lower_bound,
                    m.memory_slices,
                    m.compute_slices
                );
            }
            let sources: BTreeSet<&str> = d.measured.iter().map(|m| m.activity_source).collect();
            println!(
                "  compute need from: {}",
                sources.into_iter().collect::<Vec<_>>().join(", ")
            );
            for g in &plan.gpus {
                if !g.mig_enabled {
                    let ws: Vec<String> = g
                        .instances
                        .iter()
                        .flat_map(|i| i.workloads.iter().map(|&w| name(w)))
                        .collect();
                    println!(
                        "  {}/GPU{} {}: whole GPU, MIG off [{}]",
                        g.gpu.node,
                        g.gpu.index,
                        g.model,
                        ws.join(",")
                    );
                    continue;
                }
                let insts: Vec<String> = g
                    .instances
                    .iter()
                    .map(|i| {
                        format!(
                            "{}@{} [{}]",
                            i.profile,
                            i.placement.start,
                            i.workloads
                                .iter()
                                .map(|&w| name(w))
                                .collect::<Vec<_>>()
                                .join(",")
                        )
                    })
                    .collect();
                println!(
                    "  {}/GPU{} {}: {}",
                    g.gpu.node,
                    g.gpu.index,
                    g.model,
                    insts.join("  ")
                );
            }
            if let Some(why) = mig_planner::whole_gpu_sentence(&plan) {
                println!("  {why}");
            }
            if !plan.non_mig_gpus.is_empty() {
                println!(
                    "  kept out (no MIG table for the model): {}",
                    plan.non_mig_gpus
                        .iter()
                        .map(|g| format!("{}/GPU{} ({})", g.node, g.index, g.model))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if plan.unplaceable.is_empty() {
                println!("unplaceable workloads: none");
            } else {
                println!("unplaceable workloads: {}", plan.unplaceable.len());
                for u in &plan.unplaceable {
                    println!("  {}: {}", u.id, u.reason);
                }
            }
            match (&proposal, &units) {
                (Ok(p), Some((cron, service, timer))) => {
                    println!(
                        "night layout: {} GPU(s) switch to whole-GPU training instances ({}); {} workload(s) stay active at night",
                        p.training_gpus.len(),
                        p.training_gpus
                            .iter()
                            .map(|(n, i)| format!("{n}/GPU{i}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        p.night_active
                    );
                    for s in &p.schedule.switches {
                        let days = if s.days.is_empty() {
                            "every day".to_string()
                        } else {
                            s.days.join(",")
                        };
                        println!(
                            "  {} {} ({}) -> {}",
                            s.at, p.schedule.timezone, days, s.config
                        );
                    }
                    if args.schedule_units.is_none() {
                        println!("cron:\n{cron}");
                        println!("tessera-mig-schedule.service:\n{service}");
                        println!("tessera-mig-schedule.timer:\n{timer}");
                    }
                }
                (Err(why), _) => println!("night layout: none ({why})"),
                _ => {}
            }
            println!("wrote {}", args.out.display());
        }
    }
    Ok(())
}

/// The plan path as the schedule should name it: relative to the schedule's folder when both
/// are in the same folder, else absolute.
fn relative_plan(schedule: &Path, plan: &Path) -> String {
    let sdir = schedule.parent().unwrap_or(Path::new(""));
    let pdir = plan.parent().unwrap_or(Path::new(""));
    if sdir == pdir
        && let Some(name) = plan.file_name()
    {
        return name.to_string_lossy().into_owned();
    }
    std::path::absolute(plan)
        .unwrap_or(plan.to_path_buf())
        .display()
        .to_string()
}
