//! A queue plan as Slurm QOS limits (docs/queues.md, "Slurm"): one QOS per team,
//! `<cohort>-<team>`, with `GrpTRES=gres/gpu=<limit>` (the most GPUs its jobs hold together), and
//! the off-peak QOS with `GrpTRES=gres/gpu=<the window's GPUs, else the floor>`, changed at each
//! window edge by the systemd timer [`timers`] writes (`OnCalendar=` in the plan's time zone,
//! running `tessera queue edge --scheduler slurm`). Each QOS's `Description` is tessera's mark
//! (`tessera cohort=<cohort>`): a QOS without it is not tessera's and is never changed.
//!
//! What Slurm's QOS does not express (said by [`notes`]): a guarantee (a QOS caps, it reserves
//! nothing), GPU models (`gres/gpu` counts every model; the plan's are summed), and eviction at
//! the end of a window (lowering `GrpTRES` starts nothing new above it and stops nothing:
//! `max-runtime` and `drain` act as `finish`). Weekly reservations that hold GPUs for the
//! window need GPU amounts in reservations (`TRES=gres/gpu=N`), which Slurm accepts from 23.02
//! ([`reservations_supported`]).
//!
//! Pure: `sacctmgr` argument lists and its output parsed, no process run (`slurm_apply` runs
//! them). What it does not do: attach the QOS to accounts (printed as a step for the
//! administrator: tessera changes only its own QOS), or read a plan's teams as anything but
//! Slurm account names.

use std::fmt::Write as _;

use tessera_core::mig::plan_queues::{EndOfWindow, ModelGpus, QueuePlan};

use super::clock::{self, OffpeakState};
use super::objects::team_queue;

/// The TRES the limits are of.
pub const TRES: &str = "gres/gpu";

/// One QOS as tessera writes or reads it: its GPU limit (`None`: no `gres/gpu` limit) and
/// its description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qos {
    pub name: String,
    pub gpus: Option<u32>,
    pub description: String,
}

/// The description that marks a QOS as tessera's, of `cohort`.
pub fn mark(cohort: &str) -> String {
    format!("tessera cohort={cohort}")
}

fn total(list: &[ModelGpus]) -> u32 {
    list.iter().map(|m| m.gpus).sum()
}

/// Every QOS of `plan` with the off-peak QOS in `state`: the teams', then the off-peak one.
pub fn desired(plan: &QueuePlan, state: Option<&OffpeakState>) -> Vec<Qos> {
    let q = |name: String, gpus: u32| Qos {
        name,
        gpus: Some(gpus),
        description: mark(&plan.cohort),
    };
    let mut out: Vec<Qos> = plan
        .teams
        .iter()
        .map(|t| {
            let limit = t.quotas.iter().map(|q| q.limit.max(q.guarantee)).sum();
            q(team_queue(&plan.cohort, &t.team), limit)
        })
        .collect();
    if let (Some(o), Some(s)) = (&plan.offpeak, state) {
        out.push(q(o.queue.clone(), total(&s.gpus)));
    }
    out
}

/// The QOS of `sacctmgr -n -P show qos format=Name,GrpTRES,Description`; lines that are not
/// three `|`-separated fields are skipped.
pub fn parse(text: &str) -> Vec<Qos> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(3, '|').collect();
            let [name, tres, description] = f.as_slice() else {
                return None;
            };
            let gpus = tres
                .split(',')
                .find_map(|t| t.strip_prefix(TRES)?.strip_prefix('=')?.parse().ok());
            Some(Qos {
                name: name.trim().to_string(),
                gpus,
                description: description.trim().to_string(),
            })
        })
        .filter(|q| !q.name.is_empty())
        .collect()
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Add(Qos),
    /// The QOS with the new limit, and the limit it had.
    Modify(Qos, Option<u32>),
    Delete(String),
}

impl Step {
    /// The `sacctmgr` arguments that make the change (`-i`: without asking).
    pub fn args(&self) -> Vec<String> {
        let limit = |q: &Qos| format!("GrpTRES={TRES}={}", q.gpus.unwrap_or(0));
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            Step::Add(q) => {
                let mut a = v(&["-i", "add", "qos", &q.name, "set"]);
                a.push(limit(q));
                a.push(format!("Description={}", q.description));
                a
            }
            Step::Modify(q, _) => {
                let mut a = v(&["-i", "modify", "qos", "where"]);
                a.push(format!("name={}", q.name));
                a.push("set".into());
                a.push(limit(q));
                a
            }
            Step::Delete(name) => {
                let mut a = v(&["-i", "delete", "qos", "where"]);
                a.push(format!("name={name}"));
                a
            }
        }
    }

    /// The line a dry run prints.
    pub fn line(&self) -> String {
        let n = |g: Option<u32>| g.map_or("(none)".to_string(), |g| g.to_string());
        match self {
            Step::Add(q) => format!("+ create QOS {}  {TRES}={}", q.name, n(q.gpus)),
            Step::Modify(q, from) => format!(
                "~ update QOS {}\n    GrpTRES {TRES}: {} -> {}",
                q.name,
                n(*from),
                n(q.gpus)
            ),
            Step::Delete(name) => format!("- delete QOS {name}"),
        }
    }
}

