//! The queue plan (issue 57 item 1; docs/queues.md) on `fixtures/scenarios/queues.toml`: planted
//! team demand (serving always on, research's notebooks by weekday, a nightly training pod) and
//! planted nightly free capacity. The teams' numbers must equal `scripts/queue_reference.py`
//! (DuckDB reads the Parquet history, pandas applies the documented rule) under the default
//! rules and under other ones; the windows are the planted nights and weekend; an edited plan
//! is checked again by `tessera queue check`.
//!
//! Needs `python3` with pandas and duckdb (installed by `scripts/test.sh`); fails, never skips,
//! without.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use crate::support::cli::run;

const SINCE: &str = "2026-11-02T00:00:00Z";
const UNTIL: &str = "2026-11-16T00:00:00Z";
const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

/// Two weeks of the scenario, simulated once for this file's tests.
fn history() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let scenario =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/queues.toml");
        let (code, _, err) = run(&[
            "simulate",
            "--scenario",
            scenario.to_str().unwrap(),
            "--days",
            "14",
            "--sample-interval",
            "60s",
            "--history.interval",
            "5m",
            "--out",
            dir.path().to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        dir
    });
    dir.path()
}

fn ms(t: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(t)
        .unwrap()
        .timestamp_millis()
}

/// `tessera queue plan` as JSON, written to `out`.
fn plan(out: &Path, extra: &[&str]) -> Value {
    let src = format!("history:{}", history().display());
    let mut args = vec![
        "queue",
        "plan",
        "--source",
        &src,
        "--since",
        SINCE,
        "--until",
        UNTIL,
        "--tz",
        "Europe/Berlin",
        "--format",
        "json",
        "-o",
    ];
    let o = out.to_str().unwrap();
    args.push(o);
    args.extend(extra);
    let (code, stdout, err) = run(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&stdout).expect("queue plan JSON")
}

