//! Property tests of the exporter's file parsers (issue 17): the scenario TOML
//! (`sim::scenario`), tessera's MIG plan and schedule YAML (`mig_plan`) and nvidia-mig-parted
//! YAML (`mig_config`), and the YAML depth scan they share (`input_limits`).
//!
//! Inputs: arbitrary bytes, soups of each format's tokens, fixtures from `fixtures/` with random
//! edits, (for scenarios) structurally valid files with arbitrary values and (for the depth
//! scan) YAML documents of known shape in a random mix of styles. Invariants, for every input:
//!
//! - no panic (a panic fails the case), here and, for accepted scenarios, in the simulator
//!   that runs them for a few samples;
//! - allocation bounded: the peak of live heap bytes of the parsing thread, counted by the
//!   global allocator below, stays within `ALLOC_PER_BYTE` × input length + `ALLOC_BASE`;
//! - an error names the input (the source name given to the parser) and where: a line and
//!   column, or the item path (`nodes[0] (n).gpus`, `configs.day[0].instances`);
//! - the depth scan is an upper bound: never below the depth of the value serde_yaml_ng builds.
//!
//! Cases per property: `PROPTEST_CASES` (default 1,000; see docs/testing.md to run longer).

use std::cell::Cell;
use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

use tessera_core::device::GpuBackend;
use tessera_core::input_limits::{self, MAX_YAML_DEPTH};
use tessera_core::mig::parted::{PartedError, PartedFile};
use tessera_core::mig::plan::{MigSchedule, TesseraPlan, TesseraPlanError};
use tessera_core::sim::truth::GroundTruth;
use tessera_core::sim::{Scenario, ScenarioError, SimBackend, SimClock};

#[path = "support/counting.rs"]
mod counting;

// ---- Allocation counting: live bytes of the current thread, and their peak.

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting {
    note,
    realloc_holds_both: false,
};

/// The stated bound: heap bytes a parse may hold at its peak, per input byte and in all.
/// serde_yaml_ng holds every event of a document (measured worst ~100 bytes per input byte, a
/// flow sequence of one-digit numbers); toml's document tree is smaller.
const ALLOC_PER_BYTE: usize = 128;
const ALLOC_BASE: usize = 256 << 10;

/// Run `f`, returning its result and the peak of heap bytes it held beyond what was live
/// before.
fn peak_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - start).max(0) as usize)
}

fn within_bound(what: &str, len: usize, peak: usize) -> Result<(), TestCaseError> {
    let bound = ALLOC_PER_BYTE * len + ALLOC_BASE;
    prop_assert!(
        peak <= bound,
        "{what}: {peak} bytes held for {len} bytes of input (bound {bound})"
    );
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    }
}

// ---- Inputs.

