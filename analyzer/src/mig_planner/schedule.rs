//! Day/night MIG schedules: where the off-peak detector found windows, a `night` config that turns
//! GPUs the history says are free at night into whole-GPU training instances (`7g`, one per GPU),
//! plus the tessera-mig-schedule file, cron lines and systemd units that switch between `day` and
//! `night` by running `tessera mig apply --schedule FILE --yes` with the flags the node's apply
//! needs ([`ApplyCommand`], quoted for cron's `/bin/sh` and for systemd).
//!
//! The windows are the detector's off-peak time as a whole ([`Profile::windows`]: every run with
//! at least K GPUs free beyond the baseline, whatever its tier), never the baseline: GPUs free
//! around the clock are over-provisioning, free by day too, and need no switch.
//!
//! The rule (also in docs/mig.md): a workload is *night-active* when it held memory in more than
//! `1 − min_share` of the window's observed hours (the off-peak detector's reliability share).
//! Night-active workloads are re-planned alone; the day plan's GPUs that this night plan no longer
//! needs are freed. A switch is proposed only when at least one GPU is freed **and** the off-peak
//! detector expects GPUs free above the baseline in every hour of the windows
//! (`above_baseline`, its history-based count of GPUs reliably free at night but not by day);
//! the number of night training GPUs is the smaller of the two. GPUs the day plan already leaves
//! free are not switched (they need no MIG change to be used whole), and a freed GPU whose day
//! layout already is a whole GPU (MIG off for one workload that needs all of it, or one
//! whole-GPU instance) is not switched either; with no GPU left to switch, none is proposed.
//! Otherwise no switch is proposed and the reason is returned. The night training GPUs keep MIG
//! mode on (one `7g` instance) because they run MIG instances by day: turning MIG off for the
//! night would need a GPU reset at every switch.
//!
//! Pure: builds values and text from a plan, workloads, measurements and windows.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use chrono::{DateTime, Datelike, Timelike, Utc};
use chrono_tz::Tz;
use tessera_core::mig;
use tessera_core::mig::plan::{GpuLayout, MigSchedule, PlannedInstance, SCHEDULE_KIND, Switch};
use tessera_core::model::Placement;

use super::demand::Measured;
use super::{FleetGpu, PlannerOptions, Workload};
use crate::advisor::offpeak::Profile;

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// A proposed day/night switch.
#[derive(Debug, Clone)]
pub struct NightProposal {
    /// The `night` config.
    pub night: Vec<GpuLayout>,
    /// GPUs turned into training GPUs at night (node, index).
    pub training_gpus: Vec<(String, u32)>,
    pub schedule: MigSchedule,
    /// Workloads that stay active at night.
    pub night_active: usize,
}

/// Whether UTC hour `h` falls in one of the profile's windows (local time `tz`).
pub fn in_window(profile: &Profile, tz: Tz, h: i64) -> bool {
    let Some(t) = DateTime::<Utc>::from_timestamp(h * 3600, 0) else {
        return false;
    };
    let local = t.with_timezone(&tz);
    let weekly = profile.period == "week";
    let nslots = if weekly { 168 } else { 24 };
    let slot = local.hour() as usize
        + if weekly {
            local.weekday().num_days_from_monday() as usize * 24
        } else {
            0
        };
    profile.windows.iter().any(|w| {
        let off = (slot + nslots - w.start_slot % nslots) % nslots;
        off < w.hours as usize
    })
}

/// Why no night layout is proposed: an outcome the planner reports (and `tessera mig plan`
/// prints as the schedule's reason), not a failure of the command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoNightLayout {
    #[error(
        "the off-peak detector found no window with {k} GPU(s) free beyond the {baseline} free around the clock (over-provisioning, free by day too: no switch needed to use them): no night layout proposed"
    )]
    OnlyBaseline { k: u32, baseline: u32 },
    #[error("the off-peak detector found no window: no night layout proposed")]
    NoWindow,
    #[error("no observed hour falls in the off-peak windows")]
    NoObservedHour,
    #[error("night re-plan failed: {0}")]
    Replan(String),
    #[error("{0} night-active workload(s) do not fit the day plan's GPUs: no switch")]
    DoesNotFit(usize),
    #[error(
        "{active} workload(s) stay active at night and still need all {day_gpus} day GPU(s): nothing to free"
    )]
    NothingToFree { active: usize, day_gpus: usize },
    #[error(
        "the history shows no GPU reliably free in the windows: training would not get capacity"
    )]
    NoReliableCapacity,
    #[error(
        "{0} GPU(s) are free at night, but their day layouts already are whole GPUs (MIG off, or one whole-GPU instance): run training there in the window, no MIG switch needed"
    )]
    AlreadyWhole(usize),
}

