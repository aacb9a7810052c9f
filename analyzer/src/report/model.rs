//! The report's model: the versioned [`Report`] document (`docs/report.md`) and its parts —
//! usage, teams, the priced findings, data-quality notes and chart series — and what
//! [`super::build`] needs besides the frames ([`ReportInput`]).
//!
//! Types only: this module computes nothing (the tallies, [`super::findings`],
//! [`super::charts`] and [`super::quality`] fill them in).

use chrono_tz::Tz;
use serde::Serialize;

use crate::advisor::Analysis;
use crate::ingest::IngestReport;
use crate::prices::Prices;

/// Usage of a set of GPUs over the report's range.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// `fleet`, a node name or a GPU model.
    pub key: String,
    pub gpus: usize,
    /// GPUs × the range's hours: what was there to use.
    pub gpu_hours_available: f64,
    /// Σ interval of the rows: what was reported.
    pub gpu_hours_observed: f64,
    /// Rows holding ≥ 1 GiB or with activity > 5%: GPUs somebody had.
    pub gpu_hours_allocated: f64,
    /// Σ activity × interval: GPU-hours of actual work; `None` when no row has an activity value
    /// (unknown, not 0).
    pub gpu_hours_busy: Option<f64>,
    /// Mean and 95th percentile of the rows' mean activity (0–1).
    pub activity_mean: Option<f64>,
    pub activity_p95: Option<f64>,
    /// GPM's tensor and DRAM activity (Hopper and later: history format version 2), each
    /// time-weighted over the rows that have it; absent when no row has it (unknown, not 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_active_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dram_active_mean: Option<f64>,
    /// GPUs with tensor or DRAM activity in some row; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpm_gpus: Option<usize>,
    /// Mean memory used ÷ memory total (0–1).
    pub memory_used_share: Option<f64>,
    /// Highest memory used on one GPU, GiB.
    pub memory_peak_gib: Option<f64>,
    /// Energy from the energy counter, else mean power × interval.
    pub energy_kwh: Option<f64>,
    /// `gpu_hours_available` × price per GPU-hour.
    pub cost_gpu_hours: f64,
    /// `energy_kwh` × price per kWh; null when energy is not in the data (unknown, not 0).
    pub cost_energy: Option<f64>,
    /// `cost_gpu_hours` + `cost_energy` where known.
    pub cost_total: f64,
}

/// Usage of one team (`teams.dimension`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TeamUsage {
    pub team: String,
    /// The team's contact (`crate::owners`: `--owners`, namespace labels); `null`: unknown.
    pub owner: Option<String>,
    pub processes: usize,
    /// GPU time of the team's processes; a GPU's interval is split evenly between the processes
    /// on it.
    pub gpu_hours: f64,
    /// Σ memory held × time.
    pub memory_gib_hours: f64,
    /// From the idle-loaded findings of the team's processes.
    pub idle_gib_hours: f64,
    pub idle_gpu_hours: f64,
    /// `idle_gpu_hours` × price per GPU-hour.
    pub idle_cost: f64,
    /// `gpu_hours` × price per GPU-hour.
    pub cost: f64,
    /// The team's part of the GPUs' energy: each interval's energy split by share of activity
    /// (`crate::energy`); null when none of its processes ran on a GPU interval of known energy
    /// (unknown, not 0).
    pub energy_kwh: Option<f64>,
    /// `energy_kwh` × price per kWh; null with it.
    pub cost_energy: Option<f64>,
    /// From the allocated-but-unused findings of the team's pods and jobs (kind `unused`): GPU
    /// time held with nothing running, and its price; `null` when the data has no holders.
    pub allocated_unused_gpu_hours: Option<f64>,
    pub allocated_unused_cost: Option<f64>,
}

/// The team breakdown.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Teams {
    /// What a team is in this data: `namespace`, `slurm_job`, `namespace, else slurm_job`, or
    /// `none` (no process rows with attribution).
    pub dimension: String,
    pub rows: Vec<TeamUsage>,
    /// What no team used, so that `rows` and it add up to the fleet: the GPU-hours available
    /// that no team's process ran on (`team`: `(no team)`), their cost, and the energy charged
    /// to no team (`EnergySplit::idle_kwh`) and its cost; null with no rows.
    pub nobody: Option<TeamUsage>,
    /// How the GPUs' energy was split between the teams and idle; null when the data has no
    /// energy (unknown, not 0).
    pub energy: Option<EnergySplit>,
}

