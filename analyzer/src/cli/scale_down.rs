//! `tessera scale-down` (`docs/scale-down.md`): the flags, the findings (from the sources through
//! the advisor, as `tessera analyze` computes them, or from `--findings FILE`, read streaming
//! and bounded: only the findings that count are kept, `tessera::scale_down::findings`), the
//! connection, and printing: the plan or the undo list on stdout, progress and errors on
//! stderr. A module of the binary: the logic is `tessera::scale_down`.
//!
//! Exit codes: 0 done or dry run; 2 bad input (evidence older than `--evidence.max-age` or dated
//! after the clock included), an API error, a refusal to write or a record `--undo` refused,
//! with the workload that failed as it was; 3 something tessera changed could not be put back,
//! or whether a write landed is unknown (the `kubectl` commands are printed).

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use tessera::evidence::{self, EvidenceArgs};
use tessera::kubernetes::Connection;

use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use tessera::advisor::{self, Params};
use tessera::scale_down::apply::{self, Outcome};
use tessera::scale_down::findings::FindingsDoc;
use tessera::scale_down::idle::{self, rfc3339};
use tessera::scale_down::journal::Journal;
use tessera::scale_down::kube::KubeWorkloads;
use tessera::scale_down::plan::{self, render};
use tessera::scale_down::undo;
use tessera::scale_down::{AT_ANNOTATION, FROM_ANNOTATION, is_dns_label};
use tessera_core::input_limits::{LimitError, clip};

use super::source::{SourceArgs, load_parts, name_file, parse_interval};

/// The largest findings file read.
const MAX_FINDINGS_BYTES: u64 = 256 << 20;

#[derive(Debug, Args)]
pub struct ScaleDownArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// The findings of `tessera analyze --format json` (a file, or - for stdin) instead of
    /// --source: only idle_loaded and allocated_unused (unused) findings with a pod count.
    #[arg(long, value_name = "FILE", conflicts_with = "sources")]
    findings: Option<PathBuf>,
    /// Idle: least memory held, GiB (with --source).
    #[arg(long = "idle.min-memory-gib", default_value_t = 1.0)]
    idle_min_memory_gib: f64,
    /// Idle: highest activity that counts as idle (0-1, on the interval max; with --source).
    #[arg(long = "idle.max-activity", default_value_t = 0.01)]
    idle_max_activity: f64,
    /// The required idle span: a pod's last idle span must be at least this long.
    #[arg(long = "idle.min-duration", default_value = "60m", value_parser = parse_interval)]
    idle_min_duration: i64,
    /// A gap longer than this many of the entity's own rows (and 5 minutes) breaks a span (with
    /// --source).
    #[arg(long = "span.max-gap-intervals", default_value_t = 3.0)]
    max_gap_intervals: f64,
    /// Idle now: the last idle span ends at most this long before the data's end.
    #[arg(long = "idle.now-tolerance", default_value = "5m", value_parser = parse_interval)]
    now_tolerance: i64,
    /// Only this namespace (the plan and --undo).
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Scale back what tessera scaled down (the workloads with its annotation).
    #[arg(long)]
    undo: bool,
    /// Act (default: a dry run that prints the plan and the kubectl equivalents).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    kube: Connection,
    /// `--evidence.max-age` (default 15m: the data must end at most this long before now,
    /// checked at the start and again right before each workload's writes) and
    /// `--allow-stale-evidence`.
    #[command(flatten)]
    evidence: EvidenceArgs,
    /// The time to judge the evidence's age against and to record, RFC 3339 (default: the
    /// clock).
    #[arg(long, value_name = "TIME")]
    now: Option<DateTime<Utc>>,
    /// tessera's journal of the workloads it scaled down, replaced atomically at each change
    /// (default: $XDG_STATE_HOME/tessera/scale-down-journal.json, else
    /// ~/.local/state/tessera/scale-down-journal.json).
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// --undo: restore records up to this count when tessera's journal has no entry for the
    /// workload (the journal of another machine).
    #[arg(long = "undo.max-replicas", value_name = "N", requires = "undo", value_parser = clap::value_parser!(i64).range(1..=i32::MAX as i64))]
    undo_max_replicas: Option<i64>,
}

/// `--journal`, or its default under the XDG state folder.
fn journal_path(args: &ScaleDownArgs) -> Result<PathBuf> {
    if let Some(p) = &args.journal {
        return Ok(p.clone());
    }
    match tessera::kubernetes::audit::state_dir() {
        Some(dir) => Ok(dir.join("tessera/scale-down-journal.json")),
        None => bail!("neither $XDG_STATE_HOME nor $HOME is set: give --journal FILE"),
    }
}

