//! Local evaluation of the `prometheus:` source's PromQL over raw samples, for the remote-read
//! API: each query template the source sends to `/api/v1/query_range` ([`Eval::parse`]) is
//! computed here from a series' samples at the same evaluation times, with the same windows —
//! `(t − step, t]` for `{R}`, `[t − step − L, t − step]` for `{L} offset {S}` — and the same
//! output labels (the series' without `__name__`; without the code label for per-code sums).
//!
//! It covers exactly the forms the source uses (`avg|max|min|count|last_over_time`, over a metric
//! name with optional equality matchers (`m{pipe="fp64"}`), the sum of
//! two of them matched on labels, and the counter, event and value-change forms, whose templates
//! are built here for the source's catalogue: [`counter_delta`], [`event_count`],
//! [`value_changes`]); a template of another form does not parse, which a test guards. It is
//! not a PromQL engine, does no I/O, and does not know the canonical columns.

use std::collections::BTreeMap;

/// The increase of counter `m` over each step: its last value in `(ts − step, ts]` minus its last
/// value at or before `ts − step` (within the lookback), clamped at 0 (a reset counts nothing);
/// for a series' first interval, its rise inside the interval (max − min). Unlike `increase()` it
/// does not extrapolate, so the steps add up to the counter's whole increase, landing in the
/// interval of the sample that shows it — as the history writer counts it.
pub(super) fn counter_delta(m: &str) -> String {
    format!(
        "clamp_min(last_over_time({m}[{{R}}]) - last_over_time({m}[{{L}}] offset {{S}}), 0) \
         or (max_over_time({m}[{{R}}]) - min_over_time({m}[{{R}}]))"
    )
}

/// Events of a per-code counter family `m` (label `code_label`) per step: the counter increase
/// summed over codes; a code's series seen for the first time counts its value (its first event).
pub(super) fn event_count(m: &str, code_label: &str) -> String {
    format!(
        "sum without ({code_label}) (clamp_min(last_over_time({m}[{{R}}]) - \
         last_over_time({m}[{{L}}] offset {{S}}), 0) or last_over_time({m}[{{R}}]))"
    )
}

/// Value changes of gauge `m` whose later sample lies in `(ts − step, ts]`: changes over
/// step + lookback minus changes over the lookback before the step (both windows start at the
/// same time, so pairs before the step cancel); a series with nothing before the step counts
/// its changes inside it.
pub(super) fn value_changes(m: &str) -> String {
    format!("(changes({m}[{{SL}}]) - changes({m}[{{L}}] offset {{S}})) or changes({m}[{{R}}])")
}

/// A range function over `(t − step, t]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Avg,
    Max,
    Min,
    Count,
    Last,
}

/// A query template the source sends, as evaluated here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eval {
    /// `f_over_time(m[{R}])`.
    Over(Func, String),
    /// `f_over_time(m{l="v",…}[{R}])`: only the series whose labels equal every `(l, v)`.
    OverWhere(Func, String, Matchers),
    /// `a + b`, both `Over`, one-to-one on labels without `__name__`.
    Sum(Func, String, Func, String),
    /// [`counter_delta`].
    CounterDelta(String),
    /// [`event_count`]: the metric and the code label summed away.
    EventCount(String, String),
    /// [`value_changes`].
    ValueChanges(String),
}

