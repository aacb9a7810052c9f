//! Ingest: history (Parquet written here with polars + zstd, open JSONL segments), generic CSV and
//! nvidia-smi CSV, good and bad inputs, through the library and the `tessera ingest` binary.

use crate::support::cli::tessera;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde_json::{Value, json};
use tessera::frames::Frames;
use tessera::frames::schema::{ColType, Polars as _, Table, TableSchema as _};
use tessera::ingest::{self, IngestError, IngestOptions, IngestReport, Source};

const T0: i64 = 1_793_628_000_000; // 2026-11-02T14:00:00Z

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/csv")
        .join(name)
}

fn gpu_row(ts: i64, busy_max: Option<f64>) -> Value {
    json!({
        "ts": ts, "interval_ms": 10000, "node": "node-a", "gpu": 0, "uuid": "GPU-a",
        "samples": 10, "model": "NVIDIA H100 80GB HBM3", "status": "ok",
        "busy_mean": busy_max.map(|b| b / 2.0), "busy_max": busy_max,
        "sm_active_mean": null, "sm_active_max": null, "sm_occupancy_mean": null,
        "memory_controller_mean": 0.1, "memory_used_max_bytes": 1_000_000_000u64,
        "memory_total_bytes": 85_899_345_920u64, "power_mean_watts": 300.0,
        "energy_delta_joules": 3000.0, "temperature_max_celsius": 50.0, "xid_count": 0,
        "mig_enabled": false
    })
}

fn mig_row(ts: i64) -> Value {
    json!({
        "ts": ts, "interval_ms": 10000, "node": "node-a", "gpu": 1, "uuid": "GPU-b",
        "samples": 10, "gpu_instance": 1, "compute_instance": 0, "profile": "3g.40gb",
        "profile_id": 9, "placement_start": 0, "placement_size": 4, "mig_uuid": "MIG-1",
        "memory_used_max_bytes": 5u64, "memory_total_bytes": 40u64,
        "sm_active_mean": 0.25, "sm_active_max": 0.5
    })
}

fn process_row(ts: i64) -> Value {
    json!({
        "ts": ts, "interval_ms": 10000, "node": "node-a", "gpu": 0, "uuid": "GPU-a",
        "samples": 10, "pid": 4242, "process": "python", "gpu_instance": null,
        "compute_instance": null, "pod_uid": "uid-1", "container_id": null,
        "slurm_job_id": null, "namespace": "ml", "pod": "train-0",
        "memory_used_max_bytes": 7u64, "sm_mean": 0.2, "sm_max": 0.4
    })
}

/// A DataFrame in a history file's schema, built from JSON rows.
fn frame(table: Table, rows: &[Value]) -> DataFrame {
    let cols: Vec<Column> = table
        .columns()
        .iter()
        .copied()
        .map(|c| {
            let vals = rows.iter().map(|r| &r[c.name]);
            let name: PlSmallStr = c.name.into();
            match c.ty {
                ColType::Int64 => Column::new(name, vals.map(Value::as_i64).collect::<Vec<_>>()),
                ColType::UInt32 => Column::new(
                    name,
                    vals.map(|v| v.as_u64().map(|n| n as u32))
                        .collect::<Vec<_>>(),
                ),
                ColType::UInt64 => Column::new(name, vals.map(Value::as_u64).collect::<Vec<_>>()),
                ColType::Float64 => Column::new(name, vals.map(Value::as_f64).collect::<Vec<_>>()),
                ColType::Utf8 => Column::new(name, vals.map(Value::as_str).collect::<Vec<_>>()),
                ColType::Bool => Column::new(name, vals.map(Value::as_bool).collect::<Vec<_>>()),
            }
        })
        .collect();
    DataFrame::new_infer_height(cols).expect("frame")
}

fn write_parquet(path: &Path, df: &mut DataFrame) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let f = std::fs::File::create(path).expect("create");
    ParquetWriter::new(f)
        .with_compression(ParquetCompression::Zstd(None))
        .finish(df)
        .expect("write parquet");
}

fn write_manifest(node_dir: &Path, version: u64) {
    std::fs::create_dir_all(node_dir).expect("mkdir");
    let node = node_dir.file_name().and_then(|s| s.to_str()).expect("name");
    std::fs::write(
        node_dir.join("tessera-history.json"),
        format!(
            r#"{{"format": "tessera-history", "version": {version}, "node": "{node}", "interval_ms": 10000}}"#
        ),
    )
    .expect("manifest");
}

fn jsonl(table: &str, rows: &[Value]) -> String {
    let mut s = format!("{{\"tessera_history\": 1, \"table\": \"{table}\"}}\n");
    for r in rows {
        s.push_str(&r.to_string());
        s.push('\n');
    }
    s
}

