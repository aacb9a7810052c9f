//! Busy but not working with GPM's tensor and DRAM activity (issue 29), on
//! `fixtures/scenarios/busy-pipes.toml` simulated into history (version 2: H100s record the
//! pipes) and on a generic CSV of an A100 (busy ratio and SM activity, no GPM):
//!
//! | GPU | workload | expected |
//! |---|---|---|
//! | gpm-node/GPU0 | data loading, busy 86%, SM 60% (above half of busy) | found by the no-work rule only: `spinning_or_waiting`, `no_work_hours` = `hours` |
//! | gpm-node/GPU1 | matmuls at the same busy and SM | not found |
//! | gpm-node/GPU2 | data loading, busy 93%, SM 25% | found by the SM rule, `spinning_or_waiting` (tensor and DRAM ≈ 0) |
//! | gpm-node/GPU3 | small-batch tensor work, busy 93%, SM 25% | found by the SM rule, `sm_idle`, tensor and DRAM in the summary |
//! | a100-node/GPU0 | data loading on an A100 (no SM activity) | not judged (note) |
//! | CSV A100 | busy 90%, SM 20%, no GPM | the SM rule's finding, word for word as before; tensor and DRAM unknown |
//!
//! And the same history without the GPM columns (as a version-1 file reads) gives exactly the
//! findings of the SM rule, in the words it always used.

use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde_json::Value;
use tessera::advisor::{self, Analysis, Finding, Params};
use tessera::frames::Frames;
use tessera::ingest::{self, IngestOptions, Source};
use tessera_core::simulate::simulate;

use crate::support::cli::run as tessera;

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/busy-pipes.toml")
}

/// One simulated day of the scenario in `dir`, with 10-s rows.
fn history(dir: &Path) -> Frames {
    let s = tessera_core::sim::load_scenario(Some(&scenario())).expect("scenario");
    simulate(&s, 1, dir, 10_000, 10_000).expect("simulate");
    let (frames, _) = ingest::ingest(
        &[Source::history(dir.display().to_string())],
        &IngestOptions::default(),
    )
    .expect("ingest");
    frames
}

fn busy(frames: &Frames, params: &Params) -> Analysis {
    advisor::analyze(
        frames,
        params,
        None,
        vec![],
        &["busy_not_working".to_string()],
    )
    .expect("analyze")
}

fn found<'a>(a: &'a Analysis, label: &str) -> Option<&'a Finding> {
    a.findings.iter().find(|f| f.entity.label() == label)
}

fn labels(a: &Analysis) -> Vec<String> {
    let mut v: Vec<String> = a.findings.iter().map(|f| f.entity.label()).collect();
    v.sort();
    v
}

fn num(e: &Value, k: &str) -> f64 {
    e[k].as_f64().unwrap_or_else(|| panic!("{k} in {e}"))
}

/// The summary the SM rule has always written.
fn sm_rule_summary(f: &Finding) -> String {
    let e = f.evidence.to_json();
    format!(
        "{} looked busy but its SMs mostly idled for {:.1} h ({:.0}% of the time observed; busy {:.0}% vs SM activity {:.0}% on average)",
        f.entity.label(),
        num(&e, "hours"),
        num(&e, "share") * 100.0,
        num(&e, "busy_mean") * 100.0,
        num(&e, "sm_active_mean") * 100.0
    )
}

