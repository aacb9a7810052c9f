//! The off-peak windows as weekly Slurm reservations (docs/queues.md, "Slurm"), where the
//! installed Slurm accepts GPU amounts in reservations (23.02 and later:
//! [`super::slurm::reservations_supported`]): per window line and weekday (once, `DAILY`, for a
//! window of every day) a reservation `<offpeak>-<line>-<day>` with `Flags=WEEKLY`,
//! `TRES=gres/gpu=<the window's GPUs>`, `Accounts=<the teams>`, `Duration=<the window>`, first
//! starting at the next opening (local time in the plan's zone, which must be slurmctld's).
//!
//! [`steps`] compares them with `scontrol show reservation -o` ([`parse`]): absent, created;
//! different in accounts, GPUs, duration or repetition, updated (the start is kept: a weekly
//! reservation moves itself on); a reservation named with the off-peak queue's prefix that the
//! plan no longer has, deleted. Names are tessera's mark: a reservation carries no label.
//!
//! Pure: `scontrol` argument lists and its output parsed. What it does not do: run `scontrol`
//! (`slurm_apply` does), reserve nodes, or change a reservation's start.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tessera_core::mig::plan_queues::QueuePlan;

use super::clock;
use super::slurm::TRES;

/// One reservation as tessera writes or reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub name: String,
    /// Local start, `YYYY-MM-DDTHH:MM:SS` (only for a create).
    pub start: String,
    pub minutes: u32,
    /// `WEEKLY` or `DAILY`.
    pub repeat: String,
    pub accounts: Vec<String>,
    pub gpus: Option<u32>,
}

/// The prefix of the plan's reservation names.
pub fn prefix(plan: &QueuePlan) -> Option<String> {
    plan.offpeak.as_ref().map(|o| format!("{}-", o.queue))
}

/// The plan's reservations as of `at`.
pub fn desired(plan: &QueuePlan, at: DateTime<Utc>) -> Vec<Reservation> {
    let (Some(o), Some(prefix)) = (&plan.offpeak, prefix(plan)) else {
        return Vec::new();
    };
    let Ok(tz) = clock::zone(o) else {
        return Vec::new();
    };
    let mut accounts: Vec<String> = plan.teams.iter().map(|t| t.team.clone()).collect();
    accounts.sort();
    let mut out: BTreeMap<String, Reservation> = BTreeMap::new();
    for op in clock::openings(o, tz, at, at + chrono::Duration::days(8)) {
        if op.start < at {
            continue;
        }
        let w = &o.windows[op.line];
        let local = op.start.with_timezone(&tz);
        let daily = w.days.is_empty() || w.days.len() == 7;
        let day = if daily {
            "daily".to_string()
        } else {
            local.format("%a").to_string().to_lowercase()
        };
        let name = format!("{prefix}{}-{day}", op.line + 1);
        out.entry(name.clone()).or_insert(Reservation {
            name,
            start: local.format("%Y-%m-%dT%H:%M:%S").to_string(),
            minutes: w.hours * 60,
            repeat: if daily { "DAILY" } else { "WEEKLY" }.into(),
            accounts: accounts.clone(),
            gpus: Some(w.gpus.iter().map(|m| m.gpus).sum()),
        });
    }
    out.into_values().collect()
}

/// `D-HH:MM:SS` or `HH:MM:SS` as minutes.
fn minutes(d: &str) -> Option<u32> {
    let (days, rest) = match d.split_once('-') {
        Some((a, b)) => (a.parse::<u32>().ok()?, b),
        None => (0, d),
    };
    let f: Vec<u32> = rest
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    match f.as_slice() {
        [h, m, _] => Some(days * 1440 + h * 60 + m),
        [m, _] => Some(days * 1440 + m),
        _ => None,
    }
}