/// The metric names a template selects (the tokens before `[`).
fn selected(t: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' || b[i] == b':' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            if b.get(i) == Some(&b'[') && !out.iter().any(|o| o == &t[s..i]) {
                out.push(t[s..i].to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// A metric name (PromQL's characters).
fn is_name(m: &str) -> bool {
    !m.is_empty()
        && m.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Equality matchers of a selector: (label, value).
pub type Matchers = Vec<(String, String)>;

/// Equality matchers `l1="v1",l2="v2"` (values without quotes or backslashes: the source's own).
fn matchers(s: &str) -> Option<Matchers> {
    s.split(',')
        .map(|m| {
            let (l, v) = m.split_once('=')?;
            let v = v.strip_prefix('"')?.strip_suffix('"')?;
            (is_name(l) && !l.contains(':') && !v.contains(['"', '\\']))
                .then(|| (l.to_string(), v.to_string()))
        })
        .collect()
}

/// `f_over_time(m[{R}])` or `f_over_time(m{l="v",…}[{R}])`: the function, the name and the
/// matchers (empty for none).
fn over(t: &str) -> Option<(Func, String, Matchers)> {
    let (f, rest) = t.split_once("_over_time(")?;
    let func = match f {
        "avg" => Func::Avg,
        "max" => Func::Max,
        "min" => Func::Min,
        "count" => Func::Count,
        "last" => Func::Last,
        _ => return None,
    };
    let sel = rest.strip_suffix("[{R}])")?;
    let (m, labels) = match sel.split_once('{') {
        Some((m, l)) => (m, matchers(l.strip_suffix('}')?)?),
        None => (sel, Vec::new()),
    };
    is_name(m).then(|| (func, m.to_string(), labels))
}

impl Eval {
    /// The template (with its `{R}`, `{S}`, `{L}`, `{SL}` placeholders) as an [`Eval`]; `None`
    /// for a form this module does not evaluate.
    pub fn parse(template: &str) -> Option<Eval> {
        if let Some((f, m, labels)) = over(template) {
            return Some(if labels.is_empty() {
                Eval::Over(f, m)
            } else {
                Eval::OverWhere(f, m, labels)
            });
        }
        if let Some((a, b)) = template.split_once(" + ") {
            let (fa, ma, la) = over(a)?;
            let (fb, mb, lb) = over(b)?;
            if !(la.is_empty() && lb.is_empty()) {
                return None;
            }
            return Some(Eval::Sum(fa, ma, fb, mb));
        }
        let names = selected(template);
        let [m] = names.as_slice() else {
            return None;
        };
        if template == counter_delta(m) {
            return Some(Eval::CounterDelta(m.clone()));
        }
        if template == value_changes(m) {
            return Some(Eval::ValueChanges(m.clone()));
        }
        let code = template
            .strip_prefix("sum without (")?
            .split_once(')')?
            .0
            .to_string();
        (template == event_count(m, &code)).then(|| Eval::EventCount(m.clone(), code))
    }

    /// The metric names it reads.
    pub fn metrics(&self) -> Vec<&str> {
        match self {
            Eval::Over(_, m)
            | Eval::OverWhere(_, m, _)
            | Eval::CounterDelta(m)
            | Eval::EventCount(m, _)
            | Eval::ValueChanges(m) => vec![m],
            Eval::Sum(_, a, _, b) => vec![a, b],
        }
    }
}

/// The evaluation times: `first + k × step` for `k` in `0..n`, each moved `shift` later for
/// the samples (and reported at the unshifted time); `lookback` is `{L}`.
#[derive(Debug, Clone, Copy)]
pub struct Grid {
    pub first: i64,
    pub step: i64,
    pub n: i64,
    pub lookback: i64,
}

/// Output labels → points (reported time, value) in time order.
pub type Points = Vec<(i64, f64)>;
/// A series' labels.
pub type Labels = BTreeMap<String, String>;

/// One template being evaluated over a partition's series.
pub struct TextEval {
    pub eval: Eval,
    shift: i64,
    /// Sums: per output labels, each side's points.
    sides: BTreeMap<Labels, [Option<Points>; 2]>,
    /// Event counts: per output labels, per time, the sum.
    events: BTreeMap<Labels, BTreeMap<i64, f64>>,
}

impl TextEval {
    pub fn new(eval: Eval, shift: i64) -> Self {
        TextEval {
            eval,
            shift,
            sides: BTreeMap::new(),
            events: BTreeMap::new(),
        }
    }

    /// Feeds one series of metric `name` (labels with `__name__`; samples in time order, no
    /// stale markers); output series complete now go to `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn feed(
        &mut self,
        name: &str,
        labels: &Labels,
        ts: &[i64],
        vals: &[f64],
        grid: &Grid,
        bk: &mut Buckets,
        out: &mut Vec<(Labels, Points)>,
    ) {
        let mut plain = labels.clone();
        plain.remove("__name__");
        match &self.eval {
            Eval::Over(f, m) if m == name => {
                let p = over_points(*f, vals, grid, bk.get(ts, grid, self.shift));
                if !p.is_empty() {
                    out.push((plain, p));
                }
            }
            Eval::OverWhere(f, m, sel)
                if m == name
                    && sel
                        .iter()
                        .all(|(l, v)| labels.get(l).is_some_and(|x| x == v)) =>
            {
                let p = over_points(*f, vals, grid, bk.get(ts, grid, self.shift));
                if !p.is_empty() {
                    out.push((plain, p));
                }
            }
            Eval::Sum(fa, a, fb, b) => {
                for (side, (f, m)) in [(fa, a), (fb, b)].into_iter().enumerate() {
                    if m == name {
                        let p = over_points(*f, vals, grid, bk.get(ts, grid, self.shift));
                        let slot = &mut self.sides.entry(plain.clone()).or_default()[side];
                        // PromQL refuses duplicate label sets; the first series is kept.
                        if slot.is_none() {
                            *slot = Some(p);
                        }
                    }
                }
            }
            Eval::CounterDelta(m) if m == name => {
                let p =
                    previous_points(
                        ts,
                        vals,
                        grid,
                        bk.get(ts, grid, 0),
                        |prev, bucket| match prev {
                            Some(b) => Some((bucket[bucket.len() - 1] - b).max(0.0)),
                            None => {
                                let hi = bucket.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                                let lo = bucket.iter().copied().fold(f64::INFINITY, f64::min);
                                Some(hi - lo)
                            }
                        },
                    );
                if !p.is_empty() {
                    out.push((plain, p));
                }
            }
            Eval::EventCount(m, code) if m == name => {
                plain.remove(code.as_str());
                let p = previous_points(ts, vals, grid, bk.get(ts, grid, 0), |prev, bucket| {
                    let last = bucket[bucket.len() - 1];
                    Some(match prev {
                        Some(b) => (last - b).max(0.0),
                        None => last,
                    })
                });
                let acc = self.events.entry(plain).or_default();
                for (t, v) in p {
                    *acc.entry(t).or_insert(0.0) += v;
                }
            }
            Eval::ValueChanges(m) if m == name => {
                let p = changes_points(ts, vals, grid);
                if !p.is_empty() {
                    out.push((plain, p));
                }
            }
            _ => {}
        }
    }

    /// The output series that needed every series of the partition (sums, event counts).
    pub fn finish(&mut self, out: &mut Vec<(Labels, Points)>) {
        for (labels, [a, b]) in std::mem::take(&mut self.sides) {
            let (Some(a), Some(b)) = (a, b) else {
                continue;
            };
            let mut p = Vec::new();
            let (mut i, mut j) = (0, 0);
            while i < a.len() && j < b.len() {
                match a[i].0.cmp(&b[j].0) {
                    std::cmp::Ordering::Less => i += 1,
                    std::cmp::Ordering::Greater => j += 1,
                    std::cmp::Ordering::Equal => {
                        p.push((a[i].0, a[i].1 + b[j].1));
                        i += 1;
                        j += 1;
                    }
                }
            }
            if !p.is_empty() {
                out.push((labels, p));
            }
        }
        for (labels, acc) in std::mem::take(&mut self.events) {
            if !acc.is_empty() {
                out.push((labels, acc.into_iter().collect()));
            }
        }
    }
}

/// A series' [`buckets`] for the last shift asked, shared by the templates that read the
/// series (a metric's mean and maximum, say).
#[derive(Default)]
pub struct Buckets {
    shift: Option<i64>,
    b: Vec<(i64, usize, usize)>,
}

impl Buckets {
    /// Forgets the series (call before the next one).
    pub fn clear(&mut self) {
        self.shift = None;
    }

    fn get(&mut self, ts: &[i64], grid: &Grid, shift: i64) -> &[(i64, usize, usize)] {
        if self.shift != Some(shift) {
            self.b = buckets(ts, grid, shift);
            self.shift = Some(shift);
        }
        &self.b
    }
}

/// Index of the evaluation whose window `(t − step, t]` holds time `x` (may be out of range).
fn bucket(x: i64, grid: &Grid, shift: i64) -> i64 {
    (x - grid.first - shift + grid.step - 1).div_euclid(grid.step)
}

/// Each non-empty bucket's samples: (k, index range).
fn buckets(ts: &[i64], grid: &Grid, shift: i64) -> Vec<(i64, usize, usize)> {
    let mut out = Vec::with_capacity(ts.len().min(grid.n.max(0) as usize));
    let mut i = 0;
    while i < ts.len() {
        let k = bucket(ts[i], grid, shift);
        let mut j = i + 1;
        while j < ts.len() && bucket(ts[j], grid, shift) == k {
            j += 1;
        }
        if (0..grid.n).contains(&k) {
            out.push((k, i, j));
        }
        i = j;
    }
    out
}

fn time(k: i64, grid: &Grid) -> i64 {
    grid.first + k * grid.step
}

/// `f_over_time(m[{R}])` at every evaluation with samples in its window.
fn over_points(f: Func, vals: &[f64], grid: &Grid, bk: &[(i64, usize, usize)]) -> Points {
    bk.iter()
        .map(|&(k, i, j)| {
            let w = &vals[i..j];
            let v = match f {
                Func::Count => w.len() as f64,
                Func::Last => w[w.len() - 1],
                Func::Max => w
                    .iter()
                    .copied()
                    .reduce(|m, x| if x > m || m.is_nan() { x } else { m })
                    .unwrap_or(f64::NAN),
                Func::Min => w
                    .iter()
                    .copied()
                    .reduce(|m, x| if x < m || m.is_nan() { x } else { m })
                    .unwrap_or(f64::NAN),
                Func::Avg => {
                    // Kahan-compensated sum, then the mean (Prometheus 3's avg_over_time
                    // without overflow).
                    let (mut sum, mut c) = (0.0f64, 0.0f64);
                    for &x in w {
                        let t = sum + x;
                        if sum.abs() >= x.abs() {
                            c += (sum - t) + x;
                        } else {
                            c += (x - t) + sum;
                        }
                        sum = t;
                    }
                    (sum + c) / w.len() as f64
                }
            };
            (time(k, grid), v)
        })
        .collect()
}

/// For every evaluation with samples in `(t − step, t]`: `f(previous, window)` where
/// `previous` is the last sample in `[t − step − L, t − step]`, if any.
fn previous_points(
    ts: &[i64],
    vals: &[f64],
    grid: &Grid,
    bk: &[(i64, usize, usize)],
    f: impl Fn(Option<f64>, &[f64]) -> Option<f64>,
) -> Points {
    let mut out = Vec::new();
    for &(k, i, j) in bk {
        let start = time(k, grid) - grid.step;
        let prev = (i > 0 && ts[i - 1] >= start - grid.lookback).then(|| vals[i - 1]);
        if let Some(v) = f(prev, &vals[i..j]) {
            out.push((time(k, grid), v));
        }
    }
    out
}

/// [`value_changes`]: with a sample in `[t − step − L, t − step]`, the changes between
/// consecutive samples whose later one is in `(t − step, t]` (0 when none is); without, the
/// changes inside the window, when it has samples.
fn changes_points(ts: &[i64], vals: &[f64], grid: &Grid) -> Points {
    let differs = |a: f64, b: f64| a != b && !(a.is_nan() && b.is_nan());
    let mut out = Vec::new();
    let mut i = 0usize;
    for k in 0..grid.n {
        let t = time(k, grid);
        let start = t - grid.step;
        // `i`: the first sample after `start`.
        while i < ts.len() && ts[i] <= start {
            i += 1;
        }
        if i == ts.len() && ts.last().is_none_or(|&l| l < start - grid.lookback) {
            // Past the last sample and its lookback: no further points.
            break;
        }
        let mut j = i;
        while j < ts.len() && ts[j] <= t {
            j += 1;
        }
        let prev = i > 0 && ts[i - 1] >= start - grid.lookback;
        if prev {
            let n = (i..j).filter(|&x| differs(vals[x], vals[x - 1])).count();
            out.push((t, n as f64));
        } else if j > i {
            let n = (i + 1..j)
                .filter(|&x| differs(vals[x], vals[x - 1]))
                .count();
            out.push((t, n as f64));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Grid {
        Grid {
            first: 60_000,
            step: 30_000,
            n: 6,
            lookback: 60_000,
        }
    }

    #[test]
    fn windows_are_half_open_like_history_rows() {
        // Samples at 30 s and 60 s belong to the evaluation at 60 s; 61 s to 90 s.
        let ts = [30_000, 60_000, 61_000, 150_000];
        let vals = [1.0, 3.0, 5.0, 7.0];
        let g = Grid {
            first: 30_000,
            ..grid()
        };
        let p = over_points(Func::Max, &vals, &g, &buckets(&ts, &g, 0));
        assert_eq!(
            p,
            vec![(30_000, 1.0), (60_000, 3.0), (90_000, 5.0), (150_000, 7.0)]
        );
        let p = over_points(
            Func::Avg,
            &[1.0, 2.0],
            &g,
            &buckets(&[31_000, 60_000], &g, 0),
        );
        assert_eq!(p, vec![(60_000, 1.5)]);
        let p = over_points(
            Func::Count,
            &[1.0, 2.0],
            &g,
            &buckets(&[31_000, 60_000], &g, 0),
        );
        assert_eq!(p, vec![(60_000, 2.0)]);
        // Shifted: evaluated 10 s later, reported at the grid's time.
        let p = over_points(
            Func::Last,
            &[1.0, 2.0],
            &g,
            &buckets(&[65_000, 70_000], &g, 10_000),
        );
        assert_eq!(p, vec![(60_000, 2.0)]);
    }

    #[test]
    fn counter_deltas_clamp_resets_and_start_with_the_rise() {
        let ts = [61_000, 80_000, 95_000, 125_000, 300_000];
        let vals = [10.0, 12.0, 20.0, 5.0, 9.0];
        let mut e = TextEval::new(Eval::CounterDelta("c".into()), 0);
        let mut out = Vec::new();
        let labels: Labels = [("__name__".to_string(), "c".to_string())].into();
        e.feed(
            "c",
            &labels,
            &ts,
            &vals,
            &grid(),
            &mut Buckets::default(),
            &mut out,
        );
        // 90 s: first interval, rise 12 − 10; 120 s: 20 − 12; 150 s: reset → 0; 300 s lies
        // past the last evaluation (210 s).
        assert_eq!(
            out[0].1,
            vec![(90_000, 2.0), (120_000, 8.0), (150_000, 0.0)]
        );
        assert!(out[0].0.is_empty());
    }

    #[test]
    fn event_counts_sum_codes_and_value_changes_count_pairs() {
        let mut e = TextEval::new(Eval::EventCount("x".into(), "xid".into()), 0);
        let mut out = Vec::new();
        let l = |code: &str| -> Labels {
            [
                ("__name__".to_string(), "x".to_string()),
                ("gpu".to_string(), "0".to_string()),
                ("xid".to_string(), code.to_string()),
            ]
            .into()
        };
        e.feed(
            "x",
            &l("31"),
            &[70_000, 100_000],
            &[1.0, 3.0],
            &grid(),
            &mut Buckets::default(),
            &mut out,
        );
        e.feed(
            "x",
            &l("79"),
            &[100_000],
            &[1.0],
            &grid(),
            &mut Buckets::default(),
            &mut out,
        );
        assert!(out.is_empty());
        e.finish(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.get("gpu").map(String::as_str), Some("0"));
        assert!(!out[0].0.contains_key("xid"));
        assert_eq!(out[0].1, vec![(90_000, 1.0), (120_000, 3.0)]);

        // Changes: 90 s: one sample, nothing before → 0; 120 s: 70→100 and 100→110 differ;
        // 150 s, 180 s: no sample but one in the lookback → 0; 210 s: nothing in the lookback
        // (110 s < 120 s), one sample inside → 0.
        let p = changes_points(
            &[70_000, 100_000, 110_000, 200_000],
            &[1.0, 2.0, 3.0, 3.0],
            &grid(),
        );
        assert_eq!(
            p,
            vec![
                (90_000, 0.0),
                (120_000, 2.0),
                (150_000, 0.0),
                (180_000, 0.0),
                (210_000, 0.0)
            ]
        );
    }

    #[test]
    fn sums_match_series_on_labels_without_the_name() {
        let mut e = TextEval::new(Eval::Sum(Func::Avg, "u".into(), Func::Avg, "f".into()), 0);
        let mut out = Vec::new();
        let l = |n: &str| -> Labels {
            [
                ("__name__".to_string(), n.to_string()),
                ("gpu".to_string(), "0".to_string()),
            ]
            .into()
        };
        e.feed(
            "u",
            &l("u"),
            &[61_000, 91_000],
            &[1.0, 2.0],
            &grid(),
            &mut Buckets::default(),
            &mut out,
        );
        e.feed(
            "f",
            &l("f"),
            &[91_000],
            &[10.0],
            &grid(),
            &mut Buckets::default(),
            &mut out,
        );
        e.finish(&mut out);
        let want: Labels = [("gpu".to_string(), "0".to_string())].into();
        assert_eq!(out, vec![(want, vec![(120_000, 12.0)])]);
    }

    #[test]
    fn label_matchers_select_the_series_they_name() {
        let t = "avg_over_time(p{pipe=\"fp64\",x=\"1\"}[{R}])";
        let sel = vec![
            ("pipe".to_string(), "fp64".to_string()),
            ("x".to_string(), "1".to_string()),
        ];
        assert_eq!(
            Eval::parse(t),
            Some(Eval::OverWhere(Func::Avg, "p".into(), sel))
        );
        assert_eq!(Eval::parse(t).expect("parses").metrics(), vec!["p"]);
        // Only equality on plain values, and not inside sums.
        for bad in [
            "avg_over_time(p{pipe=~\"fp.*\"}[{R}])",
            "avg_over_time(p{pipe!=\"fp64\"}[{R}])",
            "avg_over_time(p{pipe=fp64}[{R}])",
            "avg_over_time(p{}[{R}])",
            "avg_over_time(p{pipe=\"a\"}[{R}]) + avg_over_time(q[{R}])",
        ] {
            assert_eq!(Eval::parse(bad), None, "{bad}");
        }
        let mut e = TextEval::new(
            Eval::parse("max_over_time(p{pipe=\"fp64\"}[{R}])").expect("parses"),
            0,
        );
        let mut out = Vec::new();
        for (pipe, v) in [("fp32", 5.0), ("fp64", 2.0)] {
            let labels: Labels = [
                ("__name__".to_string(), "p".to_string()),
                ("gpu".to_string(), "0".to_string()),
                ("pipe".to_string(), pipe.to_string()),
            ]
            .into();
            let mut bk = Buckets::default();
            e.feed("p", &labels, &[61_000], &[v], &grid(), &mut bk, &mut out);
        }
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0.get("pipe").map(String::as_str), Some("fp64"));
        assert_eq!(out[0].1, vec![(90_000, 2.0)]);
    }
}