/// The GPUs' energy over the range split by share of activity (`docs/report.md`, "Energy per
/// workload"): `workloads_kwh` (Σ of the teams' `energy_kwh`) + `idle_kwh` = `gpu_kwh`, up to
/// the rounding of each to 3 decimals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EnergySplit {
    /// The GPUs' energy in the range (the fleet's `energy_kwh`).
    pub gpu_kwh: f64,
    /// What went to the teams' processes.
    pub workloads_kwh: f64,
    /// What no workload explains: intervals without activity or without processes, and the
    /// inactive part of the others.
    pub idle_kwh: f64,
    /// `idle_kwh` × price per kWh.
    pub idle_cost: f64,
    /// Part of `idle_kwh`: intervals whose processes ran but that had no activity value to split
    /// by (nothing is guessed).
    pub no_activity_kwh: f64,
}

/// One idle-loaded model, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleModel {
    pub finding_id: String,
    pub what: String,
    pub team: Option<String>,
    pub memory_max_gib: f64,
    pub idle_hours: f64,
    pub idle_share: f64,
    pub idle_gib_hours: f64,
    pub reclaimable_gpu_hours: f64,
    /// `reclaimable_gpu_hours` × price per GPU-hour.
    pub wasted_cost: f64,
    /// The energy those GPU-hours draw at the GPU's idle power ([`IdlePower`]); null when
    /// unknown.
    pub wasted_energy_kwh: Option<f64>,
    /// `wasted_energy_kwh` × price per kWh; null with it.
    pub wasted_energy_cost: Option<f64>,
    pub action: String,
}

/// One consolidation group (a GPU model), priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsolidationStep {
    pub finding_id: String,
    pub model: String,
    pub gpus_loaded: u64,
    pub gpus_needed: u64,
    pub gpus_freed: u64,
    pub gpu_hours_freed: f64,
    /// `gpu_hours_freed` × price per GPU-hour (over the range).
    pub savings: f64,
    /// `gpus_freed` × 730.5 h × price per GPU-hour.
    pub savings_per_month: f64,
    /// `workload (node/GPU) → node/GPU` for every workload that moves.
    pub moves: Vec<String>,
    /// Who carries out each move, in the order of `moves`: tessera moves no pod or job.
    pub moved_by: Vec<MovedBy>,
}

/// Who carries out one consolidation move.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MovedBy {
    /// The move, as in `moves`.
    #[serde(rename = "move")]
    pub what: String,
    /// The scheduler of the move: `kubernetes`, `slurm`, `both` (a pod's GPU and a Slurm
    /// job's: not automated) or `unknown` (no holder in the data).
    pub scheduler: crate::advisor::scheduler::Scheduler,
    /// One sentence: who moves it, and how.
    pub by: String,
}

/// One off-peak window finding (the profile's windows with the same start and length).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffpeakWindow {
    pub finding_id: String,
    /// `week` or `day`.
    pub period: String,
    /// Start days (`Mon` …); empty: every day.
    pub days: Vec<String>,
    pub start: String,
    pub end: String,
    pub hours: f64,
    /// GPUs free in every hour of the window, the baseline included (the tier's level).
    pub expected_free_gpus: u64,
    pub confidence: f64,
    pub cron_start: String,
    pub cron_end: String,
    /// The tier (1 = fewest GPUs free).
    pub tier: u64,
    /// `expected_free_gpus` − the GPUs free around the clock.
    pub above_baseline: u64,
    /// systemd `OnCalendar=` expressions at the start and the end.
    pub systemd_start: String,
    pub systemd_end: String,
    /// The peaks inside it: ≥ K more GPUs free than `expected_free_gpus` for ≥ the shortest
    /// window (docs/findings.md).
    pub peaks: Vec<crate::advisor::evidence::PeakEvidence>,
}