/// A node folder with one closed hour per table and an open gpu segment with a torn last line.
fn good_history(root: &Path) -> PathBuf {
    let node = root.join("node-a");
    write_manifest(&node, 1);
    let rows: Vec<Value> = [0.5, 0.9, 0.7]
        .iter()
        .enumerate()
        .map(|(i, b)| gpu_row(T0 + 10_000 * (i as i64 + 1), Some(*b)))
        .collect();
    write_parquet(
        &node.join("gpu/2026-11-02T14.parquet"),
        &mut frame(Table::Gpu, &rows),
    );
    write_parquet(
        &node.join("mig/2026-11-02T14.parquet"),
        &mut frame(Table::Mig, &[mig_row(T0 + 10_000)]),
    );
    write_parquet(
        &node.join("process/2026-11-02T14.parquet"),
        &mut frame(Table::Process, &[process_row(T0 + 10_000)]),
    );
    let open_rows = [
        gpu_row(T0 + 3_600_000, Some(0.3)),
        gpu_row(T0 + 3_610_000, None),
    ];
    let mut text = jsonl("gpu", &open_rows);
    text.push_str(r#"{"ts": 1793631620000, "interval_ms": 10"#); // torn: killed mid-write
    std::fs::write(node.join("gpu/2026-11-02T15.open.jsonl"), text).expect("jsonl");
    node
}

/// Ingests with 10 s rows: the CSV fixtures sample every few seconds, and these tests check
/// how values of one row combine (auto rows are tested in `auto_rows_*`).
fn run(sources: &[Source], skip: bool) -> Result<(Frames, IngestReport), IngestError> {
    let opts = IngestOptions {
        skip_bad_rows: skip,
        interval_ms: Some(10_000),
        ..IngestOptions::default()
    };
    ingest::ingest(sources, &opts)
}

fn history(p: &Path) -> Source {
    Source::history(p.to_string_lossy().into_owned())
}

fn csv(p: &Path) -> Source {
    Source::csv(p)
}

fn f64s(df: &DataFrame, name: &str) -> Vec<Option<f64>> {
    let ca = df.column(name).expect(name).f64().expect("f64");
    (0..ca.len()).map(|i| ca.get(i)).collect()
}

fn u64s(df: &DataFrame, name: &str) -> Vec<Option<u64>> {
    let c = df
        .column(name)
        .expect(name)
        .cast(&DataType::UInt64)
        .expect("cast");
    let ca = c.u64().expect("u64");
    (0..ca.len()).map(|i| ca.get(i)).collect()
}

fn strs(df: &DataFrame, name: &str) -> Vec<Option<String>> {
    let c = df.column(name).expect(name);
    let ca = c.str().expect("str");
    (0..ca.len())
        .map(|i| ca.get(i).map(str::to_string))
        .collect()
}

fn ts_ms(df: &DataFrame) -> Vec<i64> {
    let c = df
        .column("ts")
        .expect("ts")
        .cast(&DataType::Int64)
        .expect("cast");
    let ca = c.i64().expect("i64");
    (0..ca.len()).filter_map(|i| ca.get(i)).collect()
}

fn sorted(lf: &LazyFrame, by: &[&str]) -> DataFrame {
    lf.clone()
        .sort(
            by.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            SortMultipleOptions::default(),
        )
        .collect()
        .expect("collect")
}

fn err_text(r: Result<(Frames, IngestReport), IngestError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------- history, good

#[test]
fn history_parquet_and_open_segment_with_torn_last_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    for spec in [
        node.clone(),
        dir.path().to_path_buf(),
        dir.path().join("node-*"),
    ] {
        let (frames, report) = run(&[history(&spec)], false).expect("ingest");
        assert_eq!(report.tables[&Table::Gpu].rows, 5, "{spec:?}");
        assert_eq!(report.tables[&Table::Mig].rows, 1);
        assert_eq!(report.tables[&Table::Process].rows, 1);
        assert_eq!(report.torn_lines, 1);
        assert_eq!(report.skipped["torn last line of an open segment"], 1);
        assert_eq!(report.time_range(), Some((T0 + 10_000, T0 + 3_610_000)));
        assert_eq!(report.files, 4);

        let gpu = sorted(&frames.gpu, &["ts"]);
        assert_eq!(
            gpu.schema().get("ts"),
            Some(&DataType::Datetime(
                TimeUnit::Milliseconds,
                Some(TimeZone::UTC)
            ))
        );
        assert_eq!(
            f64s(&gpu, "busy_max"),
            [Some(0.5), Some(0.9), Some(0.7), Some(0.3), None]
        );
        let max = gpu
            .column("busy_max")
            .expect("c")
            .as_materialized_series()
            .max::<f64>();
        assert_eq!(max.expect("max"), Some(0.9));
        let want_source = format!("history:{}", node.display());
        assert_eq!(
            strs(&gpu, "source")[0].as_deref(),
            Some(want_source.as_str())
        );
        let names: Vec<String> = gpu
            .get_column_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        let want: Vec<String> = Table::Gpu
            .frame_schema()
            .iter_names()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(names, want);
        let process = frames.process.clone().collect().expect("p");
        assert_eq!(strs(&process, "pod"), [Some("train-0".to_string())]);
    }
}

#[test]
fn time_filter_keeps_only_rows_in_range() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    // The range rule (docs/frames.md, "Time ranges"): rows ending in (since, until], so the
    // row ending exactly at `since` is the range before's and the one ending at `until` is in.
    let opts = IngestOptions {
        since: Some(T0 + 20_000),
        until: Some(T0 + 3_600_000),
        ..IngestOptions::default()
    };
    let (frames, report) = ingest::ingest(&[history(&node)], &opts).expect("ingest");
    assert_eq!(report.tables[&Table::Gpu].rows, 2);
    assert_eq!(
        ts_ms(&sorted(&frames.gpu, &["ts"])),
        [T0 + 30_000, T0 + 3_600_000]
    );
}

// ---------------------------------------------------------------- history, bad

#[test]
fn wrong_manifest_version_names_file_and_versions() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    write_manifest(&node, 4);
    let e = err_text(run(&[history(&node)], false));
    assert!(e.contains("tessera-history.json"), "{e}");
    assert!(
        e.contains("history version 4, this reader knows versions 1 to 3"),
        "{e}"
    );
}

#[test]
fn wrong_open_segment_header_version() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let p = node.join("gpu/2026-11-02T15.open.jsonl");
    std::fs::write(&p, "{\"tessera_history\": 7, \"table\": \"gpu\"}\n").expect("w");
    let e = err_text(run(&[history(&node)], false));
    assert!(
        e.contains("2026-11-02T15.open.jsonl") && e.contains("version 7"),
        "{e}"
    );
}

#[test]
fn truncated_and_corrupt_parquet_name_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let p = node.join("gpu/2026-11-02T14.parquet");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..bytes.len() / 2]).expect("truncate");
    let e = err_text(run(&[history(&node)], false));
    assert!(
        e.contains("2026-11-02T14.parquet") && e.contains("truncated or corrupt"),
        "{e}"
    );
    std::fs::write(&p, b"this is not parquet").expect("garbage");
    let e = err_text(run(&[history(&node)], false));
    assert!(e.contains("2026-11-02T14.parquet"), "{e}");
}

#[test]
fn missing_unknown_and_mistyped_parquet_columns() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let p = node.join("gpu/2026-11-02T14.parquet");
    let base = frame(Table::Gpu, &[gpu_row(T0 + 10_000, Some(0.5))]);

    let mut missing = base.drop("busy_max").expect("drop");
    write_parquet(&p, &mut missing);
    let e = err_text(run(&[history(&node)], false));
    assert!(
        e.contains("2026-11-02T14.parquet") && e.contains("column \"busy_max\": missing"),
        "{e}"
    );

    let mut unknown = base.clone();
    unknown
        .with_column(Column::new("fan_speed".into(), [1.0f64]))
        .expect("add");
    write_parquet(&p, &mut unknown);
    let e = err_text(run(&[history(&node)], false));
    assert!(e.contains("column \"fan_speed\": unknown column"), "{e}");

    let mut mistyped = base.clone();
    mistyped
        .with_column(Column::new("busy_max".into(), ["high"]))
        .expect("replace");
    write_parquet(&p, &mut mistyped);
    let e = err_text(run(&[history(&node)], false));
    assert!(
        e.contains("column \"busy_max\": type str, expected float64"),
        "{e}"
    );
}

#[test]
fn bad_line_inside_open_segment_is_an_error_or_a_counted_skip() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let p = node.join("gpu/2026-11-02T15.open.jsonl");
    let mut unknown_col = gpu_row(T0 + 3_620_000, Some(0.1));
    unknown_col["fan"] = json!(1);
    let mut text = jsonl("gpu", &[gpu_row(T0 + 3_600_000, Some(0.3))]);
    text.push_str("{not json\n");
    text.push_str(&format!("{unknown_col}\n"));
    text.push_str(&format!("{}\n", gpu_row(T0 + 3_630_000, Some(0.2))));
    std::fs::write(&p, text).expect("w");
    let e = err_text(run(&[history(&node)], false));
    assert!(
        e.contains("2026-11-02T15.open.jsonl:3: not valid JSON"),
        "{e}"
    );

    let (frames, report) = run(&[history(&node)], true).expect("skip");
    assert_eq!(report.skipped["bad line in an open segment"], 2);
    assert_eq!(report.torn_lines, 0);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("skipped 2 bad line(s)")),
        "{:?}",
        report.warnings
    );
    assert_eq!(report.tables[&Table::Gpu].rows, 5);
    let gpu = sorted(&frames.gpu, &["ts"]);
    assert_eq!(f64s(&gpu, "busy_max")[3..], [Some(0.3), Some(0.2)]);
}

// ---------------------------------------------------------------- sources

