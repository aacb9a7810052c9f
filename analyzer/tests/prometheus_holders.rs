//! Holders by allocation through the `prometheus:` source (issue 32), against a real Prometheus
//! (Debian's; the test fails, never skips, without it): one simulated day of
//! `fixtures/scenarios/allocated.toml` (its header lists the truth) written as tessera-exporter's
//! series, with `tessera_gpu_pod_info` from the history rows' pod holders and
//! `tessera_exporter_kubelet_up` on the Kubernetes nodes (k8s-1, mig-1) only.
//!
//! Checked: the `holders`, `holder_namespace` and `holder_pod` columns of every GPU and MIG row of
//! the Kubernetes nodes equal history's, through query-range and remote read (a free GPU is 0,
//! not null: the kubelet answered; a MIG GPU counts the pods of its instances); slurm-1, whose
//! exporter has no kubelet, has them null (unknown), never 0; and `tessera analyze` finds the same
//! `allocated_unused` findings for the pods as through `history:` (nb-alice's GPU and nb-carol's
//! MIG instance, unused all day).
//!
//! dcgm-exporter with its Kubernetes mapping: the same day as `DCGM_FI_DEV_FB_USED` series whose
//! `pod`/`namespace` labels are the rows' pod holders (MIG instances by `GPU_I_ID`): the
//! Kubernetes nodes' holders equal history's (free GPUs 0: the node has pod-labelled series),
//! slurm-1's (no pod label anywhere) are null.

use std::collections::BTreeMap;

use polars::prelude::*;
use serde_json::Value;
use tessera::ingest::prometheus::Api;
use tessera::ingest::{self, IngestOptions, Source};

use crate::support::openmetrics::{
    self as om, DAY_MS, gauge, openmetrics_with_holders, rfc3339, strs,
};
use crate::support::prometheus as prom;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/scenarios/allocated.toml"
);

/// Per row "table node uuid [gi] ts" → (holders, holder_namespace, holder_pod).
type Held = BTreeMap<String, (Option<String>, Option<String>, Option<String>)>;

fn held(gpu: &DataFrame, mig: &DataFrame) -> Held {
    let mut out = Held::new();
    for (name, df) in [("gpu", gpu), ("mig", mig)] {
        let (node, uuid, ts) = (strs(df, "node"), strs(df, "uuid"), strs(df, "ts"));
        let gi = if name == "mig" {
            strs(df, "gpu_instance")
        } else {
            vec![None; df.height()]
        };
        let (h, ns, pod) = (
            strs(df, "holders"),
            strs(df, "holder_namespace"),
            strs(df, "holder_pod"),
        );
        for i in 0..df.height() {
            let key = format!(
                "{name} {} {} {} {}",
                node[i].as_deref().unwrap_or("?"),
                uuid[i].as_deref().unwrap_or("?"),
                gi[i].as_deref().unwrap_or("-"),
                ts[i].as_deref().unwrap_or("?")
            );
            out.insert(key, (h[i].clone(), ns[i].clone(), pod[i].clone()));
        }
    }
    out
}

fn prometheus_frames(url: &str, since: i64, api: Api) -> (DataFrame, DataFrame) {
    let mut opts = IngestOptions {
        since: Some(since),
        until: Some(since + DAY_MS),
        interval_ms: Some(10_000),
        ..IngestOptions::default()
    };
    opts.prometheus.api = api;
    let (frames, _) =
        ingest::ingest(&[Source::prometheus(url.to_string())], &opts).expect("prometheus");
    (
        frames.gpu.collect().expect("gpu"),
        frames.mig.collect().expect("mig"),
    )
}