/// The steps from `current` to `want` (`prune`: tessera's QOS of the cohort that the plan no
/// longer has are deleted), and how many are already as planned; `Err` names the QOS of the
/// plan's names that are not tessera's (nothing may be changed then).
pub fn steps(
    current: &[Qos],
    want: &[Qos],
    cohort: &str,
    prune: bool,
) -> Result<(Vec<Step>, usize), Vec<String>> {
    let mark = mark(cohort);
    let mut out = Vec::new();
    let mut foreign = Vec::new();
    let mut unchanged = 0;
    for w in want {
        match current.iter().find(|c| c.name == w.name) {
            None => out.push(Step::Add(w.clone())),
            Some(c) if c.description != mark => foreign.push(format!("QOS {}", c.name)),
            Some(c) if c.gpus == w.gpus => unchanged += 1,
            Some(c) => out.push(Step::Modify(w.clone(), c.gpus)),
        }
    }
    if !foreign.is_empty() {
        return Err(foreign);
    }
    if prune {
        for c in current {
            if c.description == mark && !want.iter().any(|w| w.name == c.name) {
                out.push(Step::Delete(c.name.clone()));
            }
        }
    }
    Ok((out, unchanged))
}

/// Whether `sacctmgr --version`'s / `scontrol --version`'s `slurm X.Y.Z` accepts GPU amounts in
/// reservations (23.02 and later); `None` when the version cannot be read.
pub fn reservations_supported(version: &str) -> Option<bool> {
    let v = version.split_whitespace().last()?;
    let mut p = v.split('.').map(|x| x.parse::<u32>().ok());
    let (major, minor) = (p.next()??, p.next()??);
    Some((major, minor) >= (23, 2))
}

/// What the plan cannot say through Slurm's QOS, and what the reservations do, one line each.
pub fn notes(plan: &QueuePlan, version: &str) -> Vec<String> {
    let mut out = vec![
        "Slurm's QOS caps and reserves nothing: the teams' guarantees are not enforced (a serving team's guarantee needs a reservation or a partition of its own)".to_string(),
    ];
    if plan.capacity.len() > 1 {
        let models: Vec<&str> = plan.capacity.iter().map(|m| m.model.as_str()).collect();
        out.push(format!(
            "{TRES} counts every GPU model: each QOS's limit is the sum over {}",
            models.join(", ")
        ));
    }
    if let Some(o) = &plan.offpeak {
        if o.end != EndOfWindow::Finish {
            out.push(format!(
                "end of window {}: Slurm's QOS stops nothing that runs; the off-peak QOS's limit drops at the close (as finish)",
                match o.end {
                    EndOfWindow::MaxRuntime { hours } => format!("max-runtime:{hours}"),
                    EndOfWindow::Drain { notice_minutes } => format!("drain:{notice_minutes}"),
                    EndOfWindow::Finish => "finish".to_string(),
                }
            ));
        }
        out.push(match reservations_supported(version) {
            Some(true) => format!(
                "{version} accepts GPU amounts in reservations: a weekly reservation per window line and day also holds the window's GPUs for the teams' accounts (StartTime in the plan's zone, which must be slurmctld's)"
            ),
            Some(false) => format!(
                "{version} does not accept GPU amounts in reservations (TRES={TRES}=N needs Slurm 23.02): the window is the off-peak QOS's limit alone"
            ),
            None => "the Slurm version is unknown: no reservation is suggested".to_string(),
        });
    }
    out
}

/// The administrator's step that lets each team's jobs use its QOS (not run by tessera: an
/// account is not tessera's to change).
pub fn grants(plan: &QueuePlan) -> Vec<String> {
    let mut out: Vec<String> = plan
        .teams
        .iter()
        .map(|t| {
            format!(
                "sacctmgr -i modify account where name={} set qos+={}",
                t.team,
                team_queue(&plan.cohort, &t.team)
            )
        })
        .collect();
    if let Some(o) = &plan.offpeak {
        let teams: Vec<&str> = plan.teams.iter().map(|t| t.team.as_str()).collect();
        out.push(format!(
            "sacctmgr -i modify account where name={} set qos+={}",
            teams.join(","),
            o.queue
        ));
    }
    out
}