#[test]
fn source_parsing() {
    assert_eq!(
        "history:/h".parse::<Source>().expect("h"),
        Source::history("/h")
    );
    assert_eq!(
        "csv:a.csv".parse::<Source>().expect("c"),
        Source::csv("a.csv")
    );
    assert_eq!(
        "prometheus:http://prom:9090".parse::<Source>().expect("p"),
        Source::prometheus("http://prom:9090")
    );
    let e = "s3:bucket"
        .parse::<Source>()
        .expect_err("unknown")
        .to_string();
    assert!(e.contains("unknown scheme \"s3\""), "{e}");
    assert!("history:".parse::<Source>().is_err());
    assert!("nocolon".parse::<Source>().is_err());
    assert!("prometheus:prom:9090".parse::<Source>().is_err());
    let e = err_text(run(&[Source::history("/nonexistent/x")], false));
    assert!(e.contains("/nonexistent/x"), "{e}");
}

#[test]
fn parse_time_forms() {
    assert_eq!(
        ingest::parse_time("7d", T0).expect("d"),
        T0 - 7 * 86_400_000
    );
    assert_eq!(
        ingest::parse_time("2026-11-02T14:00:00Z", 0).expect("rfc"),
        T0
    );
    assert_eq!(
        ingest::parse_time("2026-11-02", 0).expect("date"),
        T0 - 14 * 3_600_000
    );
    assert!(ingest::parse_time("7x", T0).is_err());
    assert!(ingest::parse_time("last tuesday", T0).is_err());
}

// ---------------------------------------------------------------- CSV

#[test]
fn generic_csv_pivots_and_buckets() {
    let (frames, report) = run(&[csv(&fixture("generic.csv"))], false).expect("ingest");
    assert_eq!(report.skipped["csv: unknown metric"], 1);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("fan_speed_ratio")),
        "{:?}",
        report.warnings
    );

    let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
    assert_eq!(gpu.height(), 3);
    assert_eq!(ts_ms(&gpu), [T0 + 10_000, T0 + 20_000, T0 + 10_000]);
    assert_eq!(
        strs(&gpu, "uuid"),
        [
            Some("GPU-aaaa".into()),
            Some("GPU-aaaa".into()),
            Some("GPU-bbbb".into())
        ]
    );
    let busy_mean = f64s(&gpu, "busy_mean");
    assert!((busy_mean[0].expect("m") - 0.6).abs() < 1e-9);
    assert_eq!(f64s(&gpu, "busy_max"), [Some(1.0), Some(0.4), Some(0.0)]);
    assert_eq!(
        u64s(&gpu, "memory_used_max_bytes"),
        [Some(3000), None, None]
    );
    assert_eq!(u64s(&gpu, "memory_total_bytes")[0], Some(85_899_345_920));
    assert_eq!(f64s(&gpu, "power_mean_watts"), [Some(200.0), None, None]);
    assert_eq!(u64s(&gpu, "samples"), [Some(6), Some(1), Some(1)]);
    assert_eq!(u64s(&gpu, "gpu"), [Some(0), Some(0), Some(1)]);
    assert_eq!(u64s(&gpu, "interval_ms"), [Some(10_000); 3]);
    assert_eq!(
        strs(&gpu, "model")[0].as_deref(),
        Some("NVIDIA H100 80GB HBM3, SXM")
    );
    assert_eq!(strs(&gpu, "node")[2].as_deref(), Some("node-a"));
    let src = format!("csv:{}", fixture("generic.csv").display());
    assert_eq!(strs(&gpu, "source")[0].as_deref(), Some(src.as_str()));

    let mig = frames.mig.clone().collect().expect("mig");
    assert_eq!(mig.height(), 1);
    assert_eq!(f64s(&mig, "sm_active_mean"), [Some(0.5)]);
    assert_eq!(f64s(&mig, "sm_active_max"), [Some(0.75)]);
    assert_eq!(strs(&mig, "mig_uuid"), [Some("MIG-1111".into())]);
    assert_eq!(u64s(&mig, "gpu_instance"), [Some(1)]);

    let process = frames.process.clone().collect().expect("process");
    assert_eq!(u64s(&process, "pid"), [Some(4242)]);
    assert_eq!(
        u64s(&process, "memory_used_max_bytes"),
        [Some(5_000_000_000)]
    );
    assert_eq!(f64s(&process, "sm_max"), [Some(0.3)]);
    assert_eq!(strs(&process, "namespace"), [Some("ml".into())]);
}

#[test]
fn interval_option_changes_buckets() {
    let opts = IngestOptions {
        interval_ms: Some(60_000),
        ..IngestOptions::default()
    };
    let (frames, _) = ingest::ingest(&[csv(&fixture("generic.csv"))], &opts).expect("ingest");
    let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
    assert_eq!(ts_ms(&gpu), [T0 + 60_000, T0 + 60_000]);
    assert!((f64s(&gpu, "busy_mean")[0].expect("m") - 0.55).abs() < 1e-9);
}

#[test]
fn csv_garbage_lines_error_or_exact_skip_count() {
    let path = fixture("garbage.csv");
    let e = err_text(run(&[csv(&path)], false));
    assert!(e.contains("garbage.csv:3: expected 6 fields"), "{e}");

    let (frames, report) = run(&[csv(&path)], true).expect("skip");
    assert_eq!(report.skipped_rows(), 3);
    assert_eq!(report.skipped["csv: wrong number of fields"], 1);
    assert_eq!(report.skipped["csv: bad timestamp"], 1);
    assert_eq!(report.skipped["csv: bad value"], 1);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("skipped 3 bad line(s)") && w.contains("first at line 3")),
        "{:?}",
        report.warnings
    );
    let gpu = frames.gpu.clone().collect().expect("gpu");
    assert_eq!(f64s(&gpu, "busy_max"), [Some(0.9)]);
    assert_eq!(u64s(&gpu, "samples"), [Some(3)]);
}

#[test]
fn ratio_out_of_range_is_rejected() {
    let path = fixture("ratio-out-of-range.csv");
    let e = err_text(run(&[csv(&path)], false));
    assert!(
        e.contains("ratio-out-of-range.csv:3:") && e.contains("within 0–1, got 45"),
        "{e}"
    );
    let (_, report) = run(&[csv(&path)], true).expect("skip");
    assert_eq!(report.skipped["csv: ratio out of range"], 1);
}

#[test]
fn nvidia_smi_csv_normalises_units_and_markers() {
    let (frames, report) = run(&[csv(&fixture("nvidia-smi.csv"))], false).expect("ingest");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("1 repeated header")),
        "{:?}",
        report.warnings
    );
    let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
    assert_eq!(gpu.height(), 3);
    assert_eq!(ts_ms(&gpu), [T0 + 10_000, T0 + 20_000, T0 + 10_000]);
    let mean = f64s(&gpu, "busy_mean");
    assert!((mean[0].expect("m") - 0.70).abs() < 1e-9, "{mean:?}");
    assert_eq!(mean[2], None, "[N/A] is null, not 0");
    assert!((f64s(&gpu, "busy_max")[0].expect("m") - 0.95).abs() < 1e-9);
    assert!((f64s(&gpu, "memory_controller_mean")[0].expect("m") - 0.20).abs() < 1e-9);
    assert_eq!(
        f64s(&gpu, "memory_controller_mean")[2],
        None,
        "[Not Supported] is null"
    );
    assert_eq!(
        u64s(&gpu, "memory_used_max_bytes"),
        [Some(2048 * 1_048_576), Some(512 * 1_048_576), Some(0)]
    );
    assert_eq!(
        u64s(&gpu, "memory_total_bytes")[0],
        Some(81_559 * 1_048_576)
    );
    assert_eq!(
        f64s(&gpu, "power_mean_watts"),
        [Some(300.0), Some(70.0), None]
    );
    assert_eq!(
        f64s(&gpu, "temperature_max_celsius"),
        [Some(44.0), Some(38.0), Some(35.0)]
    );
    assert_eq!(u64s(&gpu, "gpu"), [Some(0), Some(0), Some(1)]);
    assert_eq!(
        strs(&gpu, "model")[0].as_deref(),
        Some("NVIDIA H100 80GB HBM3")
    );
    assert_eq!(u64s(&gpu, "samples"), [Some(2), Some(1), Some(1)]);
}

