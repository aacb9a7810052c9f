//! Change detection, pure: per-GPU MIG states into events ([`gpu_events`]), each workload's
//! runs on its devices into moves ([`moves`]), and events close in time (with the apply
//! journal's, `super::journal`) grouped into changes ([`group`]), or gathered around a given
//! time ([`given`]).
//!
//! It reads no frames (the scan does) and judges nothing beyond "the layout or the placement
//! changed here".

/// One thing the rows show changing.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Start of the first row that shows it, unix ms.
    pub at: i64,
    /// The GPU (`node/GPUi`) or the workload (`namespace/pod`, `slurm job N`, `node pid N (name)`).
    pub subject: String,
    pub kind: EventKind,
}

/// What changed.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// The GPU's MIG mode switched; `layout` is the instances after (`profile@start`).
    MigMode { on: bool, layout: Vec<String> },
    /// The GPU's MIG instances changed (mode unknown or unchanged).
    MigLayout {
        before: Vec<String>,
        after: Vec<String>,
    },
    /// The workload is on other devices.
    Move { from: Vec<String>, to: Vec<String> },
    /// A `tessera mig apply` run applied a plan on the node (its journal).
    Journal { plan: Option<String>, steps: usize },
}

/// One GPU row's MIG state, as the scan reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuState {
    /// Row start (`ts − interval_ms`), unix ms.
    pub start: i64,
    /// Row end (`ts`), unix ms.
    pub end: i64,
    /// `mig_enabled`; `None` where the source does not say.
    pub mig: Option<bool>,
    /// The MIG instances of the row (ids of `profile@start` names, sorted).
    pub layout: Vec<u32>,
}

/// The events of one GPU from its rows' states in time order (rows with values only: a lost
/// GPU's rows say nothing of its layout). `layouts_known`: the source has MIG instance rows at
/// all (else an empty layout is not news). `names`: the instances' names by id.
///
/// Only settled states count: rows of one state are a run, and a run shorter than `settle` (a
/// MIG series missing for a scrape, a layout half built while it was applied) is passed over.
/// Two consecutive settled runs that differ are an event at the first row after the earlier one
/// (so the half-built rows of an apply date the change, and a state that flickers and comes back
/// is none).
pub fn gpu_events(
    gpu: &str,
    states: &[GpuState],
    layouts_known: bool,
    names: &[String],
    settle: i64,
) -> Vec<Event> {
    let text = |l: &[u32]| -> Vec<String> {
        let mut v: Vec<String> = l.iter().map(|&i| names[i as usize].clone()).collect();
        v.sort();
        v
    };
    let same =
        |a: &GpuState, b: &GpuState| a.mig == b.mig && (!layouts_known || a.layout == b.layout);
    // Runs of one state: (first row, start, end), and the start of the row after each.
    let mut runs: Vec<(&GpuState, i64, i64, Option<i64>)> = Vec::new();
    for st in states {
        match runs.last_mut() {
            Some((first, _, end, _)) if same(first, st) => *end = st.end,
            _ => {
                if let Some(last) = runs.last_mut() {
                    last.3 = Some(st.start);
                }
                runs.push((st, st.start, st.end, None));
            }
        }
    }
    let settled: Vec<&(&GpuState, i64, i64, Option<i64>)> =
        runs.iter().filter(|r| r.2 - r.1 >= settle).collect();
    let mut out = Vec::new();
    for w in settled.windows(2) {
        let ((a, _, _, next), (b, _, _, _)) = (w[0], w[1]);
        let at = next.unwrap_or(b.start);
        match (a.mig, b.mig) {
            _ if same(a, b) => {}
            (Some(x), Some(y)) if x != y => out.push(Event {
                at,
                subject: gpu.to_string(),
                kind: EventKind::MigMode {
                    on: y,
                    layout: text(&b.layout),
                },
            }),
            _ if layouts_known && a.layout != b.layout && a.mig != Some(false) => {
                // A GPU in MIG mode (or of unknown mode) whose instances changed.
                out.push(Event {
                    at,
                    subject: gpu.to_string(),
                    kind: EventKind::MigLayout {
                        before: text(&a.layout),
                        after: text(&b.layout),
                    },
                })
            }
            _ => {}
        }
    }
    out
}

/// A workload on one set of devices over `[start, end)` (unix ms), as one partition saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub workload: String,
    pub devices: Vec<String>,
    pub start: i64,
    pub end: i64,
}

/// Moves from the workloads' runs (of every partition): a workload seen on one set of devices
/// for at least `settle`, then on another for at least `settle`, moved when the second began.
/// Runs that overlap in time (a workload on two nodes at once) are no move.
pub fn moves(runs: impl Iterator<Item = Run>, settle: i64) -> Vec<Event> {
    let mut runs: Vec<Run> = runs.collect();
    runs.sort_by(|a, b| (&a.workload, a.start, a.end).cmp(&(&b.workload, b.start, b.end)));
    // Runs of one workload on the same devices that meet or nearly meet are one run.
    let mut merged: Vec<Run> = Vec::with_capacity(runs.len());
    for r in runs {
        match merged.last_mut() {
            Some(m)
                if m.workload == r.workload
                    && m.devices == r.devices
                    && r.start <= m.end + settle =>
            {
                m.end = m.end.max(r.end);
            }
            _ => merged.push(r),
        }
    }
    let mut out = Vec::new();
    for w in merged.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if a.workload != b.workload || a.devices == b.devices || b.start < a.end {
            continue;
        }
        if a.end - a.start >= settle && b.end - b.start >= settle {
            out.push(Event {
                at: b.start,
                subject: b.workload.clone(),
                kind: EventKind::Move {
                    from: a.devices.clone(),
                    to: b.devices.clone(),
                },
            });
        }
    }
    out
}

