//! One recommendation per workload (issue 54, docs/findings.md "Actions"): the advisor's findings
//! and the MIG planner's plan (a [`MigCandidate`], measured by the top-level `actions` module), resolved into
//! ranked [`Action`]s in which every workload appears at most once, with the reason each losing
//! candidate lost. `analyze`, `report` and `notify` all take their actions from [`recommend`].
//!
//! A workload here is the work on one device (a GPU by UUID, or a MIG instance of it): what the
//! detectors and planners find, move or lay out. Precedence, first match wins:
//! 1. idle the whole period (an `idle_loaded` finding idle for all it was observed) → scale to zero;
//! 2. held and unused (an `allocated_unused` finding of kind `unused`) → release the device;
//! 3. the plan that frees the most GPUs: the MIG layouts (where the caller planned them) or the
//!    consolidation groups (ties go to the MIG layouts, as the report's MIG section has always
//!    said); consolidation groups that lose a workload to 1–2 shrink, and a group whose host was
//!    taken goes (the MIG figure is the planner's, over every workload);
//! 4. idle in spans (an `idle_loaded` finding idle for part of the period) → scale to zero while
//!    idle.
//!
//! Commands are the one way to act tessera has for the workload's scheduler: `scale-down` and
//! `share` act on Kubernetes workloads only; for a Slurm job or an unattributed process the
//! action is advice to its owner (who also moves pods and jobs: tessera moves neither). MIG
//! layouts apply to nodes, whatever the scheduler. Ranked by GPU-hours a month (the period's
//! figures scaled to 730 hours), priced when the caller has prices.
//!
//! Pure: findings and figures in, actions out. It plans nothing, replays nothing and prints
//! nothing; the verdict line says which command replays a plan.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::evidence::{PlanGroup, Scheduler};
use super::{Entity, Evidence, Finding};
use crate::commands;
use crate::prices::Prices;

/// The detectors whose findings are a workload's candidate action (see the module docs), and
/// those whose findings are advice for the fleet (their alerts keep their own suggestion). Every
/// detector of the registry is in exactly one (a test): a new detector must be placed.
pub const CANDIDATE_DETECTORS: [&str; 3] = ["idle_loaded", "allocated_unused", "consolidation"];
/// See [`CANDIDATE_DETECTORS`].
pub const ADVICE_DETECTORS: [&str; 2] = ["offpeak_window", "busy_not_working"];

/// Hours in a month (365 × 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The plan file the consolidation action's commands write and read.
pub const CONSOLIDATION_PLAN_FILE: &str = "consolidation.yaml";
/// The plan file the MIG action's commands write and read.
pub const MIG_PLAN_FILE: &str = "plan.yaml";

/// A workload of an action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionWorkload {
    /// The device: GPU UUID (`/GI<n>` for a MIG instance), else `node/GPU<n>`.
    pub key: String,
    /// Who runs on it, as the findings name it.
    pub label: String,
    /// `kubernetes`, `slurm`, `both` or `unknown`.
    pub scheduler: Scheduler,
}

/// One command of an action, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActionStep {
    pub what: String,
    pub command: String,
}

/// A candidate that lost to this action, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overruled {
    /// The workload's key.
    pub workload: String,
    /// The losing candidate's kind (`consolidate`, `mig_layout`, …).
    pub candidate: &'static str,
    pub reason: String,
}