#[test]
fn sources_combine() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let (frames, report) =
        run(&[history(&node), csv(&fixture("nvidia-smi.csv"))], false).expect("ingest");
    assert_eq!(report.tables[&Table::Gpu].rows, 8);
    let srcs = frames
        .gpu
        .clone()
        .group_by([col("source")])
        .agg([len()])
        .collect()
        .expect("g");
    assert_eq!(srcs.height(), 2);
}

// ---------------------------------------------------------------- schema vs doc

/// The column lists in `schema.rs` agree with the tables in docs/history-format.md.
#[test]
fn schema_matches_the_history_doc() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/history-format.md"),
    )
    .expect("doc");
    let mut section = String::new();
    let mut from_doc: Vec<(String, String, String, bool)> = Vec::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("### ") {
            section = h.trim().trim_matches('`').to_string();
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let ty = cells[2];
        for name in cells[1].split(',') {
            let name = name.trim().trim_matches('`').to_string();
            from_doc.push((
                section.clone(),
                name,
                ty.trim_end_matches('?').to_string(),
                ty.ends_with('?'),
            ));
        }
    }
    let mut from_code = Vec::new();
    for c in tessera::frames::schema::COMMON.iter() {
        from_code.push((
            "Columns common to every table".to_string(),
            c.name.to_string(),
            c.ty.doc_name().to_string(),
            c.nullable,
        ));
    }
    for t in Table::ALL {
        for c in t.own_columns() {
            from_code.push((
                t.name().to_string(),
                c.name.to_string(),
                c.ty.doc_name().to_string(),
                c.nullable,
            ));
        }
    }
    assert_eq!(from_doc, from_code);
}

// ---------------------------------------------------------------- binary

#[test]
fn cli_ingest_table_json_and_errors() {
    let src = format!("csv:{}", fixture("nvidia-smi.csv").display());
    let out = tessera(&["ingest", "--source", &src, "--interval", "10s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("gpu") && stdout.contains("2026-11-02T14:00:10.000Z"),
        "{stdout}"
    );
    assert!(stdout.contains("busy_mean 33%"), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));

    let out = tessera(&[
        "ingest",
        "--source",
        &src,
        "--format",
        "json",
        "--interval",
        "10s",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["tables"][0]["rows"], 3);
    assert_eq!(v["tables"][0]["entities"], 2);

    let bad = format!("csv:{}", fixture("garbage.csv").display());
    let out = tessera(&["ingest", "--source", &bad]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("garbage.csv:3"), "{stderr}");

    let out = tessera(&[
        "ingest",
        "--source",
        &bad,
        "--skip-bad-rows",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["skipped"]["csv: bad value"], 1);

    // Nothing listens on port 1: three attempts, then one line naming the source.
    let out = tessera(&[
        "ingest",
        "--source",
        "prometheus:http://127.0.0.1:1",
        "--prometheus.timeout",
        "2s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("prometheus:http://127.0.0.1:1"), "{e}");
    assert!(e.contains("failed after 3 attempt(s)"), "{e}");
}

// ---------------------------------------------------------------- exporter interop

/// The frames' schema is core's column list (the one contract) with `ts` as a UTC datetime and
/// `source` added: no column of its own, none left out, in file order.
#[test]
fn frame_schema_is_the_contract_plus_source() {
    use tessera::frames::schema::TableSchema as _;
    for t in Table::ALL {
        let names: Vec<String> = t
            .frame_schema()
            .iter_names()
            .map(|n| n.to_string())
            .collect();
        let mut expected: Vec<String> = t.columns().iter().map(|c| c.name.to_string()).collect();
        expected.push("source".into());
        assert_eq!(names, expected, "table {}", t.name());
        assert_eq!(
            t.frame_schema().get("ts"),
            Some(&tessera::frames::schema::ts_dtype())
        );
    }
}

/// History written by the exporter's own writer (through its simulator) ingests row for row.
#[test]
fn ingests_history_written_by_the_exporter() {
    let tmp = tempfile::tempdir().expect("tmp");
    let scenario = tessera_core::sim::load_scenario(None).expect("demo");
    let s = tessera_core::simulate::simulate(&scenario, 1, tmp.path(), 10_000, 10_000)
        .expect("simulate");
    let (frames, report) = run(&[history(tmp.path())], false).expect("ingest");
    for (i, t) in Table::ALL.into_iter().enumerate() {
        assert_eq!(report.tables[&t].rows, s.rows[i], "{}", t.name());
    }
    assert_eq!(report.skipped_rows(), 0);
    let sources = frames
        .gpu
        .group_by([col("source")])
        .agg([len()])
        .collect()
        .expect("g");
    assert_eq!(sources.height(), s.nodes);
}

/// Day files from the writer's daily compaction ingest like hourly ones; an hourly file that a
/// day file lists (a compaction interrupted before its deletes) is left out with a warning, not
/// read twice.
#[test]
fn compacted_day_files_and_a_leftover_hourly_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let scenario = tessera_core::sim::load_scenario(None).expect("demo");
    let s = tessera_core::simulate::simulate(&scenario, 2, tmp.path(), 10_000, 10_000)
        .expect("simulate");
    let node = tmp.path().join(&scenario.nodes[0].name);
    let day = node.join("gpu/2026-11-02.parquet");
    assert!(day.exists());
    let listed = tessera_core::history::files::compacted_from(&day).expect("listed");
    assert!(listed.contains(&"2026-11-02T03.parquet".to_string()));
    // The leftover: a valid file under a listed name (its rows would double if read).
    std::fs::copy(&day, node.join("gpu/2026-11-02T03.parquet")).expect("copy");
    let (_, report) = run(&[history(tmp.path())], false).expect("ingest");
    for (i, t) in Table::ALL.into_iter().enumerate() {
        assert_eq!(report.tables[&t].rows, s.rows[i], "{}", t.name());
    }
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("2026-11-02T03.parquet") && w.contains("day file")),
        "{:?}",
        report.warnings
    );
}

/// A day file whose footer reads but whose data pages are damaged: ingest checks only footers,
/// so the damage shows when frames are collected; every command then names the file (exit 2)
/// instead of passing on polars' error, which names none.
#[test]
fn corrupt_data_page_names_the_file() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    for node in ["lab-a", "lab-b"] {
        for table in ["gpu", "mig", "process"] {
            let from = src.join(node).join(table);
            // git keeps no empty folders: the demo has no MIG rows, so no `mig/` in a clone.
            if !from.is_dir() {
                continue;
            }
            let to = tmp.path().join(node).join(table);
            std::fs::create_dir_all(&to).expect("mkdir");
            for e in std::fs::read_dir(&from).expect("read") {
                let e = e.expect("entry");
                std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
            }
        }
        std::fs::copy(
            src.join(node).join("tessera-history.json"),
            tmp.path().join(node).join("tessera-history.json"),
        )
        .expect("manifest");
    }
    let bad = tmp.path().join("lab-a/gpu/2026-11-03.parquet");
    let mut bytes = std::fs::read(&bad).expect("read");
    // Flip bytes in the first column chunks, far from the footer at the end.
    for b in &mut bytes[200..2000] {
        *b ^= 0x5a;
    }
    std::fs::write(&bad, &bytes).expect("write");
    let source = format!("history:{}", tmp.path().display());
    for cmd in [
        vec!["ingest", "--source", &source],
        vec!["analyze", "--source", &source],
        vec!["report", "--source", &source],
    ] {
        let out = tessera(&cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("lab-a/gpu/2026-11-03.parquet") && err.contains("does not decode"),
            "{cmd:?}: {err}"
        );
    }
}