/// GPUs of one model free around the clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineModel {
    pub model: String,
    pub gpus: u64,
}

/// The off-peak detector's baseline: GPUs free at every hour of the profile (over-provisioning).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffpeakBaseline {
    pub finding_id: String,
    /// `week` or `day`.
    pub period: String,
    pub gpus: u64,
    pub gpus_observed: u64,
    pub by_model: Vec<BaselineModel>,
    /// Baseline GPUs no single model accounts for (which GPUs are free varies).
    pub unattributed_gpus: u64,
    pub min_share: f64,
}

/// One data-quality note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QualityNote {
    /// `source_missing`, `stopped`, `status`, `gap`, `signal`, `no_rows`, `ingest`, `advisor`,
    /// `owners`.
    pub kind: String,
    pub message: String,
}

/// Per-GPU activity distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuActivity {
    /// `node/GPUn`.
    pub gpu: String,
    pub model: String,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    /// Share of observed time in each tenth of activity (0–10%, …, 90–100%).
    pub histogram: Vec<f64>,
}

/// One hour of the free-capacity timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FreeHour {
    /// Start of the hour, RFC 3339 UTC.
    pub hour: String,
    pub gpus: u32,
    pub free_gpus: u32,
    /// Inside an off-peak window.
    pub offpeak: bool,
    /// The most GPUs an off-peak window covering this hour expects free (its tier's level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offpeak_free_gpus: Option<u64>,
}

/// What the HTML charts draw (also in the JSON, for other front ends).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Charts {
    /// Mean activity per local hour of week: 7 rows (Mon … Sun) × 24 hours; null = no data.
    pub hour_of_week: Vec<Vec<Option<f64>>>,
    pub gpu_activity: Vec<GpuActivity>,
    pub free_timeline: Vec<FreeHour>,
}

/// One allocated-but-unused (or low-use) device, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatedDevice {
    pub finding_id: String,
    /// `node/GPUn` or `node/GPUn/GIk`, and the holder.
    pub what: String,
    pub team: Option<String>,
    /// `unused` or `low_use`.
    pub kind: String,
    pub held_hours: f64,
    pub unused_hours: f64,
    pub activity_mean: Option<f64>,
    pub wasted_gpu_hours: f64,
    /// `wasted_gpu_hours` × price per GPU-hour.
    pub wasted_cost: f64,
    /// The energy those GPU-hours draw at the GPU's idle power ([`IdlePower`]); null when
    /// unknown.
    pub wasted_energy_kwh: Option<f64>,
    /// `wasted_energy_kwh` × price per kWh; null with it.
    pub wasted_energy_cost: Option<f64>,
    pub action: String,
}

/// Each GPU's idle power, W: its energy over its rows with activity ≤ 1% divided by their time
/// (else the same over its model's GPUs), for pricing the energy of wasted GPU-hours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdlePower {
    /// (node, GPU index) → W.
    pub by_gpu: std::collections::BTreeMap<(String, u32), f64>,
    /// Node → its GPUs' model, by GPU index (to fall back on the model's).
    pub model_of: std::collections::BTreeMap<(String, u32), String>,
    /// GPU model → W.
    pub by_model: std::collections::BTreeMap<String, f64>,
}

impl IdlePower {
    /// The idle power of `node`'s GPU `gpu`, else of its model's GPUs.
    pub fn of(&self, node: Option<&str>, gpu: Option<u32>) -> Option<f64> {
        let k = (node?.to_string(), gpu?);
        self.by_gpu.get(&k).copied().or_else(|| {
            self.model_of
                .get(&k)
                .and_then(|m| self.by_model.get(m))
                .copied()
        })
    }
}

/// The scheduler's view over the range: GPU-hours held by pods or jobs, and how much of it
/// nothing used (the `allocated_unused` detector's figures).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocationSummary {
    pub held_gpu_hours: f64,
    pub unused_gpu_hours: f64,
    /// `unused_gpu_hours` × price per GPU-hour.
    pub unused_cost: f64,
    pub low_use_gpu_hours: f64,
    pub devices_unused: usize,
    pub devices_low_use: usize,
}