/// One recommendation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    /// 1 = do first.
    pub rank: usize,
    /// `scale_to_zero`, `release`, `mig_layout`, `consolidate`, `scale_idle_spans`.
    pub kind: &'static str,
    /// What to do, one line.
    pub what: String,
    pub workloads: Vec<ActionWorkload>,
    /// GPUs it frees (the plans: `mig_layout`, `consolidate`); `null` for one workload's action.
    pub gpus_freed: Option<i64>,
    /// GPU-hours a month it saves (the period's figure scaled to 730 hours).
    pub gpu_hours_per_month: f64,
    /// `gpu_hours_per_month` × the price of a GPU-hour; `null` without prices (`analyze`).
    pub saving_per_month: Option<f64>,
    pub currency: Option<String>,
    /// The evidence, one line.
    pub evidence: String,
    /// Whether it is safe on the period's data: a plan's replay command, or why none is needed.
    pub verdict: String,
    /// The commands that apply it, in order, runnable as printed (dry runs: `--yes` acts).
    /// Empty when tessera cannot act for the workload's scheduler: see `advice`.
    pub steps: Vec<ActionStep>,
    /// For whom tessera cannot act (Slurm jobs, unattributed processes): what to ask of whom.
    pub advice: Option<String>,
    /// Who carries it out.
    pub done_by: String,
    /// The contacts of its workloads' teams (`crate::owners`; set by the caller that has
    /// owners: `actions::set_owners`); `null`: unknown.
    pub owner: Option<String>,
    /// The teams of its workloads (namespaces, `slurm job N`; `crate::owners::team_of`), set
    /// with `owner`: whose mail carries it (`deliver::team`). Empty: none known.
    pub teams: Vec<String>,
    /// The findings it answers.
    pub findings: Vec<String>,
    /// The candidates it won over.
    pub overruled: Vec<Overruled>,
    /// The work per GPU-hour of its workloads' pods (`crate::work`, where a source counts work;
    /// set by the report): absent otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub work: Vec<crate::work::WorkFigure>,
}

/// The MIG planner's plan as a candidate (the report plans it; `analyze` does not).
#[derive(Debug, Clone, PartialEq)]
pub struct MigCandidate {
    /// GPUs the plan frees (`mig_planner::GpuCount::freed`).
    pub gpus_freed: i64,
    /// The devices of the workloads it lays out, with their labels.
    pub workloads: Vec<(String, String)>,
    /// One line of evidence.
    pub evidence: String,
}

/// What the actions are computed for.
#[derive(Debug, Clone)]
pub struct ActionContext<'a> {
    /// The sources as the user named them (filled into the commands).
    pub sources: &'a [String],
    /// Hours in the analysed period (scales the period's GPU-hours to a month).
    pub period_hours: f64,
    /// Prices, when the caller has them.
    pub prices: Option<&'a Prices>,
    /// The user's range flags (`--since …`, `--until …`), filled into the commands that plan and
    /// replay (never into those that act: they read fresh data).
    pub range: &'a [String],
}

/// The device key of an entity (see [`ActionWorkload::key`]).
pub fn device_key(
    uuid: Option<&str>,
    node: Option<&str>,
    gpu: Option<u32>,
    gi: Option<u32>,
) -> String {
    let base = match (uuid, node, gpu) {
        (Some(u), _, _) => u.to_string(),
        (None, Some(n), Some(g)) => format!("{n}/GPU{g}"),
        (None, Some(n), None) => n.to_string(),
        _ => "unknown device".to_string(),
    };
    match gi {
        Some(gi) => format!("{base}/GI{gi}"),
        None => base,
    }
}

fn entity_scheduler(e: &Entity) -> Scheduler {
    match (&e.pod, &e.slurm_job) {
        (Some(_), Some(_)) => Scheduler::Both,
        (Some(_), None) => Scheduler::Kubernetes,
        (None, Some(_)) => Scheduler::Slurm,
        (None, None) => Scheduler::Unknown,
    }
}

fn entity_workload(e: &Entity) -> ActionWorkload {
    ActionWorkload {
        key: device_key(e.uuid.as_deref(), e.node.as_deref(), e.gpu, e.gpu_instance),
        label: e.label(),
        scheduler: entity_scheduler(e),
    }
}

/// A candidate before precedence.
struct Candidate<'a> {
    kind: &'static str,
    finding: &'a Finding,
    workload: ActionWorkload,
    gpu_hours: f64,
    evidence: String,
}

