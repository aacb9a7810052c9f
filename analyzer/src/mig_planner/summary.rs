//! What `tessera mig plan` prints from a [`PlanOutcome`]: the JSON summary (version 1,
//! docs/mig.md) and the table (per model, per planned GPU, the GPUs left out of MIG mode, the
//! unplaceable workloads, the night layout and, unless written to files, its cron and systemd
//! units). Pure text; writing files and choosing stdout are the command's.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::run::{PlanOutcome, Units};
use super::{Method, whole_gpu_sentence};

impl PlanOutcome {
    fn name(&self, i: usize) -> String {
        self.demand.workloads[i].id.clone()
    }

    /// The JSON summary; `plan_file`: where the plan was written.
    pub fn json(&self, plan_file: &str) -> Value {
        let (d, plan) = (&self.demand, &self.plan);
        json!({
            "version": 2,
            "workloads": d.workloads.iter().zip(&d.measured).map(|(w, m)| json!({
                "id": w.id, "node": w.node, "current_gpu": w.current_gpu,
                "memory_need_bytes": w.memory_bytes, "compute_need_slices": w.compute_slices,
                "measured": m,
            })).collect::<Vec<_>>(),
            "gpus_before": self.count.before,
            "gpus_after": self.count.after,
            "gpus_freed": self.count.freed,
            "helps": self.count.helps(),
            "kept": plan.kept,
            "lower_bound": plan.lower_bound,
            "gap": plan.gap(),
            "method": plan.method,
            "per_model": plan.per_model,
            "unplaceable": plan.unplaceable,
            "non_mig_gpus": plan.non_mig_gpus,
            "mig_off_gpus": plan.gpus.iter().filter(|g| !g.mig_enabled && !g.kept).map(|g| json!({
                "node": g.gpu.node, "index": g.gpu.index, "model": g.model,
                "workloads": g.instances.iter().flat_map(|i| i.workloads.iter().map(|&w| self.name(w))).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "mig_off_reason": whole_gpu_sentence(plan),
            "plan_file": plan_file,
            "schedule": match &self.night {
                Ok(p) => json!({"proposed": true, "training_gpus": p.training_gpus,
                    "night_active_workloads": p.night_active, "switches": p.schedule.switches.len()}),
                Err(why) => json!({"proposed": false, "reason": why.to_string()}),
            },
        })
    }

    /// The table summary. `units`: the schedule's units (none when no schedule file was asked
    /// for), printed when `print_units` (they were not written to a folder); `plan_file`: where
    /// the plan was written.
    pub fn table(&self, units: Option<&Units>, print_units: bool, plan_file: &str) -> String {
        let mut out = String::new();
        self.table_head(&mut out);
        self.table_gpus(&mut out);
        self.table_rest(&mut out);
        self.table_night(&mut out, units, print_units);
        let _ = writeln!(out, "wrote {plan_file}");
        // Workload ids come from pod and process names (anyone can name a process): escaped
        // once, here, at the table's boundary.
        crate::output::escape::printable_lines(&out).into_owned()
    }

    fn table_head(&self, out: &mut String) {
        let (d, plan) = (&self.demand, &self.plan);
        let _ = writeln!(
            out,
            "MIG plan: {} workload(s), {} (lower bound {}, gap {:.1}%, {})",
            d.workloads.len(),
            self.count.text(),
            plan.lower_bound,
            plan.gap() * 100.0,
            match plan.method {
                Method::Exact => "optimal",
                Method::ExactIncomplete => "exact search stopped at its budget",
                Method::Heuristic => "heuristic",
            }
        );
        if !self.count.helps() {
            let _ = writeln!(out, "  {}", super::does_not_help_sentence(&self.count));
        }
        let mut models = crate::output::Table::default();
        for m in &plan.per_model {
            models.push(vec![
                m.model.to_string(),
                m.workloads.to_string(),
                "workload(s)".to_string(),
                m.gpus_used.to_string(),
                format!(
                    "GPU(s), bound {} ({} memory slices, {} compute slices)",
                    m.lower_bound, m.memory_slices, m.compute_slices
                ),
            ]);
        }
        out.push_str(&models.columns(&crate::output::Columns {
            indent: "  ",
            cols: &[
                crate::output::Col::left(14),
                crate::output::Col::right(4),
                crate::output::Col::left(0),
                crate::output::Col::right(4),
                crate::output::Col::left(0),
            ],
            trim_end: false,
        }));
        let sources: BTreeSet<&str> = d.measured.iter().map(|m| m.activity_source).collect();
        let _ = writeln!(
            out,
            "  compute need from: {}",
            sources.into_iter().collect::<Vec<_>>().join(", ")
        );
    }

    fn table_gpus(&self, out: &mut String) {
        for g in &self.plan.gpus {
            if g.kept {
                let ws: Vec<String> = g
                    .instances
                    .iter()
                    .flat_map(|i| i.workloads.iter().map(|&w| self.name(w)))
                    .collect();
                let _ = writeln!(
                    out,
                    "  {}/GPU{} {}: kept whole, MIG off [{}]",
                    g.gpu.node,
                    g.gpu.index,
                    g.model,
                    ws.join(",")
                );
                continue;
            }
            if !g.mig_enabled {
                let ws: Vec<String> = g
                    .instances
                    .iter()
                    .flat_map(|i| i.workloads.iter().map(|&w| self.name(w)))
                    .collect();
                let _ = writeln!(
                    out,
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
                    let ws: Vec<String> = i.workloads.iter().map(|&w| self.name(w)).collect();
                    format!("{}@{} [{}]", i.profile, i.placement.start, ws.join(","))
                })
                .collect();
            let _ = writeln!(
                out,
                "  {}/GPU{} {}: {}",
                g.gpu.node,
                g.gpu.index,
                g.model,
                insts.join("  ")
            );
        }
    }

    fn table_rest(&self, out: &mut String) {
        let plan = &self.plan;
        if let Some(why) = whole_gpu_sentence(plan) {
            let _ = writeln!(out, "  {why}");
        }
        const SHOWN: usize = 10;
        if plan.kept.len() > SHOWN {
            let _ = writeln!(out, "  {}", super::kept_sentence(plan).unwrap_or_default());
        }
        for k in plan.kept.iter().take(SHOWN) {
            let _ = writeln!(
                out,
                "  {} keeps {}/GPU{}: {}",
                k.id, k.node, k.index, k.reason
            );
        }
        if plan.kept.len() > SHOWN {
            let _ = writeln!(
                out,
                "  … and {} more (`--format json`: kept)",
                plan.kept.len() - SHOWN
            );
        }
        if !plan.non_mig_gpus.is_empty() {
            let _ = writeln!(
                out,
                "  kept out (no MIG table for the model): {}",
                plan.non_mig_gpus
                    .iter()
                    .map(|g| format!("{}/GPU{} ({})", g.node, g.index, g.model))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if plan.unplaceable.is_empty() {
            let _ = writeln!(out, "unplaceable workloads: none");
        } else {
            let _ = writeln!(out, "unplaceable workloads: {}", plan.unplaceable.len());
            for u in &plan.unplaceable {
                let _ = writeln!(out, "  {}: {}", u.id, u.reason);
            }
        }
    }

    fn table_night(&self, out: &mut String, units: Option<&Units>, print_units: bool) {
        match &self.night {
            Ok(p) => {
                let _ = writeln!(
                    out,
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
                    let _ = writeln!(
                        out,
                        "  {} {} ({}) -> {}",
                        s.at, p.schedule.timezone, days, s.config
                    );
                }
                match units {
                    Some(u) if print_units => {
                        let _ = writeln!(out, "cron:\n{}", u.cron);
                        let _ = writeln!(out, "tessera-mig-schedule.service:\n{}", u.service);
                        let _ = writeln!(out, "tessera-mig-schedule.timer:\n{}", u.timer);
                    }
                    Some(_) => {}
                    None => {
                        let _ = writeln!(
                            out,
                            "  (write the schedule with --schedule FILE to get the cron lines and systemd units that apply it)"
                        );
                    }
                }
            }
            Err(why) => {
                let _ = writeln!(out, "night layout: none ({why})");
            }
        }
    }
}
