//! What `tessera queue plan` prints: the team quotas and the off-peak queue as the output
//! layer's sections (text), or a JSON document (the plan's `queues` section, the notes and the
//! file written). Formatting only.

use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{EndOfWindow, ModelGpus};

use super::QueueOutcome;
use super::replay::QueueReplay;
use crate::output::Section;

fn gpus(list: &[ModelGpus]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    list.iter()
        .map(|m| format!("{} × {}", m.gpus, m.model))
        .collect::<Vec<_>>()
        .join(", ")
}

fn end_text(e: EndOfWindow) -> String {
    match e {
        EndOfWindow::Finish => "finish: training still running at the close runs to its end; nothing new is admitted (no work lost)".into(),
        EndOfWindow::MaxRuntime { hours } => format!("max-runtime: training still running at the close is stopped {hours} h after it"),
        EndOfWindow::Drain { notice_minutes } => format!("drain: training still running at the close is evicted {notice_minutes} min after a notice"),
    }
}

/// The text: a section of team quotas, one of the off-peak queue, the notes.
pub fn table(o: &QueueOutcome, plan_file: &str) -> String {
    let p = &o.plan;
    let mut teams = Section {
        title: format!("Team quotas (cohort {})", p.cohort),
        lines: vec![format!(
            "Guarantee: a serving team's demand at quantile {} (held in ≥ {:.0}% of hours: serving); limit: quantile {} of every team's; GPUs held per hour, by allocation.",
            p.rules.guarantee_quantile,
            p.rules.serving_share * 100.0,
            p.rules.limit_quantile
        )],
        header: [
            "team",
            "class",
            "GPU model",
            "guarantee",
            "limit",
            "held",
            "median",
            "max",
        ]
        .map(String::from)
        .to_vec(),
        ..Section::default()
    };
    for t in &p.teams {
        for q in &t.quotas {
            let m = q.measured.as_ref();
            teams.rows.push(vec![
                t.team.clone(),
                t.class.as_str().to_string(),
                q.model.clone(),
                q.guarantee.to_string(),
                q.limit.to_string(),
                m.map_or("-".into(), |m| {
                    format!("{:.0}% of {} h", m.held_share * 100.0, m.hours)
                }),
                m.map_or("-".into(), |m| m.median.to_string()),
                m.map_or("-".into(), |m| m.max.to_string()),
            ]);
        }
    }
    let mut sections = vec![teams];
    if let Some(w) = &p.offpeak {
        let mut s = Section {
            title: format!("Off-peak queue {} ({})", w.queue, w.timezone),
            lines: vec![format!("Outside the windows: {}", gpus(&w.floor))],
            header: ["days", "start", "hours", "GPUs"]
                .map(String::from)
                .to_vec(),
            after: vec![format!("End of window: {}", end_text(w.end))],
            ..Section::default()
        };
        for l in &w.windows {
            s.rows.push(vec![
                if l.days.is_empty() {
                    "every day".into()
                } else {
                    l.days.join(", ")
                },
                l.start.clone(),
                l.hours.to_string(),
                gpus(&l.gpus),
            ]);
        }
        sections.push(s);
    }
    if !o.notes.is_empty() {
        sections.push(Section {
            title: "Notes".into(),
            lines: o.notes.iter().map(|n| format!("- {n}")).collect(),
            ..Section::default()
        });
    }
    let mut out = crate::output::section::to_text(
        &[format!("Queue plan: {} team(s)", p.teams.len())],
        &sections,
        false,
    );
    out.push_str(&format!(
        "\nwrote {}\n",
        crate::output::escape::printable(plan_file)
    ));
    out
}

/// The JSON document (version 1).
pub fn json(o: &QueueOutcome, plan_file: &str) -> Value {
    json!({
        "version": 1,
        "queues": o.plan,
        "notes": o.notes,
        "plan_file": plan_file,
    })
}

/// The replay of a queue plan as the output layer's sections: the verdict line first, then one
/// row per team and model, the hours whose guarantees did not fit, the notes.
pub fn replay_sections(r: &QueueReplay) -> (Vec<String>, Vec<Section>) {
    let head = vec![
        format!(
            "Replayed queue plan {} .. {} ({} h)",
            r.from, r.until, r.hours
        ),
        format!(
            "Verdict: {} ({} hour(s) whose guarantees did not fit)",
            r.verdict.to_uppercase(),
            r.guarantee_misfits.len()
        ),
    ];
    let mut teams = Section {
        title: "Teams".into(),
        lines: vec![format!(
            "Windows offered: {}",
            if r.window_gpu_hours.is_empty() {
                "none".to_string()
            } else {
                r.window_gpu_hours
                    .iter()
                    .map(|(m, h)| format!("{h} GPU-h of {m}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )],
        header: [
            "team",
            "GPU model",
            "demand GPU-h",
            "waited GPU-h",
            "longest wait h",
            "into windows GPU-h",
            "still waiting GPU-h",
        ]
        .map(String::from)
        .to_vec(),
        ..Section::default()
    };
    for t in &r.teams {
        teams.rows.push(vec![
            t.team.clone(),
            t.model.clone(),
            t.demand_gpu_hours.to_string(),
            t.waited_gpu_hours.to_string(),
            t.longest_wait_hours.to_string(),
            t.admitted_in_windows_gpu_hours.to_string(),
            t.still_waiting_gpu_hours.to_string(),
        ]);
    }
    let mut sections = vec![teams];
    if !r.guarantee_misfits.is_empty() {
        sections.push(Section {
            title: "Guarantees that did not fit".into(),
            header: ["hour", "GPU model", "guaranteed", "GPUs"]
                .map(String::from)
                .to_vec(),
            rows: r
                .guarantee_misfits
                .iter()
                .map(|m| {
                    vec![
                        m.hour.clone(),
                        m.model.clone(),
                        m.guaranteed.to_string(),
                        m.gpus.to_string(),
                    ]
                })
                .collect(),
            ..Section::default()
        });
    }
    if !r.notes.is_empty() {
        sections.push(Section {
            title: "Notes".into(),
            lines: r.notes.iter().map(|n| format!("- {n}")).collect(),
            ..Section::default()
        });
    }
    (head, sections)
}
