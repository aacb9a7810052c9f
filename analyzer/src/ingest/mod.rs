//! Ingest: reads telemetry from `--source`s (tessera history, CSV files, Prometheus) into the canonical frames
//! of `docs/frames.md` — three polars `LazyFrame`s `gpu`, `mig`, `process` with the columns of
//! `docs/history-format.md`, `ts` as `Datetime(ms, UTC)` and a `source` column — plus an
//! [`IngestReport`] (rows, time range, skipped rows with reasons, warnings).
//!
//! Readers are strict: a bad manifest, version, column, file or line is an [`IngestError`] naming
//! the file (and line or column); `skip_bad_rows` turns bad *rows* (not bad files or schemas) into
//! counted warnings. Duplicate history rows (one node's key and `ts` twice) are counted and dropped
//! where there is a sign of them ([`dedupe`]); a file named by two sources is read once. This
//! module does not detect, plan or report anything and does not deduplicate rows that sources of
//! different kinds share.

mod csv;
mod dedupe;
mod history;
pub mod period;
pub mod prometheus;
mod promeval;
mod remote_read;
pub mod resample;
pub mod schema;
pub mod summary;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use polars::prelude::*;
use serde::Serialize;

pub use prometheus::PrometheusOptions;
pub use resample::Sampling;
pub use schema::Table;

/// The canonical frames: one lazy frame per table, all sources concatenated.
#[derive(Clone)]
pub struct Frames {
    pub gpu: LazyFrame,
    pub mig: LazyFrame,
    pub process: LazyFrame,
}

impl Frames {
    /// The frame of one table.
    pub fn table(&self, t: Table) -> &LazyFrame {
        match t {
            Table::Gpu => &self.gpu,
            Table::Mig => &self.mig,
            Table::Process => &self.process,
        }
    }
}

/// Where telemetry comes from (`--source`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `history:DIR`: a folder of node folders, one node folder, or a glob of either.
    History(String),
    /// `csv:FILE`: the generic long format or an `nvidia-smi --format=csv` log.
    Csv(PathBuf),
    /// `prometheus:URL`: a server with the Prometheus HTTP API (`query_range`).
    Prometheus(String),
}

impl FromStr for Source {
    type Err = IngestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| IngestError::SourceSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = s.split_once(':').ok_or_else(|| {
            bad("expected SCHEME:LOCATION with scheme history, csv or prometheus")
        })?;
        if rest.is_empty() {
            return Err(bad("the location after the scheme is empty"));
        }
        match scheme {
            "history" => Ok(Source::History(rest.to_string())),
            "csv" => Ok(Source::Csv(PathBuf::from(rest))),
            "prometheus" => {
                if !(rest.starts_with("http://") || rest.starts_with("https://")) {
                    return Err(bad("expected prometheus:http(s)://HOST[:PORT]"));
                }
                Ok(Source::Prometheus(rest.to_string()))
            }
            other => Err(bad(&format!(
                "unknown scheme {other:?}; expected history, csv or prometheus"
            ))),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::History(d) => write!(f, "history:{d}"),
            Source::Csv(p) => write!(f, "csv:{}", p.display()),
            Source::Prometheus(u) => write!(f, "prometheus:{u}"),
        }
    }
}

/// Progress callback: (work items done, work items in total). A work item is one file.
pub type Progress<'a> = &'a dyn Fn(usize, usize);

