//! Execution: [`Applier`] holds the lock and the journal; [`Applier::execute`] refuses before
//! any change when processes are in the way, records the checkpoint, runs and journals each
//! step, restores the checkpoint on any failure and checks the node afterwards;
//! [`Applier::recover`] restores the checkpoint of a run that was interrupted mid-way.
//!
//! It does not compute the steps ([`super::steps`]) nor read plans ([`super::target`]); it never
//! resets a GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::steps::{self, Diff, GpuDiff, Step, at, diff, reset_hint};
use super::target::checkpoint_targets;
use super::{ApplyError, ApplyLock, GpuTarget, Journal, TornTail};
use crate::mig::control::{Activation, ControlError, MigControl, MigNodeState};
use crate::model::Placement;

/// What one executed step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    pub step: Step,
    /// `ok`, `pending-reset`, `skipped: …`.
    pub result: String,
}

/// The result of a successful [`Applier::execute`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub steps: Vec<StepOutcome>,
    /// Mode changes waiting for a GPU reset, with what the operator must do.
    pub pending: Vec<String>,
}

/// What [`Applier::recover`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    pub run: String,
    pub started: String,
    pub plan: Option<String>,
    /// Restore steps taken.
    pub steps: usize,
}

/// A held apply session: the lock and the journal.
#[derive(Debug)]
pub struct Applier {
    _lock: ApplyLock,
    journal: Journal,
    run: String,
    /// A torn last journal line found (and cut off) when the session opened.
    pub torn_tail: Option<TornTail>,
    /// Test hook: abort the process right after journaling this step (1-based).
    pub abort_after_step: Option<u64>,
}

/// `GPU N (UUID)` of a step, the UUID from the state it was planned on.
fn target_of(step: &Step, state: &MigNodeState) -> String {
    match state.gpu(step.gpu()) {
        Some(g) => format!("GPU {} ({})", g.index, g.uuid),
        None => format!("GPU {}", step.gpu()),
    }
}

/// Run one step; returns the activation for mode changes.
fn run_step(
    ctrl: &mut dyn MigControl,
    step: &Step,
    created: &mut BTreeMap<(u32, Placement), u32>,
) -> Result<Option<Activation>, ControlError> {
    match step {
        Step::SetMigMode { gpu, enabled } => ctrl.set_mig_mode(*gpu, *enabled).map(Some),
        Step::DestroyComputeInstance {
            gpu,
            gpu_instance,
            compute_instance,
            ..
        } => ctrl
            .destroy_compute_instance(*gpu, *gpu_instance, *compute_instance)
            .map(|_| None),
        Step::DestroyGpuInstance {
            gpu, gpu_instance, ..
        } => ctrl.destroy_gpu_instance(*gpu, *gpu_instance).map(|_| None),
        Step::CreateGpuInstance {
            gpu,
            profile_id,
            placement,
            ..
        } => {
            let id = ctrl.create_gpu_instance(*gpu, *profile_id, *placement)?;
            created.insert((*gpu, *placement), id);
            Ok(None)
        }
        Step::CreateComputeInstance {
            gpu,
            profile_id,
            placement,
            ..
        } => {
            let gi = match created.get(&(*gpu, *placement)) {
                Some(id) => *id,
                None => ctrl
                    .read_state()?
                    .gpu(*gpu)
                    .and_then(|g| {
                        g.instances
                            .iter()
                            .find(|i| i.profile_id == *profile_id && i.placement == *placement)
                    })
                    .map(|i| i.gpu_instance_id)
                    .ok_or(ControlError::NotFound {
                        gpu: *gpu,
                        what: format!("the GPU instance at {}", at(placement)),
                    })?,
            };
            ctrl.create_compute_instance(*gpu, gi).map(|_| None)
        }
    }
}