/// The night-active workloads, each on the GPU the day plan gives it when it has one (no move at
/// the switch).
fn night_workloads(day: &[GpuLayout], workloads: &[Workload], active: &[usize]) -> Vec<Workload> {
    active
        .iter()
        .map(|&w| {
            let mut wl = workloads[w].clone();
            if let Some(g) = day.iter().find(|g| {
                g.workloads.contains(&wl.id)
                    || g.instances.iter().any(|i| i.workloads.contains(&wl.id))
            }) {
                wl.current_gpu = g.uuid.clone();
                wl.node = g.node.clone();
            }
            wl
        })
        .collect()
}

/// The fleet GPUs the day plan uses (`day_gpus`).
fn day_fleet(day_gpus: &[&GpuLayout], fleet: &[FleetGpu]) -> Vec<FleetGpu> {
    fleet
        .iter()
        .filter(|f| {
            day_gpus
                .iter()
                .any(|g| g.node.as_deref() == Some(f.node.as_str()) && g.gpu == f.index)
        })
        .cloned()
        .collect()
}

/// A GPU of the night config keeping only workloads it holds by day keeps their day placements
/// (the switch then only destroys the instances of workloads idle at night).
fn keep_day_placements(night: &mut [GpuLayout], day: &[GpuLayout]) {
    for g in night.iter_mut().filter(|g| g.mig_enabled) {
        let Some(d) = day.iter().find(|d| d.node == g.node && d.gpu == g.gpu) else {
            continue;
        };
        let ids: Vec<&String> = g.instances.iter().flat_map(|i| &i.workloads).collect();
        let kept: Vec<PlannedInstance> = d
            .instances
            .iter()
            .filter(|i| i.workloads.iter().any(|w| ids.contains(&w)))
            .cloned()
            .map(|mut i| {
                i.workloads.retain(|w| ids.contains(&w));
                i
            })
            .collect();
        let kept_ids = kept.iter().map(|i| i.workloads.len()).sum::<usize>();
        if kept_ids == ids.len() {
            g.instances = kept;
        }
    }
}

/// Gives training up to `n` GPUs of the night config that hold no night workload and are not
/// whole by day already: each one whole-GPU MIG instance. Returns them (node, index).
fn give_training(night: &mut [GpuLayout], day: &[GpuLayout], n: usize) -> Vec<(String, u32)> {
    let used: BTreeSet<(Option<String>, u32)> = night
        .iter()
        .filter(|g| g.mig_enabled || !g.workloads.is_empty())
        .map(|g| (g.node.clone(), g.gpu))
        .collect();
    // GPUs with MIG off by day are whole already: training uses them without a switch.
    let whole_by_day = |g: &GpuLayout| {
        day.iter()
            .any(|d| d.node == g.node && d.gpu == g.gpu && !d.mig_enabled)
    };
    let mut training = Vec::new();
    for g in night.iter_mut() {
        if training.len() >= n
            || g.mig_enabled
            || used.contains(&(g.node.clone(), g.gpu))
            || whole_by_day(g)
        {
            continue;
        }
        let Some(model) = mig::model(&g.model) else {
            continue;
        };
        let Some(full) = model
            .profiles
            .iter()
            .filter(|p| !p.media_extensions)
            .max_by_key(|p| p.compute_slices)
        else {
            continue;
        };
        g.mig_enabled = true;
        g.instances = vec![PlannedInstance {
            profile: full.name.clone(),
            profile_id: full.id,
            placement: Placement {
                start: 0,
                size: full.memory_slices,
            },
            workloads: vec!["training".into()],
        }];
        training.push((g.node.clone().unwrap_or_default(), g.gpu));
    }
    training
}

/// A switch must change something: training leaves the GPUs whose day layout already is its
/// night one (one whole-GPU instance gives training the same capacity without a MIG change).
fn drop_unchanged(training: &mut Vec<(String, u32)>, night: &[GpuLayout], day: &[GpuLayout]) {
    let same = |g: &GpuLayout| {
        day.iter().any(|d| {
            d.node == g.node
                && d.gpu == g.gpu
                && d.mig_enabled == g.mig_enabled
                && d.layout() == g.layout()
        })
    };
    training.retain(|(n, i)| {
        night
            .iter()
            .find(|g| g.node.as_deref() == Some(n.as_str()) && g.gpu == *i)
            .is_some_and(|g| !same(g))
    });
}

