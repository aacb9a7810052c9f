//! The report's "Work per GPU-hour" section (`crate::work`, docs/work.md): per team and unit, then
//! per workload, model and pod, the work the serving frameworks counted over the GPU-hours the same pods held in the
//! same hours, and the pods that held GPUs without a work metric. Builds a [`Section`]; laying
//! it out is the callers'.

use super::{Section, thousands};
use crate::report::Report;
use crate::work::WorkFigure;

fn row(f: &WorkFigure) -> Vec<String> {
    vec![
        match (&f.pod, &f.workload, &f.model) {
            (Some(p), _, _) => format!("{}/{p}", f.namespace),
            (None, Some(w), _) => format!("{}/{w} (workload)", f.namespace),
            (None, None, Some(m)) => format!("{}/{m} (model)", f.namespace),
            (None, None, None) => f.namespace.clone(),
        },
        f.unit.clone(),
        thousands(f.work, 0),
        format!("{:.1}", f.gpu_hours),
        f.per_gpu_hour
            .map_or("unknown".to_string(), |v| thousands(v, 0)),
        f.per_kwh.map_or("unknown".to_string(), |v| thousands(v, 0)),
        f.per_cost
            .map_or("unknown".to_string(), |v| thousands(v, 0)),
    ]
}

/// The section, when the sources counted any work.
pub fn section(r: &Report) -> Option<Section> {
    let w = r.work.as_ref()?;
    let mut s = Section {
        title: "Work per GPU-hour".into(),
        ..Section::default()
    };
    let declared = if w.declared.is_empty() {
        String::new()
    } else {
        format!(
            " and the counters --work-metrics declares ({})",
            w.declared
                .iter()
                .map(|m| format!("{}: {}", m.unit, m.counter))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    s.lines.push(format!(
        "The work the serving frameworks counted (vLLM, SGLang, TGI, Triton){declared}, over the GPU-hours the same pods held in the same hours (and their energy and cost); units apart; hours where either is unknown are left out (docs/work.md)."
    ));
    s.header = [
        "team / workload / model / pod".to_string(),
        "unit".into(),
        "work".into(),
        "GPU-hours".into(),
        "per GPU-hour".into(),
        "per kWh".into(),
        format!("per {}", r.prices.currency),
    ]
    .to_vec();
    s.rows = w
        .teams
        .iter()
        .chain(&w.workloads)
        .chain(&w.models)
        .chain(&w.pods)
        .map(row)
        .collect();
    if !w.no_work_metric.is_empty() {
        s.after.push(format!(
            "No work metric (GPUs held, work unknown): {}",
            w.no_work_metric.join(", ")
        ));
    }
    Some(s)
}