/// The actions for `findings` (and the MIG plan, where planned), ranked (see the module docs).
pub fn recommend(
    findings: &[Finding],
    mig: Option<&MigCandidate>,
    ctx: &ActionContext<'_>,
) -> Vec<Action> {
    let per_month = |h: f64| {
        if ctx.period_hours > 0.0 && h.is_finite() && h > 0.0 {
            h / ctx.period_hours * HOURS_PER_MONTH
        } else {
            0.0
        }
    };
    let (mut first, spans) = candidates(findings);
    let mut r = Resolution::default();
    // 1–2: scale to zero before release (a stable sort keeps the findings' order within a kind).
    first.sort_by_key(|c| usize::from(c.kind != "scale_to_zero"));
    for c in first {
        r.place(
            c,
            "comes first: it frees the device outright",
            &per_month,
            ctx,
        );
    }
    // 3: the plans.
    plans(&mut r, findings, mig, &per_month, ctx);
    // 4: idle spans of what is left.
    for c in spans {
        r.place(c, "frees more: it comes first", &per_month, ctx);
    }
    r.finish()
}

/// The workload-level candidates of `findings`: those of precedence 1–2 and the idle spans (4).
fn candidates(findings: &[Finding]) -> (Vec<Candidate<'_>>, Vec<Candidate<'_>>) {
    let (mut first, mut spans) = (Vec::new(), Vec::new());
    for f in findings {
        match &f.evidence {
            Evidence::IdleLoaded(e) => {
                let c = Candidate {
                    kind: if e.idle_share >= 0.999 {
                        "scale_to_zero"
                    } else {
                        "scale_idle_spans"
                    },
                    finding: f,
                    workload: entity_workload(&f.entity),
                    gpu_hours: e.reclaimable_gpu_hours,
                    evidence: format!(
                        "held {:.1} GiB and did no work for {:.1} h of {:.1} h observed ({:.0}%)",
                        e.memory_max_gib,
                        e.idle_hours,
                        e.observed_hours,
                        e.idle_share * 100.0
                    ),
                };
                if c.kind == "scale_to_zero" {
                    first.push(c);
                } else {
                    spans.push(c);
                }
            }
            Evidence::Allocated(e) if e.kind == "unused" => first.push(Candidate {
                kind: "release",
                finding: f,
                workload: entity_workload(&f.entity),
                gpu_hours: e.wasted_gpu_hours,
                evidence: format!(
                    "held {:.1} h with nothing running for {:.1} h",
                    e.held_hours, e.unused_hours
                ),
            }),
            _ => {}
        }
    }
    (first, spans)
}

/// The actions so far, the workloads they claimed, and what each won over.
#[derive(Default)]
struct Resolution {
    claimed: BTreeMap<String, &'static str>,
    actions: Vec<Action>,
    overruled: BTreeMap<usize, Vec<Overruled>>,
}

impl Resolution {
    /// A workload's candidate: its own action, or — its workload claimed already — the finding
    /// joins the claiming action, which says it won (`why` after its kind).
    fn place(
        &mut self,
        c: Candidate<'_>,
        why: &str,
        per_month: &dyn Fn(f64) -> f64,
        ctx: &ActionContext<'_>,
    ) {
        if let Some(&by) = self.claimed.get(&c.workload.key) {
            let key = &c.workload.key;
            let at = |a: &Action| a.kind == by && a.workloads.iter().any(|w| &w.key == key);
            if let Some(i) = self.actions.iter().position(at) {
                self.actions[i].findings.push(c.finding.id.clone());
                self.overruled.entry(i).or_default().push(Overruled {
                    workload: c.workload.key.clone(),
                    candidate: c.kind,
                    reason: format!("{} {why}", by.replace('_', " ")),
                });
            }
            return;
        }
        self.claimed.insert(c.workload.key.clone(), c.kind);
        self.actions
            .push(workload_action(&c, per_month(c.gpu_hours), ctx));
    }

    /// Claims the workloads of `a` and adds it.
    fn push_plan(&mut self, a: Action) {
        for w in &a.workloads {
            self.claimed.insert(w.key.clone(), a.kind);
        }
        self.actions.push(a);
    }

