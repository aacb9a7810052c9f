//! Owners (issue 56 item 1, docs/report.md "Owners"): the demo history with an `--owners` file —
//! the team table, the JSON's `teams.rows[].owner` and `actions[].owner`, the Actions block's
//! `owner:` line (`unknown` where the file names no one), notify's `owner` label, `tessera job`'s
//! owner; a malformed file is exit 2 naming the file and the line; and kube-state-metrics'
//! `kube_namespace_labels` read through a real Prometheus (Debian's; the test fails, never skips,
//! without it): the owners planted in the namespaces' labels appear, and a server without the
//! metric gives the data-quality note; the namespaces' labels and annotations read from the
//! Kubernetes API (the fake API server of `tests/fake-kube`): owners planted in labels and in
//! annotations appear, a key's label before its annotation, the file first, and a refused list
//! is a note, not a failure.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::run;
use crate::support::openmetrics::{self as om, DAY_MS, openmetrics, rfc3339};
use crate::support::prometheus as prom;

fn demo() -> String {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    format!("history:{}", d.display())
}

fn owners_file(dir: &Path) -> PathBuf {
    let p = dir.join("owners.toml");
    std::fs::write(
        &p,
        "# the platform team's list\n[owners]\nresearch = \"research-leads@example.com\"\n\
         serving = \"ml-serving@example.com\"\n\"slurm job 81234\" = \"alice@example.com\"\n",
    )
    .unwrap();
    p
}

fn ok(args: &[&str]) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn json(args: &[&str]) -> Value {
    let o = ok(args);
    serde_json::from_str(&o).unwrap_or_else(|e| panic!("{e}: {o}"))
}

fn team_owner<'a>(r: &'a Value, team: &str) -> &'a Value {
    let rows = r["teams"]["rows"].as_array().expect("teams.rows");
    let row = rows.iter().find(|t| t["team"] == team);
    &row.unwrap_or_else(|| panic!("no team {team}: {rows:?}"))["owner"]
}

#[test]
fn the_report_names_the_owners_of_the_file_and_unknown_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let file = owners_file(tmp.path());
    let (src, f) = (demo(), file.to_str().unwrap().to_string());
    let r = json(&[
        "report", "--source", &src, "--format", "json", "--owners", &f,
    ]);
    assert_eq!(team_owner(&r, "serving"), "ml-serving@example.com");
    assert_eq!(team_owner(&r, "slurm job 81234"), "alice@example.com");
    assert!(team_owner(&r, "docs").is_null(), "unknown is null");
    let actions = r["actions"].as_array().expect("actions");
    let scale = actions
        .iter()
        .find(|a| a["kind"] == "scale_to_zero")
        .expect("the demo's scale-to-zero action");
    assert_eq!(scale["owner"], "research-leads@example.com", "{scale}");
    // Without the file, nobody is named.
    let bare = json(&["report", "--source", &src, "--format", "json"]);
    assert!(team_owner(&bare, "serving").is_null());
    assert!(
        bare["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["owner"].is_null())
    );

    let table = ok(&["report", "--source", &src, "--owners", &f]);
    let head = table
        .lines()
        .find(|l| l.contains("team") && l.contains("owner") && l.contains("processes"))
        .unwrap_or_else(|| panic!("no owner column:\n{table}"));
    assert!(head.find("team") < head.find("owner"), "{head}");
    for want in [
        "ml-serving@example.com",
        "alice@example.com",
        "unknown",
        "owner: research-leads@example.com",
    ] {
        assert!(table.contains(want), "{want:?} missing:\n{table}");
    }
    let md = ok(&[
        "report", "--source", &src, "--owners", &f, "--format", "markdown",
    ]);
    assert!(md.contains("| owner |") || md.contains("owner"), "{md}");
}

#[test]
fn notify_labels_and_the_job_carry_the_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let f = owners_file(tmp.path()).to_str().unwrap().to_string();
    let src = demo();
    let alerts = json(&["notify", "--source", &src, "--dry-run", "--owners", &f]);
    let alerts = alerts.as_array().expect("alerts");
    let mut named = 0;
    for a in alerts {
        let l = &a["labels"];
        match l["namespace"]
            .as_str()
            .or(l["slurm_job"].as_str().map(|_| "job"))
        {
            Some("research") => {
                assert_eq!(l["owner"], "research-leads@example.com", "{l}");
                named += 1;
            }
            Some("docs") => assert!(l["owner"].is_null(), "no owner guessed: {l}"),
            _ => {}
        }
    }
    assert!(named > 0, "no research alert: {alerts:?}");

    let job = ok(&["job", "81234", "--source", &src, "--owners", &f]);
    assert!(job.contains("Owner     alice@example.com"), "{job}");
    let job = json(&["job", "81234", "--source", &src, "--format", "json"]);
    assert!(job["owner"].is_null(), "unknown without the file: {job}");
}

