//! A queue plan applied to Slurm's accounting (docs/queues.md, "Slurm"): `tessera queue apply
//! --scheduler slurm` (every QOS of [`super::slurm`]), `queue edge` (the off-peak QOS at a window
//! edge, what the systemd timer runs) and `queue undo` (tessera's QOS of the cohort removed),
//! through `sacctmgr`.
//!
//! The steps: `sacctmgr` must reach slurmdbd and know the `gres/gpu` TRES (else
//! [`SlurmError::NotReachable`] or [`SlurmError::NoGpuTres`], nothing changed); the QOS are read
//! once; a QOS of the plan's name without tessera's description refuses the whole apply before
//! any write; the changes are printed, and with `yes` made one by one. sacctmgr has no
//! compare-and-swap: each QOS is read again right before its write and the step decided again
//! (a QOS that became someone else's refuses it), and the QOS are read once more after the
//! writes to check that they say what the plan says. When a step fails, the earlier steps are
//! put back, newest first. Each change is a line of the local audit log.
//!
//! On Slurm 23.02 and later the windows are also weekly reservations
//! ([`super::slurm_reservations`], through `scontrol`), written the same way: `scontrol` has no
//! compare-and-swap either, so the reservations are read again right before each write, and a
//! step whose reservation someone else created, changed or deleted since the first read is
//! refused ([`SlurmError::Changed`]) and the reservation steps made before it are put back.
//!
//! What it does not do: attach QOS to accounts (the grants are printed), reserve nodes, or
//! restart anything.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tessera_core::mig::plan_queues::QueuePlan;

use super::apply::{Mode, Outcome};
use super::objects::offpeak_state;
use super::slurm::{self, Qos, Step};
use super::slurm_reservations::{self as res, ResStep, Reservation};
use crate::kubernetes::audit::{self, Change, Regarding};

/// How long one `sacctmgr` call may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Why an apply, edge or undo on Slurm stopped.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "Slurm's accounting is not reachable ({0}): QOS limits need slurmdbd (AccountingStorageType=accounting_storage/slurmdbd); nothing was changed"
    )]
    NotReachable(String),
    #[error(
        "Slurm's accounting does not track gres/gpu: add it to AccountingStorageTRES in slurm.conf and restart slurmctld (nothing was changed)"
    )]
    NoGpuTres,
    #[error(
        "{0} exist(s) and are not tessera's (Description is not \"{1}\"): tessera changes only its own QOS; rename the cohort (--cohort of queue plan) or remove them (nothing was changed)"
    )]
    Foreign(String, String),
    #[error(
        "QOS {0} is missing: run `tessera queue apply --scheduler slurm` with this plan first (nothing was changed)"
    )]
    NotApplied(String),
    #[error("the plan: {0}")]
    Plan(String),
    #[error("sacctmgr {args}: {why}")]
    Command { args: String, why: String },
    #[error("scontrol {args}: {why}")]
    Scontrol { args: String, why: String },
    #[error(
        "reservation {0} changed since tessera read it (someone else's change): tessera left it as it is; run the command again to decide on what is there now"
    )]
    Changed(String),
    /// A step failed after others had changed the accounting.
    #[error("{cause}; {rollback}")]
    Failed {
        cause: Box<SlurmError>,
        rollback: String,
    },
}

/// The `sacctmgr` tessera runs, and where it writes its audit lines.
#[derive(Debug, Clone)]
pub struct Sacctmgr {
    pub program: PathBuf,
    /// The `scontrol` of the weekly reservations (Slurm 23.02 and later only).
    pub scontrol: PathBuf,
    pub timeout: Duration,
    /// The local audit log (`-`: stderr); `None`: none.
    pub audit_log: Option<PathBuf>,
}

impl Sacctmgr {
    fn run(&self, args: &[String]) -> Result<String, SlurmError> {
        crate::process::run(&self.program, args, self.timeout).map_err(|why| SlurmError::Command {
            args: args.join(" "),
            why,
        })
    }

    fn scontrol(&self, args: &[String]) -> Result<String, SlurmError> {
        crate::process::run(&self.scontrol, args, self.timeout).map_err(|why| {
            SlurmError::Scontrol {
                args: args.join(" "),
                why,
            }
        })
    }