/// Propose a night config and schedule, or say why not. `day` is the plan's day config; `fleet`
/// and `workloads`/`measured` as given to the planner; `observed_hours` the UTC hours with data.
#[allow(clippy::too_many_arguments)]
pub fn propose(
    day: &[GpuLayout],
    workloads: &[Workload],
    measured: &[Measured],
    fleet: &[FleetGpu],
    observed_hours: &BTreeSet<i64>,
    profile: &Profile,
    tz: Tz,
    min_share: f64,
    plan_file: &str,
) -> Result<NightProposal, NoNightLayout> {
    if profile.windows.is_empty() {
        return Err(if profile.baseline.gpus > 0 {
            NoNightLayout::OnlyBaseline {
                k: profile.k,
                baseline: profile.baseline.gpus,
            }
        } else {
            NoNightLayout::NoWindow
        });
    }
    let window_hours: Vec<i64> = observed_hours
        .iter()
        .copied()
        .filter(|&h| in_window(profile, tz, h))
        .collect();
    if window_hours.is_empty() {
        return Err(NoNightLayout::NoObservedHour);
    }
    let active: Vec<usize> = (0..workloads.len())
        .filter(|&w| {
            let loaded = window_hours
                .iter()
                .filter(|h| measured[w].loaded_hours.contains(h))
                .count();
            loaded as f64 > (1.0 - min_share) * window_hours.len() as f64
        })
        .collect();
    // Night-active workloads prefer the GPU the day plan gives them (no move at the switch).
    let night_ws = night_workloads(day, workloads, &active);
    // Re-plan the night-active workloads on the GPUs the day plan uses (MIG instances, or whole
    // with MIG off for one workload).
    let day_gpus: Vec<&GpuLayout> = day
        .iter()
        .filter(|g| g.mig_enabled || !g.workloads.is_empty())
        .collect();
    let day_fleet = day_fleet(&day_gpus, fleet);
    let night_plan = super::plan(&night_ws, &day_fleet, &PlannerOptions::default())
        .map_err(|e| NoNightLayout::Replan(e.to_string()))?;
    if !night_plan.unplaceable.is_empty() {
        return Err(NoNightLayout::DoesNotFit(night_plan.unplaceable.len()));
    }
    let freed = day_gpus.len().saturating_sub(night_plan.gpus.len());
    // GPUs free in the windows beyond those free around the clock: what the night frees.
    let expected = profile
        .windows
        .iter()
        .map(|w| w.above_baseline as usize)
        .min()
        .unwrap_or(0);
    let n = freed.min(expected);
    if freed == 0 {
        return Err(NoNightLayout::NothingToFree {
            active: active.len(),
            day_gpus: day_gpus.len(),
        });
    }
    if expected == 0 {
        return Err(NoNightLayout::NoReliableCapacity);
    }
    // Night config: night plan's GPUs, n freed GPUs as 1×7g, the rest MIG off.
    let nw: Vec<Workload> = night_ws;
    let mut night = super::export::config(&night_plan, &nw);
    keep_day_placements(&mut night, day);
    let mut training = give_training(&mut night, day, n);
    // Keep the GPUs the day plan left free as they are (MIG off) in the night config too.
    for g in day.iter().filter(|g| !g.mig_enabled) {
        if !night.iter().any(|x| x.node == g.node && x.gpu == g.gpu) {
            night.push(g.clone());
        }
    }
    night.sort_by(|a, b| (&a.node, a.gpu).cmp(&(&b.node, b.gpu)));
    drop_unchanged(&mut training, &night, day);
    if training.is_empty() {
        return Err(NoNightLayout::AlreadyWhole(freed));
    }
    Ok(NightProposal {
        night,
        training_gpus: training,
        schedule: schedule_file(profile, tz, plan_file),
        night_active: active.len(),
    })
}

/// The schedule: `night` at each window's start, `day` at its end, in the profile's time zone.
pub fn schedule_file(profile: &Profile, tz: Tz, plan_file: &str) -> MigSchedule {
    let weekly = profile.period == "week";
    // (at, config) -> days
    let mut switches: Vec<(String, &str, BTreeSet<usize>)> = Vec::new();
    let mut add = |slot: usize, config: &'static str| {
        let at = format!("{:02}:00", slot % 24);
        let day = (slot / 24) % 7;
        match switches
            .iter_mut()
            .find(|(a, c, _)| *a == at && *c == config)
        {
            Some((_, _, d)) => {
                d.insert(day);
            }
            None => switches.push((at, config, BTreeSet::from([day]))),
        }
    };
    for w in &profile.windows {
        add(w.start_slot, "night");
        add(w.start_slot + w.hours as usize, "day");
    }
    MigSchedule {
        version: "v1".into(),
        kind: SCHEDULE_KIND.into(),
        timezone: tz.name().to_string(),
        plan: plan_file.to_string(),
        comment: Some(format!(
            "written by tessera mig plan from the off-peak windows ({} profile)",
            profile.period
        )),
        switches: switches
            .into_iter()
            .map(|(at, config, days)| Switch {
                at,
                days: if weekly && days.len() < 7 {
                    days.iter().map(|&d| DAYS[d].to_string()).collect()
                } else {
                    Vec::new()
                },
                config: config.to_string(),
            })
            .collect(),
    }
}