/// The reservations of `scontrol show reservation -o` (one per line, `key=value` words); lines
/// without a `ReservationName` are skipped ("No reservations in the system").
pub fn parse(text: &str) -> Vec<Reservation> {
    text.lines()
        .filter_map(|l| {
            let kv: BTreeMap<&str, &str> = l
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .collect();
            let name = kv.get("ReservationName")?.to_string();
            let flags = kv.get("Flags").copied().unwrap_or_default();
            let list = |k: &str| -> Vec<String> {
                let mut v: Vec<String> = kv
                    .get(k)
                    .filter(|v| **v != "(null)")
                    .map(|v| v.split(',').map(str::to_string).collect())
                    .unwrap_or_default();
                v.sort();
                v
            };
            Some(Reservation {
                name,
                start: kv.get("StartTime").copied().unwrap_or_default().to_string(),
                minutes: kv.get("Duration").and_then(|d| minutes(d)).unwrap_or(0),
                repeat: if flags.split(',').any(|f| f == "DAILY") {
                    "DAILY"
                } else if flags.split(',').any(|f| f == "WEEKLY") {
                    "WEEKLY"
                } else {
                    ""
                }
                .into(),
                accounts: list("Accounts"),
                gpus: kv.get("TRES").and_then(|t| {
                    t.split(',')
                        .find_map(|x| x.strip_prefix(TRES)?.strip_prefix('=')?.parse().ok())
                }),
            })
        })
        .collect()
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResStep {
    Create(Reservation),
    Update(Reservation),
    Delete(String),
}

impl ResStep {
    /// The reservation the step writes.
    pub fn name(&self) -> &str {
        match self {
            ResStep::Create(r) | ResStep::Update(r) => &r.name,
            ResStep::Delete(n) => n,
        }
    }

    /// The `scontrol` arguments.
    pub fn args(&self) -> Vec<String> {
        let body = |r: &Reservation| {
            vec![
                format!("ReservationName={}", r.name),
                format!("Duration={}", r.minutes),
                format!("Accounts={}", r.accounts.join(",")),
                format!("TRES={TRES}={}", r.gpus.unwrap_or(0)),
            ]
        };
        match self {
            ResStep::Create(r) => {
                let mut a = vec!["create".to_string(), "reservation".into()];
                a.extend(body(r));
                a.push(format!("StartTime={}", r.start));
                a.push(format!("Flags={}", r.repeat));
                a
            }
            ResStep::Update(r) => {
                let mut a = vec!["update".to_string()];
                a.extend(body(r));
                a
            }
            ResStep::Delete(n) => vec!["delete".into(), format!("ReservationName={n}")],
        }
    }

    /// The line a dry run prints.
    pub fn line(&self) -> String {
        match self {
            ResStep::Create(r) => format!(
                "+ create reservation {} {} from {} for {} min, {TRES}={} for {}",
                r.name,
                r.repeat,
                r.start,
                r.minutes,
                r.gpus.unwrap_or(0),
                r.accounts.join(",")
            ),
            ResStep::Update(r) => format!(
                "~ update reservation {}: {} min, {TRES}={} for {}",
                r.name,
                r.minutes,
                r.gpus.unwrap_or(0),
                r.accounts.join(",")
            ),
            ResStep::Delete(n) => format!("- delete reservation {n}"),
        }
    }
}

/// What [`steps`] compares of a reservation: its duration, repetition, accounts and GPUs (not
/// its start, which a weekly reservation moves on by itself).
fn terms(r: &Reservation) -> (u32, &str, &[String], Option<u32>) {
    (r.minutes, &r.repeat, &r.accounts, r.gpus)
}

/// Whether the reservation `name` is another in `fresh` than it was in `read`: created, deleted,
/// or changed in what [`steps`] compares (scontrol has no compare-and-swap: `slurm_apply` reads
/// again right before each write and refuses a step whose reservation someone else changed).
pub fn changed(name: &str, read: &[Reservation], fresh: &[Reservation]) -> bool {
    let read = read.iter().find(|r| r.name == name);
    read.map(terms) != fresh.iter().find(|r| r.name == name).map(terms)
}

/// The steps from `current` to `want`; tessera's are the names starting with `prefix`.
pub fn steps(current: &[Reservation], want: &[Reservation], prefix: &str) -> Vec<ResStep> {
    let mut out = Vec::new();
    for w in want {
        match current.iter().find(|c| c.name == w.name) {
            None => out.push(ResStep::Create(w.clone())),
            Some(c) if terms(c) != terms(w) => out.push(ResStep::Update(w.clone())),
            Some(_) => {}
        }
    }
    for c in current {
        if c.name.starts_with(prefix) && !want.iter().any(|w| w.name == c.name) {
            out.push(ResStep::Delete(c.name.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::objects::fixture::plan;
    use tessera_core::mig::plan_queues::EndOfWindow;

    #[test]
    fn one_reservation_per_window_line_and_day_created_updated_and_pruned() {
        let p = plan(EndOfWindow::Finish);
        let at: DateTime<Utc> = "2026-11-02T21:00:00Z".parse().unwrap();
        let want = desired(&p, at);
        assert_eq!(want.len(), 1, "{want:?}");
        let r = &want[0];
        assert_eq!(
            (
                r.name.as_str(),
                r.start.as_str(),
                r.minutes,
                r.repeat.as_str(),
                r.gpus
            ),
            (
                "tessera-offpeak-1-daily",
                "2026-11-03T20:00:00",
                480,
                "DAILY",
                Some(7)
            )
        );
        assert_eq!(
            ResStep::Create(r.clone()).args(),
            [
                "create",
                "reservation",
                "ReservationName=tessera-offpeak-1-daily",
                "Duration=480",
                "Accounts=research,serving",
                "TRES=gres/gpu=7",
                "StartTime=2026-11-03T20:00:00",
                "Flags=DAILY"
            ]
        );
        let shown = "ReservationName=tessera-offpeak-1-daily StartTime=2026-11-03T20:00:00 EndTime=2026-11-04T04:00:00 Duration=08:00:00 Nodes=n1 NodeCnt=1 Flags=DAILY,SPEC_NODES TRES=cpu=8,gres/gpu=6 Users=(null) Accounts=serving,research State=INACTIVE\n\
                     ReservationName=tessera-offpeak-2-sat StartTime=2026-11-07T10:00:00 Duration=1-00:00:00 Flags=WEEKLY Accounts=research TRES=gres/gpu=2\n\
                     ReservationName=maintenance StartTime=2026-11-05T00:00:00 Duration=02:00:00 Flags=MAINT Users=root\n";
        let current = parse(shown);
        assert_eq!(current.len(), 3);
        assert_eq!((current[0].minutes, current[0].gpus), (480, Some(6)));
        assert_eq!(current[1].minutes, 1440);
        let steps = steps(&current, &want, "tessera-offpeak-");
        let lines: Vec<String> = steps.iter().map(ResStep::line).collect();
        assert_eq!(
            lines,
            [
                "~ update reservation tessera-offpeak-1-daily: 480 min, gres/gpu=7 for research,serving",
                "- delete reservation tessera-offpeak-2-sat"
            ]
        );
        assert!(super::steps(&parse("No reservations in the system\n"), &want, "x-").len() == 1);
    }

    #[test]
    fn a_reservation_created_changed_or_deleted_since_the_read_is_changed_and_its_start_is_not() {
        let read = parse(
            "ReservationName=t-1-sat StartTime=2026-11-07T22:00:00 Duration=10:00:00 Flags=WEEKLY Accounts=research TRES=gres/gpu=6\n",
        );
        let again = |line: &str| parse(&format!("{line}\n"));
        let same = "ReservationName=t-1-sat StartTime=2026-11-07T22:00:00 Duration=10:00:00 Flags=WEEKLY Accounts=research TRES=gres/gpu=6";
        assert!(!changed("t-1-sat", &read, &again(same)));
        // A weekly reservation moved on to its next week is the same reservation.
        let moved = same.replace("2026-11-07", "2026-11-14");
        assert!(!changed("t-1-sat", &read, &again(&moved)));
        for other in [
            same.replace("Accounts=research", "Accounts=ops"),
            same.replace("gres/gpu=6", "gres/gpu=2"),
            same.replace("10:00:00", "11:00:00"),
            same.replace("WEEKLY", "DAILY"),
            String::new(),
        ] {
            assert!(changed("t-1-sat", &read, &again(&other)), "{other}");
        }
        // Someone else created one of the name a create step was going to write.
        assert!(changed("t-1-sat", &[], &read));
        assert!(!changed("t-2-sun", &read, &read));
        assert_eq!(ResStep::Delete("t-1-sat".into()).name(), "t-1-sat");
    }
}
