//! Work per GPU-hour around a change, in the trend's realized savings (issue 60; docs/work.md
//! "Before and after a change", docs/report.md "Trend"), through a real Prometheus (Debian's;
//! fails, never skips, without it): eight simulated days of one node with two H100s, ml/trainer-0
//! holding GPU 0 all the time, written as tessera-exporter's series with `tessera_gpu_pod_info`,
//! beside two declared counters of the same pod (`--work-metrics`): `steady_steps_total` at 4
//! steps a second throughout, `halved_steps_total` at 4 until the middle of the report's week and
//! 2 after. The report covers the last seven days exactly (the trend's last week is its own) with
//! a change given at that middle (`--change-at`): declared as the halved counter, ml's steps per
//! GPU-hour fall by half (planted truth: 14,400 before, 7,200 after), the change is flagged and
//! its saving is left out of the trend's realized savings (JSON and text); declared as the steady
//! one, it holds (14,400 both sides), the change is not flagged and its saving is counted. With
//! the plan that made the change (`--plan`, a consolidation of GPU 1 onto GPU 0 with a
//! `prediction` block), the same figures and flag stand beside the predicted-vs-realized block.

use serde_json::Value;

use crate::support::openmetrics::{self as om, DAY_MS, openmetrics_with_holders, rfc3339};
use crate::support::prometheus as prom;

const SCENARIO: &str = r#"
name = "work-changes"
seed = 60
start = "2026-11-02T00:00:00Z"

[[nodes]]
name = "k8s-1"
gpus = [{ model = "H100-80GB", count = 2 }]

[[workloads]]
name = "trainer"
kind = "inference"
node = "k8s-1"
gpu = 0
memory_gib = 30
peak = 0.7
base = 0.2
namespace = "ml"
pod = "trainer-0"
"#;

const DAYS: i64 = 8;

/// The planted steps per second: `before` until `at` (ms after the start), `after` from it.
fn steps(at: i64, before: f64, after: f64) -> impl Fn(i64) -> f64 {
    move |t| {
        let t0 = t.min(at) as f64 / 1000.0;
        let t1 = (t - at).max(0) as f64 / 1000.0;
        before * t0 + after * t1
    }
}

struct Served {
    _tmp: tempfile::TempDir,
    _server: prom::Server,
    dir: std::path::PathBuf,
    src: String,
    since: i64,
    change: i64,
}

fn serve() -> Served {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) =
        om::simulate_days(tmp.path(), SCENARIO, "work-changes", DAYS as u32);
    let mut text = openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1"]);
    text.truncate(text.len() - "# EOF\n".len());
    // The middle of the report's week (days 1 to 8): day 4, 12:00.
    let change = 4 * DAY_MS + DAY_MS / 2;
    let labels = "namespace=\"ml\",pod=\"trainer-0\",job=\"trainer\"";
    let no_jitter = |_| 0;
    for (name, after) in [("steady_steps_total", 4.0), ("halved_steps_total", 2.0)] {
        om::sampled_counter(
            &mut text,
            (name, labels),
            (since, DAYS * DAY_MS, 60_000),
            &no_jitter,
            &[],
            &steps(change, 4.0, after),
        );
    }
    text.push_str("# EOF\n");
    let om_file = tmp.path().join("data.om");
    std::fs::write(&om_file, &text).expect("write openmetrics");
    let server = prom::serve_file(tmp.path(), &om_file, "24h");
    Served {
        src: format!("prometheus:{}", server.url),
        dir: tmp.path().to_path_buf(),
        _server: server,
        _tmp: tmp,
        since,
        change,
    }
}