/// A reader that fails once more than `max` bytes came through: `take` lets one byte more
/// through, to tell a file of exactly `max` bytes from a longer one.
struct Bounded<R> {
    inner: std::io::Take<R>,
    read: u64,
    max: u64,
}

impl<R: Read> Bounded<R> {
    fn new(inner: R, max: u64) -> Self {
        Bounded {
            inner: inner.take(max + 1),
            read: 0,
            max,
        }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.max {
            return Err(std::io::Error::other(LimitError::TooLarge {
                size: None,
                limit: self.max,
            }));
        }
        Ok(n)
    }
}

/// `--findings FILE` (or `-`, stdin): at most [`MAX_FINDINGS_BYTES`], read by
/// [`parse_findings`].
fn read_findings(path: &Path) -> Result<FindingsDoc> {
    let name = path.display().to_string();
    if path.as_os_str() == "-" {
        return parse_findings(std::io::stdin().lock(), &name, MAX_FINDINGS_BYTES);
    }
    let file = std::fs::File::open(path).with_context(|| format!("--findings {name}"))?;
    let meta = file
        .metadata()
        .with_context(|| format!("--findings {name}"))?;
    if meta.is_file() && meta.len() > MAX_FINDINGS_BYTES {
        bail!(
            "--findings {name}: {}",
            LimitError::TooLarge {
                size: Some(meta.len()),
                limit: MAX_FINDINGS_BYTES
            }
        );
    }
    parse_findings(file, &name, MAX_FINDINGS_BYTES)
}

/// The default of `scale-down --evidence.max-age`: 15 minutes ("idle now" must be now).
pub const MAX_EVIDENCE_AGE_MS: i64 = 15 * 60_000;

/// The findings document of `input` (named `name` in errors), deserialized as it is read,
/// through a buffer, keeping only the findings that count ([`FindingsDoc`]); more than `max`
/// bytes is an error.
fn parse_findings(input: impl Read, name: &str, max: u64) -> Result<FindingsDoc> {
    let reader = BufReader::with_capacity(1 << 16, Bounded::new(input, max));
    serde_json::from_reader(reader).map_err(|e| {
        // serde_json's message has the line and column; a syntax error is no JSON at all.
        let what = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not JSON: ",
            _ => "",
        };
        anyhow!("--findings {name}: {what}{}", clip(&e.to_string()))
    })
}

/// The findings document, as `tessera analyze --format json` prints it, as far as scale-down
/// reads it.
fn findings(args: &ScaleDownArgs) -> Result<FindingsDoc> {
    if let Some(path) = &args.findings {
        return read_findings(path);
    }
    if args.src.sources.is_empty() {
        bail!("give --source (telemetry, as for tessera analyze) or --findings FILE");
    }
    if !(0.0..=1.0).contains(&args.idle_max_activity) || args.idle_min_memory_gib < 0.0 {
        bail!("--idle.max-activity must be in 0–1 and --idle.min-memory-gib not negative");
    }
    let mut p = Params::default();
    p.idle.min_memory_bytes = args.idle_min_memory_gib * (1u64 << 30) as f64;
    p.idle.max_activity = args.idle_max_activity;
    p.idle.min_duration_ms = args.idle_min_duration;
    p.idle.max_gap_intervals = args.max_gap_intervals;
    let (parts, range, _) = load_parts(&args.src)?;
    if range.is_none() {
        bail!("no rows in the sources for the chosen range: nothing is idle now");
    }
    let files = super::source::part_files(&parts);
    let analysis = advisor::analyze_parts_with(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        &p,
        range.map(|r| (r.since, r.until)),
        args.src.sources.iter().map(|s| s.to_string()).collect(),
        &["idle_loaded".to_string(), "allocated_unused".to_string()],
        &|_| {},
    )
    .map_err(|e| name_file(e.into(), &files))?;
    // The document `tessera analyze --format json` would print, read as a findings file is.
    Ok(serde_json::from_value(serde_json::to_value(&analysis)?)?)
}

fn report(out: &Outcome) -> u8 {
    for d in &out.done {
        println!("  {d}");
    }
    for s in &out.skipped {
        println!("  skipped {s}");
    }
    for r in &out.refused {
        eprintln!("tessera: refused {}", tessera::output::escape::printable(r));
    }
    for n in &out.notes {
        eprintln!("tessera: {n}");
    }
    if let Some((what, e)) = &out.failed {
        eprintln!("tessera: {what}: {e}; it is as it was");
    }
    if !out.not_tried.is_empty() {
        eprintln!("tessera: not tried: {}", out.not_tried.join(", "));
    }
    if !out.left.is_empty() {
        eprintln!("tessera: not everything tessera changed could be put back; run:");
        for l in &out.left {
            eprintln!("  {l}");
        }
    }
    out.exit_code()
}