/// How to ingest.
#[derive(Default)]
pub struct IngestOptions<'a> {
    /// Keep rows with `ts >= since` (unix ms).
    pub since: Option<i64>,
    /// Keep rows with `ts < until` (unix ms).
    pub until: Option<i64>,
    /// Skip bad rows (counted in the report) instead of failing.
    pub skip_bad_rows: bool,
    /// `--interval`: the shortest row length for sources that are not already in rows (CSV,
    /// Prometheus), in ms; `None` (`auto`) for each entity's own sampling period. Rows are
    /// never finer than the data (`period`). History keeps its own rows.
    pub interval_ms: Option<i64>,
    /// Timeout, retries and auth of `prometheus:` sources.
    pub prometheus: PrometheusOptions,
    /// Called after each file.
    pub progress: Option<Progress<'a>>,
    /// A folder where a `prometheus:` source read by node group writes each group's rows as
    /// Parquet as soon as they are resampled, its partition then scanning them like history
    /// (memory holds the groups in flight, not the fleet); `None`: kept in memory. The caller
    /// removes the folder when done with the partitions.
    pub spill: Option<&'a Path>,
    /// Take row counts and time ranges of closed history files from their Parquet footers
    /// (row count, `ts` statistics) instead of scanning `ts`, when there is no time filter. For
    /// commands that read all the data afterwards anyway (a damaged data page then fails there,
    /// named by [`name_unreadable`]); `tessera ingest` scans, so it also checks the `ts` pages.
    pub footer_stats: bool,
}

/// Rows and time range of one table after ingest (and the time filter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    pub rows: u64,
    /// First and last `ts`, unix ms.
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

/// What an ingest read, skipped and warned about.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestReport {
    /// Per table: rows and time range.
    pub tables: BTreeMap<Table, TableStats>,
    /// Skipped rows by reason (only with `skip_bad_rows`, plus torn last lines of open segments
    /// and duplicate history rows, which are always counted once).
    pub skipped: BTreeMap<String, u64>,
    /// Torn last lines of open segments (tolerated; also counted in `skipped`).
    pub torn_lines: u64,
    /// Files read.
    pub files: u64,
    /// Human-readable warnings, one line each.
    pub warnings: Vec<String>,
    /// Per source: the rows it gave at which length, the sampling period found, period changes
    /// (docs/frames.md, "Sampling periods").
    pub sampling: BTreeMap<String, Sampling>,
    /// Partitions whose history showed a sign of duplicate rows and was checked row by row, with
    /// the sign ([`dedupe`]); none for clean history, which costs no check.
    #[serde(skip)]
    pub duplicate_checks: BTreeMap<String, &'static str>,
}

impl IngestReport {
    /// Overall time range over all tables (unix ms).
    pub fn time_range(&self) -> Option<(i64, i64)> {
        let first = self.tables.values().filter_map(|t| t.first_ts).min()?;
        let last = self.tables.values().filter_map(|t| t.last_ts).max()?;
        Some((first, last))
    }

    /// Total skipped rows.
    pub fn skipped_rows(&self) -> u64 {
        self.skipped.values().sum()
    }

    pub(crate) fn skip(&mut self, reason: impl Into<String>) {
        *self.skipped.entry(reason.into()).or_default() += 1;
    }
}

/// Ingest errors: what, where, and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("bad --source {spec:?}: {reason}")]
    SourceSpec { spec: String, reason: String },
    #[error("{source_spec}: {reason}")]
    Prometheus { source_spec: String, reason: String },
    #[error("bad time {value:?}: {reason}")]
    Time { value: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{source_spec}: no tessera history found (expected a folder with tessera-history.json or folders of them)"
    )]
    NoHistory { source_spec: String },
    #[error("{path}: bad manifest: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("{path}: history version {found}, this reader knows version {expected}")]
    Version {
        path: PathBuf,
        found: String,
        expected: u64,
    },
    #[error("{path}: column {column:?}: {reason}")]
    Column {
        path: PathBuf,
        column: String,
        reason: String,
    },
    #[error("{path}: not a readable Parquet file (truncated or corrupt?): {reason}")]
    Parquet { path: PathBuf, reason: String },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("polars: {0}")]
    Polars(#[from] PolarsError),
}

/// One file to read, resolved from a source.
enum WorkItem {
    Parquet {
        table: Table,
        path: PathBuf,
        source: String,
        /// The node its manifest names (the partition key).
        node: String,
        /// The manifest's row interval.
        interval_ms: i64,
    },
    Jsonl {
        table: Table,
        path: PathBuf,
        source: String,
        node: String,
        interval_ms: i64,
    },
    Csv {
        path: PathBuf,
    },
    Prometheus {
        url: String,
    },
}