/// A corrupt data page in a column `tessera ingest` did not read (its summary reads `ts`, the
/// keys and a few value columns) still fails it, naming the file: ingest is how a user checks the
/// data, so it decodes every column.
#[test]
fn ingest_decodes_every_column() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history/lab-a");
    let node = tmp.path().join("lab-a");
    std::fs::create_dir_all(node.join("gpu")).expect("mkdir");
    std::fs::copy(
        src.join("tessera-history.json"),
        node.join("tessera-history.json"),
    )
    .expect("manifest");
    std::fs::copy(
        src.join("gpu/2026-11-03.parquet"),
        node.join("gpu/2026-11-03.parquet"),
    )
    .expect("copy");
    let bad = node.join("gpu/2026-11-03.parquet");
    // The column chunks of `temperature_max_celsius`, which the summary does not otherwise read.
    let ranges: Vec<std::ops::Range<u64>> = {
        let mut r = ParquetReader::new(std::fs::File::open(&bad).expect("open"));
        let meta = r.get_metadata().expect("footer").clone();
        meta.row_groups
            .iter()
            .flat_map(|g| g.parquet_columns().iter())
            .filter(|c| {
                c.descriptor().path_in_schema.first().map(|s| s.as_str())
                    == Some("temperature_max_celsius")
            })
            .map(|c| c.byte_range())
            .collect()
    };
    assert!(!ranges.is_empty());
    let mut bytes = std::fs::read(&bad).expect("read");
    for r in &ranges {
        // Past the page header, into the compressed values.
        let (a, b) = (r.start as usize, r.end as usize);
        for x in &mut bytes[(a + (b - a) / 3)..b] {
            *x ^= 0x5a;
        }
    }
    std::fs::write(&bad, &bytes).expect("write");
    let out = tessera(&["ingest", "--source", &format!("history:{}", node.display())]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gpu/2026-11-03.parquet") && err.contains("does not decode"),
        "{err}"
    );
}

/// A FIFO named like a history file (or any file that is not a regular one) is skipped with a
/// warning: opening it would block forever.
#[test]
fn a_fifo_in_a_history_folder_does_not_hang() {
    let tmp = tempfile::tempdir().expect("tmp");
    let node = good_history(tmp.path());
    for name in ["gpu/2026-11-20T06.parquet", "gpu/2026-11-20T07.open.jsonl"] {
        let ok = std::process::Command::new("mkfifo")
            .arg(node.join(name))
            .status()
            .expect("mkfifo");
        assert!(ok.success());
    }
    std::os::unix::fs::symlink("/dev/zero", node.join("process/2026-11-20T08.parquet"))
        .expect("symlink");
    let (tx, rx) = std::sync::mpsc::channel();
    let src = history(&node);
    std::thread::spawn(move || {
        let _ = tx.send(run(&[src], false).map(|(_, r)| r.warnings));
    });
    let warnings = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("ingest returns instead of hanging on a FIFO")
        .expect("ingest");
    for name in [
        "2026-11-20T06.parquet",
        "2026-11-20T07.open.jsonl",
        "2026-11-20T08.parquet",
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(name) && w.contains("not a regular file")),
            "{name}: {warnings:?}"
        );
    }
}

/// With `footer_stats` (analyze, report), row counts and time ranges come from the Parquet
/// footers (row count, `ts` statistics) when there is no time filter; a file without statistics
/// is scanned instead. Both give the same
/// report, and so does the scan that a time filter forces.
#[test]
fn footer_statistics_and_scans_agree() {
    let dir = tempfile::tempdir().expect("tmp");
    let node = good_history(dir.path());
    let p = node.join("gpu/2026-11-02T14.parquet");
    let footer = tessera_core::history::reader::footer_summary(&p).expect("footer");
    assert_eq!(footer.rows, 3);
    assert_eq!(footer.ts_range, Some((T0 + 10_000, T0 + 30_000)));
    let footer_opts = IngestOptions {
        footer_stats: true,
        ..IngestOptions::default()
    };
    let (_, with_stats) = ingest::ingest(&[history(&node)], &footer_opts).expect("ingest");
    let (_, scanned_too) = run(&[history(&node)], false).expect("ingest");
    assert_eq!(scanned_too.tables, with_stats.tables);

    // The same rows without statistics: the footer has no range, the reader scans `ts`.
    let rows: Vec<Value> = [0.5, 0.9, 0.7]
        .iter()
        .enumerate()
        .map(|(i, b)| gpu_row(T0 + 10_000 * (i as i64 + 1), Some(*b)))
        .collect();
    let mut df = frame(Table::Gpu, &rows);
    ParquetWriter::new(std::fs::File::create(&p).expect("create"))
        .with_statistics(StatisticsOptions::empty())
        .finish(&mut df)
        .expect("write");
    let footer = tessera_core::history::reader::footer_summary(&p).expect("footer");
    assert_eq!((footer.rows, footer.ts_range), (3, None));
    let (_, scanned) = ingest::ingest(&[history(&node)], &footer_opts).expect("ingest");
    assert_eq!(scanned.tables, with_stats.tables);
    let gpu = &with_stats.tables[&Table::Gpu];
    // 3 closed rows + 2 in the open segment; the torn line is not a row.
    assert_eq!(
        (gpu.rows, gpu.first_ts, gpu.last_ts),
        (5, Some(T0 + 10_000), Some(T0 + 3_610_000))
    );

    // A time filter that keeps everything scans too, with the same result.
    let opts = IngestOptions {
        since: Some(T0 - 3_600_000),
        footer_stats: true,
        ..IngestOptions::default()
    };
    let (_, filtered) = ingest::ingest(&[history(&node)], &opts).expect("ingest");
    assert_eq!(filtered.tables, with_stats.tables);
}

// ------------------------------------------------------- CSV: auto rows, identity, messages

/// Ingests with `--interval auto` (the default).
fn run_auto(sources: &[Source]) -> Result<(Frames, IngestReport), IngestError> {
    ingest::ingest(sources, &IngestOptions::default())
}

/// A generic long CSV: `rows` of (unix s, entity, metric, value, kind, extra labels).
fn write_csv(dir: &Path, name: &str, header_labels: &str, rows: &[String]) -> PathBuf {
    let path = dir.join(name);
    let mut text = format!("timestamp,entity,metric,value,kind{header_labels}\n");
    for r in rows {
        text.push_str(r);
        text.push('\n');
    }
    std::fs::write(&path, text).expect("write csv");
    path
}