#[test]
fn a_malformed_owners_file_is_exit_2_naming_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("owners.toml");
    std::fs::write(&p, "[owners]\nserving = \"a@x\"\nresearch = 7\n").unwrap();
    let f = p.to_str().unwrap();
    let (code, _, err) = run(&["report", "--source", &demo(), "--owners", f]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(f) && err.contains("line 3"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, _, err) = run(&[
        "job",
        "81234",
        "--source",
        &demo(),
        "--owners",
        "/nonexistent/o.toml",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/o.toml"), "{err}");
}

const SCENARIO: &str = r#"
name = "owners"
seed = 3
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0
driver_version = "550.54.15"
cuda_version = "12.4"

[[nodes]]
name = "gpu-node-1"
gpus = [{ model = "H100-80GB", count = 3 }]

[[workloads]]
name = "chat-api"
kind = "inference"
node = "gpu-node-1"
gpu = 0
memory_gib = 30.0
peak = 0.7
base = 0.05
namespace = "serving"
pod = "chat-api-7d9f8c-x2k4p"

[[workloads]]
name = "embeddings-forgotten"
kind = "idle"
node = "gpu-node-1"
gpu = 1
memory_gib = 14.5
namespace = "research"
pod = "embed-test-5c8d7-qq9zl"

[[workloads]]
name = "ocr"
kind = "idle"
node = "gpu-node-1"
gpu = 2
memory_gib = 9.0
namespace = "docs"
pod = "ocr-75d9b-m4k1s"
"#;

/// `kube_namespace_labels` every minute of the day: `serving` with `tessera.io/owner` and
/// `team` (the first wins), `research` with `team` only, `docs` with no owner label.
fn namespace_labels(since: i64) -> String {
    let mut s = String::from("# TYPE kube_namespace_labels gauge\n");
    let series = [
        "namespace=\"serving\",label_tessera_io_owner=\"ml-serving@example.com\",label_team=\"ml\"",
        "namespace=\"research\",label_team=\"research-leads@example.com\"",
        "namespace=\"docs\",label_kubernetes_io_metadata_name=\"docs\"",
    ];
    for l in series {
        for m in 0..=(DAY_MS / 60_000) {
            let t = (since + m * 60_000) as f64 / 1000.0;
            s.push_str(&format!("kube_namespace_labels{{{l}}} 1 {t:.3}\n"));
        }
    }
    s
}

fn report(url: &str, since: i64) -> (Value, String) {
    let src = format!("prometheus:{url}");
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let out = crate::support::cli::tessera(&[
        "report", "--source", &src, "--since", &from, "--until", &to, "--format", "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "report failed:\n{stderr}");
    (serde_json::from_slice(&out.stdout).expect("JSON"), stderr)
}

#[test]
fn kube_namespace_labels_give_the_owners_and_their_absence_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), SCENARIO, "owners");
    let base = openmetrics(&gpu, &mig, &process);
    let body = base.trim_end().trim_end_matches("# EOF").to_string();

    let with = tmp.path().join("with");
    std::fs::create_dir_all(&with).unwrap();
    let server = prom::serve(&with, &format!("{body}{}# EOF\n", namespace_labels(since)));
    let (r, _) = report(&server.url, since);
    assert_eq!(team_owner(&r, "serving"), "ml-serving@example.com");
    assert_eq!(team_owner(&r, "research"), "research-leads@example.com");
    assert!(team_owner(&r, "docs").is_null(), "no owner label, no owner");
    let notes = r["data_quality"].to_string();
    assert!(!notes.contains("owners:"), "{notes}");
    drop(server);

    let without = tmp.path().join("without");
    std::fs::create_dir_all(&without).unwrap();
    let server = prom::serve(&without, &base);
    let (r, stderr) = report(&server.url, since);
    assert!(team_owner(&r, "serving").is_null());
    let notes: Vec<&Value> = r["data_quality"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "owners")
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", r["data_quality"]);
    assert!(
        notes[0]["message"]
            .as_str()
            .unwrap()
            .contains("no kube_namespace_labels series"),
        "{notes:?}"
    );
    assert!(stderr.contains("kube_namespace_labels"), "{stderr}");
}

/// The demo's namespaces in the fake API server: `serving` names its owner in an annotation
/// (`tessera.io/owner`, before the `team` label), `research` in a label and an annotation of
/// the same key (the label wins), `docs` names no one.
fn kube_with_owners(dir: &Path) -> (fake_kube::FakeKube, String) {
    let kube = fake_kube::FakeKube::start();
    kube.add_namespace(
        "serving",
        &[("team", "ml")],
        &[("tessera.io/owner", "ml-serving@example.com")],
    );
    kube.add_namespace(
        "research",
        &[("owner", "research-label@example.com")],
        &[("owner", "research-annotation@example.com")],
    );
    kube.add_namespace("docs", &[("kubernetes.io/metadata.name", "docs")], &[]);
    let kc = dir.join("kubeconfig");
    kube.write_kubeconfig(&kc);
    (kube, kc.to_str().unwrap().to_string())
}

#[test]
fn the_kubernetes_api_gives_owners_from_labels_and_annotations() {
    let tmp = tempfile::tempdir().unwrap();
    let (kube, kc) = kube_with_owners(tmp.path());
    let src = demo();
    let r = json(&[
        "report",
        "--source",
        &src,
        "--format",
        "json",
        "--kubeconfig",
        &kc,
    ]);
    assert_eq!(team_owner(&r, "serving"), "ml-serving@example.com");
    assert_eq!(team_owner(&r, "research"), "research-label@example.com");
    assert!(team_owner(&r, "docs").is_null(), "no owner key, no owner");
    assert!(
        kube.requests()
            .iter()
            .any(|q| q.method == "GET" && q.path == "/api/v1/namespaces"),
        "one list of the namespaces"
    );
    let alerts = json(&["notify", "--source", &src, "--dry-run", "--kubeconfig", &kc]);
    let research: Vec<&Value> = alerts
        .as_array()
        .expect("alerts")
        .iter()
        .filter(|a| a["labels"]["namespace"] == "research")
        .collect();
    assert!(!research.is_empty());
    for a in research {
        assert_eq!(a["labels"]["owner"], "research-label@example.com", "{a}");
    }

    // The file comes first.
    let f = owners_file(tmp.path());
    let r = json(&[
        "report",
        "--source",
        &src,
        "--format",
        "json",
        "--kubeconfig",
        &kc,
        "--owners",
        f.to_str().unwrap(),
    ]);
    assert_eq!(team_owner(&r, "research"), "research-leads@example.com");
    assert_eq!(team_owner(&r, "serving"), "ml-serving@example.com");
}

#[test]
fn a_refused_namespace_list_is_a_note_not_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let (kube, kc) = kube_with_owners(tmp.path());
    kube.fail(fake_kube::Fault {
        code: 403,
        message: "namespaces is forbidden: User cannot list resource".into(),
        ..fake_kube::Fault::leader_changed("GET", "/api/v1/namespaces", 1)
    });
    let out = crate::support::cli::tessera(&[
        "report",
        "--source",
        &demo(),
        "--format",
        "json",
        "--kubeconfig",
        &kc,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        team_owner(&r, "serving").is_null(),
        "nothing read, nothing named"
    );
    let notes = r["data_quality"].to_string();
    assert!(
        notes.contains("cannot list the namespaces") && notes.contains("list namespaces"),
        "{notes}"
    );
    assert!(stderr.contains("forbidden"), "{stderr}");
}

/// A fake `sacct` in a folder of its own (to put first on PATH): it logs its arguments and
/// prints `out` on stdout and `err` on stderr, exiting `code`.
pub(crate) fn fake_sacct(dir: &Path, out: &str, err: &str, code: i32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("sacct.args");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{}'\nprintf '%s' '{out}'\nprintf '%s\\n' '{err}' >&2\nexit {code}\n",
        log.display()
    );
    let p = bin.join("sacct");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

pub(crate) fn with_path(args: &[&str], path: &Path) -> (i32, String, String) {
    let out = crate::support::cli::tessera_with(args, |c| {
        c.env("PATH", path);
    });
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn owner_notes(r: &Value) -> Vec<String> {
    r["data_quality"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "owners")
        .map(|n| n["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sacct_gives_the_slurm_jobs_user_and_account() {
    let tmp = tempfile::tempdir().unwrap();
    // The allocation line first, then its step; a line of another job it was not asked about.
    let bin = fake_sacct(
        tmp.path(),
        "81234|alice|physics\n81234.batch|alice|physics\n99999|mallory|x\n",
        "",
        0,
    );
    let src = demo();
    let (code, out, err) = with_path(&["report", "--source", &src, "--format", "json"], &bin);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(team_owner(&r, "slurm job 81234"), "alice (account physics)");
    assert!(owner_notes(&r).is_empty(), "{:?}", owner_notes(&r));
    assert!(
        !out.contains("mallory"),
        "a job not asked about names no one"
    );
    let args = std::fs::read_to_string(tmp.path().join("sacct.args")).unwrap();
    assert!(
        args.contains("-j 81234") && args.contains("JobIDRaw,User,Account"),
        "{args}"
    );

    let (code, out, err) = with_path(
        &["job", "81234", "--source", &src, "--format", "json"],
        &bin,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(job["owner"], "alice (account physics)");

    // The owners file names the job: sacct is not asked.
    std::fs::remove_file(tmp.path().join("sacct.args")).unwrap();
    let f = owners_file(tmp.path());
    let (code, out, err) = with_path(
        &[
            "report",
            "--source",
            &src,
            "--format",
            "json",
            "--owners",
            f.to_str().unwrap(),
        ],
        &bin,
    );
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(team_owner(&r, "slurm job 81234"), "alice@example.com");
    assert!(
        !tmp.path().join("sacct.args").exists(),
        "sacct asked though the file names the job"
    );
}

#[test]
fn absent_or_failing_sacct_is_unknown_and_one_note() {
    let tmp = tempfile::tempdir().unwrap();
    let src = demo();
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out, err) = with_path(&["report", "--source", &src, "--format", "json"], &empty);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(team_owner(&r, "slurm job 81234").is_null());
    let notes = owner_notes(&r);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("sacct is not on PATH"), "{notes:?}");
    assert_eq!(
        err.matches("sacct is not on PATH").count(),
        1,
        "said once: {err}"
    );

    // Accounting without slurmdbd: sacct fails; still exit 0, the reason in the note.
    let bin = fake_sacct(
        tmp.path(),
        "",
        "sacct: error: Slurm accounting storage is disabled",
        1,
    );
    let (code, out, err) = with_path(&["report", "--source", &src, "--format", "json"], &bin);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert!(team_owner(&r, "slurm job 81234").is_null());
    let notes = owner_notes(&r);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("accounting storage is disabled"),
        "{notes:?}"
    );
    let (code, _, err) = with_path(&["job", "81234", "--source", &src], &bin);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("accounting storage is disabled"), "{err}");
}

#[test]
fn analyze_actions_carry_the_owners_as_the_reports_do() {
    let tmp = tempfile::tempdir().unwrap();
    let f = owners_file(tmp.path()).to_str().unwrap().to_string();
    let src = demo();
    let scale_owner = |a: &Value| -> Value {
        let actions = a["actions"].as_array().expect("actions");
        let scale = actions.iter().find(|x| x["kind"] == "scale_to_zero");
        scale.expect("the demo's scale-to-zero action")["owner"].clone()
    };
    let a = json(&[
        "analyze", "--source", &src, "--format", "json", "--owners", &f,
    ]);
    assert_eq!(scale_owner(&a), "research-leads@example.com");
    let actions = a["actions"].as_array().unwrap();
    let scale = actions
        .iter()
        .find(|x| x["kind"] == "scale_to_zero")
        .unwrap();
    assert_eq!(scale["teams"], serde_json::json!(["research"]), "{scale}");
    let table = ok(&["analyze", "--source", &src, "--owners", &f]);
    assert!(
        table.contains("owner: research-leads@example.com"),
        "{table}"
    );
    // Without owners: unknown.
    let bare = json(&["analyze", "--source", &src, "--format", "json"]);
    assert!(scale_owner(&bare).is_null());
    // From the Kubernetes API.
    let (_kube, kc) = kube_with_owners(tmp.path());
    let a = json(&[
        "analyze",
        "--source",
        &src,
        "--format",
        "json",
        "--kubeconfig",
        &kc,
    ]);
    assert_eq!(scale_owner(&a), "research-label@example.com");
}
