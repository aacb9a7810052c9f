//! Property tests of the MIG apply journal reader (`apply::journal::parse`) and of its torn
//! tail repair (issue 17: property tests for every parser). Generated inputs: arbitrary bytes,
//! valid journals (records with arbitrary strings and real checkpoints), and valid journals cut
//! at any byte, with bytes flipped, inserted or deleted, lines duplicated, and a torn record
//! glued to the next one (what tessera before the torn-tail fix wrote).
//!
//! Invariants:
//! - no panic;
//! - peak heap while parsing ≤ [`HEAP_FACTOR`] × input bytes + [`HEAP_SLACK`] (measured by a
//!   counting global allocator, per thread);
//! - records ≤ input bytes / [`MIN_RECORD_BYTES`] (no structure beyond the records);
//! - an error names the file, a line that exists and is not blank, and a column;
//! - a valid journal cut anywhere reads as a prefix of its records (the torn last line skipped);
//!   a torn record glued to the next one reads as if it were not there;
//! - after `repair_tail` + `append`, every line is a whole record: the complete ones, then the
//!   new one.
//!
//! Cases: `PROPTEST_CASES` = N (default 1000): 2N arbitrary byte strings, N sets of record-like
//! lines, N/2 of each generated-journal property, N/8 journals on files (about 4,600 inputs by
//! default, a few seconds in a debug build). Longer: `PROPTEST_CASES=100000 cargo test -p
//! tessera-core --release --test journal_props` (docs/testing.md).

use std::cell::Cell;
use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::Config;
use tessera_core::mig::apply::journal::{self, Journal, Record};
use tessera_core::mig::control::{MigControl, MigNodeState};
use tessera_core::sim::control::SimMigControl;
use tessera_core::sim::{Scenario, SimNode};

#[path = "support/counting.rs"]
mod counting;

/// Peak heap while parsing, per input byte: the records (`size_of::<Record>()` is 232 bytes, the
/// smallest record 32 input bytes) in a `Vec` that doubles, old and new buffer during the copy:
/// about 18 at worst (`many_minimal_records_stay_within_the_heap_bound`).
const HEAP_FACTOR: usize = 24;
/// Peak heap while parsing, fixed part.
const HEAP_SLACK: usize = 64 * 1024;
/// The smallest record: `{"time":"","run":"","event":""}`.
const MIN_RECORD_BYTES: usize = 31;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grow(n: usize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

fn shrink(n: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().saturating_sub(n)));
}