#[test]
fn tensor_and_dram_find_spinning_gpus_and_qualify_the_sm_rule() {
    let tmp = tempfile::tempdir().expect("tmp");
    let frames = history(tmp.path());
    let a = busy(&frames, &Params::default());
    println!("{}", serde_json::to_string_pretty(&a).unwrap());
    assert_eq!(
        labels(&a),
        ["gpm-node/GPU0", "gpm-node/GPU2", "gpm-node/GPU3"]
    );
    let d = &a.detectors[0];
    assert!(
        d.summary.contains(
            "SM activity stayed ≤ 50% of it, or tensor ≤ 5% and DRAM ≤ 10% (GPM), for ≥ 60 min"
        ),
        "{}",
        d.summary
    );
    // The A100 has no SM activity: not judged, as before.
    assert_eq!(
        d.notes,
        [
            "SM activity is missing for 1 of 5 GPU(s) (MIG mode, pre-Hopper without DCGM profiling): not judged, busy ratio alone cannot tell busy from working"
        ]
    );

    // GPU0: SM activity 60% of a busy 86% — the SM rule misses it; no tensor or DRAM work.
    let g0 = found(&a, "gpm-node/GPU0").expect("GPU0");
    let e = g0.evidence.to_json();
    assert_eq!(e["verdict"], "spinning_or_waiting");
    assert!(
        num(&e, "sm_active_mean") > 0.5 * num(&e, "busy_mean"),
        "{e}"
    );
    assert!(num(&e, "tensor_active_mean") <= 0.05, "{e}");
    assert!(num(&e, "dram_active_mean") <= 0.10, "{e}");
    assert_eq!(num(&e, "no_work_hours"), num(&e, "hours"));
    assert!(num(&e, "hours") >= 23.9, "{e}");
    assert!(
        g0.summary.contains("did no tensor or DRAM work")
            && g0.summary.contains("its kernels spun or waited"),
        "{}",
        g0.summary
    );
    assert!(g0.action.contains("NCCL"), "{}", g0.action);
    let signals = &e["signals"];
    assert!(
        signals["busy_mean"]
            .as_str()
            .unwrap()
            .contains("NVML utilization.gpu")
    );
    assert!(signals["sm_active_mean"].as_str().unwrap().contains("GPM"));
    assert!(
        signals["tensor_active_mean"]
            .as_str()
            .unwrap()
            .starts_with("tensor activity")
    );
    assert!(
        signals["dram_active_mean"]
            .as_str()
            .unwrap()
            .starts_with("DRAM activity")
    );

    // GPU2: the SM rule already finds it; tensor and DRAM say why.
    let e = found(&a, "gpm-node/GPU2").expect("GPU2").evidence.to_json();
    assert_eq!(e["verdict"], "spinning_or_waiting");
    assert_eq!(num(&e, "no_work_hours"), 0.0);

    // GPU3: small batches of tensor work — SMs idle, but not spinning.
    let g3 = found(&a, "gpm-node/GPU3").expect("GPU3");
    let e = g3.evidence.to_json();
    assert_eq!(e["verdict"], "sm_idle");
    assert!(num(&e, "tensor_active_mean") > 0.05, "{e}");
    let old = sm_rule_summary(g3);
    assert_eq!(
        g3.summary,
        format!(
            "{}; tensor {:.0}% and DRAM {:.0}% in those spans)",
            &old[..old.len() - 1],
            num(&e, "tensor_active_mean") * 100.0,
            num(&e, "dram_active_mean") * 100.0
        )
    );
    assert!(
        g3.action.starts_with("profile the workload"),
        "{}",
        g3.action
    );

    // Stricter thresholds: GPU0's DRAM (3%) is no longer "none"; the SM rule's GPUs stay.
    let strict = Params {
        busy: advisor::busy::BusyParams {
            max_dram: 0.02,
            ..Default::default()
        },
        ..Params::default()
    };
    assert_eq!(
        labels(&busy(&frames, &strict)),
        ["gpm-node/GPU2", "gpm-node/GPU3"]
    );
    // A busy FP pipe is work: with the FP32 pipe bound below GPU0's (~5%), it is not found.
    let fp = Params {
        busy: advisor::busy::BusyParams {
            max_pipe: 0.01,
            ..Default::default()
        },
        ..Params::default()
    };
    assert_eq!(
        labels(&busy(&frames, &fp)),
        ["gpm-node/GPU2", "gpm-node/GPU3"]
    );

    // One node at a time (what `tessera analyze` runs) gives the same document.
    let (parts, _) = ingest::ingest_parts(
        &[Source::history(tmp.path().display().to_string())],
        &IngestOptions::default(),
    )
    .expect("parts");
    assert_eq!(parts.len(), 2);
    let by_node = advisor::analyze_parts(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        &Params::default(),
        None,
        vec![],
        &["busy_not_working".to_string()],
    )
    .expect("by node");
    assert_eq!(
        serde_json::to_value(&by_node).unwrap(),
        serde_json::to_value(&a).unwrap()
    );
}

