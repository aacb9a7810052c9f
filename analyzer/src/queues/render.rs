//! What `tessera queue plan` prints: the team quotas and the off-peak queue as the output
//! layer's sections (text), or a JSON document (the plan's `queues` section, the notes and the
//! file written). Formatting only.

use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{EndOfWindow, ModelGpus};

use super::QueueOutcome;
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