fn reference(rules: [&str; 3]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/queue_reference.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(history())
        .arg(ms(SINCE).to_string())
        .arg(ms(UNTIL).to_string())
        .args(rules)
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "queue_reference.py (needs pandas and duckdb: scripts/test.sh installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every team and model of the plan against the reference, figure by figure.
fn assert_teams_match(doc: &Value, want: &Value) {
    let teams = doc["queues"]["teams"].as_array().unwrap();
    let want = want.as_object().unwrap();
    assert_eq!(teams.len(), want.len(), "{teams:#?} vs {want:#?}");
    for t in teams {
        let name = t["team"].as_str().unwrap();
        let w = &want[name];
        for q in t["quotas"].as_array().unwrap() {
            let model = q["model"].as_str().unwrap();
            let w = &w[model];
            let m = &q["measured"];
            assert_eq!(t["class"], w["class"], "{name}");
            for (got, key) in [
                (&q["guarantee"], "guarantee"),
                (&q["limit"], "limit"),
                (&m["hours"], "hours"),
                (&m["held-share"], "held_share"),
                (&m["q-guarantee"], "q_guarantee"),
                (&m["median"], "median"),
                (&m["q-limit"], "q_limit"),
                (&m["max"], "max"),
            ] {
                assert_eq!(got.as_f64(), w[key].as_f64(), "{name} {model} {key}");
            }
        }
    }
}

#[test]
fn team_quotas_follow_the_documented_rule_and_windows_the_planted_nights() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = plan(&tmp.path().join("plan.yaml"), &[]);
    assert_teams_match(&doc, &reference(["0.05", "0.95", "0.9"]));
    let teams = doc["queues"]["teams"].as_array().unwrap();
    let team = |n: &str| teams.iter().find(|t| t["team"] == n).unwrap();
    // The planted truth.
    assert_eq!(team("serving")["class"], "serving");
    assert_eq!(team("serving")["quotas"][0]["guarantee"], 2);
    assert_eq!(team("research")["class"], "job-like");
    assert_eq!(team("research")["quotas"][0]["limit"], 4);
    assert_eq!(team("train")["quotas"][0]["model"], A100);
    assert_eq!(team("train")["quotas"][0]["limit"], 1);

    // Off-peak: the weeknights and the weekend, with research's four H100s free beside the two
    // never held; outside them the never-held GPUs.
    let o = &doc["queues"]["offpeak"];
    assert_eq!(o["timezone"], "Europe/Berlin");
    assert_eq!(o["end"]["policy"], "finish");
    let floor: Vec<(String, u64)> = o["floor"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["model"].as_str().unwrap().to_string(),
                m["gpus"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(floor, vec![(A100.to_string(), 1), (H100.to_string(), 2)]);
    let windows = o["windows"].as_array().unwrap();
    let line = |start_day: &str| {
        windows
            .iter()
            .find(|w| w["days"].as_array().unwrap().iter().any(|d| d == start_day))
            .unwrap_or_else(|| panic!("a window starting {start_day}: {windows:#?}"))
    };
    let nights = line("Mon");
    assert_eq!(
        nights["days"],
        serde_json::json!(["Mon", "Tue", "Wed", "Thu"])
    );
    assert_eq!(
        (nights["start"].as_str(), nights["hours"].as_u64()),
        (Some("18:00"), Some(15))
    );
    let weekend = line("Fri");
    assert_eq!(
        (weekend["start"].as_str(), weekend["hours"].as_u64()),
        (Some("18:00"), Some(63))
    );
    for w in [nights, weekend] {
        let h100 = w["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["model"] == H100)
            .unwrap();
        assert_eq!(h100["gpus"], 6, "{w}");
    }
}

#[test]
fn other_rules_and_classes_set_by_hand_still_match_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plan.yaml");
    // A low serving share makes research and train serving; their guarantee is then the
    // 0.5 quantile (0), their limits the 0.75 quantile.
    let doc = plan(
        &file,
        &[
            "--guarantee-quantile",
            "0.5",
            "--limit-quantile",
            "0.75",
            "--serving-share",
            "0.2",
            "--end-of-window",
            "drain:30",
        ],
    );
    assert_teams_match(&doc, &reference(["0.5", "0.75", "0.2"]));
    assert_eq!(doc["queues"]["offpeak"]["end"]["notice-minutes"], 30);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("kind: tessera-plan") && text.contains("policy: drain"),
        "{text}"
    );

    // The plan file checks; edited to break a rule, the check names the item.
    let f = file.to_str().unwrap();
    let (code, out, err) = run(&["queue", "check", f]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queues ok: 3 team(s)"), "{out}");
    let broken = text.replacen("guarantee: 2", "guarantee: 9", 1);
    assert_ne!(broken, text);
    std::fs::write(&file, broken).unwrap();
    let (code, _, err) = run(&["queue", "check", f]);
    assert_ne!(code, 0);
    assert!(
        err.contains("queues.teams[") && err.contains("above limit"),
        "{err}"
    );

    // A class set by hand wins over the measured one.
    let doc = plan(
        &file,
        &["--class", "research=serving", "--guarantee-quantile", "0.5"],
    );
    let research = doc["queues"]["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "research")
        .unwrap();
    assert_eq!(research["class"], "serving");

    // Bad input: a clear error, no file.
    for (flag, value, says) in [
        (
            "--end-of-window",
            "drain:0",
            "expected finish, max-runtime:HOURS or drain:MINUTES",
        ),
        (
            "--class",
            "research",
            "expected TEAM=serving or TEAM=job-like",
        ),
        ("--limit-quantile", "1.5", "queues.rules"),
    ] {
        let out = tmp.path().join("bad.yaml");
        let src = format!("history:{}", history().display());
        let (code, _, err) = run(&[
            "queue",
            "plan",
            "--source",
            &src,
            "-o",
            out.to_str().unwrap(),
            flag,
            value,
        ]);
        assert_ne!(code, 0, "{flag} {value}");
        assert!(err.contains(says), "{flag} {value}: {err}");
        assert!(!out.exists(), "{flag} {value}");
    }
}

#[test]
fn data_without_allocation_is_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    let out = tmp.path().join("plan.yaml");
    let (code, _, err) = run(&[
        "queue",
        "plan",
        "--source",
        &format!("history:{}", demo.display()),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("no allocation in the data"), "{err}");
    assert!(!out.exists());
}

/// `tessera replay` of a queue plan, as JSON.
fn replay(plan: &Path) -> Value {
    let src = format!("history:{}", history().display());
    let (code, out, err) = run(&[
        "replay",
        "--plan",
        plan.to_str().unwrap(),
        "--source",
        &src,
        "--since",
        SINCE,
        "--until",
        UNTIL,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("replay JSON")
}

#[test]
fn replay_reports_the_planted_waits_and_a_window_that_promised_too_much() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plan.yaml");
    plan(&file, &[]);
    let text = std::fs::read_to_string(&file).unwrap();
    let team = |r: &Value, n: &str| {
        r["teams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == n)
            .unwrap()
            .clone()
    };

    // As planned: nobody waits.
    let r = replay(&file);
    assert_eq!(r["verdict"], "safe", "{r:#}");
    assert_eq!(r["hours"], 336);
    assert!(
        r["teams"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["waited_gpu_hours"] == 0),
        "{r:#}"
    );

    // Research limited to 2 of its 4 notebooks: 2 GPUs wait 09:00-18:00 on each of the ten
    // weekdays (180 GPU-hours, 9 h at most), and every one goes into the night's window.
    let limited = text.replacen("limit: 4", "limit: 2", 1);
    assert_ne!(limited, text);
    std::fs::write(&file, &limited).unwrap();
    let r = replay(&file);
    let research = team(&r, "research");
    assert_eq!(research["demand_gpu_hours"], 360, "{research}");
    assert_eq!(research["waited_gpu_hours"], 180, "{research}");
    assert_eq!(research["longest_wait_hours"], 9, "{research}");
    assert_eq!(research["admitted_in_windows_gpu_hours"], 180, "{research}");
    assert_eq!(research["still_waiting_gpu_hours"], 0, "{research}");
    assert_eq!(team(&r, "serving")["waited_gpu_hours"], 0);
    assert_eq!(r["verdict"], "safe");

    // A window edited to promise all 8 H100s while serving holds 2: the deferred work it takes
    // meets serving's guarantee, hour by hour: unsafe, the hours named.
    let greedy = limited
        .replacen("limit: 2", "limit: 0", 1)
        .replace("gpus: 6", "gpus: 8");
    std::fs::write(&file, &greedy).unwrap();
    let (code, _, err) = run(&["queue", "check", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let r = replay(&file);
    assert_eq!(r["verdict"], "unsafe", "{r:#}");
    let misfits = r["guarantee_misfits"].as_array().unwrap();
    assert!(!misfits.is_empty());
    for m in misfits {
        assert_eq!(m["model"], H100);
        assert_eq!(m["gpus"], 8);
        assert!(m["guaranteed"].as_u64().unwrap() > 8, "{m}");
        // Local evenings: the window opens at 18:00 Berlin (17:00 UTC).
        let hour = chrono::DateTime::parse_from_rfc3339(m["hour"].as_str().unwrap()).unwrap();
        assert!(chrono::Timelike::hour(&hour) >= 17, "{m}");
    }
    assert_eq!(team(&r, "research")["waited_gpu_hours"], 360);

    // The text says the same; HTML is refused with the reason.
    let src = format!("history:{}", history().display());
    let f = file.to_str().unwrap();
    let (code, out, err) = run(&[
        "replay", "--plan", f, "--source", &src, "--since", SINCE, "--until", UNTIL,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Verdict: UNSAFE") && out.contains("Guarantees that did not fit"),
        "{out}"
    );
    let (code, _, err) = run(&["replay", "--plan", f, "--source", &src, "--format", "html"]);
    assert_ne!(code, 0);
    assert!(err.contains("table, Markdown or JSON"), "{err}");
}

/// The measured plan, equal to the reference, applied to Kueue (the fake API server): each
/// team's ClusterQueue holds its guarantee as `nominalQuota` and limit − guarantee as
/// `borrowingLimit` in the model's flavor, and the cohort's quotas add up to the fleet.
#[test]
fn the_measured_plan_becomes_kueue_quotas_equal_to_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plan.yaml");
    let doc = plan(&file, &[]);
    let want = reference(["0.05", "0.95", "0.9"]);
    assert_teams_match(&doc, &want);
    let kube = fake_kube::FakeKube::start();
    let kubeconfig = tmp.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig);
    let (code, out, err) = run(&[
        "queue",
        "apply",
        file.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--audit-log",
        tmp.path().join("audit.jsonl").to_str().unwrap(),
        // A Wednesday noon after the range: outside the windows, the data 2.5 days old.
        "--now",
        "2026-11-18T12:00:00Z",
        "--yes",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied:"), "{out}");
    let quota = |cq: &str, model: &str| -> (u64, u64) {
        let cq = kube
            .object("ClusterQueue", "", cq)
            .unwrap_or_else(|| panic!("ClusterQueue {cq}"));
        let flavor = tessera::queues::kueue::flavor_name("tessera", model);
        let f = cq["spec"]["resourceGroups"][0]["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == flavor.as_str())
            .unwrap_or_else(|| panic!("flavor {flavor} in {cq}"))
            .clone();
        // Absent (the off-peak queue borrows nothing outside a cohort): 0.
        let n = |v: &Value| v.as_str().map_or(0, |s| s.parse::<u64>().unwrap());
        let r = &f["resources"][0];
        (n(&r["nominalQuota"]), n(&r["borrowingLimit"]))
    };
    let mut guaranteed: std::collections::BTreeMap<String, u64> = Default::default();
    for (team, models) in want.as_object().unwrap() {
        for (model, w) in models.as_object().unwrap() {
            let (g, l) = (
                w["guarantee"].as_u64().unwrap(),
                w["limit"].as_u64().unwrap(),
            );
            assert_eq!(
                quota(&format!("tessera-{team}"), model),
                (g, l - g),
                "{team} {model}"
            );
            *guaranteed.entry(model.clone()).or_default() += g;
        }
    }
    for c in doc["queues"]["capacity"].as_array().unwrap() {
        let model = c["model"].as_str().unwrap();
        let gpus = c["gpus"].as_u64().unwrap();
        let offpeak = quota("tessera-offpeak", model).0;
        let shared = quota("tessera-shared", model).0;
        assert_eq!(
            guaranteed.get(model).copied().unwrap_or(0) + offpeak + shared,
            gpus,
            "{model}: the cohort's and the off-peak queue's quotas add up to the fleet"
        );
    }
}

#[test]
fn slurm_jobs_count_for_their_accounts_in_the_plan_and_its_replay() {
    // The scenario with the nightly trainer as Slurm job 7001 instead of a pod: its A100 is held
    // by a job, whose account `sacct` (a fake on PATH) says is physics.
    let tmp = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/queues.toml");
    let text = std::fs::read_to_string(scenario).unwrap();
    let slurm = text.replace(
        "namespace = \"train\"\npod = \"trainer-0\"",
        "slurm_job = \"7001\"",
    );
    assert_ne!(slurm, text);
    let toml = tmp.path().join("slurm.toml");
    std::fs::write(&toml, slurm).unwrap();
    let hist = tmp.path().join("history");
    let (code, _, err) = run(&[
        "simulate",
        "--scenario",
        toml.to_str().unwrap(),
        "--days",
        "7",
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        hist.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let bin = crate::owners::fake_sacct(
        tmp.path(),
        "7001|alice|physics\n7001.batch|alice|physics\n",
        "",
        0,
    );
    let src = format!("history:{}", hist.display());
    let file = tmp.path().join("plan.yaml");
    let f = file.to_str().unwrap();
    let base = [
        "--source",
        &src,
        "--since",
        SINCE,
        "--until",
        "2026-11-09T00:00:00Z",
        "--format",
        "json",
    ];
    let teams = |doc: &Value| -> Vec<(String, String, u64)> {
        doc["queues"]["teams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let q = &t["quotas"][0];
                (
                    t["team"].as_str().unwrap().to_string(),
                    q["model"].as_str().unwrap().to_string(),
                    q["limit"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let mut args = vec!["queue", "plan", "-o", f];
    args.extend(base);
    // Without the accounts the job's GPU counts for no team.
    let (code, out, err) = crate::owners::with_path(&args, &bin);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert!(
        !teams(&doc).iter().any(|t| t.1 == A100),
        "{:?}",
        teams(&doc)
    );
    assert!(
        !tmp.path().join("sacct.args").exists(),
        "sacct asked without --slurm-accounts"
    );
    args.push("--slurm-accounts");
    let (code, out, err) = crate::owners::with_path(&args, &bin);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert!(
        teams(&doc).contains(&("physics".to_string(), A100.to_string(), 1)),
        "{:?}",
        teams(&doc)
    );
    let asked = std::fs::read_to_string(tmp.path().join("sacct.args")).unwrap();
    assert!(asked.contains("-j 7001"), "{asked}");
    // The replay counts the job's hours for physics too.
    let mut args = vec!["replay", "--plan", f, "--slurm-accounts"];
    args.extend(base);
    let (code, out, err) = crate::owners::with_path(&args, &bin);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let physics = r["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team"] == "physics")
        .unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(physics["waited_gpu_hours"], 0, "{physics:#}");
    // The planted truth: 8 hours on each of the five weeknights.
    assert_eq!(physics["demand_gpu_hours"], 40, "{physics:#}");
}