/// The report over the last seven days, the change given, the counter `counter` declared.
fn report(s: &Served, counter: &str, format: &str, extra: &[&str]) -> String {
    let file = s.dir.join(format!("{counter}.toml"));
    std::fs::write(
        &file,
        format!("[[work]]\nunit = \"steps\"\ncounter = \"{counter}\"\n"),
    )
    .unwrap();
    let (from, to) = (rfc3339(s.since + DAY_MS), rfc3339(s.since + DAYS * DAY_MS));
    let at = rfc3339(s.since + s.change);
    let mut args = vec![
        "report",
        "--source",
        &s.src,
        "--since",
        &from,
        "--until",
        &to,
        "--interval",
        "10s",
        "--format",
        format,
        "--no-replay",
        "--trend.weeks",
        "2",
        "--change-at",
        &at,
        "--work-metrics",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = crate::support::cli::tessera(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn work_change(r: &Value) -> Value {
    let cmp = &r["changes"]["changes"][0]["comparison"]["work_per_gpu_hour"];
    cmp.as_array()
        .unwrap()
        .iter()
        .find(|c| c["team"] == "ml" && c["unit"] == "steps")
        .unwrap_or_else(|| panic!("{cmp:#}"))
        .clone()
}

fn close(got: &Value, want: f64, what: &str) {
    let v = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
    assert!(
        (v - want).abs() <= want * 0.005,
        "{what}: {v} vs the planted {want}"
    );
}

#[test]
fn work_per_gpu_hour_a_flagged_change_is_left_out_of_the_realized_savings() {
    let s = serve();
    // The planted truth: 4 steps a second on one GPU, then 2 (halved) or 4 (steady).
    let (before, halved) = (4.0 * 3600.0, 2.0 * 3600.0);

    let r: Value = serde_json::from_str(&report(&s, "halved_steps_total", "json", &[])).unwrap();
    let w = work_change(&r);
    close(&w["before"], before, "before");
    close(&w["after"], halved, "after");
    assert_eq!(w["flagged"], true, "{w:#}");
    let t = &r["trend"];
    let realized = t["realized"].as_array().unwrap();
    assert_eq!(realized.len(), 1, "{t:#}");
    assert_eq!(
        realized[0]["work_flagged"],
        serde_json::json!(["ml (steps)"]),
        "{t:#}"
    );
    assert!(realized[0]["saving_per_month"].is_number(), "{t:#}");
    assert_eq!(
        t["flagged_left_out"],
        serde_json::json!([realized[0]["at"]]),
        "{t:#}"
    );
    assert!(t["realized_saving_per_month"].is_null(), "left out: {t:#}");
    let text = report(&s, "halved_steps_total", "table", &[]);
    assert!(
        text.contains("flagged: work per GPU-hour of ml (steps) fell by more than 30% at it")
            && text.contains("Realized savings: none counted (left out, flagged by work per GPU-hour: the change(s) at"),
        "{text}"
    );

    let r: Value = serde_json::from_str(&report(&s, "steady_steps_total", "json", &[])).unwrap();
    let w = work_change(&r);
    close(&w["before"], before, "before");
    close(&w["after"], before, "after");
    assert_eq!(w["flagged"], false, "{w:#}");
    let t = &r["trend"];
    let realized = t["realized"].as_array().unwrap();
    assert_eq!(realized.len(), 1, "{t:#}");
    assert!(realized[0].get("work_flagged").is_none(), "{t:#}");
    assert_eq!(t["flagged_left_out"], serde_json::json!([]), "{t:#}");
    assert_eq!(
        t["realized_saving_per_month"], realized[0]["saving_per_month"],
        "counted: {t:#}"
    );
}

/// The plan that made the change: GPU 1's work onto GPU 0, made from days 1 to 3 (before the
/// change), its prediction 2 GPUs → 1.
fn plan(s: &Served) -> std::path::PathBuf {
    let p = s.dir.join("plan.yaml");
    let (from, until) = (rfc3339(s.since + DAY_MS), rfc3339(s.since + 3 * DAY_MS));
    std::fs::write(
        &p,
        format!(
            "version: v1\nkind: tessera-plan\n\
             window: {{ from: \"{from}\", until: \"{until}\", sources: [\"{src}\"] }}\n\
             consolidation:\n  - model: H100-80GB\n    host: {{ node: k8s-1, gpu: 0 }}\n    guests:\n      - {{ node: k8s-1, gpu: 1 }}\n\
             prediction:\n  from: \"{from}\"\n  until: \"{until}\"\n  verdict: safe\n  gpus-before: 2\n  gpus-after: 1\n  gpu-hours-freed: 48.0\n  failed-intervals: 0\n",
            src = s.src
        ),
    )
    .unwrap();
    p
}

#[test]
fn work_per_gpu_hour_stands_beside_the_predicted_and_realized() {
    let s = serve();
    let plan = plan(&s);
    let plan = plan.to_str().unwrap();
    let (before, halved) = (4.0 * 3600.0, 2.0 * 3600.0);
    for (counter, after, flagged) in [
        ("halved_steps_total", halved, true),
        ("steady_steps_total", before, false),
    ] {
        let r: Value =
            serde_json::from_str(&report(&s, counter, "json", &["--plan", plan])).unwrap();
        let cmp = &r["changes"]["changes"][0]["comparison"];
        let p = &cmp["predicted"];
        assert_eq!(p["plan"], plan, "{cmp:#}");
        let beside = p["work_per_gpu_hour"]
            .as_array()
            .unwrap_or_else(|| panic!("{p:#}"));
        assert_eq!(beside.len(), 1, "{p:#}");
        let w = &beside[0];
        assert_eq!(
            (&w["team"], &w["unit"]),
            (&"ml".into(), &"steps".into()),
            "{w:#}"
        );
        close(&w["before"], before, "before");
        close(&w["after"], after, "after");
        assert_eq!(w["flagged"], flagged, "{counter}: {w:#}");
        // The same figures as the change's own comparison.
        assert_eq!(*w, work_change(&r), "{cmp:#}");
        for format in ["table", "html"] {
            let text = report(&s, counter, format, &["--plan", plan]);
            let line = text
                .lines()
                .find(|l| l.contains("Beside the prediction, work per GPU-hour, ml (steps)"))
                .unwrap_or_else(|| panic!("{format}: {text}"));
            assert_eq!(
                line.contains("flagged: it fell by more than 30%"),
                flagged,
                "{format}: {line}"
            );
        }
    }
}