/// Events (sorted by time) grouped into changes: an event within `settle` of the group's last
/// one joins it. Each change is at its first event seen in the rows (a journal's `begin` comes
/// before the rows show anything; it only dates a change the rows do not show).
pub fn group(events: &[Event], settle: i64) -> Vec<(i64, Vec<Event>)> {
    let mut out: Vec<(i64, Vec<Event>)> = Vec::new();
    let mut last = i64::MIN;
    for e in events {
        match out.last_mut() {
            Some((_, evs)) if e.at - last <= settle => evs.push(e.clone()),
            _ => out.push((e.at, vec![e.clone()])),
        }
        last = e.at;
    }
    for (at, evs) in &mut out {
        if let Some(first) = evs
            .iter()
            .filter(|e| !matches!(e.kind, EventKind::Journal { .. }))
            .map(|e| e.at)
            .min()
        {
            *at = first;
        }
    }
    out
}

/// A given change time with the events within `settle` of it.
pub fn given(at: i64, events: &[Event], settle: i64) -> (i64, Vec<Event>) {
    (
        at,
        events
            .iter()
            .filter(|e| (e.at - at).abs() <= settle)
            .cloned()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    const NAMES: [&str; 3] = ["1g.10gb@0", "1g.10gb@1", "3g.40gb@0"];

    fn st(start: i64, mig: Option<bool>, layout: &[&str]) -> GpuState {
        GpuState {
            start,
            end: start + 5,
            mig,
            layout: layout
                .iter()
                .map(|s| NAMES.iter().position(|n| n == s).unwrap() as u32)
                .collect(),
        }
    }

    fn names() -> Vec<String> {
        NAMES.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mode_switch_and_layout_change_are_events_at_the_first_row_showing_them() {
        let s = [
            st(0, Some(false), &[]),
            st(5, Some(false), &[]),
            st(10, Some(true), &["1g.10gb@0"]),
            st(15, Some(true), &["1g.10gb@0"]),
            st(20, Some(true), &["1g.10gb@0", "1g.10gb@1"]),
            st(25, Some(true), &["1g.10gb@0", "1g.10gb@1"]),
        ];
        let e = gpu_events("n/GPU0", &s, true, &names(), 10);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].at, 10);
        assert!(matches!(&e[0].kind, EventKind::MigMode { on: true, layout } if layout.len() == 1));
        assert_eq!(e[1].at, 20);
        // Unknown mode (CSV): instances appearing are a layout change.
        let s = [
            st(0, None, &[]),
            st(5, None, &[]),
            st(10, None, &["3g.40gb@0"]),
            st(15, None, &["3g.40gb@0"]),
        ];
        assert_eq!(gpu_events("g", &s, true, &names(), 10).len(), 1);
        // Without instance rows in the source, an empty layout says nothing.
        assert!(gpu_events("g", &s, false, &names(), 10).is_empty());
    }

    #[test]
    fn a_state_that_flickers_is_no_change_and_a_half_built_layout_dates_one() {
        let full = ["1g.10gb@0", "1g.10gb@1"];
        let mut s: Vec<GpuState> = (0..6).map(|k| st(k * 5, Some(true), &full)).collect();
        // One row with an instance's series missing, then the layout as before.
        s.push(st(30, Some(true), &["1g.10gb@0"]));
        s.extend((7..12).map(|k| st(k * 5, Some(true), &full)));
        assert!(
            gpu_events("g", &s, true, &names(), 15).is_empty(),
            "flicker"
        );
        // MIG off, one row half built, then the whole layout: one event, at the half-built row.
        let mut s: Vec<GpuState> = (0..6).map(|k| st(k * 5, Some(false), &[])).collect();
        s.push(st(30, Some(true), &["1g.10gb@0"]));
        s.extend((7..12).map(|k| st(k * 5, Some(true), &full)));
        let e = gpu_events("g", &s, true, &names(), 15);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].at, 30);
        assert!(matches!(&e[0].kind, EventKind::MigMode { on: true, layout } if layout.len() == 2));
    }

    fn run(w: &str, dev: &str, start: i64, end: i64) -> Run {
        Run {
            workload: w.into(),
            devices: vec![dev.into()],
            start,
            end,
        }
    }

    #[test]
    fn a_move_needs_a_settled_run_on_each_side() {
        let runs = vec![
            run("a", "n/GPU1", 0, 10 * H),
            run("a", "n/GPU0", 10 * H, 20 * H),
            // Too short on the first device: no move.
            run("b", "n/GPU2", 0, H / 2),
            run("b", "n/GPU3", H / 2, 20 * H),
            // On the same device with a gap: no move.
            run("c", "n/GPU4", 0, 5 * H),
            run("c", "n/GPU4", 5 * H + 60_000, 20 * H),
        ];
        let m = moves(runs.into_iter(), H);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!((m[0].subject.as_str(), m[0].at), ("a", 10 * H));
    }

    #[test]
    fn events_within_the_margin_are_one_change() {
        let ev = |at: i64| Event {
            at,
            subject: format!("g{at}"),
            kind: EventKind::MigMode {
                on: true,
                layout: vec![],
            },
        };
        let events = [ev(0), ev(H / 2), ev(H), ev(5 * H)];
        let g = group(&events, H);
        assert_eq!(
            g.iter().map(|(t, e)| (*t, e.len())).collect::<Vec<_>>(),
            [(0, 3), (5 * H, 1)]
        );
        assert_eq!(given(4 * H, &events, H).1.len(), 1);
    }
}