impl Applier {
    /// Take the lock (failing at once when another apply holds it) and open the journal,
    /// cutting off a torn last line ([`Journal::repair_tail`]; reported in `torn_tail`).
    pub fn open(lock: &Path, journal: &Path) -> Result<Applier, ApplyError> {
        let lock = ApplyLock::acquire(lock)?;
        let run = super::journal::new_run_id();
        let journal = Journal::new(journal);
        let torn_tail = journal.repair_tail()?;
        Ok(Applier {
            _lock: lock,
            journal,
            run,
            torn_tail,
            abort_after_step: None,
        })
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// This session's run id (its journal records carry it).
    pub fn run(&self) -> &str {
        &self.run
    }

    fn log_step(
        &self,
        event: &str,
        n: u64,
        step: &Step,
        state: &MigNodeState,
        result: &str,
    ) -> Result<(), ApplyError> {
        let mut r = Journal::record(&self.run, event);
        r.step = Some(n);
        r.target = Some(target_of(step, state));
        r.action = Some(step.to_string());
        r.result = Some(result.to_string());
        self.journal.append(&r)
    }

    fn end(&self, run: &str, result: &str) -> Result<(), ApplyError> {
        let mut r = Journal::record(run, "end");
        r.result = Some(result.into());
        self.journal.append(&r)
    }

    /// Bring the node back to `checkpoint`; journal each step under `event`. Returns the
    /// number of steps, or the errors when the node does not match the checkpoint afterwards.
    fn restore(
        &self,
        ctrl: &mut dyn MigControl,
        checkpoint: &MigNodeState,
        event: &str,
    ) -> Result<usize, String> {
        let targets = checkpoint_targets(checkpoint);
        let state = ctrl.read_state().map_err(|e| e.to_string())?;
        let d = diff(&state, &targets).map_err(|e| e.to_string())?;
        let mut errors = Vec::new();
        let mut created = BTreeMap::new();
        let steps = d.steps();
        for (i, step) in steps.iter().enumerate() {
            let result = match run_step(ctrl, step, &mut created) {
                Ok(_) => "ok".to_string(),
                Err(e) => {
                    errors.push(format!("{step}: {e}"));
                    format!("error: {e}")
                }
            };
            if let Err(e) = self.log_step(event, i as u64 + 1, step, checkpoint, &result) {
                errors.push(e.to_string());
            }
        }
        let after = ctrl.read_state().map_err(|e| e.to_string())?;
        let check = diff(&after, &targets).map_err(|e| e.to_string())?;
        if !check.steps().is_empty() {
            errors.push(format!("still differs:\n{}", check.render()));
        }
        if errors.is_empty() {
            Ok(steps.len())
        } else {
            Err(errors.join("; "))
        }
    }

    /// When the journal holds an interrupted run, restore its checkpoint and close it.
    pub fn recover(&self, ctrl: &mut dyn MigControl) -> Result<Option<Recovered>, ApplyError> {
        let Some(i) = self.journal.interrupted()? else {
            return Ok(None);
        };
        let mut r = Journal::record(&i.run, "recover");
        r.result = Some(format!("by run {}", self.run));
        self.journal.append(&r)?;
        match self.restore(ctrl, &i.checkpoint, "recover-step") {
            Ok(steps) => {
                self.end(&i.run, "recovered")?;
                Ok(Some(Recovered {
                    run: i.run,
                    started: i.started,
                    plan: i.plan,
                    steps,
                }))
            }
            Err(errors) => Err(ApplyError::RestoreIncomplete {
                context: format!("recovering the interrupted apply {}", i.run),
                errors,
                journal: self.journal.path().to_path_buf(),
            }),
        }
    }

    /// Execute `diff`'s steps from `checkpoint` (the state `diff` was computed from); on any
    /// failure restore the checkpoint. `plan` names the plan and label in the journal.
    pub fn execute(
        &self,
        ctrl: &mut dyn MigControl,
        checkpoint: &MigNodeState,
        targets: &[GpuTarget],
        diff: &Diff,
        plan: &str,
    ) -> Result<Applied, ApplyError> {
        if let Some(i) = self.journal.interrupted()? {
            return Err(ApplyError::Journal {
                path: self.journal.path().to_path_buf(),
                message: format!(
                    "the apply {} started at {} was interrupted; recover it first",
                    i.run, i.started
                ),
            });
        }
        let busy = diff.busy();
        if !busy.is_empty() {
            return Err(ApplyError::Busy(busy));
        }
        let steps = diff.steps();
        if steps.is_empty() {
            return Ok(Applied {
                steps: Vec::new(),
                pending: diff.pending(),
            });
        }
        let mut begin = Journal::record(&self.run, "begin");
        begin.plan = Some(plan.to_string());
        begin.checkpoint = Some(checkpoint.clone());
        self.journal.append(&begin)?;
        let mut created = BTreeMap::new();
        let mut skip = BTreeSet::new();
        let mut outcomes = Vec::new();
        let mut pending = diff.pending();
        for (i, step) in steps.iter().enumerate() {
            let n = i as u64 + 1;
            let result = if skip.contains(&step.gpu()) {
                "skipped: MIG mode change pending a GPU reset".to_string()
            } else {
                match run_step(ctrl, step, &mut created) {
                    Ok(Some(Activation::PendingReset)) => {
                        skip.insert(step.gpu());
                        let g = checkpoint.gpu(step.gpu());
                        let change = match step {
                            Step::SetMigMode { enabled: true, .. } => "enabling MIG",
                            _ => "disabling MIG",
                        };
                        if let Some(g) = g {
                            pending.push(reset_hint(g, change));
                        }
                        "pending-reset".to_string()
                    }
                    Ok(_) => "ok".to_string(),
                    Err(e) => return self.roll_back(ctrl, checkpoint, n, step, &e),
                }
            };
            self.log_step("step", n, step, checkpoint, &result)?;
            outcomes.push(StepOutcome {
                step: step.clone(),
                result,
            });
            if self.abort_after_step == Some(n) {
                std::process::abort();
            }
        }
        self.check_applied(ctrl, targets, &skip)?;
        pending.sort();
        pending.dedup();
        Ok(Applied {
            steps: outcomes,
            pending,
        })
    }

    /// Step `n` failed with `e`: journal it, restore the checkpoint and end the run as rolled
    /// back. Always an error: [`ApplyError::RolledBack`], or
    /// [`ApplyError::RestoreIncomplete`] when the node does not match the checkpoint afterwards.
    fn roll_back(
        &self,
        ctrl: &mut dyn MigControl,
        checkpoint: &MigNodeState,
        n: u64,
        step: &Step,
        e: &ControlError,
    ) -> Result<Applied, ApplyError> {
        self.log_step("step", n, step, checkpoint, &format!("error: {e}"))?;
        let context = format!(
            "step {n} ({}: {step}) failed: {e}",
            target_of(step, checkpoint)
        );
        let mut r = Journal::record(&self.run, "rollback");
        r.result = Some(context.clone());
        self.journal.append(&r)?;
        match self.restore(ctrl, checkpoint, "rollback-step") {
            Ok(_) => {
                self.end(&self.run, "rolled-back")?;
                Err(ApplyError::RolledBack {
                    step: format!("{n} ({}: {step})", target_of(step, checkpoint)),
                    error: e.to_string(),
                    journal: self.journal.path().to_path_buf(),
                })
            }
            Err(errors) => Err(ApplyError::RestoreIncomplete {
                context,
                errors,
                journal: self.journal.path().to_path_buf(),
            }),
        }
    }

    /// After the steps: everything but the GPUs whose mode change awaits a reset (`skip`) must
    /// match the targets now; ends the run as applied, or as failed with what still differs.
    fn check_applied(
        &self,
        ctrl: &mut dyn MigControl,
        targets: &[GpuTarget],
        skip: &BTreeSet<u32>,
    ) -> Result<(), ApplyError> {
        let after = ctrl.read_state()?;
        let check = steps::diff(&after, targets)?;
        let left: Vec<&GpuDiff> = check
            .gpus
            .iter()
            .filter(|g| !g.steps.is_empty() && !skip.contains(&g.gpu))
            .collect();
        if !left.is_empty() {
            self.end(&self.run, "failed")?;
            return Err(ApplyError::StillDiffers(check.render()));
        }
        self.end(&self.run, "applied")
    }
}