    /// The actions with what they won over, ranked by saving, then kind precedence, then the
    /// first workload.
    fn finish(mut self) -> Vec<Action> {
        for (i, o) in std::mem::take(&mut self.overruled) {
            self.actions[i].overruled.extend(o);
        }
        let order = |k: &str| match k {
            "scale_to_zero" => 0,
            "release" => 1,
            "mig_layout" | "consolidate" => 2,
            _ => 3,
        };
        let mut actions = self.actions;
        actions.sort_by(|a, b| {
            b.gpu_hours_per_month
                .total_cmp(&a.gpu_hours_per_month)
                .then(order(a.kind).cmp(&order(b.kind)))
                .then_with(|| {
                    a.workloads
                        .first()
                        .map(|w| &w.key)
                        .cmp(&b.workloads.first().map(|w| &w.key))
                })
        });
        for (i, a) in actions.iter_mut().enumerate() {
            a.rank = i + 1;
        }
        actions
    }
}

/// Step 3: the plan that frees the most GPUs, MIG or consolidation (ties to MIG), with the
/// other's workloads overruled.
fn plans(
    r: &mut Resolution,
    findings: &[Finding],
    mig: Option<&MigCandidate>,
    per_month: &dyn Fn(f64) -> f64,
    ctx: &ActionContext<'_>,
) {
    let groups = consolidation_groups(findings, &r.claimed);
    let consolidation_freed: usize = groups.iter().map(|g| g.moved.len()).sum();
    let mig_wins =
        mig.is_some_and(|m| m.gpus_freed > 0 && m.gpus_freed >= consolidation_freed as i64);
    if mig_wins && let Some(m) = mig {
        let mut a = mig_action(
            m,
            &r.claimed,
            per_month(m.gpus_freed as f64 * ctx.period_hours),
            ctx,
        );
        for g in &groups {
            for w in g.moved.iter().chain(std::iter::once(&g.host)) {
                a.overruled.push(Overruled {
                    workload: w.key.clone(),
                    candidate: "consolidate",
                    reason: format!(
                        "the MIG layouts free at least as many GPUs ({} against the consolidation plan's {consolidation_freed})",
                        m.gpus_freed
                    ),
                });
            }
        }
        r.push_plan(a);
    } else if !groups.is_empty() {
        let mut a = consolidation_action(
            findings,
            &groups,
            per_month(consolidation_freed as f64 * ctx.period_hours),
            ctx,
        );
        if let Some(m) = mig {
            for (key, _) in m
                .workloads
                .iter()
                .filter(|(k, _)| a.workloads.iter().any(|w| &w.key == k))
            {
                a.overruled.push(Overruled {
                    workload: key.clone(),
                    candidate: "mig_layout",
                    reason: format!(
                        "the consolidation plan frees more GPUs ({consolidation_freed} against the MIG layouts' {})",
                        m.gpus_freed
                    ),
                });
            }
        }
        r.push_plan(a);
    }
}

/// The money of `gpu_hours_per_month`, where priced.
fn priced(h: f64, ctx: &ActionContext<'_>) -> (Option<f64>, Option<String>) {
    match ctx.prices {
        Some(p) => (Some(h * p.gpu_hour), Some(p.currency.clone())),
        None => (None, None),
    }
}