fn fixture(path: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Small scenarios of `fixtures/scenarios` (the large ones cost time, not coverage).
static SCENARIOS: LazyLock<Vec<String>> = LazyLock::new(|| {
    [
        "demo",
        "advisor-faults",
        "alerting",
        "mig-node",
        "mig-models",
        "mig-plan",
        "offpeak",
        "report-demo",
    ]
    .iter()
    .map(|n| fixture(&format!("fixtures/scenarios/{n}.toml")))
    .collect()
});

const PLAN: &str = r#"# tessera MIG plan (tessera-mig-plan v1); see docs/mig.md
version: v1
kind: tessera-mig-plan
comment: "planned by a test"
configs:
  day:
    - node: n1
      gpu: 0
      uuid: GPU-5f0c
      model: H100-80GB
      mig-enabled: true
      instances:
        - profile: 3g.40gb
          profile-id: 9
          placement: { start: 0, size: 4 }
          workloads: [team-a/chat]
        - profile: 1g.10gb
          profile-id: 19
          placement:
            start: 4
            size: 1
    - node: n1
      gpu: 1
      model: A100-40GB
      mig-enabled: false
  night:
    - gpu: 0
      model: H100-80GB
      mig-enabled: true
      instances:
        - {profile: 7g.80gb, profile-id: 0, placement: {start: 0, size: 8}}
"#;

const SCHEDULE: &str = r#"version: v1
kind: tessera-mig-schedule
timezone: Europe/Berlin
plan: plan.yaml
switches:
  - at: "07:00"
    days: [mon, tue, wed, thu, fri]
    config: day
  - at: "22:00"
    config: night
"#;

static PARTED: LazyLock<Vec<String>> = LazyLock::new(|| {
    vec![
        fixture("fixtures/mig-configs/alerting.yaml"),
        r#"version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  balanced:
    - device-filter: ["0x233010DE", "0x20B210DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  custom:
    - devices: [0, 1]
      mig-enabled: false
    - device-filter: "0x20B010DE"
      devices: [2]
      mig-enabled: true
      mig-devices: { "3g.20gb": 1, "1g.5gb+me": 1 }
"#
        .to_string(),
    ]
});

/// An edit of a text: at a position (a fraction of its length), delete some characters, insert
/// a token, or duplicate or drop a line.
#[derive(Debug, Clone)]
enum Edit {
    Delete(f64, usize),
    Insert(f64, &'static str),
    Replace(f64, usize, &'static str),
    DuplicateLine(f64),
    DropLine(f64),
}

fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut s = text.to_string();
    for e in edits {
        let at = |f: f64, s: &str| floor_boundary(s, (f * s.len() as f64) as usize);
        match e {
            Edit::Delete(f, n) => {
                let a = at(*f, &s);
                let b = floor_boundary(&s, a + n);
                s.replace_range(a..b, "");
            }
            Edit::Insert(f, t) => {
                let a = at(*f, &s);
                s.insert_str(a, t);
            }
            Edit::Replace(f, n, t) => {
                let a = at(*f, &s);
                let b = floor_boundary(&s, a + n);
                s.replace_range(a..b, t);
            }
            Edit::DuplicateLine(f) | Edit::DropLine(f) => {
                let mut lines: Vec<&str> = s.split_inclusive('\n').collect();
                if lines.is_empty() {
                    continue;
                }
                let i = ((f * lines.len() as f64) as usize).min(lines.len() - 1);
                let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                if matches!(e, Edit::DuplicateLine(_)) {
                    out.insert(i, lines[i].to_string());
                } else {
                    lines.remove(i);
                    out = lines.iter().map(|l| l.to_string()).collect();
                }
                s = out.concat();
            }
        }
    }
    s
}

fn edits(tokens: &'static [&'static str]) -> impl Strategy<Value = Vec<Edit>> {
    let pos = 0.0..1.0f64;
    let tok = prop::sample::select(tokens);
    prop::collection::vec(
        prop_oneof![
            (pos.clone(), 1..20usize).prop_map(|(f, n)| Edit::Delete(f, n)),
            (pos.clone(), tok.clone()).prop_map(|(f, t)| Edit::Insert(f, t)),
            (pos.clone(), 1..8usize, tok).prop_map(|(f, n, t)| Edit::Replace(f, n, t)),
            pos.clone().prop_map(Edit::DuplicateLine),
            pos.prop_map(Edit::DropLine),
        ],
        1..8,
    )
}

fn soup(tokens: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(tokens), 0..max).prop_map(|v| v.concat())
}

fn bytes() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 0..2000)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