/// The allocated_unused findings: "node/GPUn[/GIk] pod" → (kind, unused hours).
fn findings(source: &str, since: i64, extra: &[&str]) -> BTreeMap<String, (String, f64)> {
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let mut args = vec![
        "analyze", "--source", source, "--since", &from, "--until", &to, "--format", "json",
    ];
    args.extend_from_slice(extra);
    let out = crate::support::cli::tessera(&args);
    assert!(
        out.status.success(),
        "{source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["detector"] == "allocated_unused")
        .filter_map(|f| {
            let e = &f["entity"];
            let mut key = format!("{}/GPU{}", e["node"].as_str().unwrap(), e["gpu"]);
            if let Some(gi) = e["gpu_instance"].as_u64() {
                key.push_str(&format!("/GI{gi}"));
            }
            let pod = e["pod"].as_str()?;
            let ev = &f["evidence"];
            Some((
                format!("{key} {pod}"),
                (
                    ev["kind"].as_str().unwrap().to_string(),
                    ev["unused_hours"].as_f64().unwrap(),
                ),
            ))
        })
        .collect()
}

#[test]
fn pod_info_and_kubelet_up_give_history_holders_and_findings() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), &toml, "allocated");
    let want = held(&gpu, &mig);
    let server = prom::serve(
        tmp.path(),
        &openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1", "mig-1"]),
    );

    for api in [Api::QueryRange, Api::RemoteRead] {
        let (pg, pm) = prometheus_frames(&server.url, since, api);
        let got = held(&pg, &pm);
        assert_eq!(got.len(), want.len(), "{api:?}: rows");
        let (mut free, mut shared, mut unknown) = (0, 0, 0);
        for (key, w) in &want {
            let g = got
                .get(key)
                .unwrap_or_else(|| panic!("{api:?}: no row {key}"));
            if key.contains(" slurm-1 ") {
                assert_eq!(
                    g,
                    &(None, None, None),
                    "{api:?}: {key}: no kubelet: unknown"
                );
                unknown += 1;
            } else {
                assert_eq!(g, w, "{api:?}: {key}");
                free += usize::from(g.0.as_deref() == Some("0"));
                shared += usize::from(g.0.as_deref() == Some("2"));
            }
        }
        // k8s-1's GPU 2 all day and GPU 3 (nb-bob holds it from day 2 only); mig-1's GPU holds
        // its two instances' pods.
        assert_eq!(free, 2 * 8640, "{api:?}: free rows");
        assert_eq!(shared, 8640, "{api:?}: rows of the MIG GPU");
        assert_eq!(unknown, 5 * 8640, "{api:?}: slurm-1's rows");
    }

    let hist = format!("history:{}", tmp.path().join("history").display());
    let prom_src = format!("prometheus:{}", server.url);
    let from_history = findings(&hist, since, &[]);
    let from_prom = findings(&prom_src, since, &["--interval", "10s"]);
    assert_eq!(
        from_history.keys().collect::<Vec<_>>(),
        ["k8s-1/GPU1 nb-alice", "mig-1/GPU0/GI2 nb-carol"],
        "{from_history:#?}"
    );
    assert_eq!(from_prom, from_history);

    // The queue plan's team quotas (docs/queues.md) are the same through both sources: the
    // namespaces' GPUs held per hour come from the pods' allocation either way.
    let from_history = queue_teams(&hist, since, &[], &tmp.path().join("qh.yaml"));
    let from_prom = queue_teams(
        &prom_src,
        since,
        &["--interval", "10s"],
        &tmp.path().join("qp.yaml"),
    );
    let names: Vec<&str> = from_history
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap())
        .collect();
    // serving's api and notebooks' nb-alice hold a whole GPU all day; research holds only MIG
    // instances (left out of whole-GPU quotas).
    assert_eq!(names, ["notebooks", "serving"], "{from_history:#}");
    // This day's series carry no GPU model (no `tessera_gpu_info` name): the figures must agree,
    // under the model "unknown model" through Prometheus.
    let unnamed = |v: &Value| {
        let mut v = v.clone();
        for t in v.as_array_mut().unwrap() {
            for q in t["quotas"].as_array_mut().unwrap() {
                q.as_object_mut().unwrap().remove("model");
            }
        }
        v
    };
    assert_eq!(from_prom[0]["quotas"][0]["model"], "unknown model");
    assert_eq!(unnamed(&from_prom), unnamed(&from_history));
}

