//! The ingest driver: [`ingest_parts`] resolves every source into work items, reads each (history
//! files checked up front and scanned lazily, CSV files and Prometheus servers through their
//! readers), keeps the rows partitioned by node where it can ([`Part`]), checks history for
//! duplicate rows where there is a sign of them, and fills the report's row counts, time
//! ranges, sampling and warnings; [`ingest`] is the union of its partitions as one set of
//! canonical [`Frames`].
//!
//! It parses no file format itself (`history`, `csv`, `prometheus` do) and detects nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::frames::schema::{Polars as _, TableSchema as _};
use polars::prelude::*;

use crate::frames::Frames;

use super::error::IngestError;
use super::report::{IngestReport, TableStats};
use super::resample::Sampling;
use super::source::Source;
use super::{IngestOptions, WorkItem, dedupe, history, period};
use crate::frames::schema::{self, Table};

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

/// The start of the earliest row's interval (`ts − interval_ms`, unix ms) over every table of
/// `parts`, `None` without rows: where the data starts, for [`crate::range`]. Reads two columns.
pub fn first_row_start(parts: &[Part]) -> Result<Option<i64>, IngestError> {
    let mut first: Option<i64> = None;
    for p in parts {
        for t in [Table::Gpu, Table::Mig, Table::Process] {
            let df = p
                .frames
                .table(t)
                .clone()
                .select([(col("ts").cast(DataType::Int64)
                    - col("interval_ms").cast(DataType::Int64))
                .min()
                .alias("start")])
                .collect()?;
            let v = df.column("start")?.cast(&DataType::Int64)?.i64()?.get(0);
            first = min_opt(first, v);
        }
    }
    Ok(first)
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
    let items = work_items(sources, &mut report)?;
    let single = items.iter().any(|i| matches!(i, WorkItem::Read(_)));
    let total = items.len();
    let mut g = Gathered {
        single,
        total,
        parts: BTreeMap::new(),
        extents: BTreeMap::new(),
        scans: BTreeMap::new(),
        files: BTreeMap::new(),
    };
    for (i, item) in items.into_iter().enumerate() {
        g.item(item, opts, &mut report)?;
        report.files += 1;
        if let Some(p) = opts.progress {
            p(i + 1, total);
        }
    }
    g.scan_history(opts)?;
    if g.parts.is_empty() && single {
        g.parts.insert("*".into(), BTreeMap::new());
    }
    warn_history_interval(&mut report, opts);
    let mut out = Vec::with_capacity(g.parts.len());
    for (key, tables) in std::mem::take(&mut g.parts) {
        out.push(g.partition(key, tables, &mut report)?);
    }
    for t in Table::ALL {
        report.tables.entry(t).or_default();
    }
    Ok((out, report))
}

/// Every source's work items; a history file named by two sources (a folder and its parent,
/// overlapping globs) is read once.
fn work_items(sources: &[Source], report: &mut IngestReport) -> Result<Vec<WorkItem>, IngestError> {
    let mut items = Vec::new();
    for s in sources {
        items.extend(s.kind().items(s, report)?);
    }
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
    Ok(items)
}

/// A lazy frame of a partition's table, with its row count and time range when the Parquet
/// footers tell them (else they are computed by scanning `ts`), and whether the rows are
/// history (looked at for duplicates).
type Entry = (LazyFrame, Option<TableStats>, bool);

/// A checked Parquet file and its footer.
type Checked = (PathBuf, tessera_core::history::reader::FooterSummary);

/// What the work items gave, by partition.
struct Gathered {
    /// Whether everything is one partition (`*`): any source is CSV or Prometheus.
    single: bool,
    /// The number of work items.
    total: usize,
    /// Lazy frames by partition and table.
    parts: BTreeMap<String, BTreeMap<Table, Vec<Entry>>>,
    /// What is known cheaply about each history file, by partition and table: the signs of
    /// duplicate rows ([`dedupe`]).
    extents: BTreeMap<String, BTreeMap<Table, Vec<dedupe::Extent>>>,
    /// Checked Parquet files by (partition, source, table), scanned together
    /// ([`Gathered::scan_history`]).
    scans: BTreeMap<(String, String, Table), Vec<Checked>>,
    /// The Parquet files each partition's frames scan (history; Prometheus groups spilled).
    files: BTreeMap<String, Vec<PathBuf>>,
}

impl Gathered {
    /// The partition of a node's rows.
    fn key(&self, node: &str) -> String {
        if self.single {
            "*".to_string()
        } else {
            node.to_string()
        }
    }

    /// Adds a frame to a partition's table.
    fn push(&mut self, part: String, table: Table, entry: Entry) {
        self.parts
            .entry(part)
            .or_default()
            .entry(table)
            .or_default()
            .push(entry);
    }

    /// Records a history file's extent.
    fn extent(&mut self, node: &str, table: Table, e: dedupe::Extent) {
        let part = self.key(node);
        self.extents
            .entry(part)
            .or_default()
            .entry(table)
            .or_default()
            .push(e);
    }