/// One suggested command: what it does and the command line (`tessera …`, runnable as printed
/// from any folder, the sources as the report was given them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextStep {
    pub what: String,
    pub command: String,
}

/// The report (`docs/report.md`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    /// Reported range: rows ending after `from` and at or before `until`, RFC 3339 UTC.
    pub from: String,
    pub until: String,
    pub hours: f64,
    pub tz: String,
    pub sources: Vec<String>,
    pub prices: Prices,
    /// One recommendation per workload, ranked by saving per month (`crate::actions`;
    /// docs/report.md "Actions"): the block every format opens with.
    pub actions: Vec<crate::actions::Action>,
    /// Which activity the numbers use: `sm_active`, `busy`, `sm_active, else busy`, `none`.
    pub activity_signal: String,
    pub fleet: Usage,
    /// The same-length period before `from`, when the data covers it (week-over-week).
    pub previous_period: Option<Usage>,
    pub by_node: Vec<Usage>,
    pub by_model: Vec<Usage>,
    pub teams: Teams,
    pub idle_models: Vec<IdleModel>,
    /// GPU-hours allocated and unused; `null` when the data says nothing of allocation
    /// (unknown, not 0).
    pub allocation: Option<AllocationSummary>,
    /// The top allocated-but-unused and low-use devices, priced (unused first).
    pub allocated_unused: Vec<AllocatedDevice>,
    pub consolidation: Vec<ConsolidationStep>,
    pub offpeak_windows: Vec<OffpeakWindow>,
    /// GPUs free around the clock (over-provisioning), when there are any.
    pub offpeak_baseline: Option<OffpeakBaseline>,
    /// The MIG planner's recommendation ([`super::mig_section`]); `null` when none was computed.
    pub mig: Option<MigSection>,
    /// Layout changes found in the range (or given with `--change-at`) and equal periods
    /// around each compared (`crate::changes`); `null` when not computed.
    pub changes: Option<crate::changes::ChangeSection>,
    /// The commands that act on the report's findings and plans, each runnable as printed
    /// ([`super::next_steps`]); `[]` when there is nothing to act on.
    pub next_steps: Vec<NextStep>,
    /// The last weeks' waste and cost, and the savings changes realized (`--trend.weeks`;
    /// [`super::trend`]); `null` with `--trend.weeks 0`.
    pub trend: Option<Trend>,
    /// Work per GPU-hour (`crate::work`, docs/work.md): absent when the sources count no work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<crate::work::WorkSummary>,
    pub data_quality: Vec<QualityNote>,
    pub charts: Charts,
    /// `--out-of-sample`: each of the report's plans made from the previous period and replayed
    /// on this one; absent from the JSON unless asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_sample: Option<Vec<super::out_of_sample::OutOfSample>>,
    /// The plans the plan actions propose, as files (`consolidation`: the moves left after the
    /// actions that come first; `mig`: the day layout), for the command to replay on the period
    /// (the actions' verdicts). Not in the JSON.
    #[serde(skip)]
    pub plans: Vec<(&'static str, tessera_core::mig::plan::TesseraPlan)>,
    /// The user's `--since`/`--until` flags as given, filled into the printed commands that plan
    /// and replay. Not in the JSON.
    #[serde(skip)]
    pub range_flags: Vec<String>,
}

/// The report's MIG recommendation: a summary, and the plan's figures when there is a plan
/// (absent when nothing was placed or the planner could not run; the summary says why). Fields
/// in alphabetical order, as the JSON has always listed them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigSection {
    /// Gap between the GPUs used and the lower bound, a share (3 decimals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap: Option<f64>,
    /// GPUs holding work once the plan is in force: the GPUs it fills, the GPUs kept for work it
    /// gives no other place, the GPUs of work it leaves where it is (`mig_planner::GpuCount`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_after: Option<u64>,
    /// GPUs the workloads use now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_before: Option<u64>,
    /// `gpus_before − gpus_after`: negative when MIG needs more GPUs than today.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_freed: Option<i64>,
    /// GPUs kept whole (MIG off) for the work that runs on them and no MIG instance holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_kept: Option<u64>,
    /// Planned GPUs left out of MIG mode (one workload needing the whole GPU; kept GPUs apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_mig_off: Option<u64>,
    /// Whether the plan frees GPUs (`gpus_freed` > 0); when not, `summary` says which plan to
    /// follow instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helps: Option<bool>,
    /// Up to `--top` planned GPUs with their instances, then the workloads not placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    /// Fewest GPUs any layout could use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_bound: Option<u64>,
    pub summary: String,
    /// Workloads no MIG instance holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unplaceable: Option<u64>,
    /// Workloads planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads: Option<u64>,
}