/// Reads every source into the canonical frames. Fails on the first bad file; the report
/// carries row counts and time ranges (from the Parquet footers when there is no time filter,
/// else by scanning `ts`), skips and warnings.
///
/// The frames are the union of [`ingest_parts`]' partitions.
pub fn ingest(
    sources: &[Source],
    opts: &IngestOptions,
) -> Result<(Frames, IngestReport), IngestError> {
    let (parts, report) = ingest_parts(sources, opts)?;
    Ok((Frames::union(parts.into_iter().map(|p| p.frames))?, report))
}

/// One partition of the canonical frames: every row of the nodes it names, and no row of any
/// other partition's nodes.
#[derive(Clone)]
pub struct Part {
    /// The node (tessera history), or `*` when the partition holds every source.
    pub key: String,
    pub frames: Frames,
    /// The Parquet history files its frames scan (see [`name_unreadable`]).
    pub files: Vec<PathBuf>,
}

/// Names the first of `files` whose data does not decode (a corrupt data page behind a good
/// footer), by reading each one whole. Ingest checks only footers and schemas up front, so such
/// damage shows up later, as a polars error that names no file, when a frame is collected; the
/// commands call this on that error path to say which file it was. `None` when every file reads.
pub fn name_unreadable(files: &[PathBuf]) -> Option<IngestError> {
    files.iter().find_map(|path| {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                return Some(IngestError::Io {
                    path: path.clone(),
                    source: e,
                });
            }
        };
        ParquetReader::new(file)
            .finish()
            .err()
            .map(|e| IngestError::Parquet {
                path: path.clone(),
                reason: format!("its data does not decode: {e}"),
            })
    })
}

impl Frames {
    /// Empty frames with the canonical schemas.
    pub fn empty() -> Frames {
        let e = |t: Table| DataFrame::empty_with_schema(&t.frame_schema()).lazy();
        Frames {
            gpu: e(Table::Gpu),
            mig: e(Table::Mig),
            process: e(Table::Process),
        }
    }

    /// The rows of every table with `ts` at or after `from` (unix ms), lazily.
    pub fn since(&self, from: i64) -> Frames {
        let f = |t: Table| {
            self.table(t)
                .clone()
                .filter(col("ts").cast(DataType::Int64).gt_eq(lit(from)))
        };
        Frames {
            gpu: f(Table::Gpu),
            mig: f(Table::Mig),
            process: f(Table::Process),
        }
    }

    /// The union (concatenation) of several frames, table by table.
    pub fn union(parts: impl IntoIterator<Item = Frames>) -> Result<Frames, IngestError> {
        let mut g = Vec::new();
        let mut m = Vec::new();
        let mut p = Vec::new();
        for f in parts {
            g.push(f.gpu);
            m.push(f.mig);
            p.push(f.process);
        }
        if g.is_empty() {
            return Ok(Frames::empty());
        }
        let cat = |v: Vec<LazyFrame>| -> Result<LazyFrame, IngestError> {
            Ok(if v.len() == 1 {
                v.into_iter().next().expect("one")
            } else {
                concat(v, UnionArgs::default())?
            })
        };
        Ok(Frames {
            gpu: cat(g)?,
            mig: cat(m)?,
            process: cat(p)?,
        })
    }
}