/// The same history as a version-1 file reads it (the GPM columns null): the SM rule alone,
/// findings and words as they always were.
#[test]
fn without_gpm_columns_the_verdict_is_the_sm_rules() {
    let tmp = tempfile::tempdir().expect("tmp");
    let frames = history(tmp.path());
    let gpm = [
        "tensor_active_mean",
        "tensor_active_max",
        "dram_active_mean",
        "fp64_active_mean",
        "fp32_active_mean",
        "fp16_active_mean",
        "integer_active_mean",
        "nvlink_tx_mean_bytes_per_second",
        "nvlink_rx_mean_bytes_per_second",
    ];
    let v1 = Frames {
        gpu: frames.gpu.clone().with_columns(
            gpm.iter()
                .map(|c| lit(NULL).cast(DataType::Float64).alias(*c))
                .collect::<Vec<_>>(),
        ),
        ..frames
    };
    let a = busy(&v1, &Params::default());
    assert_eq!(labels(&a), ["gpm-node/GPU2", "gpm-node/GPU3"]);
    assert_eq!(
        a.detectors[0].summary,
        "2 GPU(s) busy by utilization.gpu while SM activity stayed ≤ 50% of it for ≥ 60 min"
    );
    assert_eq!(a.detectors[0].notes.len(), 1);
    for f in &a.findings {
        assert_eq!(f.summary, sm_rule_summary(f));
        assert!(f.action.starts_with("profile the workload"), "{}", f.action);
        let e = f.evidence.to_json();
        assert_eq!(e["verdict"], "sm_idle");
        assert!(e["tensor_active_mean"].is_null() && e["dram_active_mean"].is_null());
        assert_eq!(num(&e, "no_work_hours"), 0.0);
        assert!(
            e["signals"]["tensor_active_mean"]
                .as_str()
                .unwrap()
                .starts_with("unknown"),
            "{e}"
        );
    }
}

/// An A100 read from a generic CSV with busy ratio and SM activity (dcgm-exporter's profiling)
/// and no GPM figures: the SM rule's verdict, tensor and DRAM unknown; `--busy.*` flags checked.
#[test]
fn an_a100_without_gpm_gets_the_sm_rules_verdict_with_tensor_and_dram_unknown() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("a100.csv");
    let mut text = String::from("timestamp,entity,metric,value,node,gpu,model\n");
    let t0 = 1_793_577_600; // 2026-11-02T00:00:00Z
    for i in 1..=120 {
        for (m, v) in [("gpu_busy_ratio", 0.9), ("sm_active_ratio", 0.2)] {
            text.push_str(&format!(
                "{},GPU-a100,{m},{v},n1,0,NVIDIA A100-SXM4-80GB\n",
                t0 + 60 * i
            ));
        }
    }
    std::fs::write(&path, text).expect("write");
    let src = format!("csv:{}", path.display());
    let (code, out, err) = tessera(&[
        "analyze",
        "--source",
        &src,
        "--detector",
        "busy_not_working",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let f = &v["findings"][0];
    assert_eq!(
        f["summary"],
        "n1/GPU0 looked busy but its SMs mostly idled for 2.0 h (100% of the time observed; busy 90% vs SM activity 20% on average)"
    );
    let e = &f["evidence"];
    assert_eq!(e["verdict"], "sm_idle");
    assert!(
        e["tensor_active_mean"].is_null() && e["dram_active_mean"].is_null(),
        "{e}"
    );
    assert!(
        e["signals"]["dram_active_mean"]
            .as_str()
            .unwrap()
            .starts_with("unknown"),
        "{e}"
    );
    assert_eq!(
        v["detectors"][0]["summary"],
        "1 GPU(s) busy by utilization.gpu while SM activity stayed ≤ 50% of it for ≥ 60 min"
    );

    for flag in ["--busy.max-tensor", "--busy.max-dram", "--busy.max-pipe"] {
        let (code, _, err) = tessera(&["analyze", "--source", &src, flag, "1.5"]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(&format!("bad {flag} 1.5")), "{flag}: {err}");
    }
}