    fn reservations(&self) -> Result<Vec<Reservation>, SlurmError> {
        let a = ["show", "reservation", "-o"].map(String::from);
        Ok(res::parse(&self.scontrol(&a)?))
    }

    /// Make one reservation step of a plan whose reservations were `read`, unless its
    /// reservation changed since (read again now: [`res::changed`]).
    fn reserve_read(
        &self,
        step: &ResStep,
        read: &[Reservation],
        err: &mut dyn Write,
    ) -> Result<(), SlurmError> {
        if res::changed(step.name(), read, &self.reservations()?) {
            return Err(SlurmError::Changed(step.name().to_string()));
        }
        self.reserve(step, err)
    }

    /// Make one reservation step and write its audit line.
    fn reserve(&self, step: &ResStep, err: &mut dyn Write) -> Result<(), SlurmError> {
        self.scontrol(&step.args())?;
        let Some(path) = &self.audit_log else {
            return Ok(());
        };
        let (reason, name) = match step {
            ResStep::Create(r) => ("ReservationCreated", r.name.clone()),
            ResStep::Update(r) => ("ReservationUpdated", r.name.clone()),
            ResStep::Delete(n) => ("ReservationDeleted", n.clone()),
        };
        let change = Change {
            regarding: Regarding {
                api_version: "slurm/scontrol".into(),
                kind: "Reservation".into(),
                namespace: None,
                name,
                uid: None,
            },
            reason,
            action: "Apply",
            note: step.line(),
            warning: false,
        };
        if let Err(e) = audit::append(path, &change, crate::evidence::now_ms(), &hostname()) {
            let _ = writeln!(
                err,
                "tessera: warning: the change was made, but the audit log {} could not be written: {e}",
                path.display()
            );
        }
        Ok(())
    }

    fn version(&self) -> String {
        self.run(&["--version".to_string()])
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    }

    /// slurmdbd answers and tracks `gres/gpu`.
    fn check(&self) -> Result<(), SlurmError> {
        let a = ["-n", "-P", "show", "tres", "format=Type,Name"].map(String::from);
        let tres = self.run(&a).map_err(|e| match e {
            SlurmError::Command { why, .. } => SlurmError::NotReachable(why),
            e => e,
        })?;
        if tres.lines().any(|l| l.trim() == "gres|gpu") {
            Ok(())
        } else {
            Err(SlurmError::NoGpuTres)
        }
    }

    fn qos(&self) -> Result<Vec<Qos>, SlurmError> {
        let a = ["-n", "-P", "show", "qos", "format=Name,GrpTRES,Description"].map(String::from);
        Ok(slurm::parse(&self.run(&a)?))
    }

    fn audit(&self, step: &Step, err: &mut dyn Write) {
        let Some(path) = &self.audit_log else { return };
        let (reason, name) = match step {
            Step::Add(q) => ("QueueCreated", q.name.clone()),
            Step::Modify(q, _) => ("QueueUpdated", q.name.clone()),
            Step::Delete(n) => ("QueueDeleted", n.clone()),
        };
        let change = Change {
            regarding: Regarding {
                api_version: "slurm/sacctmgr".into(),
                kind: "QOS".into(),
                namespace: None,
                name,
                uid: None,
            },
            reason,
            action: "Apply",
            note: step.line().replace("\n   ", ";"),
            warning: false,
        };
        let host = hostname();
        if let Err(e) = audit::append(path, &change, crate::evidence::now_ms(), &host) {
            let _ = writeln!(
                err,
                "tessera: warning: the change was made, but the audit log {} could not be written: {e}",
                path.display()
            );
        }
    }