fn cron_dows(days: &[String]) -> String {
    if days.is_empty() {
        return "*".into();
    }
    days.iter()
        .filter_map(|d| DAYS.iter().position(|x| x == d))
        .map(|i| ((i + 1) % 7).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The command every switch runs: `TESSERA mig apply --schedule FILE --yes` and the flags this
/// node's apply needs (its device backend, `--allow-plan-outside` for a plan that is not beside
/// the schedule). `--yes` because a switch that only printed its steps would exit 0 and change
/// nothing, every time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyCommand {
    argv: Vec<String>,
}

impl ApplyCommand {
    /// `tessera mig apply --schedule SCHEDULE --yes EXTRA…`; `tessera` and `schedule` should be
    /// absolute (cron and systemd run neither in this folder nor with this `PATH`).
    pub fn new(tessera: &str, schedule: &str, extra: &[String]) -> ApplyCommand {
        let mut argv: Vec<String> = [tessera, "mig", "apply", "--schedule", schedule, "--yes"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        argv.extend(extra.iter().cloned());
        ApplyCommand { argv }
    }

    /// The words, unquoted.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The command of a cron line: words quoted for `/bin/sh` where needed, and `%` escaped
    /// (cron turns a bare `%` into a line end).
    pub fn cron(&self) -> String {
        self.argv
            .iter()
            .map(|w| sh_word(w).replace('%', "\\%"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The command of a systemd `ExecStart=`: words double-quoted where needed (systemd's own
    /// rules, not the shell's), `%` and `$` doubled (systemd expands specifiers and variables).
    pub fn systemd(&self) -> String {
        self.argv
            .iter()
            .map(|w| systemd_word(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Characters a word may hold and still be one plain word to `sh` and to systemd.
fn plain(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c))
}

fn sh_word(w: &str) -> String {
    if plain(w) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn systemd_word(w: &str) -> String {
    let w = w.replace('%', "%%").replace('$', "$$");
    if plain(&w) {
        w
    } else {
        format!("\"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// Cron lines (`/etc/cron.d` format, with `CRON_TZ`) that run `cmd` at every switch.
pub fn cron_lines(s: &MigSchedule, cmd: &ApplyCommand) -> String {
    let mut out = format!("CRON_TZ={}\n", s.timezone);
    let command = cmd.cron();
    for sw in &s.switches {
        let (h, m) = sw.at.split_once(':').unwrap_or(("0", "0"));
        let _ = writeln!(
            out,
            "{} {} * * {} root {command}   # -> {}",
            m.trim_start_matches('0').parse::<u32>().unwrap_or(0),
            h.trim_start_matches('0').parse::<u32>().unwrap_or(0),
            cron_dows(&sw.days),
            sw.config
        );
    }
    out
}

/// A systemd service and timer (`tessera-mig-schedule.service`/`.timer`): the service runs `cmd`
/// (a failed or refused apply exits 2 and fails the unit); the timer has one `OnCalendar=` per
/// switch in the schedule's time zone, and one shortly after boot (MIG instances do not survive
/// a reboot).
pub fn systemd_units(s: &MigSchedule, cmd: &ApplyCommand) -> (String, String) {
    let service = format!(
        "[Unit]\nDescription=Apply the MIG layout the tessera schedule says is active now\nAfter=nvidia-persistenced.service nvidia-fabricmanager.service\n\n[Service]\nType=oneshot\nExecStart={}\n",
        cmd.systemd()
    );
    let mut timer = String::from(
        "[Unit]\nDescription=Switch MIG layouts on the tessera schedule\n\n[Timer]\nOnBootSec=1min\n",
    );
    for sw in &s.switches {
        let days = if sw.days.is_empty() {
            String::new()
        } else {
            let mut d: Vec<String> = sw
                .days
                .iter()
                .map(|d| {
                    let mut c = d.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect();
            d.dedup();
            format!("{} ", d.join(","))
        };
        let _ = writeln!(timer, "OnCalendar={days}*-*-* {}:00 {}", sw.at, s.timezone);
    }
    timer.push_str("Persistent=true\n\n[Install]\nWantedBy=timers.target\n");
    (service, timer)
}
