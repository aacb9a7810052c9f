//! Benchmark helper (docs/performance.md, History): times the phases of `tessera ingest` on
//! `history:` sources — `ingest()` (resolve, schema checks, lazy scans, ts stats), the summary
//! `describe()` — and, with `--collect`, collects every canonical frame in full (all columns,
//! every row) one table at a time. Prints seconds and the process's peak RSS after each phase.
//!
//!     cargo run --release -p tessera --example ingest_collect -- [--collect] history:DIR ...

use std::time::Instant;

use polars::prelude::*;
use tessera::frames::schema::{self, Polars as _};
use tessera::frames::{Frames, Table};
use tessera::ingest::{self, IngestOptions, IngestReport, Source, summary};

/// Experiment (`--grouped DIR`): the same canonical frames built from one multi-file Parquet scan
/// per (node, table) instead of one scan per file; no schema checks, no open segments.
fn grouped(dir: &str) -> anyhow::Result<Frames> {
    let mut nodes: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("tessera-history.json").is_file())
        .collect();
    nodes.sort();
    let build = |t: Table| -> anyhow::Result<LazyFrame> {
        let mut lfs = Vec::new();
        for n in &nodes {
            let d = n.join(t.name());
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            let mut paths: Vec<String> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if paths.is_empty() {
                continue;
            }
            paths.sort();
            let buf = paths.into_iter().map(PlRefPath::new).collect();
            let lf = LazyFrame::scan_parquet_files(buf, ScanArgsParquet::default())?;
            let mut exprs: Vec<Expr> = t
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
            exprs.push(lit(format!("history:{}", n.display())).alias("source"));
            lfs.push(lf.select(exprs));
        }
        Ok(concat(lfs, UnionArgs::default())?)
    };
    Ok(Frames {
        gpu: build(Table::Gpu)?,
        mig: build(Table::Mig)?,
        process: build(Table::Process)?,
    })
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let mut collect = false;
    let mut group_dir = None;
    let mut sources: Vec<Source> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--collect" {
            collect = true;
        } else if a == "--grouped" {
            group_dir = args.next();
        } else {
            sources.push(a.parse()?);
        }
    }
    let t0 = Instant::now();
    let (frames, report) = match &group_dir {
        Some(d) => (grouped(d)?, IngestReport::default()),
        None => ingest::ingest(&sources, &IngestOptions::default())?,
    };
    println!(
        "ingest(): {} files, {:.2} s, peak RSS {:.0} MiB",
        report.files,
        t0.elapsed().as_secs_f64(),
        peak_rss_mib()
    );
    let t1 = Instant::now();
    let s = summary::describe(&frames, &report)?;
    println!(
        "describe(): {:.2} s, peak RSS {:.0} MiB; rows {:?}",
        t1.elapsed().as_secs_f64(),
        peak_rss_mib(),
        s.iter().map(|t| t.rows).collect::<Vec<_>>()
    );
    if collect {
        for t in Table::ALL {
            let t2 = Instant::now();
            let df = frames.table(t).clone().collect()?;
            println!(
                "collect {:<8} rows {:>11} x {:>2} columns, {:>8.1} MiB in frame, {:.2} s, peak RSS {:.0} MiB",
                t.name(),
                df.height(),
                df.width(),
                df.estimated_size() as f64 / (1u64 << 20) as f64,
                t2.elapsed().as_secs_f64(),
                peak_rss_mib()
            );
        }
    }
    Ok(())
}