#[test]
fn auto_rows_follow_each_entitys_period_and_samples_on_a_boundary_end_their_row() {
    // GPU a every 57 s (a public trace's rate), GPU b every 5 s, for an hour; GPU c every 60 s
    // exactly on minute boundaries.
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = T0 / 1000;
    let mut rows = Vec::new();
    for i in 0..63 {
        rows.push(format!("{},a,gpu_busy_ratio,0.5,gpu", t0 + 3 + 57 * i));
    }
    for i in 0..720 {
        rows.push(format!("{},b,gpu_busy_ratio,0.25,gpu", t0 + 1 + 5 * i));
    }
    for i in 1..=60 {
        rows.push(format!("{},c,gpu_busy_ratio,0.75,gpu", t0 + 60 * i));
    }
    let path = write_csv(dir.path(), "mixed.csv", "", &rows);
    let (frames, report) = run_auto(&[csv(&path)]).expect("ingest");
    let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
    let uuid = strs(&gpu, "uuid");
    let iv = u64s(&gpu, "interval_ms");
    let ts = ts_ms(&gpu);
    let of = |u: &str| -> Vec<usize> {
        (0..gpu.height())
            .filter(|&i| uuid[i].as_deref() == Some(u))
            .collect()
    };
    // 57 s → 60 s rows, never finer than the data: every row holds a sample.
    assert!(of("a").iter().all(|&i| iv[i] == Some(60_000)), "{iv:?}");
    let a: Vec<i64> = of("a").iter().map(|&i| ts[i]).collect();
    assert_eq!(a.len(), 59);
    assert!(a.windows(2).all(|w| w[1] - w[0] == 60_000), "{a:?}");
    assert!(of("b").iter().all(|&i| iv[i] == Some(5_000)));
    assert_eq!(of("b").len(), 720);
    // A sample exactly on a boundary ends the row before it: c's rows end at its samples.
    let c: Vec<i64> = of("c").iter().map(|&i| ts[i]).collect();
    assert_eq!(c, (1..=60).map(|i| T0 + 60_000 * i).collect::<Vec<_>>());
    assert_eq!(report.sampling.len(), 1, "{:?}", report.sampling);
    let s = report.sampling.values().next().expect("sampling");
    assert_eq!(s.rows.get(&60_000), Some(&2));
    assert_eq!(s.rows.get(&5_000), Some(&1));
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("60 s rows (2 entities), 5 s rows (1 entity)")),
        "{:?}",
        report.warnings
    );

    // An explicit interval finer than the data says what it does, with numbers.
    let opts = IngestOptions {
        interval_ms: Some(10_000),
        ..IngestOptions::default()
    };
    let (frames, report) = ingest::ingest(&[csv(&path)], &opts).expect("ingest 10s");
    let w = report.warnings.join("\n");
    assert!(
        w.contains("% of 10 s steps hold no sample: this source samples every"),
        "{w}"
    );
    assert!(w.contains("using 60 s"), "{w}");
    let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
    let iv = u64s(&gpu, "interval_ms");
    let uuid = strs(&gpu, "uuid");
    for i in 0..gpu.height() {
        let want = if uuid[i].as_deref() == Some("b") {
            10_000
        } else {
            60_000
        };
        assert_eq!(iv[i], Some(want), "{:?}", uuid[i]);
    }
}

#[test]
fn a_series_that_changes_period_gets_rows_of_each_period() {
    // nvidia-smi-style 5 s logs for an hour, then 1-minute exports for an hour.
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = T0 / 1000;
    let mut rows: Vec<String> = (1..=720)
        .map(|i| format!("{},g,memory_used_bytes,1000,gpu", t0 + 5 * i))
        .collect();
    rows.extend((1..=60).map(|i| format!("{},g,memory_used_bytes,2000,gpu", t0 + 3600 + 60 * i)));
    let path = write_csv(dir.path(), "switch.csv", "", &rows);
    let (frames, report) = run_auto(&[csv(&path)]).expect("ingest");
    let gpu = sorted(&frames.gpu, &["ts"]);
    let iv = u64s(&gpu, "interval_ms");
    let ts = ts_ms(&gpu);
    assert_eq!(gpu.height(), 720 + 60, "{iv:?}");
    for i in 0..gpu.height() {
        let want = if ts[i] <= T0 + 3_600_000 {
            5_000
        } else {
            60_000
        };
        assert_eq!(iv[i], Some(want), "row {i} at {}", ts[i]);
    }
    let w = report.warnings.join("\n");
    assert!(w.contains("1 series changed sampling period"), "{w}");
    assert!(w.contains("every 5 s → every 60 s"), "{w}");
}