/// `tessera queue plan`'s teams over the day from `since`.
fn queue_teams(source: &str, since: i64, extra: &[&str], out: &std::path::Path) -> Value {
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let mut args = vec![
        "queue", "plan", "--source", source, "--since", &from, "--until", &to, "--format", "json",
        "-o",
    ];
    let o = out.to_str().unwrap();
    args.push(o);
    args.extend(extra);
    let (code, stdout, err) = crate::support::cli::run(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        doc["notes"].to_string().contains("MIG mode"),
        "{source}: {:#}",
        doc["notes"]
    );
    doc["queues"]["teams"].clone()
}

/// The frames as dcgm-exporter's `DCGM_FI_DEV_FB_USED` (MiB) with its Kubernetes mapping: a
/// row's pod holder as `pod`/`namespace` labels; GPUs with MIG rows only as their instances.
fn dcgm_with_pods(gpu: &DataFrame, mig: &DataFrame) -> String {
    let mib = |df: &DataFrame, renames: &[(&str, &str)]| {
        let mut df = df
            .clone()
            .lazy()
            .with_column(
                (col("memory_used_max_bytes").cast(DataType::Float64) / lit(1_048_576.0))
                    .alias("fb"),
            )
            .collect()
            .expect("fb");
        for (from, to) in renames {
            df.rename(from, (*to).into()).expect("rename");
        }
        df
    };
    let mig_uuids: Vec<Option<String>> = strs(mig, "uuid");
    let mask: BooleanChunked = strs(gpu, "uuid")
        .iter()
        .map(|u| !mig_uuids.contains(u))
        .collect();
    let whole = gpu.filter(&mask).expect("whole GPUs");
    let pods = [
        ("holder_pod", "pod"),
        ("holder_namespace", "namespace"),
        ("uuid", "UUID"),
    ];
    let g = mib(&whole, &pods);
    let mut mi = pods.to_vec();
    mi.extend([("gpu_instance", "GPU_I_ID"), ("profile", "GPU_I_PROFILE")]);
    let m = mib(mig, &mi);
    let mut s = String::new();
    gauge(
        &mut s,
        "DCGM_FI_DEV_FB_USED",
        &g,
        &["gpu", "UUID", "namespace", "pod"],
        "fb",
        "fb",
    );
    let mut t = String::new();
    gauge(
        &mut t,
        "DCGM_FI_DEV_FB_USED",
        &m,
        &[
            "gpu",
            "UUID",
            "GPU_I_ID",
            "GPU_I_PROFILE",
            "namespace",
            "pod",
        ],
        "fb",
        "fb",
    );
    // One family: the second block without its TYPE line.
    s.push_str(t.split_once('\n').map_or("", |x| x.1));
    s.push_str("# EOF\n");
    s
}

#[test]
fn dcgm_pod_labels_give_history_holders() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, _, since) = om::simulate(tmp.path(), &toml, "allocated");
    let want = held(&gpu, &mig);
    let server = prom::serve(tmp.path(), &dcgm_with_pods(&gpu, &mig));
    let (pg, pm) = prometheus_frames(&server.url, since, Api::QueryRange);
    assert!(pm.height() > 0, "MIG rows");
    let got = held(&pg, &pm);
    let (mut known, mut unknown) = (0, 0);
    for (key, g) in &got {
        let w = want
            .get(key)
            .unwrap_or_else(|| panic!("history has no row {key}"));
        if key.contains(" slurm-1 ") {
            assert_eq!(
                g,
                &(None, None, None),
                "{key}: no pod label on the node: unknown"
            );
            unknown += 1;
        } else {
            assert_eq!(g, w, "{key}");
            known += 1;
        }
    }
    // k8s-1's 4 GPUs and mig-1's two instances; slurm-1's 5 GPUs.
    assert_eq!(known, 6 * 8640);
    assert_eq!(unknown, 5 * 8640);
}