/// A scale-to-zero, release or idle-spans action of one workload.
fn workload_action(c: &Candidate<'_>, per_month: f64, ctx: &ActionContext<'_>) -> Action {
    let e = &c.finding.entity;
    let who = e.label();
    let (saving, currency) = priced(per_month, ctx);
    let (what, verdict) = match c.kind {
        "scale_to_zero" => (
            format!("scale {who} to zero"),
            "no replay needed: it did no work in the period".to_string(),
        ),
        "release" => (
            format!("release the device {who} holds"),
            "no replay needed: nothing ran on it while held".to_string(),
        ),
        _ => (
            format!("scale {who} to zero while it is idle"),
            "no replay needed: only its idle spans are reclaimed".to_string(),
        ),
    };
    let mut a = Action {
        rank: 0,
        kind: c.kind,
        what,
        workloads: vec![c.workload.clone()],
        gpus_freed: None,
        gpu_hours_per_month: per_month,
        saving_per_month: saving,
        currency,
        evidence: c.evidence.clone(),
        verdict,
        steps: Vec::new(),
        advice: None,
        done_by: String::new(),
        owner: None,
        teams: Vec::new(),
        findings: vec![c.finding.id.clone()],
        overruled: Vec::new(),
        work: Vec::new(),
    };
    match (c.workload.scheduler, &e.namespace) {
        (Scheduler::Kubernetes, Some(ns)) => {
            a.steps.push(ActionStep {
                what: format!("the scale-down of namespace {ns}'s idle workloads, a dry run (--yes scales; --undo scales back)"),
                command: commands::scale_down(ctx.sources, ns),
            });
            a.done_by = "tessera scale-down, on data at most 15 minutes old".into();
        }
        (Scheduler::Slurm | Scheduler::Both, _) => {
            let job = e.slurm_job.as_deref().unwrap_or("?");
            a.advice = Some(match c.kind {
                "release" => format!(
                    "ask the owner of Slurm job {job} to give the GPU back (scancel {job}, or resubmit with fewer GPUs): tessera does not act on Slurm jobs"
                ),
                _ => format!(
                    "ask the owner of Slurm job {job} to end it (scancel {job}) or to free the GPU while idle: tessera does not act on Slurm jobs"
                ),
            });
            a.done_by = format!("the owner of Slurm job {job}");
        }
        _ => {
            a.advice = Some(format!(
                "ask the owner of {who} to stop the process or free the GPU: no pod or job holds it, so tessera cannot act"
            ));
            a.done_by = "the process's owner".into();
        }
    }
    a
}

/// A consolidation group after precedence: its host and the workloads moved onto it.
struct Group<'a> {
    host: ActionWorkload,
    moved: Vec<ActionWorkload>,
    source: &'a PlanGroup,
}

fn plan_workload(w: &crate::advisor::evidence::PlanWorkload) -> ActionWorkload {
    ActionWorkload {
        key: device_key(w.uuid.as_deref(), w.node.as_deref(), w.gpu, None),
        label: w.label.clone(),
        scheduler: w.scheduler,
    }
}

/// The consolidation groups, without the workloads already claimed (a group whose host is
/// claimed goes; one left with nothing to move goes).
fn consolidation_groups<'a>(
    findings: &'a [Finding],
    claimed: &BTreeMap<String, &'static str>,
) -> Vec<Group<'a>> {
    let mut out = Vec::new();
    for f in findings {
        let Evidence::Consolidation(e) = &f.evidence else {
            continue;
        };
        for g in &e.plan {
            // The host is the GPU that stays (its own work listed among the workloads).
            let host = device_key(
                g.host.uuid.as_deref(),
                g.host.node.as_deref(),
                g.host.gpu,
                None,
            );
            let Some(host) = g
                .workloads
                .iter()
                .map(plan_workload)
                .find(|w| w.key == host)
            else {
                continue;
            };
            if claimed.contains_key(&host.key) {
                continue;
            }
            let moved: Vec<ActionWorkload> = g
                .workloads
                .iter()
                .map(plan_workload)
                .filter(|w| w.key != host.key && !claimed.contains_key(&w.key))
                .collect();
            if !moved.is_empty() {
                out.push(Group {
                    host,
                    moved,
                    source: g,
                });
            }
        }
    }
    out
}