#[test]
fn named_process_entities_stay_distinct() {
    // Seven processes named by the entity, with no pid or pod label.
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = T0 / 1000;
    let mut rows = Vec::new();
    for name in ["embed", "rerank", "chat", "asr", "tts", "ocr", "vision"] {
        for i in 1..=10 {
            rows.push(format!(
                "{},{name},memory_used_bytes,2e9,process,node-a,GPU-x",
                t0 + 60 * i
            ));
            rows.push(format!(
                "{},{name},sm_ratio,0,process,node-a,GPU-x",
                t0 + 60 * i
            ));
        }
    }
    let path = write_csv(dir.path(), "named.csv", ",node,uuid", &rows);
    let (frames, report) = run_auto(&[csv(&path)]).expect("ingest");
    let summary = ingest::summary::describe(&frames, &report).expect("summary");
    let process = summary
        .iter()
        .find(|t| t.table == Table::Process)
        .expect("process table");
    assert_eq!(process.entities, 7);
    let p = sorted(&frames.process, &["process", "ts"]);
    let names: std::collections::BTreeSet<String> =
        strs(&p, "process").into_iter().flatten().collect();
    assert_eq!(names.len(), 7, "{names:?}");
    assert_eq!(p.column("pid").expect("pid").null_count(), p.height());

    // The CLI counts them too.
    let out = tessera(&[
        "ingest",
        "--source",
        &format!("csv:{}", path.display()),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["tables"][2]["table"], "process");
    assert_eq!(v["tables"][2]["entities"], 7);

    // A process label, no pid or pod, and names as entities: nothing tells them apart.
    let rows: Vec<String> = ["a", "b"]
        .iter()
        .map(|n| format!("{},{n},memory_used_bytes,2e9,process,python3", t0 + 60))
        .collect();
    let path = write_csv(dir.path(), "anonymous.csv", ",process", &rows);
    let e = err_text(run_auto(&[csv(&path)]));
    assert!(e.contains("anonymous.csv:2:"), "{e}");
    assert!(e.contains("column entity"), "{e}");
    assert!(e.contains("no pid, pod or pod_uid"), "{e}");
}

#[test]
fn a_metric_of_another_kind_names_the_kinds_and_the_equivalent() {
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = T0 / 1000;
    let rows: Vec<String> = (1..=5)
        .flat_map(|i| {
            [
                format!("{},4242,gpu_busy_ratio,0.5,process", t0 + 60 * i),
                format!("{},4242,memory_used_bytes,2e9,process", t0 + 60 * i),
            ]
        })
        .collect();
    let path = write_csv(dir.path(), "kinds.csv", "", &rows);
    let (_, report) = run_auto(&[csv(&path)]).expect("ingest");
    let w = report.warnings.join("\n");
    assert!(
        w.contains(
            "ignored 5 value(s) of gpu_busy_ratio on kind=process rows: gpu_busy_ratio is a \
             metric of kind gpu, not process; per-process activity is sm_ratio"
        ),
        "{w}"
    );
    assert!(!w.contains("unknown metric"), "{w}");
    assert_eq!(report.skipped["csv: metric of another kind"], 5);
}

/// GPM's profiling metrics (history format version 2) in the long format: each fills its
/// column (mean, and max for tensor), on GPUs and MIG instances, in both readers; a GPU without
/// them keeps the columns null; a tensor ratio of 45 is refused like any ratio.
#[test]
fn gpm_pipe_metrics_fill_their_columns() {
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = T0 / 1000;
    let mut rows = Vec::new();
    for i in 1..=3 {
        let (a, b) = (t0 + 60 * i - 30, t0 + 60 * i);
        rows.push(format!("{a},GPU-h,tensor_active_ratio,0.1,gpu"));
        rows.push(format!("{b},GPU-h,tensor_active_ratio,0.3,gpu"));
        for t in [a, b] {
            for (m, v) in [
                ("gpu_busy_ratio", "0.9"),
                ("dram_active_ratio", "0.05"),
                ("fp64_active_ratio", "0.01"),
                ("fp32_active_ratio", "0.02"),
                ("fp16_active_ratio", "0.03"),
                ("integer_active_ratio", "0.04"),
                ("nvlink_tx_bytes_per_second", "1e9"),
                ("nvlink_rx_bytes_per_second", "2e9"),
            ] {
                rows.push(format!("{t},GPU-h,{m},{v},gpu"));
            }
            rows.push(format!("{t},GPU-a,gpu_busy_ratio,0.9,gpu"));
            rows.push(format!("{t},MIG-1,tensor_active_ratio,0.4,mig"));
            rows.push(format!("{t},MIG-1,dram_active_ratio,0.5,mig"));
        }
    }
    let path = write_csv(dir.path(), "gpm.csv", "", &rows);
    let opts = |skip_bad_rows: bool| IngestOptions {
        skip_bad_rows,
        interval_ms: Some(60_000),
        ..IngestOptions::default()
    };
    let fast = ingest::ingest(&[csv(&path)], &opts(false)).expect("fast");
    let lines = ingest::ingest(&[csv(&path)], &opts(true)).expect("lines");
    for (frames, report) in [&fast, &lines] {
        assert!(
            !report.skipped.contains_key("csv: unknown metric"),
            "{report:?}"
        );
        let gpu = sorted(&frames.gpu, &["uuid", "ts"]);
        // GPU-a first (sorted by uuid): three rows without any GPM value.
        for (c, want) in [
            ("tensor_active_mean", 0.2),
            ("tensor_active_max", 0.3),
            ("dram_active_mean", 0.05),
            ("fp64_active_mean", 0.01),
            ("fp32_active_mean", 0.02),
            ("fp16_active_mean", 0.03),
            ("integer_active_mean", 0.04),
            ("nvlink_tx_mean_bytes_per_second", 1e9),
            ("nvlink_rx_mean_bytes_per_second", 2e9),
        ] {
            let v = f64s(&gpu, c);
            assert_eq!(v[..3], [None, None, None], "GPU-a {c}");
            assert!(
                v[3..]
                    .iter()
                    .all(|x| x.is_some_and(|x| (x - want).abs() < 1e-12)),
                "GPU-h {c}: {v:?}"
            );
        }
        let mig = frames.mig.clone().collect().expect("mig");
        assert_eq!(f64s(&mig, "tensor_active_mean"), [Some(0.4); 3]);
        assert_eq!(f64s(&mig, "dram_active_mean"), [Some(0.5); 3]);
    }
    for t in Table::ALL {
        let by: &[&str] = match t {
            Table::Gpu => &["uuid", "ts"],
            Table::Mig => &["mig_uuid", "ts"],
            Table::Process => &["pid", "ts"],
        };
        let (a, b) = (sorted(fast.0.table(t), by), sorted(lines.0.table(t), by));
        assert!(a.equals_missing(&b), "{t:?}:\n{a}\n{b}");
    }

    let bad = write_csv(
        dir.path(),
        "bad.csv",
        "",
        &[format!("{},GPU-h,tensor_active_ratio,45,gpu", t0 + 60)],
    );
    let e = err_text(run(&[csv(&bad)], false));
    assert!(
        e.contains("bad.csv:2:") && e.contains("within 0–1, got 45"),
        "{e}"
    );
}

#[test]
fn the_fast_reader_and_the_line_reader_agree() {
    // The line reader runs with --skip-bad-rows (or when the fast reader gives up); on a clean
    // file both must give the same frames and warnings.
    for f in ["generic.csv", "advisor-edges.csv"] {
        let path = fixture(f);
        let fast = ingest::ingest(&[csv(&path)], &IngestOptions::default()).expect("fast");
        let lines = ingest::ingest(
            &[csv(&path)],
            &IngestOptions {
                skip_bad_rows: true,
                ..IngestOptions::default()
            },
        )
        .expect("lines");
        for t in Table::ALL {
            let by: &[&str] = match t {
                Table::Gpu => &["uuid", "ts"],
                Table::Mig => &["mig_uuid", "ts"],
                Table::Process => &["pid", "ts"],
            };
            let a = sorted(fast.0.table(t), by);
            let b = sorted(lines.0.table(t), by);
            assert!(a.equals_missing(&b), "{f} {t:?}:\n{a}\n{b}");
        }
        assert_eq!(fast.1.warnings, lines.1.warnings, "{f}");
        assert_eq!(fast.1.skipped, lines.1.skipped, "{f}");
    }
}

/// Nonsense that used to pass (issue 17): a timestamp of 99999999999999999999 (read as the year
/// −292 million), negative memory (read as 0), 1e30 bytes (read as u64::MAX), a negative XID
/// count (read as 0) — each is an error naming file, line and what was expected; a 5 MB first line
/// is refused without echoing it.
#[test]
fn csv_nonsense_is_refused_with_file_line_and_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = T0 / 1000;
    for (name, line, want) in [
        (
            "ts.csv",
            "99999999999999999999,GPU-a,gpu_busy_ratio,0.5".to_string(),
            "between 1970 and 9999",
        ),
        (
            "negative-memory.csv",
            format!("{t},GPU-a,memory_used_bytes,-5"),
            "memory outside 0–2^60 bytes",
        ),
        (
            "huge-memory.csv",
            format!("{t},GPU-a,memory_used_bytes,1e30"),
            "memory outside 0–2^60 bytes",
        ),
        (
            "negative-xid.csv",
            format!("{t},GPU-a,xid_count,-3"),
            "negative power, energy or count",
        ),
        ("inf-power.csv", format!("{t},GPU-a,power_watts,inf"), ""),
    ] {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("timestamp,entity,metric,value\n{t},GPU-a,gpu_busy_ratio,0.1\n{line}\n"),
        )
        .expect("write");
        let r = run_auto(&[csv(&path)]);
        if want.is_empty() {
            // `inf` is no value (like NaN): null, never a number.
            let (frames, _) = r.expect("inf is null");
            let g = frames.gpu.collect().expect("gpu");
            assert_eq!(
                g.column("power_mean_watts").expect("p").null_count(),
                g.height()
            );
            continue;
        }
        let e = err_text(r);
        assert!(
            e.contains(&format!("{name}:3:")) && e.contains(want),
            "{name}: {e}"
        );
    }
    // A first line of 5 MB: refused, and the message stays short.
    let path = dir.path().join("header-only.csv");
    std::fs::write(&path, "x".repeat(5 << 20)).expect("write");
    let e = err_text(run_auto(&[csv(&path)]));
    assert!(
        e.contains("header-only.csv:1:") && e.contains("longer than 1024 KiB"),
        "{e}"
    );
    assert!(e.len() < 1000, "{} bytes of error", e.len());
    // A long header that is no known format: named, shortened.
    let path = dir.path().join("wide-header.csv");
    let header: Vec<String> = (0..20_000).map(|i| format!("column{i}")).collect();
    std::fs::write(&path, header.join(",") + "\n").expect("write");
    let e = err_text(run_auto(&[csv(&path)]));
    assert!(e.contains("unrecognised header") && e.len() < 1000, "{e}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

fn gpu_height(frames: &Frames) -> u64 {
    frames.gpu.clone().collect().expect("collect").height() as u64
}

fn duplicate_warnings(report: &IngestReport) -> Vec<&String> {
    report
        .warnings
        .iter()
        .filter(|w| w.contains("duplicate"))
        .collect()
}

/// Duplicate history rows (issue 17 item 11) are counted once, with a warning that gives the
/// count: a node's folder copied next to the original, the same folder named twice, a Parquet
/// file holding each row twice (two exporters appending to one segment, before the lock), and
/// an open segment with a line written twice. History without duplicates gives no warning.
#[test]
fn duplicate_history_rows_are_counted_once_with_a_warning() {
    let tmp = tempfile::tempdir().expect("tmp");
    let a = tmp.path().join("a");
    let scenario = tessera_core::sim::load_scenario(None).expect("demo");
    let s = tessera_core::simulate::simulate(&scenario, 2, &a, 10_000, 10_000).expect("simulate");
    let (frames, report) = run(&[history(&a)], false).expect("ingest");
    assert_eq!(report.tables[&Table::Gpu].rows, s.rows[0]);
    assert_eq!(gpu_height(&frames), s.rows[0]);
    assert!(
        duplicate_warnings(&report).is_empty(),
        "{:?}",
        report.warnings
    );
    assert_eq!(report.skipped_rows(), 0);
    // The writer's own history (hourly files, day files, open segments) shows no sign, so it
    // costs no row-by-row check.
    assert!(
        report.duplicate_checks.is_empty(),
        "{:?}",
        report.duplicate_checks
    );
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    let (_, report) = run(&[history(&demo)], false).expect("demo");
    assert!(
        report.duplicate_checks.is_empty(),
        "{:?}",
        report.duplicate_checks
    );

    // The same folder named twice: each file is read once.
    let (frames, report) = run(&[history(&a), history(&a)], false).expect("ingest");
    assert_eq!(gpu_height(&frames), s.rows[0]);
    assert_eq!(report.tables[&Table::Gpu].rows, s.rows[0]);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("named by more than one --source")),
        "{:?}",
        report.warnings
    );

    // A copy of every node's folder under another root: the same node twice, every row twice.
    let b = tmp.path().join("b");
    copy_dir(&a, &b);
    let (frames, report) = run(&[history(&a), history(&b)], false).expect("ingest");
    for (i, t) in Table::ALL.into_iter().enumerate() {
        assert_eq!(report.tables[&t].rows, s.rows[i], "{}", t.name());
        if s.rows[i] > 0 {
            assert_eq!(
                report.skipped[&format!("duplicate {} rows (same key and ts)", t.name())],
                s.rows[i],
                "{}",
                t.name()
            );
        }
    }
    assert_eq!(gpu_height(&frames), s.rows[0]);
    let warned = duplicate_warnings(&report);
    // One warning per node and table with rows, each with its count.
    assert!(warned.len() >= s.nodes, "{warned:?}");
    assert!(
        warned.iter().all(|w| w.contains("files overlap in time")),
        "{warned:?}"
    );

    // One Parquet file holding each of its rows twice (no other file overlaps it).
    let c = tmp.path().join("c");
    let node = c.join("node-a");
    write_manifest(&node, 1);
    let rows: Vec<Value> = (1..=6)
        .flat_map(|i| {
            let r = gpu_row(T0 + 10_000 * i, Some(0.5));
            [r.clone(), r]
        })
        .collect();
    write_parquet(
        &node.join("gpu/2026-11-02T14.parquet"),
        &mut frame(Table::Gpu, &rows),
    );
    let (frames, report) = run(&[history(&c)], false).expect("ingest");
    assert_eq!(report.tables[&Table::Gpu].rows, 6);
    assert_eq!(gpu_height(&frames), 6);
    assert_eq!(report.skipped["duplicate gpu rows (same key and ts)"], 6);
    let warned = duplicate_warnings(&report);
    assert!(
        warned.len() == 1 && warned[0].contains("node node-a: 6 duplicate gpu rows"),
        "{warned:?}"
    );

    // An open segment with one line written twice; the closed hour before it is distinct.
    std::fs::remove_file(node.join("gpu/2026-11-02T14.parquet")).expect("rm");
    let good = good_history(&tmp.path().join("d"));
    let seg = good.join("gpu/2026-11-02T15.open.jsonl");
    let text = std::fs::read_to_string(&seg).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, lines[1]);
    std::fs::write(&seg, lines.join("\n")).expect("write");
    let (frames, report) = run(&[history(&good)], false).expect("ingest");
    assert_eq!(report.skipped["duplicate gpu rows (same key and ts)"], 1);
    assert_eq!(gpu_height(&frames), 3 + 2);
}