/// Like [`ingest`], but keeps the data partitioned by node so that per-node work (the
/// advisor's detectors, the summary) can run one partition at a time in bounded memory.
///
/// When every source is tessera history, there is one partition per node (by the node name of
/// its manifest, so one node given twice is still one partition). A single `prometheus:` source
/// is read by groups of nodes (`--prometheus.nodes-per-query`, one node by default), each its
/// own partition keyed by its (first) node. When any source is CSV, or Prometheus beside other
/// sources, everything is one partition with key `*`. Row counts and time ranges in the report
/// are summed over the partitions.
pub fn ingest_parts(
    sources: &[Source],
    opts: &IngestOptions,
) -> Result<(Vec<Part>, IngestReport), IngestError> {
    let mut report = IngestReport::default();
    let mut items = Vec::new();
    for s in sources {
        match s {
            Source::History(spec) => items.extend(history::resolve(spec, &mut report)?),
            Source::Csv(path) => items.push(WorkItem::Csv { path: path.clone() }),
            Source::Prometheus(url) => items.push(WorkItem::Prometheus { url: url.clone() }),
        }
    }
    // A history file named by two sources (a folder and its parent, overlapping globs) is read
    // once.
    let mut seen = std::collections::HashSet::new();
    let mut twice: Vec<PathBuf> = Vec::new();
    items.retain(|i| match i {
        WorkItem::Parquet { path, .. } | WorkItem::Jsonl { path, .. } => {
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            seen.insert(real) || {
                twice.push(path.clone());
                false
            }
        }
        _ => true,
    });
    if let Some(first) = twice.first() {
        report.warnings.push(format!(
            "{} history file(s) are named by more than one --source (e.g. {}): each is read once",
            twice.len(),
            first.display()
        ));
    }
    let single = items
        .iter()
        .any(|i| matches!(i, WorkItem::Csv { .. } | WorkItem::Prometheus { .. }));
    let total = items.len();
    // Lazy frames by partition and table, each with its row count and time range when the
    // Parquet footers tell them (else they are computed by scanning `ts`).
    // The flag says whether the rows are history (looked at for duplicates).
    type Entry = (LazyFrame, Option<TableStats>, bool);
    let mut parts: BTreeMap<String, BTreeMap<Table, Vec<Entry>>> = BTreeMap::new();
    // What is known cheaply about each history file, by partition and table: the signs of
    // duplicate rows ([`dedupe`]).
    let mut extents: BTreeMap<String, BTreeMap<Table, Vec<dedupe::Extent>>> = BTreeMap::new();
    // Checked Parquet files by (partition, source, table), scanned together below.
    type Checked = (PathBuf, tessera_core::history::reader::FooterSummary);
    let mut scans: BTreeMap<(String, String, Table), Vec<Checked>> = BTreeMap::new();
    // The Parquet files each partition's frames scan (history; Prometheus groups spilled).
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let key = |node: &str| {
        if single {
            "*".to_string()
        } else {
            node.to_string()
        }
    };
    for (i, item) in items.into_iter().enumerate() {
        match item {
            WorkItem::Parquet {
                table,
                path,
                source,
                node,
                interval_ms,
            } => {
                let footer = history::check_parquet(table, &path)?;
                let gpus = match table {
                    Table::Gpu if footer.rows > 0 => history::gpu_count(&path),
                    _ => None,
                };
                extents
                    .entry(key(&node))
                    .or_default()
                    .entry(table)
                    .or_default()
                    .push(dedupe::Extent {
                        rows: footer.rows,
                        ts: footer.ts_range,
                        gpus,
                        interval_ms,
                        holds_duplicates: false,
                    });
                let group = scans.entry((key(&node), source, table)).or_default();
                group.push((path, footer));
            }
            WorkItem::Jsonl {
                table,
                path,
                source,
                node,
                interval_ms,
            } => {
                let df = history::read_open_segment(table, &path, opts, &mut report)?;
                let ts = df.column("ts")?.cast(&DataType::Int64)?;
                let ts = ts.i64()?;
                extents
                    .entry(key(&node))
                    .or_default()
                    .entry(table)
                    .or_default()
                    .push(dedupe::Extent {
                        rows: df.height() as u64,
                        ts: ts.min().zip(ts.max()),
                        gpus: None,
                        interval_ms,
                        holds_duplicates: dedupe::holds_duplicates(&df, table)?,
                    });
                parts
                    .entry(key(&node))
                    .or_default()
                    .entry(table)
                    .or_default()
                    .push((canonical(df.lazy(), table, &source, opts), None, true));
            }
            WorkItem::Csv { path } => {
                let source = format!("csv:{}", path.display());
                let (tables, sampling) = csv::read(&path, opts, &mut report)?;
                note_sampling(&mut report, &source, "samples", sampling, opts.interval_ms);
                for (table, df) in tables {
                    parts
                        .entry(key(""))
                        .or_default()
                        .entry(table)
                        .or_default()
                        .push((canonical(df.lazy(), table, &source, opts), None, false));
                }
            }
            WorkItem::Prometheus { url } => {
                let source = format!("prometheus:{url}");
                let (groups, sampling) = prometheus::read(&url, opts, &mut report)?;
                note_sampling(&mut report, &source, "scrapes", sampling, opts.interval_ms);
                for (group, tables, spilled) in groups {
                    // The server's node partitions stand when it is the only source.
                    let part = if total == 1 { group } else { key("") };
                    files.entry(part.clone()).or_default().extend(spilled);
                    for (table, lf) in tables {
                        parts
                            .entry(part.clone())
                            .or_default()
                            .entry(table)
                            .or_default()
                            .push((canonical(lf, table, &source, opts), None, false));
                    }
                }
            }
        }
        report.files += 1;
        if let Some(p) = opts.progress {
            p(i + 1, total);
        }
    }
    for ((part, source, table), checked) in scans {
        let paths: Vec<PathBuf> = checked.iter().map(|c| c.0.clone()).collect();
        let lf = history::scan_parquet_files(&paths)?;
        files.entry(part.clone()).or_default().extend(paths);
        // Without a time filter, the footers' row counts and `ts` statistics are the stats.
        let known = (opts.footer_stats
            && opts.since.is_none()
            && opts.until.is_none()
            && checked
                .iter()
                .all(|(_, f)| f.rows == 0 || f.ts_range.is_some()))
        .then(|| {
            checked
                .iter()
                .fold(TableStats::default(), |acc, (_, f)| TableStats {
                    rows: acc.rows + f.rows,
                    first_ts: min_opt(acc.first_ts, f.ts_range.map(|r| r.0)),
                    last_ts: max_opt(acc.last_ts, f.ts_range.map(|r| r.1)),
                })
        });
        parts
            .entry(part)
            .or_default()
            .entry(table)
            .or_default()
            .push((canonical(lf, table, &source, opts), known, true));
    }
    if parts.is_empty() && single {
        parts.insert("*".into(), BTreeMap::new());
    }
    if let Some(req) = opts.interval_ms {
        for (src, s) in &report.sampling {
            if src.starts_with("history:") && s.rows.keys().any(|&iv| iv != req) {
                let ivs: Vec<String> = s
                    .rows
                    .keys()
                    .map(|&iv| period::fmt_period(iv as f64))
                    .collect();
                report.warnings.push(format!(
                    "{src}: history rows keep their own interval ({}); --interval {} applies to \
                     csv: and prometheus: sources only",
                    ivs.join(", "),
                    period::fmt_period(req as f64)
                ));
            }
        }
    }
    let mut out = Vec::with_capacity(parts.len());
    for (key, mut tables) in parts {
        let files = files.remove(&key).unwrap_or_default();
        // A sign of duplicates in one table checks every table of the partition.
        let sign = extents
            .get(&key)
            .into_iter()
            .flat_map(|by_table| by_table.values())
            .find_map(|e| dedupe::sign(e));
        if let Some(why) = sign {
            report.duplicate_checks.insert(key.clone(), why);
        }
        let mut build = |t: Table| -> Result<LazyFrame, IngestError> {
            let entries = tables.remove(&t).unwrap_or_default();
            let mut lfs = Vec::with_capacity(entries.len());
            let (mut hist, mut hist_rows) = (Vec::new(), 0u64);
            for (lf, known, is_history) in entries {
                let stats = match known {
                    Some(s) => s,
                    None => {
                        table_stats(lf.clone()).map_err(|e| name_unreadable(&files).unwrap_or(e))?
                    }
                };
                let acc = report.tables.entry(t).or_default();
                acc.rows += stats.rows;
                acc.first_ts = min_opt(acc.first_ts, stats.first_ts);
                acc.last_ts = max_opt(acc.last_ts, stats.last_ts);
                if is_history && sign.is_some() {
                    hist.push(lf);
                    hist_rows += stats.rows;
                } else {
                    lfs.push(lf);
                }
            }
            if let (Some(why), false) = (sign, hist.is_empty()) {
                let all = match hist.len() {
                    1 => hist.pop().expect("one"),
                    _ => concat(hist, UnionArgs::default())?,
                };
                let (lf, dropped) = dedupe::dedupe(all, t, hist_rows)
                    .map_err(|e| name_unreadable(&files).unwrap_or(e))?;
                if dropped > 0 {
                    report.tables.entry(t).or_default().rows -= dropped;
                    *report
                        .skipped
                        .entry(format!("duplicate {} rows (same key and ts)", t.name()))
                        .or_default() += dropped;
                    let whose = match key.as_str() {
                        "*" => "history".to_string(),
                        node => format!("history of node {node}"),
                    };
                    report.warnings.push(format!(
                        "{whose}: {dropped} duplicate {} rows (same {} and ts) \
                         counted once ({why}); two exporters writing one folder, a clock that \
                         went back, or a copy of the folder next to it write them",
                        t.name(),
                        dedupe::key_columns(t)
                            .iter()
                            .filter(|c| **c != "ts")
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                lfs.push(lf);
            }
            Ok(match lfs.len() {
                0 => DataFrame::empty_with_schema(&t.frame_schema()).lazy(),
                1 => lfs.into_iter().next().expect("one"),
                _ => concat(lfs, UnionArgs::default())?,
            })
        };
        let frames = Frames {
            gpu: build(Table::Gpu)?,
            mig: build(Table::Mig)?,
            process: build(Table::Process)?,
        };
        out.push(Part { key, frames, files });
    }
    for t in Table::ALL {
        report.tables.entry(t).or_default();
    }
    Ok((out, report))
}

/// Records what a source's resampling found and says what the user should know: the rows
/// chosen, series that changed period, and an explicit `--interval` finer than the data (with
/// the share of its steps that would have been empty).
fn note_sampling(
    report: &mut IngestReport,
    source: &str,
    verb: &str,
    s: Sampling,
    requested: Option<i64>,
) {
    if s.rows.is_empty() {
        return;
    }
    let period = s
        .median_period_ms
        .map(|p| format!("; sampled every {} (median)", period::fmt_period(p)))
        .unwrap_or_default();
    report.warnings.push(format!(
        "{source}: {}{period}{}",
        s.describe(),
        if requested.is_none() {
            " (--interval auto: each entity at its own period)"
        } else {
            ""
        }
    ));
    if let (Some(req), Some((empty, total))) = (requested, s.finer_request)
        && total > 0
    {
        let coarsest = s.rows.keys().max().copied().unwrap_or(req);
        let p = s.median_period_ms.unwrap_or(coarsest as f64);
        report.warnings.push(format!(
            "{source}: {:.0}% of {} steps hold no sample: this source {verb} every {}; using {}",
            100.0 * empty as f64 / total as f64,
            period::fmt_period(req as f64),
            period::fmt_period(p),
            s.rows
                .keys()
                .filter(|&&k| k > req)
                .map(|&k| period::fmt_period(k as f64))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    const SHOWN: usize = 5;
    if !s.changes.is_empty() {
        report.warnings.push(format!(
            "{source}: {} series changed sampling period: {}{}",
            s.changes.len(),
            s.changes
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
            if s.changes.len() > SHOWN { "; …" } else { "" }
        ));
    }
    report
        .sampling
        .entry(source.to_string())
        .or_default()
        .merge(s);
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Row count and ts range of a frame (reads only `ts`).
fn table_stats(lf: LazyFrame) -> Result<TableStats, IngestError> {
    let ms = col("ts").cast(DataType::Int64);
    let df = lf
        .select([
            len().alias("rows"),
            ms.clone().min().alias("first"),
            ms.max().alias("last"),
        ])
        .collect()?;
    let get = |name: &str| -> Result<Option<i64>, IngestError> {
        let c = df.column(name)?.cast(&DataType::Int64)?;
        Ok(c.i64()?.get(0))
    };
    Ok(TableStats {
        rows: get("rows")?.unwrap_or(0).max(0) as u64,
        first_ts: get("first")?,
        last_ts: get("last")?,
    })
}

/// Selects the table's columns in order with their canonical types, applies the time filter,
/// converts `ts` to `Datetime(ms, UTC)` and adds `source`.
fn canonical(lf: LazyFrame, table: Table, source: &str, opts: &IngestOptions) -> LazyFrame {
    let mut lf = lf;
    if let Some(since) = opts.since {
        lf = lf.filter(col("ts").cast(DataType::Int64).gt_eq(lit(since)));
    }
    if let Some(until) = opts.until {
        lf = lf.filter(col("ts").cast(DataType::Int64).lt(lit(until)));
    }
    let mut exprs: Vec<Expr> = table
        .columns()
        .map(|c| {
            if c.name == "ts" {
                col("ts").cast(DataType::Int64).cast(schema::ts_dtype())
            } else {
                col(c.name).cast(c.ty.polars())
            }
        })
        .collect();
    exprs.push(lit(source.to_string()).alias("source"));
    lf.select(exprs)
}

/// The range a canonical column's value must lie in (after scaling), for every source that is
/// not history (docs/frames.md). Infinite values and ratios outside 0–1 are impossible, as is negative
/// memory, power, energy or a count; memory beyond 2^60 bytes (an exbibyte) is not a GPU's.
pub(crate) fn check_value(column: &str, v: f64) -> Result<(), &'static str> {
    value_range(column).check(v)
}

/// The range [`check_value`] holds a column's values to, looked up once for many values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueRange {
    lo: f64,
    hi: f64,
    why: &'static str,
}

impl ValueRange {
    /// Whether `v` is finite and in the range; else why not.
    pub(crate) fn check(self, v: f64) -> Result<(), &'static str> {
        if !v.is_finite() {
            Err("infinite")
        } else if v < self.lo || v > self.hi {
            Err(self.why)
        } else {
            Ok(())
        }
    }
}

/// The [`ValueRange`] of a canonical column.
pub(crate) fn value_range(column: &str) -> ValueRange {
    let r = |lo: f64, hi: f64, why: &'static str| ValueRange { lo, hi, why };
    if matches!(
        column,
        "busy_mean"
            | "busy_max"
            | "sm_active_mean"
            | "sm_active_max"
            | "sm_occupancy_mean"
            | "memory_controller_mean"
            | "sm_mean"
            | "sm_max"
    ) {
        r(0.0, 1.0, "ratio outside 0–1")
    } else if column.contains("bytes") {
        r(0.0, (1u64 << 60) as f64, "memory outside 0–2^60 bytes")
    } else if matches!(
        column,
        "power_mean_watts" | "energy_delta_joules" | "xid_count" | "samples" | "mig_enabled"
    ) {
        r(0.0, f64::INFINITY, "negative power, energy or count")
    } else if column == "temperature_max_celsius" {
        r(-100.0, 300.0, "temperature outside −100–300 °C")
    } else {
        r(f64::NEG_INFINITY, f64::INFINITY, "")
    }
}

/// Parses `--since`/`--until`: a duration back from `now_ms` (`90s`, `30m`, `12h`, `7d`, `2w`),
/// an RFC 3339 time, or a date (`2026-11-02`, midnight UTC). Returns unix ms.
pub fn parse_time(value: &str, now_ms: i64) -> Result<i64, IngestError> {
    let err = |reason: &str| IngestError::Time {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    if v.starts_with(|c: char| c.is_ascii_digit())
        && v.ends_with(|c: char| c.is_ascii_alphabetic())
        && !v.contains(['-', ':', 'T'])
    {
        // A duration back from now, through the one duration parser (`0s` is now).
        if v.trim_start_matches(['0', '.'])
            .starts_with(|c: char| c.is_ascii_alphabetic())
        {
            return Ok(now_ms);
        }
        let d = tessera_core::units::parse_duration(v).map_err(|e| err(&e))?;
        let ms = i64::try_from(d.as_millis()).map_err(|_| err("duration too long"))?;
        return Ok(now_ms.saturating_sub(ms));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_millis());
    }
    Err(err(
        "expected a duration like 7d or 12h, an RFC 3339 time, or a date YYYY-MM-DD",
    ))
}

/// Formats unix ms as RFC 3339 UTC (for reports).
pub fn fmt_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}