    /// Make `step` after reading the QOS again (`cohort`'s mark must still be on it).
    fn make(&self, step: &Step, cohort: &str, err: &mut dyn Write) -> Result<(), SlurmError> {
        let name = match step {
            Step::Add(q) | Step::Modify(q, _) => &q.name,
            Step::Delete(n) => n,
        };
        let now = self.qos()?;
        let cur = now.iter().find(|q| &q.name == name);
        if cur.is_some_and(|c| c.description != slurm::mark(cohort)) {
            return Err(SlurmError::Foreign(
                format!("QOS {name}"),
                slurm::mark(cohort),
            ));
        }
        let step = match (step, cur) {
            (Step::Add(q), Some(c)) if c.gpus == q.gpus => return Ok(()),
            (Step::Add(q), Some(c)) => Step::Modify(q.clone(), c.gpus),
            (Step::Modify(q, _), None) => Step::Add(q.clone()),
            (Step::Delete(_), None) => return Ok(()),
            (s, _) => s.clone(),
        };
        self.run(&step.args())?;
        self.audit(&step, err);
        Ok(())
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The step that puts back what `step` changed (`before`: the QOS as read before it).
fn undo_of(step: &Step, before: &[Qos]) -> Option<Step> {
    match step {
        Step::Add(q) => Some(Step::Delete(q.name.clone())),
        Step::Modify(q, from) => Some(Step::Modify(
            Qos {
                gpus: *from,
                ..q.clone()
            },
            q.gpus,
        )),
        Step::Delete(n) => before.iter().find(|q| &q.name == n).cloned().map(Step::Add),
    }
}

fn run_steps(
    s: &Sacctmgr,
    steps: &[Step],
    before: &[Qos],
    cohort: &str,
    err: &mut dyn Write,
) -> Result<(), SlurmError> {
    for (i, step) in steps.iter().enumerate() {
        if let Err(cause) = s.make(step, cohort, err) {
            let mut failed = Vec::new();
            for done in steps[..i].iter().rev() {
                if let Some(back) = undo_of(done, before)
                    && let Err(e) = s.make(&back, cohort, err)
                {
                    failed.push(e.to_string());
                }
            }
            let rollback = if failed.is_empty() {
                format!("the {i} change(s) made before it were put back")
            } else {
                format!(
                    "of the {i} change(s) made before it, these could not be put back: {} (run the apply again, or `tessera queue undo --scheduler slurm`)",
                    failed.join("; ")
                )
            };
            return Err(SlurmError::Failed {
                cause: Box::new(cause),
                rollback,
            });
        }
    }
    Ok(())
}

fn conclude(steps: &[Step], unchanged: usize, yes: bool, out: &mut dyn Write) -> Outcome {
    let mut o = Outcome {
        unchanged,
        ..Outcome::default()
    };
    for s in steps {
        match s {
            Step::Add(_) => o.created += 1,
            Step::Modify(..) => o.updated += 1,
            Step::Delete(_) => o.deleted += 1,
        }
    }
    super::apply::say_outcome(&o, steps.len(), "QOS", yes, out);
    o
}

/// Each line of `text`, escaped (names come from the plan and the accounting).
fn print(out: &mut dyn Write, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "{}", crate::output::escape::printable(line));
    }
}