/// The systemd units (a oneshot service and its timer, as one text with `# FILE` headers) that
/// run `tessera queue edge PLAN --scheduler slurm --yes` at each window edge, `OnCalendar=` in
/// the plan's time zone (systemd follows daylight saving), `Persistent=true` (a boot after a
/// missed edge runs it; the edge sets the state of that moment).
pub fn timers(plan: &QueuePlan, plan_path: &str, tessera: &str) -> Result<String, String> {
    let Some(o) = &plan.offpeak else {
        return Err("the plan has no off-peak queue: no window edges to schedule".into());
    };
    clock::zone(o)?;
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    let unit = format!("tessera-queue-edges-{}", plan.cohort);
    let mut s = String::new();
    let _ = write!(
        s,
        "# /etc/systemd/system/{unit}.service\n[Unit]\nDescription=tessera: the off-peak QOS {q} at a window edge\n\n[Service]\nType=oneshot\nExecStart={tessera} queue edge {plan_path} --scheduler slurm --yes\n\n# /etc/systemd/system/{unit}.timer\n[Unit]\nDescription=tessera: the window edges of the off-peak QOS {q}\n\n[Timer]\n",
        q = o.queue
    );
    for e in clock::edges(o) {
        let days = if e.days.is_empty() || e.days.len() == 7 {
            String::new()
        } else {
            let d: Vec<&str> = e.days.iter().map(|d| DAYS[*d as usize % 7]).collect();
            format!("{} ", d.join(","))
        };
        let _ = writeln!(
            s,
            "OnCalendar={days}*-*-* {:02}:{:02}:00 {}",
            e.hour, e.minute, o.timezone
        );
    }
    s.push_str("Persistent=true\n\n[Install]\nWantedBy=timers.target\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::objects::{fixture::plan, offpeak_state};
    use chrono::{DateTime, Utc};

    #[test]
    fn the_plan_becomes_limits_and_steps_touch_only_tesseras_qos() {
        let p = plan(EndOfWindow::Finish);
        let at: DateTime<Utc> = "2026-11-02T21:00:00Z".parse().unwrap();
        let want = desired(&p, offpeak_state(&p, at).unwrap().as_ref());
        let limits: Vec<(&str, Option<u32>)> =
            want.iter().map(|q| (q.name.as_str(), q.gpus)).collect();
        assert_eq!(
            limits,
            [
                ("tessera-serving", Some(3)),
                ("tessera-research", Some(5)),
                ("tessera-offpeak", Some(7))
            ]
        );
        let current = parse(
            "normal||Normal QOS default\ntessera-research|cpu=4,gres/gpu=4|tessera cohort=tessera\ntessera-old|gres/gpu=1|tessera cohort=tessera\nbroken line\n",
        );
        assert_eq!(current.len(), 3);
        assert_eq!(current[1].gpus, Some(4));
        let (steps, unchanged) = steps(&current, &want, "tessera", true).unwrap();
        assert_eq!(unchanged, 0);
        let lines: Vec<String> = steps.iter().map(Step::line).collect();
        assert_eq!(
            lines,
            [
                "+ create QOS tessera-serving  gres/gpu=3",
                "~ update QOS tessera-research\n    GrpTRES gres/gpu: 4 -> 5",
                "+ create QOS tessera-offpeak  gres/gpu=7",
                "- delete QOS tessera-old"
            ]
        );
        assert_eq!(
            steps[1].args(),
            [
                "-i",
                "modify",
                "qos",
                "where",
                "name=tessera-research",
                "set",
                "GrpTRES=gres/gpu=5"
            ]
        );
        let theirs = parse("tessera-serving|gres/gpu=9|the ops team's\n");
        assert_eq!(
            super::steps(&theirs, &want, "tessera", true).unwrap_err(),
            ["QOS tessera-serving"]
        );
        assert_eq!(reservations_supported("slurm 22.05.8"), Some(false));
        assert_eq!(reservations_supported("slurm-wlm 23.02.1"), Some(true));
        assert_eq!(reservations_supported("nonsense"), None);
        assert!(
            notes(&p, "slurm 23.11.4")
                .iter()
                .any(|l| l.contains("a weekly reservation per window line"))
        );
    }
}
