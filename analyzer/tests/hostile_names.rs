//! Issue 53: a hostile pod, namespace and process name (terminal escapes, BEL, CR, a C1 CSI)
//! reaches every command that prints names from the data, and none of them passes a control
//! character to the terminal. One history written here (a generic CSV: an idle pod holding
//! memory on one H100 and a light one on another, so that every detector, plan and dry run has
//! something to name), then every command that runs offline (the `share apply` and
//! `scale-down` dry runs against `tessera-fake-kube`): stdout and stderr hold no control
//! character but `\n` (and `\t` nowhere), and the human outputs show the name escaped
//! (`\u{1b}`, as `tessera::output::escape::printable` writes it). JSON outputs carry the name as JSON
//! escapes it (`\u001b`); they are held to the same rule for raw characters.

use std::fmt::Write as _;
use std::path::Path;

use fake_kube::FakeKube;

use super::support::cli::tessera_with;

const T0: i64 = 1_793_577_600; // 2026-11-02T00:00:00Z, s
const PROCESS: &str = "py\u{1b}[2J\u{1b}]0;owned\u{7}";
const NAMESPACE: &str = "ns\u{1b}[31m";
const POD: &str = "pod\u{9b}1\rx";

/// Three hours of three H100s: n0's GPU 0 idle with the hostile process holding 8 GB (pod and
/// namespace hostile, Slurm job 77 too), n1's GPU 1 lightly used by another hostile pod, its GPU
/// 2 by a plain one: an idle-loaded finding, a consolidation move and a MIG plan that all name a
/// hostile workload.
fn history(dir: &Path) -> String {
    let mut s = String::from(
        "timestamp,entity,metric,value,kind,node,model,gpu,uuid,process,namespace,pod,slurm_job_id,holder_namespace,holder_pod\n",
    );
    for i in 1..=180i64 {
        let t = T0 + 60 * i;
        for g in 0..3 {
            let busy = if g == 0 { 0.0 } else { 0.05 };
            let (node, ns, pod, job) = match g {
                0 => ("n0", NAMESPACE, POD, "77"),
                1 => ("n1", NAMESPACE, "pod\u{9b}2\rx", ""),
                _ => ("n1", "plain", "plain-pod", ""),
            };
            for (m, v) in [
                ("gpu_busy_ratio", busy),
                ("sm_active_ratio", busy),
                ("memory_used_bytes", 8e9),
                ("memory_total_bytes", 80e9),
                ("holders", 1.0),
            ] {
                let _ = writeln!(
                    s,
                    "{t},GPU-{g},{m},{v},gpu,{node},NVIDIA H100 80GB HBM3,{g},GPU-{g},,,,,{ns},{pod}"
                );
            }
            let _ = writeln!(
                s,
                "{t},{},memory_used_bytes,8e9,process,{node},,{g},GPU-{g},{PROCESS},{ns},{pod},{job},,",
                4242 + g
            );
        }
    }
    let path = dir.join("hostile.csv");
    std::fs::write(&path, s).unwrap();
    format!("csv:{}", path.display())
}

/// A fake cluster with node n1 (3 GPUs) and the device plugin's ConfigMap, for the dry runs that
/// read a cluster; its kubeconfig in `dir`.
fn cluster(dir: &Path) -> FakeKube {
    let kube = FakeKube::start();
    kube.add_gpu_node("n1", 3, &[]);
    kube.set_device_plugin_config(Some("device-plugin-configs"), Some("any"));
    kube.put_configmap(
        "gpu-operator",
        "device-plugin-configs",
        &[("any", "version: v1\n")],
    );
    kube.write_kubeconfig(&dir.join("kubeconfig"));
    kube
}

/// One command's outputs.
struct Run {
    what: String,
    code: i32,
    out: String,
    err: String,
}