/// Apply `plan` as of `at` (every QOS, or the off-peak QOS at a window edge).
pub fn apply(
    s: &Sacctmgr,
    plan: &QueuePlan,
    at: DateTime<Utc>,
    mode: Mode,
    yes: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, SlurmError> {
    let state = offpeak_state(plan, at).map_err(SlurmError::Plan)?;
    if mode == Mode::Edge && plan.offpeak.is_none() {
        return Err(SlurmError::Plan(
            "no off-peak queue: no window edges".into(),
        ));
    }
    s.check()?;
    let mut want = slurm::desired(plan, state.as_ref());
    let current = s.qos()?;
    if mode == Mode::Edge {
        let q = plan.offpeak.as_ref().map(|o| o.queue.clone());
        want.retain(|w| Some(&w.name) == q.as_ref());
        for w in &want {
            if !current.iter().any(|c| c.name == w.name) {
                return Err(SlurmError::NotApplied(w.name.clone()));
            }
        }
    }
    let version = if mode == Mode::All {
        s.version()
    } else {
        String::new()
    };
    if mode == Mode::All {
        for n in slurm::notes(plan, &version) {
            print(out, &format!("note: {n}"));
        }
    }
    if let (Some(o), Some(st)) = (&plan.offpeak, &state) {
        let gpus: u32 = st.gpus.iter().map(|m| m.gpus).sum();
        print(
            out,
            &format!("off-peak QOS {}: {} ({gpus} GPUs)", o.queue, st.why),
        );
    }
    let (steps, unchanged) = slurm::steps(&current, &want, &plan.cohort, mode == Mode::All)
        .map_err(|f| SlurmError::Foreign(f.join(", "), slurm::mark(&plan.cohort)))?;
    for st in &steps {
        print(out, &st.line());
    }
    if yes {
        run_steps(s, &steps, &current, &plan.cohort, err)?;
        let after = s.qos()?;
        let (left, _) = slurm::steps(&after, &want, &plan.cohort, false)
            .map_err(|f| SlurmError::Foreign(f.join(", "), slurm::mark(&plan.cohort)))?;
        if let Some(l) = left.first() {
            return Err(SlurmError::Command {
                args: "show qos".into(),
                why: format!("after the apply the accounting still differs: {}", l.line()),
            });
        }
    }
    let mut o = conclude(&steps, unchanged, yes, out);
    if mode == Mode::All && slurm::reservations_supported(&version) == Some(true) {
        let done = reservations(s, plan, at, yes, out, err)?;
        o.created += done.created;
        o.updated += done.updated;
        o.deleted += done.deleted;
    }
    if mode == Mode::All {
        print(
            out,
            "the teams' jobs use these QOS once their accounts may (an administrator's step, not run by tessera):",
        );
        for g in slurm::grants(plan) {
            print(out, &format!("  {g}"));
        }
    }
    Ok(o)
}

/// The weekly reservations of the plan's windows: compared, printed, and with `yes` made (a
/// failed step puts back the reservation steps made before it).
fn reservations(
    s: &Sacctmgr,
    plan: &QueuePlan,
    at: DateTime<Utc>,
    yes: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, SlurmError> {
    let Some(prefix) = res::prefix(plan) else {
        return Ok(Outcome::default());
    };
    let current = s.reservations()?;
    let steps = res::steps(&current, &res::desired(plan, at), &prefix);
    let mut o = Outcome::default();
    for st in &steps {
        print(out, &st.line());
        match st {
            ResStep::Create(_) => o.created += 1,
            ResStep::Update(_) => o.updated += 1,
            ResStep::Delete(_) => o.deleted += 1,
        }
    }
    if !yes {
        return Ok(o);
    }
    for (i, st) in steps.iter().enumerate() {
        if let Err(cause) = s.reserve_read(st, &current, err) {
            let mut failed = Vec::new();
            for done in steps[..i].iter().rev() {
                let prior = |n: &str| current.iter().find(|c| c.name == n).cloned();
                let back = match done {
                    ResStep::Create(r) => Some(ResStep::Delete(r.name.clone())),
                    ResStep::Update(r) => prior(&r.name).map(ResStep::Update),
                    ResStep::Delete(n) => prior(n).map(ResStep::Create),
                };
                if let Some(b) = back
                    && let Err(e) = s.reserve(&b, err)
                {
                    failed.push(e.to_string());
                }
            }
            let rollback = if failed.is_empty() {
                format!("the {i} reservation change(s) made before it were put back")
            } else {
                format!("these could not be put back: {}", failed.join("; "))
            };
            return Err(SlurmError::Failed {
                cause: Box::new(cause),
                rollback,
            });
        }
    }
    Ok(o)
}

/// Remove tessera's QOS of `cohort`.
pub fn undo(
    s: &Sacctmgr,
    cohort: &str,
    yes: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome, SlurmError> {
    s.check()?;
    let current = s.qos()?;
    let (steps, _) = slurm::steps(&current, &[], cohort, true).unwrap_or_default();
    // The reservations of tessera's QOS (`<qos>-<line>-<day>`), where Slurm has them.
    let (mut gone, mut read) = (Vec::new(), Vec::new());
    if slurm::reservations_supported(&s.version()) == Some(true) {
        let ours: Vec<String> = steps
            .iter()
            .filter_map(|st| match st {
                Step::Delete(n) => Some(format!("{n}-")),
                _ => None,
            })
            .collect();
        read = s.reservations()?;
        for r in &read {
            if ours.iter().any(|p| r.name.starts_with(p.as_str())) {
                gone.push(ResStep::Delete(r.name.clone()));
            }
        }
    }
    for st in &gone {
        print(out, &st.line());
    }
    for st in &steps {
        print(out, &st.line());
    }
    if yes {
        for st in &gone {
            s.reserve_read(st, &read, err)?;
        }
        for st in &steps {
            s.make(st, cohort, err)?;
        }
    }
    let mut o = conclude(&steps, 0, yes, out);
    o.deleted += gone.len();
    Ok(o)
}