    /// Reads (or, for Parquet, checks) one work item.
    fn item(
        &mut self,
        item: WorkItem,
        opts: &IngestOptions,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
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
                let extent = dedupe::Extent {
                    rows: footer.rows,
                    ts: footer.ts_range,
                    gpus,
                    interval_ms,
                    holds_duplicates: false,
                };
                self.extent(&node, table, extent);
                let group = self.scans.entry((self.key(&node), source, table));
                group.or_default().push((path, footer));
            }
            WorkItem::Jsonl {
                table,
                path,
                source,
                node,
                interval_ms,
            } => {
                let df = history::read_open_segment(table, &path, opts, report)?;
                let ts = df.column("ts")?.cast(&DataType::Int64)?;
                let ts = ts.i64()?;
                let extent = dedupe::Extent {
                    rows: df.height() as u64,
                    ts: ts.min().zip(ts.max()),
                    gpus: None,
                    interval_ms,
                    holds_duplicates: dedupe::holds_duplicates(&df, table)?,
                };
                self.extent(&node, table, extent);
                let lf = canonical(df.lazy(), table, &source, opts);
                self.push(self.key(&node), table, (lf, None, true));
            }
            WorkItem::Read(source) => self.read(&source, opts, report)?,
        }
        Ok(())
    }

    /// Reads a source through its kind, by the partitions it gives: they stand when it is the
    /// only work item; else its rows join partition `*`.
    fn read(
        &mut self,
        source: &Source,
        opts: &IngestOptions,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        let name = source.to_string();
        let rows = source.kind().read(source.location(), opts, report)?;
        if let Some((sampling, verb)) = rows.sampling {
            note_sampling(report, &name, verb, sampling, opts.interval_ms);
        }
        for (group, tables, spilled) in rows.parts {
            let part = if self.total == 1 { group } else { self.key("") };
            self.files.entry(part.clone()).or_default().extend(spilled);
            for (table, lf) in tables {
                let lf = canonical(lf, table, &name, opts);
                self.push(part.clone(), table, (lf, None, false));
            }
        }
        Ok(())
    }

    /// The checked Parquet files scanned, by partition, source and table.
    fn scan_history(&mut self, opts: &IngestOptions) -> Result<(), IngestError> {
        for ((part, source, table), checked) in std::mem::take(&mut self.scans) {
            let paths: Vec<PathBuf> = checked.iter().map(|c| c.0.clone()).collect();
            let lf = history::scan_parquet_files(Some(table), &paths)?;
            self.files.entry(part.clone()).or_default().extend(paths);
            let known = footer_stats(&checked, opts);
            let lf = canonical(lf, table, &source, opts);
            self.push(part, table, (lf, known, true));
        }
        Ok(())
    }

    /// One partition's frames; its history deduplicated when any of its tables shows a sign of
    /// duplicates.
    fn partition(
        &mut self,
        key: String,
        mut tables: BTreeMap<Table, Vec<Entry>>,
        report: &mut IngestReport,
    ) -> Result<Part, IngestError> {
        let files = self.files.remove(&key).unwrap_or_default();
        // A sign of duplicates in one table checks every table of the partition.
        let sign = self
            .extents
            .get(&key)
            .into_iter()
            .flat_map(|by_table| by_table.values())
            .find_map(|e| dedupe::sign(e));
        if let Some(why) = sign {
            report.duplicate_checks.insert(key.clone(), why);
        }
        let mut build = |t: Table| {
            let entries = tables.remove(&t).unwrap_or_default();
            table_frame(t, entries, (&key, &files, sign), report)
        };
        let frames = Frames {
            gpu: build(Table::Gpu)?,
            mig: build(Table::Mig)?,
            process: build(Table::Process)?,
        };
        Ok(Part { key, frames, files })
    }
}

/// Without a time filter, the footers' row counts and `ts` statistics are the stats.
fn footer_stats(checked: &[Checked], opts: &IngestOptions) -> Option<TableStats> {
    (opts.footer_stats
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
    })
}

/// Says when an explicit `--interval` does not apply to history rows of another interval.
fn warn_history_interval(report: &mut IngestReport, opts: &IngestOptions) {
    let Some(req) = opts.interval_ms else {
        return;
    };
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

/// One table of partition `key` (its Parquet `files`, its sign of duplicates): each entry's
/// stats added to the report, the history entries deduplicated when there is a sign, all
/// concatenated.
fn table_frame(
    t: Table,
    entries: Vec<Entry>,
    (key, files, sign): (&str, &[PathBuf], Option<&'static str>),
    report: &mut IngestReport,
) -> Result<LazyFrame, IngestError> {
    let mut lfs = Vec::with_capacity(entries.len());
    let (mut hist, mut hist_rows) = (Vec::new(), 0u64);
    for (lf, known, is_history) in entries {
        let stats = match known {
            Some(s) => s,
            None => table_stats(lf.clone()).map_err(|e| name_unreadable(files).unwrap_or(e))?,
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
        let (lf, dropped) =
            dedupe::dedupe(all, t, hist_rows).map_err(|e| name_unreadable(files).unwrap_or(e))?;
        if dropped > 0 {
            warn_duplicates(t, key, why, dropped, report);
        }
        lfs.push(lf);
    }
    Ok(match lfs.len() {
        0 => DataFrame::empty_with_schema(&t.frame_schema()).lazy(),
        1 => lfs.into_iter().next().expect("one"),
        _ => concat(lfs, UnionArgs::default())?,
    })
}

/// Counts the `dropped` duplicate rows of table `t` of partition `key` out, and says so.
fn warn_duplicates(
    t: Table,
    key: &str,
    why: &'static str,
    dropped: u64,
    report: &mut IngestReport,
) {
    report.tables.entry(t).or_default().rows -= dropped;
    *report
        .skipped
        .entry(format!("duplicate {} rows (same key and ts)", t.name()))
        .or_default() += dropped;
    let whose = match key {
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
    // The range rule (crate::range): rows ending in (since, until].
    if let Some(since) = opts.since {
        lf = lf.filter(col("ts").cast(DataType::Int64).gt(lit(since)));
    }
    if let Some(until) = opts.until {
        lf = lf.filter(col("ts").cast(DataType::Int64).lt_eq(lit(until)));
    }
    let mut exprs: Vec<Expr> = table
        .columns()
        .iter()
        .copied()
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