pub fn run(args: ScaleDownArgs) -> Result<u8> {
    if let Some(ns) = &args.namespace
        && !is_dns_label(ns)
    {
        bail!(
            "--namespace {:?}: not a Kubernetes namespace name",
            tessera::output::escape::printable(ns)
        );
    }
    let connect = || KubeWorkloads::connect(&args.kube);
    if args.undo {
        if args.findings.is_some() || !args.src.sources.is_empty() {
            bail!("--undo restores by annotation: give neither --source nor --findings");
        }
        let mut journal = Journal::open(&journal_path(&args)?)?;
        let mut cluster = connect()?;
        let scaled = undo::scaled(&mut cluster, args.namespace.as_deref())?;
        if scaled.is_empty() {
            println!("nothing to undo: no workload carries {FROM_ANNOTATION}");
            return Ok(0);
        }
        println!(
            "{}",
            if args.yes {
                "restoring:"
            } else {
                "would restore (dry run: nothing is changed; --yes to apply):"
            }
        );
        if !args.yes {
            for w in &scaled {
                let refused = match w.replicas {
                    Some(0) => undo::restorable(w, &journal, args.undo_max_replicas).err(),
                    _ => None,
                };
                println!(
                    "  {}: {FROM_ANNOTATION}={} ({AT_ANNOTATION}={}){}",
                    w.label(),
                    tessera::output::escape::printable(&w.annotations[FROM_ANNOTATION]),
                    tessera::output::escape::printable(
                        w.annotations.get(AT_ANNOTATION).map_or("?", String::as_str)
                    ),
                    refused
                        .map(|why| format!(
                            ": refused: {}",
                            tessera::output::escape::printable(&why)
                        ))
                        .unwrap_or_default()
                );
            }
            return Ok(0);
        }
        return Ok(report(&undo::undo(
            &mut cluster,
            &scaled,
            &mut journal,
            args.undo_max_replicas,
        )));
    }
    let doc = findings(&args)?;
    let idle = idle::idle_pods(&doc, args.idle_min_duration, args.now_tolerance)?;
    // The freshness rule, against the clock (or --now): now, and again before each write.
    let fixed_now = args.now.map(|t| t.timestamp_millis());
    let now = || fixed_now.unwrap_or_else(|| Utc::now().timestamp_millis());
    let max_age = args.evidence.max_age(MAX_EVIDENCE_AGE_MS);
    let fresh = || match max_age {
        Some(max) => evidence::check(idle.data_end_ms, now(), max).map_err(|e| e.to_string()),
        None => Ok(()),
    };
    if let Err(e) = fresh() {
        bail!("refusing to act on this evidence: {e}");
    }
    eprintln!(
        "tessera: {} pod(s) idle now, {} with findings but not idle now (data until {})",
        idle.idle.len(),
        idle.not_now.len(),
        rfc3339(idle.data_end_ms)
    );
    let mut cluster = connect()?;
    let plan = plan::plan(&mut cluster, &idle, args.namespace.as_deref())?;
    let at = rfc3339(now());
    print!("{}", render(&plan, &at, args.yes));
    if !args.yes || plan.actions.is_empty() {
        return Ok(0);
    }
    let mut journal = Journal::open(&journal_path(&args)?)?;
    let ctx = apply::Context {
        at: &at,
        idle: &idle,
        fresh: &fresh,
        journal: &mut journal,
    };
    Ok(report(&apply::scale_down(&mut cluster, &plan, ctx)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_past_the_limit_or_not_json_are_errors_naming_the_input() {
        let doc = r#"{"until": "2026-11-30T00:00:00Z", "findings": [{"detector": "x"}]}"#;
        let max = doc.len() as u64;
        let read = parse_findings(doc.as_bytes(), "f.json", max).unwrap();
        assert_eq!(read.findings.unwrap().total, 1);
        // One byte over (white space, which JSON allows after the value): refused.
        let over = format!("{doc} ");
        let e = parse_findings(over.as_bytes(), "-", max).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            format!("--findings -: larger than the limit of {max} bytes")
        );
        let e = parse_findings(&b"{\n  \"until\": nope"[..], "f.json", 100).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "--findings f.json: not JSON: expected ident at line 2 column 13"
        );
        let e = parse_findings(&b"{\"findings\": 3}"[..], "f.json", 100).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "--findings f.json: invalid type: integer `3`, expected the `findings` array at line 1 column 15"
        );
    }
}
