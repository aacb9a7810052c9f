//! The report's fleet tallies against DuckDB's (issue 61 item 1: the peer any analyst would reach
//! for, and an independent answer): `scripts/report-duckdb.py` computes, with SQL over the same
//! history Parquet files and range, the GPUs, GPU-hours and energy of the fleet, each node and
//! each GPU model, each team's GPU-hours (a GPU's interval split evenly between its processes)
//! and the free GPUs per UTC hour (the off-peak detector's rule). A `scripts/gen-fleet.py` fleet
//! of 64 GPUs (MIG instances, Slurm jobs, every workload kind) is simulated for two days at
//! 60-s rows; the range starts and ends on the half hour. The report's figures are rounded to 3
//! decimals: equal within that rounding; counts exactly. Requires DuckDB's Python package (the
//! test fails, never skips, without it; `scripts/test.sh` installs it).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::openmetrics::rfc3339;

const HOUR_MS: i64 = 3_600_000;

fn close(got: &Value, want: &Value, what: &str) {
    let (g, w) = (
        got.as_f64().unwrap_or_else(|| panic!("{what}: {got}")),
        want.as_f64().unwrap_or_else(|| panic!("{what}: {want}")),
    );
    assert!(
        (g - w).abs() <= 0.0006,
        "{what}: the report's {g} vs DuckDB's {w}"
    );
}

#[test]
fn the_reports_fleet_tallies_equal_duckdbs_on_the_same_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let (hist, start) = crate::support::fleet::simulate(tmp.path(), 64, 11, 2);
    let (since, until) = (start + 11 * HOUR_MS / 2, start + 79 * HOUR_MS / 2);
    let out = crate::support::cli::tessera(&[
        "report",
        "--source",
        &format!("history:{}", hist.display()),
        "--since",
        &rfc3339(since),
        "--until",
        &rfc3339(until),
        "--format",
        "json",
        "--no-replay",
        "--trend.weeks",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let duck = Command::new("python3")
        .arg(root.join("scripts/report-duckdb.py"))
        .arg(&hist)
        .args(["--since", &since.to_string(), "--until", &until.to_string()])
        .output()
        .expect("python3");
    assert!(
        duck.status.success(),
        "scripts/report-duckdb.py (DuckDB's Python package is required; scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&duck.stderr)
    );
    let duck: Value = serde_json::from_slice(&duck.stdout).expect("DuckDB's JSON");

    let f = &report["fleet"];
    assert_eq!(f["gpus"], duck["fleet"]["gpus"]);
    close(
        &f["gpu_hours_observed"],
        &duck["fleet"]["gpu_hours"],
        "fleet GPU-hours",
    );
    close(
        &f["energy_kwh"],
        &duck["fleet"]["energy_kwh"],
        "fleet energy",
    );
    for (list, key) in [("by_node", "by_node"), ("by_model", "by_model")] {
        let rows = report[list].as_array().unwrap();
        assert_eq!(
            rows.len(),
            duck[key].as_object().unwrap().len(),
            "{list}: {rows:?}"
        );
        for r in rows {
            let k = r["key"].as_str().unwrap();
            let d = &duck[key][k];
            close(
                &r["gpu_hours_observed"],
                &d["gpu_hours"],
                &format!("{k} GPU-hours"),
            );
            close(&r["energy_kwh"], &d["energy_kwh"], &format!("{k} energy"));
        }
    }
    let teams: BTreeMap<String, Value> = report["teams"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["team"].as_str().unwrap().to_string(),
                t["gpu_hours"].clone(),
            )
        })
        .collect();
    let duck_teams = duck["teams"].as_object().unwrap();
    assert_eq!(
        teams.keys().collect::<Vec<_>>(),
        duck_teams.keys().collect::<Vec<_>>(),
        "teams"
    );
    assert!(teams.len() > 3, "{teams:?}");
    for (team, h) in &teams {
        close(h, &duck_teams[team], &format!("team {team}"));
    }
    // Free GPUs per UTC hour: the report's chart against DuckDB's, hour by hour.
    let free: BTreeMap<i64, (u64, u64)> = report["charts"]["free_timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let at = chrono::DateTime::parse_from_rfc3339(h["hour"].as_str().unwrap())
                .unwrap()
                .timestamp_millis();
            (
                at,
                (
                    h["gpus"].as_u64().unwrap(),
                    h["free_gpus"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let duck_free: BTreeMap<i64, (u64, u64)> = duck["free_by_hour"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["hour_ms"].as_i64().unwrap(),
                (
                    h["gpus"].as_u64().unwrap(),
                    h["free_gpus"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    assert!(free.len() >= 30, "{free:?}");
    assert!(
        free.values().any(|(_, f)| *f > 0),
        "some GPUs are free in some hour: {free:?}"
    );
    assert_eq!(free, duck_free, "free GPUs per hour");
}