#[test]
fn since_and_until_take_every_unit_of_the_one_duration_parser() {
    // `--since 90m`, `--since 500ms` work; zero is now.
    assert_eq!(ingest::parse_time("90m", T0).unwrap(), T0 - 5_400_000);
    assert_eq!(ingest::parse_time("500ms", T0).unwrap(), T0 - 500);
    assert_eq!(ingest::parse_time("0s", T0).unwrap(), T0);
}

/// One rule for a column named twice (issue 27): refused, naming the column and both
/// positions, whichever column it is (before: a second `node` silently won, a second `value`
/// silently lost with a warning).
#[test]
fn csv_columns_named_twice_are_refused_naming_both_positions() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = T0 / 1000;
    for (header, row, want) in [
        (
            "timestamp,entity,metric,value,node,node",
            format!("{t},GPU-a,gpu_busy_ratio,0.5,n1,n2"),
            "column \"node\" appears twice (columns 5 and 6)",
        ),
        (
            "timestamp,entity,metric,value,value",
            format!("{t},GPU-a,gpu_busy_ratio,0.5,0.9"),
            "column \"value\" appears twice (columns 4 and 5)",
        ),
        (
            "timestamp,timestamp,entity,metric,value",
            format!("{t},{t},GPU-a,gpu_busy_ratio,0.5"),
            "column \"timestamp\" appears twice (columns 1 and 2)",
        ),
    ] {
        let path = dir.path().join("dup.csv");
        std::fs::write(&path, format!("{header}\n{row}\n")).expect("write");
        let e = err_text(run_auto(&[csv(&path)]));
        assert!(
            e.contains("dup.csv:1:") && e.contains(want),
            "{header}: {e}"
        );
    }
}