impl MigSection {
    /// A section that is only a sentence (no plan to show).
    pub fn note(summary: String) -> MigSection {
        MigSection {
            gap: None,
            gpus_after: None,
            gpus_before: None,
            gpus_freed: None,
            gpus_kept: None,
            gpus_mig_off: None,
            helps: None,
            lines: None,
            lower_bound: None,
            summary,
            unplaceable: None,
            workloads: None,
        }
    }
}

/// What [`super::build`] needs besides the frames.
pub struct ReportInput<'a> {
    /// The advisor's analysis over `range`.
    pub analysis: &'a Analysis,
    /// Reported range, unix ms: rows with `start < ts <= end`.
    pub range: (i64, i64),
    pub ingest: &'a IngestReport,
    pub sources: Vec<String>,
    pub prices: Prices,
    pub tz: Tz,
    /// How many top idle-loaded models to list.
    pub top: usize,
}

/// The last weeks' waste and cost, oldest first (`Report::trend`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// Weeks asked for (`--trend.weeks`).
    pub weeks_asked: usize,
    /// The weeks with data, oldest first (a trend needs two).
    pub weeks: Vec<TrendWeek>,
    /// The layout changes found in those weeks whose periods could be compared, with what each
    /// saves per month as measured.
    pub realized: Vec<RealizedChange>,
    /// Σ of `realized`'s savings per month, the changes work per GPU-hour flags left out;
    /// `null` when no other change was compared.
    pub realized_saving_per_month: Option<f64>,
    /// When the changes happened (`realized[].at`) that work per GPU-hour flags and the sum
    /// leaves out.
    pub flagged_left_out: Vec<String>,
}

/// One week of the trend: what its own report says of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendWeek {
    /// The week's bounds, RFC 3339 UTC (`from` is the data's first row start when the data
    /// begins inside the week).
    pub from: String,
    pub until: String,
    /// Hours of the week covered (168 unless the data begins inside it).
    pub hours: f64,
    pub gpus: usize,
    pub gpu_hours_available: f64,
    /// GPU-hours of work ÷ GPU-hours available; `null` when the data has no activity.
    pub work_utilization: Option<f64>,
    /// The idle-loaded models' reclaimable GPU-hours; `null` when memory used is not in the
    /// data (nothing can be called idle-loaded).
    pub idle_loaded_gpu_hours: Option<f64>,
    pub idle_loaded_cost: Option<f64>,
    /// GPU-hours held by a pod or job and unused; `null` when the data says nothing of who holds
    /// the GPUs.
    pub allocated_unused_gpu_hours: Option<f64>,
    pub allocated_unused_cost: Option<f64>,
    pub energy_kwh: Option<f64>,
    /// GPU-hours available × price + energy × price.
    pub cost: f64,
}

/// A layout change and what it saved, measured over equal periods around it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealizedChange {
    /// When the change happened, RFC 3339 UTC.
    pub at: String,
    /// Mean GPUs in use before − after; `null` when in use is unknown.
    pub gpus_freed: Option<f64>,
    /// (Cost before − cost after) ÷ the compared hours × hours in a month (GPU-hours in use and
    /// energy, as the change section prices them); `null` when a side's cost is unknown.
    pub saving_per_month: Option<f64>,
    /// The teams (and units) whose work per GPU-hour fell by more than
    /// `crate::work::DROP_FLAGGED` at the change, `team (unit)`: when any, the change is not
    /// a plain saving and is left out of the sum ([`Trend::flagged_left_out`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub work_flagged: Vec<String>,
}