const YAML_TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ", ",
    ",",
    ": ",
    ":",
    "- ",
    "-",
    "? ",
    "?",
    "#",
    " # c",
    "'",
    "\"",
    "''",
    "\\\"",
    "\\",
    "|",
    "|-",
    ">",
    ">+2",
    "!",
    "!!str ",
    "!<x[y]> ",
    "&a ",
    "*a",
    "\n",
    "\n  ",
    "\n    ",
    "\n- ",
    " ",
    "  ",
    "\t",
    "a",
    "1",
    "-1",
    "4294967296",
    "1e400",
    ".nan",
    "~",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "\r\n",
    "\u{85}",
    "\u{2028}",
    "\u{feff}",
    "é",
    "version",
    "v1",
    "kind",
    "tessera-mig-plan",
    "tessera-mig-schedule",
    "configs",
    "day",
    "gpu",
    "model",
    "H100-80GB",
    "mig-enabled",
    "true",
    "instances",
    "profile",
    "3g.40gb",
    "profile-id",
    "placement",
    "start",
    "size",
    "workloads",
    "timezone",
    "UTC",
    "plan",
    "switches",
    "at",
    "\"07:00\"",
    "days",
    "mon",
    "config",
    "mig-configs",
    "devices",
    "all",
    "device-filter",
    "\"0x233010DE\"",
    "mig-devices",
    "\"1g.10gb\"",
    "7",
    "<<",
];

const TOML_TOKENS: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    " = ",
    ",",
    ".",
    "\"",
    "'",
    "\"\"\"",
    "'''",
    "#",
    "\n",
    " ",
    "\t",
    "\\",
    "\\u0000",
    "1",
    "-1",
    "0",
    "4294967296",
    "18446744073709551616",
    "1e400",
    "1e300",
    "nan",
    "-inf",
    "+inf",
    "0.5",
    "-0.0",
    "true",
    "2026-11-02T00:00:00Z",
    "2026-11-02T25:00:00Z",
    "1979-05-27",
    "name",
    "seed",
    "start",
    "utc_offset_hours",
    "nodes",
    "[[nodes]]",
    "gpus",
    "model",
    "\"H100-80GB\"",
    "\"A30-24GB\"",
    "count",
    "mig",
    "instances",
    "profile",
    "\"1g.10gb\"",
    "workloads",
    "[[workloads]]",
    "kind",
    "\"idle\"",
    "\"training\"",
    "\"batch\"",
    "\"notebook\"",
    "\"inference\"",
    "node",
    "\"n\"",
    "gpu",
    "mig_start",
    "memory_gib",
    "peak",
    "base",
    "efficiency",
    "noise",
    "from",
    "until",
    "start_hour",
    "duration_hours",
    "days",
    "[\"mon\"]",
    "every_hours",
    "duration_minutes",
    "burst_probability",
    "faults",
    "[[faults]]",
    "\"xid\"",
    "\"gpu_lost\"",
    "\"ecc\"",
    "\"row_remap\"",
    "\"nvml_error\"",
    "\"driver_error\"",
    "at",
    "xid",
    "field",
    "\"power\"",
    "error",
    "failure",
    "uncorrected",
];

// ---- Invariants.

/// Where an error points: a line (and column), or the whole file (a second document).
fn has_position(message: &str) -> bool {
    message.contains("line ") || message.ends_with("(the whole file)")
}

fn check_scenario(text: &str) -> Result<Option<Scenario>, TestCaseError> {
    let (res, peak) = peak_alloc(|| Scenario::from_toml(text, "input.toml"));
    within_bound("scenario", text.len(), peak)?;
    match res {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            let m = e.to_string();
            prop_assert!(m.starts_with("scenario input.toml: "), "{m}");
            prop_assert!(
                m.len() <= 3 * input_limits::MAX_MESSAGE_CHARS + 500,
                "{} bytes",
                m.len()
            );
            match &e {
                ScenarioError::Parse { message, .. } => {
                    prop_assert!(has_position(message), "no position: {m}");
                }
                ScenarioError::Invalid { item, .. } => {
                    prop_assert!(!item.is_empty(), "no item: {m}");
                }
                ScenarioError::Read { .. } => prop_assert!(false, "read error from text: {m}"),
            }
            Ok(None)
        }
    }
}