fn run(dir: &Path, args: &[&str]) -> Run {
    let out = tessera_with(args, |c| {
        c.env_remove("KUBECONFIG")
            .env("NO_COLOR", "1")
            .env("XDG_STATE_HOME", dir.join("state"))
            .current_dir(dir);
    });
    Run {
        what: args.join(" "),
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Where a command's stdout shows the hostile names.
#[derive(Clone, Copy)]
enum Shows {
    /// Escaped as `text::printable` writes it (`\u{1b}`).
    Escaped,
    /// In a JSON document, as JSON escapes it (`\u001b`) or as a label the text escaped.
    Json,
    /// Nowhere (the output names other things).
    Nothing,
}

/// The control characters of `text` other than `\n`, with their byte offsets.
fn raw_controls(text: &str) -> Vec<(usize, char)> {
    text.char_indices()
        .filter(|&(_, c)| c.is_control() && c != '\n')
        .collect()
}

#[test]
fn a_hostile_name_is_escaped_in_every_commands_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = history(dir);
    let kube = cluster(dir);
    let kubeconfig = dir.join("kubeconfig").display().to_string();
    let (mig, moves) = ("mig.yaml", "moves.yaml");
    // The plans the later commands read, made first.
    for args in [
        vec!["mig", "plan", "--source", &src, "-o", mig],
        vec!["analyze", "--source", &src, "--plan-out", moves],
    ] {
        let r = run(dir, &args);
        assert_eq!(r.code, 0, "{}: {}", r.what, r.err);
    }
    let mut runs: Vec<(Run, Shows)> = Vec::new();
    let mut check = |args: &[&str], shows: Shows| runs.push((run(dir, args), shows));
    use Shows::{Escaped, Json, Nothing};
    check(&["analyze", "--source", &src], Escaped);
    check(&["analyze", "--source", &src, "--format", "json"], Json);
    for fmt in ["table", "markdown", "html"] {
        check(&["report", "--source", &src, "--format", fmt], Escaped);
    }
    check(&["report", "--source", &src, "--format", "json"], Json);
    // Jobs are named by their Slurm id, the ingest summary by tables and nodes.
    check(&["report", "--source", &src, "--by", "job"], Nothing);
    check(
        &[
            "report", "--source", &src, "--by", "job", "--format", "json",
        ],
        Nothing,
    );
    check(&["job", "77", "--source", &src], Nothing);
    check(&["ingest", "--source", &src], Nothing);
    check(
        &["mig", "plan", "--source", &src, "-o", "mig2.yaml"],
        Escaped,
    );
    check(
        &[
            "mig",
            "plan",
            "--source",
            &src,
            "--format",
            "json",
            "-o",
            "mig3.yaml",
        ],
        Json,
    );
    // The MIG plan's workloads are processes and pods; the consolidation moves' are GPUs.
    for (plan, shows, json) in [(mig, Escaped, Json), (moves, Nothing, Nothing)] {
        for fmt in ["table", "markdown", "html"] {
            check(
                &["replay", "--source", &src, "--plan", plan, "--format", fmt],
                shows,
            );
        }
        check(
            &[
                "replay", "--source", &src, "--plan", plan, "--format", "json",
            ],
            json,
        );
    }
    check(
        &["share", "plan", "--plan", moves, "--source", &src],
        Escaped,
    );
    check(
        &[
            "share", "plan", "--plan", moves, "--source", &src, "--format", "json",
        ],
        Json,
    );
    let stale = "--allow-stale-evidence";
    check(
        &[
            "share",
            "apply",
            "--plan",
            moves,
            "--source",
            &src,
            "--kubeconfig",
            &kubeconfig,
            stale,
        ],
        Escaped,
    );
    check(
        &[
            "scale-down",
            "--source",
            &src,
            "--kubeconfig",
            &kubeconfig,
            stale,
            "--journal",
            "journal.json",
            "--audit-log",
            "-",
        ],
        Escaped,
    );
    check(&["notify", "--source", &src, "--dry-run"], Json);
    assert!(
        kube.requests().iter().all(|r| r.method == "GET"),
        "dry runs write nothing"
    );
    let mut failures = Vec::new();
    for (r, shows) in &runs {
        if r.code != 0 {
            failures.push(format!("{}: exit {}:\n{}", r.what, r.code, r.err));
        }
        for (stream, text) in [("stdout", &r.out), ("stderr", &r.err)] {
            let raw = raw_controls(text);
            if !raw.is_empty() {
                failures.push(format!(
                    "{}: {stream} holds raw control characters {raw:?}:\n{text}",
                    r.what
                ));
            }
        }
        let shown = match shows {
            Escaped => r.out.contains("\\u{1b}"),
            // Valid JSON holding the name (as JSON escapes it, or as the text escapes it in a
            // label) whole: the C1 control read back too.
            Json => match serde_json::from_str::<serde_json::Value>(&r.out) {
                Ok(v) => {
                    let all = v.to_string();
                    all.contains("\\u001b") || all.contains("\\\\u{1b}")
                }
                Err(e) => {
                    failures.push(format!("{}: not JSON ({e}):\n{}", r.what, r.out));
                    true
                }
            },
            Nothing => true,
        };
        if !shown {
            failures.push(format!(
                "{}: stdout does not show the name escaped:\n{}",
                r.what, r.out
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