fn consolidation_action(
    findings: &[Finding],
    groups: &[Group<'_>],
    per_month: f64,
    ctx: &ActionContext<'_>,
) -> Action {
    let (saving, currency) = priced(per_month, ctx);
    let freed: usize = groups.iter().map(|g| g.moved.len()).sum();
    let workloads: Vec<ActionWorkload> = groups
        .iter()
        .flat_map(|g| std::iter::once(g.host.clone()).chain(g.moved.iter().cloned()))
        .collect();
    let all_kubernetes = workloads
        .iter()
        .all(|w| w.scheduler == Scheduler::Kubernetes);
    let p99 = groups
        .iter()
        .map(|g| g.source.combined_activity_p99)
        .fold(0.0_f64, f64::max);
    let ids: BTreeSet<String> = findings
        .iter()
        .filter(|f| matches!(f.evidence, Evidence::Consolidation(_)))
        .map(|f| f.id.clone())
        .collect();
    let mut a = Action {
        rank: 0,
        kind: "consolidate",
        what: format!(
            "share {} GPU(s) between {} workloads (frees {freed} GPU(s))",
            groups.len(),
            workloads.len()
        ),
        workloads,
        gpus_freed: Some(freed as i64),
        gpu_hours_per_month: per_month,
        saving_per_month: saving,
        currency,
        evidence: format!(
            "{} group(s) whose combined memory and activity fit one GPU; combined activity p99 at most {:.0}%",
            groups.len(),
            p99 * 100.0
        ),
        verdict: "not replayed in this output: step 2 replays the moves on the period (memory, contention, a verdict: safe, tight or unsafe); `report --out-of-sample` replays a plan made from the period before".into(),
        steps: vec![
            ActionStep {
                what: "write the moves as a plan".into(),
                command: commands::consolidation_plan(ctx.sources, ctx.range, CONSOLIDATION_PLAN_FILE),
            },
            ActionStep {
                what: "replay it on the data".into(),
                command: commands::replay(CONSOLIDATION_PLAN_FILE, ctx.sources, ctx.range),
            },
        ],
        advice: None,
        done_by: String::new(),
        owner: None,
        teams: Vec::new(),
        findings: ids.into_iter().collect(),
        overruled: Vec::new(),
        work: Vec::new(),
    };
    if all_kubernetes {
        a.steps.push(ActionStep {
            what: "the sharing config of each host GPU, a dry run against the cluster (--yes applies it)".into(),
            command: commands::share("apply", CONSOLIDATION_PLAN_FILE, ctx.sources),
        });
        a.done_by = "tessera share apply (the GPU's sharing config); the Kubernetes scheduler moves the pods when they are next scheduled".into();
    } else {
        a.advice = Some(
            "some of these GPUs are held by Slurm jobs or by processes no scheduler names: share them through the scheduler (Slurm: gres/shard or gres/mps in gres.conf) and ask the jobs' owners to resubmit onto the shared GPUs; tessera changes no Slurm configuration".into(),
        );
        a.done_by = "the cluster's scheduler admins and the jobs' owners".into();
    }
    a
}

fn mig_action(
    m: &MigCandidate,
    claimed: &BTreeMap<String, &'static str>,
    per_month: f64,
    ctx: &ActionContext<'_>,
) -> Action {
    let (saving, currency) = priced(per_month, ctx);
    let mut seen = BTreeSet::new();
    let workloads: Vec<ActionWorkload> = m
        .workloads
        .iter()
        .filter(|(k, _)| !claimed.contains_key(k))
        .filter(|w| seen.insert((*w).clone()))
        .map(|(key, label)| ActionWorkload {
            key: key.clone(),
            label: label.clone(),
            scheduler: Scheduler::Unknown,
        })
        .collect();
    Action {
        rank: 0,
        kind: "mig_layout",
        what: format!(
            "lay out MIG instances for {} workload(s) (frees {} GPU(s))",
            workloads.len(),
            m.gpus_freed
        ),
        workloads,
        gpus_freed: Some(m.gpus_freed),
        gpu_hours_per_month: per_month,
        saving_per_month: saving,
        currency,
        evidence: m.evidence.clone(),
        verdict: "not replayed in this output: step 2 replays the layouts on the period (a verdict: safe, tight or unsafe); `report --out-of-sample` replays a plan made from the period before".into(),
        steps: vec![
            ActionStep {
                what: "write the MIG plan".into(),
                command: commands::mig_plan(ctx.sources, ctx.range, MIG_PLAN_FILE),
            },
            ActionStep {
                what: "replay it on the data".into(),
                command: commands::replay(MIG_PLAN_FILE, ctx.sources, ctx.range),
            },
            ActionStep {
                what: "on each node, the steps of its day layout (a dry run; --yes makes them)".into(),
                command: commands::mig_apply(MIG_PLAN_FILE, "day"),
            },
        ],
        advice: None,
        done_by: "tessera mig apply on each node (on Kubernetes through the GPU Operator's mig-manager: mig apply --via mig-manager); the scheduler places pods and jobs on the new instances".into(),
        owner: None,
        teams: Vec::new(),
        findings: Vec::new(),
        overruled: Vec::new(),
        work: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