/// An accepted scenario runs: every node's backend gives samples, and the ground truth of an
/// hour computes.
fn run_scenario(s: &Scenario, offset_s: i64) -> Result<(), TestCaseError> {
    let start = s.start.timestamp_millis() + offset_s * 1000;
    for node in &s.nodes {
        let mut b = SimBackend::new(
            s,
            Some(&node.name),
            SimClock::Stepped {
                next_ms: start,
                step_ms: 3_600_000,
            },
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        b.inventory()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for _ in 0..3 {
            let _ = b.sample();
        }
    }
    let from = s.start + chrono::Duration::seconds(offset_s);
    GroundTruth::compute(s, from, from + chrono::Duration::hours(1));
    Ok(())
}

fn check_yaml_error(
    m: &str,
    source: &str,
    kind: &str,
    positioned: bool,
) -> Result<(), TestCaseError> {
    prop_assert!(m.contains(source), "{kind}: no source in {m}");
    prop_assert!(
        m.len() <= 2 * input_limits::MAX_MESSAGE_CHARS + 500,
        "{kind}: {} bytes",
        m.len()
    );
    prop_assert!(positioned, "{kind}: no position in {m}");
    Ok(())
}

fn plan_positioned(e: &TesseraPlanError) -> bool {
    match e {
        TesseraPlanError::Parse { message, .. } => has_position(message),
        TesseraPlanError::Invalid { item, .. } => !item.is_empty(),
        TesseraPlanError::Limit { limit, .. } => {
            matches!(limit, input_limits::LimitError::TooDeep { .. })
        }
        _ => false,
    }
}

fn check_plan_and_schedule(text: &str) -> Result<(), TestCaseError> {
    let (res, peak) = peak_alloc(|| TesseraPlan::parse(text, "input.yaml"));
    within_bound("plan", text.len(), peak)?;
    match res {
        Ok(p) => {
            // What parses writes back and reads back the same.
            let again = TesseraPlan::parse(&p.to_yaml(), "again.yaml")
                .map_err(|e| TestCaseError::fail(format!("round trip: {e}")))?;
            prop_assert_eq!(p, again);
        }
        Err(e) => check_yaml_error(&e.to_string(), "input.yaml", "plan", plan_positioned(&e))?,
    }
    let (res, peak) = peak_alloc(|| MigSchedule::parse(text, "input.yaml"));
    within_bound("schedule", text.len(), peak)?;
    match res {
        Ok(s) => {
            let now = chrono::DateTime::parse_from_rfc3339("2026-03-29T01:30:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc);
            let _ = s.active_at(now);
        }
        Err(e) => check_yaml_error(
            &e.to_string(),
            "input.yaml",
            "schedule",
            plan_positioned(&e),
        )?,
    }
    Ok(())
}

fn check_parted(text: &str) -> Result<(), TestCaseError> {
    let (res, peak) = peak_alloc(|| PartedFile::parse(text, "input.yaml"));
    within_bound("mig-parted", text.len(), peak)?;
    match res {
        Ok(f) => {
            // Every config checks against a node of every model without panicking or blowing up.
            let inv = inventory();
            for label in f.configs.keys() {
                let plan = f
                    .select(label)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (_, peak) = peak_alloc(|| {
                    let _ = plan.validate(&inv);
                    plan.drift(&inv)
                });
                within_bound("mig-parted check", text.len(), peak)?;
            }
        }
        Err(e) => {
            let positioned = match &e {
                PartedError::Parse { message, .. } => has_position(message),
                PartedError::Invalid { item, .. } => !item.is_empty(),
                PartedError::Limit { limit, .. } => {
                    matches!(limit, input_limits::LimitError::TooDeep { .. })
                }
                _ => false,
            };
            check_yaml_error(&e.to_string(), "input.yaml", "mig-parted", positioned)?;
        }
    }
    Ok(())
}

fn inventory() -> tessera_core::model::Inventory {
    use tessera_core::model::{GpuInfo, Inventory, MigMode};
    Inventory {
        node: "n".into(),
        driver_version: None,
        cuda_version: None,
        gpus: tessera_core::mig::models()
            .iter()
            .enumerate()
            .map(|(i, m)| GpuInfo {
                index: i as u32,
                minor_number: None,
                uuid: format!("GPU-{i}"),
                name: m.nvml_name.into(),
                pci_bus_id: String::new(),
                memory_total_bytes: Some(m.memory_total_bytes),
                power_limit_watts: None,
                mig_mode: Some(MigMode {
                    current: false,
                    pending: false,
                }),
                mig_instances: Vec::new(),
            })
            .collect(),
    }
}

/// Depth of the collections of a value (keys included; tags are not collections).
fn value_depth(v: &serde_yaml_ng::Value) -> usize {
    use serde_yaml_ng::Value;
    match v {
        Value::Sequence(s) => 1 + s.iter().map(value_depth).max().unwrap_or(0),
        Value::Mapping(m) => {
            1 + m
                .iter()
                .map(|(k, v)| value_depth(k).max(value_depth(v)))
                .max()
                .unwrap_or(0)
        }
        Value::Tagged(t) => value_depth(&t.value),
        _ => 0,
    }
}

/// The depth scan never reports less than what libyaml builds (aliases aside).
fn check_depth_bound(text: &str) -> Result<(), TestCaseError> {
    let scanned = input_limits::yaml_depth(text);
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(v) if !text.contains('*') => {
            let built = value_depth(&v);
            prop_assert!(scanned >= built, "scanned {scanned} < built {built}");
        }
        Err(e) if e.to_string().contains("recursion limit exceeded") => {
            prop_assert!(
                scanned > MAX_YAML_DEPTH,
                "scanned {scanned}, serde_yaml_ng: {e}"
            );
        }
        _ => {}
    }
    Ok(())
}

/// A YAML document of known shape, rendered in a random mix of styles: block and flow
/// collections, compact (`- - a`) and indentless (`k:\n- a`) sequences, single-pair mappings in
/// flow sequences, collection keys, quoted and block scalars holding brackets and comment marks.
#[derive(Debug, Clone)]
enum Doc {
    Word(u8),
    Quoted(String),
    Block(Vec<String>),
    Seq(Vec<Doc>, Style),
    Map(Vec<(Doc, Doc)>, Style),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Style {
    Block,
    /// A block sequence as a mapping value at the mapping's own indentation.
    Indentless,
    Flow,
    /// A one-entry mapping in a flow sequence written as `a: b`.
    Pair,
}

fn doc() -> impl Strategy<Value = Doc> {
    let text = "[\\[\\]{}#:,\"'| a-z&*!%@?-]{0,12}";
    let leaf = prop_oneof![
        3 => any::<u8>().prop_map(Doc::Word),
        1 => text.prop_map(Doc::Quoted),
        1 => prop::collection::vec(text, 1..3).prop_map(Doc::Block),
    ];
    let style = prop::sample::select(vec![
        Style::Block,
        Style::Indentless,
        Style::Flow,
        Style::Pair,
    ]);
    leaf.prop_recursive(8, 64, 4, move |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), style.clone())
                .prop_map(|(v, s)| Doc::Seq(v, s)),
            (
                prop::collection::vec((inner.clone(), inner), 0..4),
                style.clone()
            )
                .prop_map(|(v, s)| Doc::Map(v, s)),
        ]
    })
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The document on one line (flow style throughout).
fn flow(d: &Doc) -> String {
    match d {
        Doc::Word(n) if n % 5 == 0 => format!("!t w{n}"),
        Doc::Word(n) if n % 5 == 1 => format!("&a{n} w{n}"),
        Doc::Word(n) => format!("w{n}"),
        Doc::Quoted(s) => quote(s),
        Doc::Block(lines) => quote(&lines.join(" ")),
        Doc::Seq(v, _) => {
            let items: Vec<String> = v
                .iter()
                .map(|i| match i {
                    Doc::Map(m, Style::Pair) if m.len() == 1 => {
                        format!("{}: {}", flow(&m[0].0), flow(&m[0].1))
                    }
                    _ => flow(i),
                })
                .collect();
            format!("[{}]", items.join(", "))
        }
        Doc::Map(m, _) => {
            let entries: Vec<String> = m
                .iter()
                .enumerate()
                .map(|(i, (k, v))| format!("{}: {}", key(k, i), flow(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// A mapping key: unique words, or a collection written in flow style (keys are one line)
/// made unique by its position.
fn key(k: &Doc, i: usize) -> String {
    match k {
        Doc::Seq(..) | Doc::Map(..) => format!("[k{i}, {}]", flow(k)),
        _ => format!("k{i}"),
    }
}

fn is_block(d: &Doc) -> bool {
    matches!(d, Doc::Seq(v, s) if !v.is_empty() && *s != Style::Flow && *s != Style::Pair)
        || matches!(d, Doc::Map(m, s) if !m.is_empty() && *s != Style::Flow && *s != Style::Pair)
}

/// `d` as the value after `key:` of a block mapping whose keys are at column `ind`.
fn block_value(d: &Doc, ind: usize) -> String {
    match d {
        Doc::Block(lines) => {
            let pad = " ".repeat(ind + 2);
            let body: String = lines
                .iter()
                .map(|l| format!("{pad}{}\n", l.trim_start()))
                .collect();
            format!(" |\n{body}")
        }
        Doc::Seq(v, Style::Indentless) if !v.is_empty() => format!("\n{}", block_items(v, ind)),
        _ if is_block(d) => format!("\n{}{}", " ".repeat(ind + 2), inline(d, ind + 2)),
        Doc::Word(n) if n % 3 == 0 => format!(" {} # ] [{{ '\n", flow(d)),
        _ => format!(" {}\n", flow(d)),
    }
}

/// The items of a block sequence at column `ind`, each on its own line.
fn block_items(v: &[Doc], ind: usize) -> String {
    v.iter()
        .map(|i| format!("{}- {}", " ".repeat(ind), inline(i, ind + 2)))
        .collect()
}

/// `d` starting on the current line at column `ind` (after `- ` or at a line's start).
fn inline(d: &Doc, ind: usize) -> String {
    match d {
        Doc::Seq(v, _) if is_block(d) => {
            let rest = block_items(&v[1..], ind);
            format!("- {}{rest}", inline(&v[0], ind + 2))
        }
        Doc::Map(m, _) if is_block(d) => m
            .iter()
            .enumerate()
            .map(|(i, (k, v))| {
                let pad = if i == 0 {
                    String::new()
                } else {
                    " ".repeat(ind)
                };
                format!("{pad}{}:{}", key(k, i), block_value(v, ind))
            })
            .collect(),
        Doc::Block(lines) => {
            let pad = " ".repeat(ind + 1);
            let body: String = lines
                .iter()
                .map(|l| format!("{pad}{}\n", l.trim_start()))
                .collect();
            format!("|\n{body}")
        }
        _ => format!("{}\n", flow(d)),
    }
}

// ---- Properties.

proptest! {
    #![proptest_config(config())]

    #[test]
    fn scenario_arbitrary_bytes(text in bytes()) {
        check_scenario(&text)?;
    }

    #[test]
    fn scenario_token_soup(text in soup(TOML_TOKENS, 300)) {
        if let Some(s) = check_scenario(&text)? {
            run_scenario(&s, 0)?;
        }
    }

    #[test]
    fn scenario_fixture_edits(
        i in 0..8usize,
        e in edits(TOML_TOKENS),
        offset in 0..(14 * 86_400i64),
    ) {
        let text = apply(&SCENARIOS[i % SCENARIOS.len()], &e);
        if let Some(s) = check_scenario(&text)? {
            run_scenario(&s, offset)?;
        }
    }

    #[test]
    fn scenario_arbitrary_values(text in scenario_values(), offset in -86_400..(8 * 86_400i64)) {
        if let Some(s) = check_scenario(&text)? {
            run_scenario(&s, offset)?;
        }
    }

    #[test]
    fn yaml_arbitrary_bytes(text in bytes()) {
        check_plan_and_schedule(&text)?;
        check_parted(&text)?;
    }

    #[test]
    fn yaml_token_soup(text in soup(YAML_TOKENS, 200)) {
        check_plan_and_schedule(&text)?;
        check_parted(&text)?;
        check_depth_bound(&text)?;
    }

    #[test]
    fn yaml_depth_bounds_what_libyaml_builds(d in doc()) {
        let text = inline(&d, 0);
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let (scanned, built) = (input_limits::yaml_depth(&text), value_depth(&v));
        prop_assert!(scanned >= built, "scanned {} < built {}:\n{}", scanned, built, text);
        prop_assert!(scanned <= built + 1, "scanned {} for {}:\n{}", scanned, built, text);
    }

    #[test]
    fn yaml_fixture_edits(i in 0..4usize, e in edits(YAML_TOKENS)) {
        let base = match i {
            0 => PLAN.to_string(),
            1 => SCHEDULE.to_string(),
            n => PARTED[n - 2].clone(),
        };
        let text = apply(&base, &e);
        check_plan_and_schedule(&text)?;
        check_parted(&text)?;
        check_depth_bound(&text)?;
    }
}

/// A well-formed scenario (one or two nodes, a few workloads and faults) whose values are
/// arbitrary: counts, indices, ratios, durations (NaN and infinities included), times.
fn scenario_values() -> impl Strategy<Value = String> {
    let special = || {
        prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1e300,
            168.0,
            168.000001,
            24.0,
            23.999,
            1e-300,
            -1.0,
        ])
    };
    // Mostly in range, sometimes anything.
    let ratio = prop_oneof![6 => 0.0..=1.0f64, 1 => -1.0..2.0f64, 1 => special()];
    let float = prop_oneof![6 => 0.0..30.0f64, 1 => -2.0..200.0f64, 1 => special()];
    let time = (-72..72i64).prop_map(|h| {
        (chrono::DateTime::parse_from_rfc3339("2026-11-02T00:00:00Z").unwrap()
            + chrono::Duration::minutes(h * 37))
        .to_rfc3339()
    });
    let models = prop::sample::select(vec!["H100-80GB", "A100-40GB", "A30-24GB", "H200-141GB"]);
    let kinds = prop::sample::select(vec!["inference", "idle", "training", "notebook", "batch"]);
    let fault_kinds = prop::sample::select(vec![
        "xid",
        "ecc",
        "row_remap",
        "gpu_lost",
        "nvml_error",
        "not_supported",
        "driver_error",
    ]);
    let opt_float = prop::option::of(float.clone());
    let workload = (
        kinds,
        prop_oneof![6 => 0..2u32, 1 => 0..70u32],
        float.clone(),
        prop::option::of(ratio),
        opt_float.clone(),
        opt_float.clone(),
        opt_float.clone(),
        opt_float,
        prop::option::of(time.clone()),
        prop::option::of(time.clone()),
        prop::option::of(prop::collection::vec(
            prop::sample::select(vec!["mon", "tue", "sat", "sun", "xyz"]),
            0..4,
        )),
    );
    let fault = (
        fault_kinds,
        prop_oneof![6 => (0..2u32).prop_map(Some), 1 => prop::option::of(0..70u32)],
        prop::option::of(time.clone()),
        prop::option::of(time),
        prop::option::of(prop_oneof![6 => 1..10u64, 1 => 0..200_000u64]),
        prop::option::of(0..100u64),
    );
    (
        prop_oneof![6 => -12..=14i32, 1 => -100..100i32],
        prop::collection::vec((models, prop_oneof![6 => 1..5u32, 1 => 0..70u32]), 1..3),
        prop::collection::vec(workload, 0..4),
        prop::collection::vec(fault, 0..4),
    )
        .prop_map(|(offset, groups, workloads, faults)| {
            let f = |x: f64| {
                if x.is_nan() {
                    "nan".to_string()
                } else if x.is_infinite() {
                    if x > 0.0 { "inf" } else { "-inf" }.to_string()
                } else {
                    format!("{x:?}")
                }
            };
            let mut t = format!(
                "name = \"v\"\nstart = \"2026-11-02T00:00:00Z\"\nutc_offset_hours = {offset}\n[[nodes]]\nname = \"n\"\ngpus = [{}]\n",
                groups
                    .iter()
                    .map(|(m, c)| format!("{{ model = \"{m}\", count = {c} }}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for (i, (kind, gpu, mem, peak, start_hour, duration, every, minutes, from, until, days)) in
                workloads.into_iter().enumerate()
            {
                t += &format!(
                    "[[workloads]]\nname = \"w{i}\"\nkind = \"{kind}\"\nnode = \"n\"\ngpu = {gpu}\nmemory_gib = {}\n",
                    f(mem)
                );
                for (k, v) in [
                    ("peak", peak),
                    ("start_hour", start_hour),
                    ("duration_hours", duration),
                    ("every_hours", every),
                    ("duration_minutes", minutes),
                ] {
                    if let Some(v) = v {
                        t += &format!("{k} = {}\n", f(v));
                    }
                }
                for (k, v) in [("from", from), ("until", until)] {
                    if let Some(v) = v {
                        t += &format!("{k} = \"{v}\"\n");
                    }
                }
                if let Some(d) = days {
                    t += &format!("days = {d:?}\n");
                }
            }
            for (kind, gpu, at, until, count, xid) in faults {
                t += &format!("[[faults]]\nkind = \"{kind}\"\nnode = \"n\"\nfield = \"power\"\n");
                if let Some(g) = gpu {
                    t += &format!("gpu = {g}\n");
                }
                for (k, v) in [("at", at), ("until", until)] {
                    if let Some(v) = v {
                        t += &format!("{k} = \"{v}\"\n");
                    }
                }
                if let Some(c) = count {
                    t += &format!("count = {c}\n");
                }
                if let Some(x) = xid {
                    t += &format!("xid = {x}\n");
                }
            }
            t
        })
}

#[test]
fn the_fixtures_pass_every_invariant() {
    for s in SCENARIOS.iter() {
        let scenario = check_scenario(s).unwrap().expect("fixture valid");
        run_scenario(&scenario, 0).unwrap();
    }
    check_plan_and_schedule(PLAN).unwrap();
    TesseraPlan::parse(PLAN, "plan").unwrap();
    MigSchedule::parse(SCHEDULE, "schedule").unwrap();
    check_plan_and_schedule(SCHEDULE).unwrap();
    for p in PARTED.iter() {
        PartedFile::parse(p, "parted").unwrap();
        check_parted(p).unwrap();
    }
    for t in [PLAN, SCHEDULE, &PARTED[0], &PARTED[1]] {
        check_depth_bound(t).unwrap();
        assert!(input_limits::yaml_depth(t) <= 7, "{t}");
    }
}

#[test]
fn the_generators_reach_both_sides() {
    // Arbitrary values must still give valid scenarios often enough to run the simulator.
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut accepted = 0;
    for _ in 0..500 {
        let text = scenario_values().new_tree(&mut runner).unwrap().current();
        accepted += Scenario::from_toml(&text, "x").is_ok() as usize;
    }
    assert!((25..=400).contains(&accepted), "{accepted} of 500 accepted");
}