fn note_journal(delta: isize) {
    match usize::try_from(delta) {
        Ok(n) => grow(n),
        Err(_) => shrink(delta.unsigned_abs()),
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting {
    note: note_journal,
    realloc_holds_both: true,
};

/// `f`'s result and the most heap it held at once above what was live before.
fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(Cell::get) - base)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

const PATH: &str = "/var/lib/tessera/mig-apply.journal";

/// Parse with every invariant that holds for any input checked; the records on success.
fn checked_parse(bytes: &[u8]) -> Result<Vec<Record>, TestCaseError> {
    let (result, peak) = peak_heap(|| journal::parse(Path::new(PATH), bytes));
    let bound = HEAP_FACTOR * bytes.len() + HEAP_SLACK;
    prop_assert!(
        peak <= bound,
        "peak heap {peak} B > {bound} B for {} input bytes",
        bytes.len()
    );
    match result {
        Ok(records) => {
            prop_assert!(records.len() <= bytes.len() / MIN_RECORD_BYTES);
            Ok(records)
        }
        Err(e) => {
            let msg = e.to_string();
            let rest = msg
                .strip_prefix(&format!("journal {PATH}: line "))
                .ok_or_else(|| TestCaseError::fail(format!("no file and line: {msg}")))?;
            let (line, rest) = rest.split_once(", column ").unwrap_or(("", ""));
            let line: usize = line
                .parse()
                .map_err(|_| TestCaseError::fail(format!("no line number: {msg}")))?;
            let column = rest.split_once(": not a journal record: ").map(|(c, _)| c);
            prop_assert!(
                column.and_then(|c| c.parse::<usize>().ok()).is_some(),
                "no column: {msg}"
            );
            let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            prop_assert!(line >= 1 && line <= lines.len(), "{msg}");
            prop_assert!(
                !lines[line - 1].iter().all(u8::is_ascii_whitespace),
                "a blank line blamed: {msg}"
            );
            Err(TestCaseError::reject("not a journal"))
        }
    }
}

/// `checked_parse`, with an error as a value rather than a rejection.
fn parse_any(bytes: &[u8]) -> Result<Option<Vec<Record>>, TestCaseError> {
    match checked_parse(bytes) {
        Ok(r) => Ok(Some(r)),
        Err(TestCaseError::Reject(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A real checkpoint: a simulated node's MIG state.
fn checkpoint() -> MigNodeState {
    static STATE: OnceLock<MigNodeState> = OnceLock::new();
    STATE.get_or_init(sim_state).clone()
}

fn sim_state() -> MigNodeState {
    let s = Scenario::from_toml(
        r#"
name = "t"
seed = 1
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "A100-80GB", count = 1 }, { model = "H100-80GB", count = 2 }]
mig = [
  { gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "1g.10gb", start = 4 }] },
]
"#,
        "t.toml",
    )
    .unwrap();
    let node = SimNode::new(&s, "n").unwrap();
    SimMigControl::open(&node, None)
        .unwrap()
        .read_state()
        .unwrap()
}

fn record() -> impl Strategy<Value = Record> {
    // Any characters, quotes, escapes and line ends included; short, to keep the cases cheap.
    let text = || proptest::option::of(r#"\PC{0,12}|["\\\n\t{}]{0,4}"#);
    (
        (
            r"\PC{0,12}",
            "[a-z0-9-]{0,24}",
            "begin|step|rollback|recover|end|[a-z]{0,8}",
        ),
        (
            proptest::option::of(any::<u64>()),
            text(),
            text(),
            text(),
            text(),
        ),
        proptest::bool::weighted(0.2),
    )
        .prop_map(
            |((time, run, event), (step, target, action, result, plan), with_checkpoint)| Record {
                time,
                run,
                event,
                step,
                target,
                action,
                result,
                plan,
                checkpoint: with_checkpoint.then(checkpoint),
            },
        )
}

fn serialise(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(serde_json::to_string(r).unwrap().as_bytes());
        out.push(b'\n');
    }
    out
}

/// A change to a valid journal's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
    DuplicateLine { line: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip { at, byte } => {
            let i = at % bytes.len();
            bytes[i] = *byte;
        }
        Mutation::Insert { at, bytes: b } => {
            let i = at % (bytes.len() + 1);
            bytes.splice(i..i, b.iter().copied());
        }
        Mutation::Delete { at, len } => {
            let i = at % bytes.len();
            let end = (i + len).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::DuplicateLine { line } => {
            let lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            let i = line % lines.len();
            let mut out = Vec::new();
            for (j, l) in lines.iter().enumerate() {
                out.extend_from_slice(l);
                if j == i {
                    out.push(b'\n');
                    out.extend_from_slice(l);
                }
                if j + 1 < lines.len() {
                    out.push(b'\n');
                }
            }
            *bytes = out;
        }
    }
}

proptest! {
    #![proptest_config(config(cases() * 2))]

    #[test]
    fn arbitrary_bytes_never_panic_and_errors_name_the_line(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let _ = parse_any(&bytes)?;
    }

}

proptest! {
    #![proptest_config(config(cases()))]

    #[test]
    fn lines_that_look_like_records_never_panic(
        lines in proptest::collection::vec(
            prop_oneof![
                "\\{\"time\":\"[^\"\n]{0,20}\",\"run\":\"[a-z0-9]{0,8}\",\"event\":\"[a-z]{0,8}\"[^\n]{0,40}",
                "[ {}\\[\\]\":,0-9a-z\\\\]{0,60}",
                "\\{\"time\":\\{\"time\":[^\n]{0,30}",
            ],
            0..20,
        ),
        terminated in any::<bool>(),
    ) {
        let mut text = lines.join("\n");
        if terminated {
            text.push('\n');
        }
        let _ = parse_any(text.as_bytes())?;
    }

}

proptest! {
    #![proptest_config(config((cases() / 2).max(32)))]

    #[test]
    fn a_valid_journal_cut_anywhere_reads_as_a_prefix(
        records in proptest::collection::vec(record(), 1..8),
        cut in any::<usize>(),
    ) {
        let bytes = serialise(&records);
        prop_assert_eq!(parse_any(&bytes)?, Some(records.clone()));
        let cut = cut % (bytes.len() + 1);
        let got = parse_any(&bytes[..cut])?.expect("a cut journal reads");
        let whole = bytes[..cut].iter().filter(|&&b| b == b'\n').count();
        prop_assert!(got.len() == whole || got.len() == whole + 1, "{} of {whole}", got.len());
        prop_assert_eq!(&got[..], &records[..got.len()]);
    }

    #[test]
    fn a_torn_record_glued_to_the_next_is_skipped(
        records in proptest::collection::vec(record(), 2..6),
        which in any::<usize>(),
        cut in any::<usize>(),
    ) {
        // What tessera wrote before the torn-tail fix: record i cut short, record i+1 appended.
        let i = which % (records.len() - 1);
        let mut bytes = serialise(&records[..i]);
        let torn = serde_json::to_string(&records[i]).unwrap();
        let cut = 1 + cut % (torn.len() - 1);
        bytes.extend_from_slice(&torn.as_bytes()[..cut]);
        bytes.extend_from_slice(&serialise(&records[i + 1..]));
        let mut want = records.clone();
        want.remove(i);
        prop_assert_eq!(parse_any(&bytes)?, Some(want));
    }

    #[test]
    fn a_mutated_journal_never_panics(
        records in proptest::collection::vec(record(), 1..6),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = serialise(&records);
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        let _ = parse_any(&bytes)?;
    }
}

proptest! {
    #![proptest_config(config((cases() / 8).max(32)))]

    /// On a file: whatever the tail, `repair_tail` then `append` leaves only whole records.
    #[test]
    fn repair_then_append_leaves_only_whole_records(
        records in proptest::collection::vec(record(), 0..5),
        cut in any::<usize>(),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.journal");
        let bytes = serialise(&records);
        let cut = cut % (bytes.len() + 1);
        let mut file = bytes[..cut].to_vec();
        // Sometimes junk after the cut (it may even complete a record: then that one is kept).
        let with_junk = !junk.contains(&b'\n');
        if with_junk {
            file.extend_from_slice(&junk);
        }
        std::fs::write(&path, &file).unwrap();
        let before = parse_any(&file)?;
        let j = Journal::new(&path);
        let torn = j.repair_tail().unwrap();
        prop_assert_eq!(torn.is_some(), !file.is_empty() && !file.ends_with(b"\n"));
        let last = Journal::record("new-run", "begin");
        j.append(&last).unwrap();
        let text = std::fs::read(&path).unwrap();
        prop_assert!(text.ends_with(b"\n"));
        let strict: Vec<Record> = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).map_err(|e| TestCaseError::fail(e.to_string())))
            .collect::<Result<_, _>>()?;
        prop_assert_eq!(strict.last(), Some(&last));
        let kept = &strict[..strict.len() - 1];
        // What was readable before is what is kept: nothing lost, nothing torn left.
        prop_assert_eq!(Some(kept.to_vec()), before);
        if !with_junk {
            prop_assert_eq!(kept, &records[..kept.len()]);
        }
    }
}

/// The worst case for the heap bound: the smallest records, as many as fit (about 18 bytes of
/// heap per input byte: a 232-byte `Record` per 32 input bytes, in a doubling `Vec`).
#[test]
fn many_minimal_records_stay_within_the_heap_bound() {
    let line = "{\"time\":\"\",\"run\":\"\",\"event\":\"\"}\n";
    assert_eq!(line.len(), MIN_RECORD_BYTES + 1);
    let bytes = line.repeat(20_000).into_bytes();
    let records = checked_parse(&bytes).unwrap();
    assert_eq!(records.len(), 20_000);
}
