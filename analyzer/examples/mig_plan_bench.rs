//! Quality and speed benchmark of the MIG planner (docs/performance.md, MIG planner): GPUs used vs
//! the lower bound, vs first-fit decreasing by memory, and vs one workload per GPU, with planning
//! time ("one per GPU" = the placed workloads, each on its own GPU), on generated workload sets of 10, 100 and 1,000 workloads over mixed GPU models (several
//! seeds each) and on the simulator's fleets (1 day of history each, demand extracted from the
//! frames as `tessera mig plan` does).
//!
//!     cargo run --release -p tessera --example mig_plan_bench [-- --seeds 5 --no-sim]

use std::time::Instant;

use tessera::ingest::{self, IngestOptions, Source};
use tessera::mig_planner::{
    self, FleetGpu, PlannerOptions, Workload, demand, first_fit_decreasing_by_memory,
};
use tessera_core::sim;
use tessera_core::simulate::simulate;

const GIB: f64 = (1u64 << 30) as f64;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1_000_000.0
    }
}

/// A mix like an inference-heavy cluster: 60% small (1–9 GiB, 1 slice), 25% medium (10–35 GiB,
/// 1–3 slices), 15% large (36–75 GiB, 3–7 slices). Fleet: as many GPUs as workloads, mixed
/// models (so one workload per GPU is always possible).
fn generate(n: usize, seed: u64) -> (Vec<Workload>, Vec<FleetGpu>) {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let ws = (0..n)
        .map(|i| {
            let u = r.unit();
            let (gib, slices) = if u < 0.6 {
                (1.0 + 8.0 * r.unit(), 1)
            } else if u < 0.85 {
                (10.0 + 25.0 * r.unit(), 1 + (r.next() % 3) as u32)
            } else {
                (36.0 + 39.0 * r.unit(), 3 + (r.next() % 5) as u32)
            };
            Workload {
                id: format!("w{i}"),
                node: Some(format!("node-{}", i / 8)),
                current_gpu: Some(format!("GPU-{i}")),
                memory_bytes: (gib * GIB) as u64,
                compute_slices: slices,
            }
        })
        .collect();
    let models = [
        "H100-80GB",
        "A100-80GB",
        "H200-141GB",
        "A100-40GB",
        "A30-24GB",
    ];
    let fleet = (0..n)
        .map(|i| FleetGpu {
            node: format!("node-{}", i / 8),
            index: (i % 8) as u32,
            uuid: Some(format!("GPU-{i}")),
            model: models[(i / 8) % models.len()].to_string(),
        })
        .collect();
    (ws, fleet)
}

struct Row {
    name: String,
    workloads: usize,
    used: u32,
    bound: u32,
    ffd: u32,
    one: usize,
    unplaceable: usize,
    ms: f64,
    method: String,
}

fn run(name: String, ws: &[Workload], fleet: &[FleetGpu]) -> anyhow::Result<Row> {
    let t = Instant::now();
    let plan = mig_planner::plan(ws, fleet, &PlannerOptions::default())?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let (ffd, _) = first_fit_decreasing_by_memory(ws, fleet)?;
    let placed: usize = plan
        .gpus
        .iter()
        .map(|g| g.instances.iter().map(|i| i.workloads.len()).sum::<usize>())
        .sum();
    Ok(Row {
        name,
        workloads: ws.len(),
        used: plan.gpus_used,
        bound: plan.lower_bound,
        ffd,
        one: placed,
        unplaceable: plan.unplaceable.len(),
        ms,
        method: format!("{:?}", plan.method),
    })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = args
        .iter()
        .position(|a| a == "--seeds")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(5), |s| s.parse())?;
    let no_sim = args.iter().any(|a| a == "--no-sim");
    println!(
        "| set | workloads | GPUs used | lower bound | gap | FFD by memory | one per GPU | unplaceable | method | plan time |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut gaps: Vec<(usize, f64)> = Vec::new();
    let print = |r: &Row| {
        let gap = if r.bound == 0 {
            0.0
        } else {
            f64::from(r.used - r.bound.min(r.used)) / f64::from(r.bound)
        };
        println!(
            "| {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {:.1} ms |",
            r.name,
            r.workloads,
            r.used,
            r.bound,
            gap * 100.0,
            r.ffd,
            r.one,
            r.unplaceable,
            r.method,
            r.ms
        );
        gap
    };
    for n in [10usize, 100, 1000] {
        let mut sum = (0u32, 0u32, 0u32, 0usize, 0.0f64, 0.0f64);
        for seed in 1..=seeds {
            let (ws, fleet) = generate(n, seed);
            let r = run(format!("generated n={n} seed={seed}"), &ws, &fleet)?;
            let g = print(&r);
            gaps.push((n, g));
            sum.0 += r.used;
            sum.1 += r.bound;
            sum.2 += r.ffd;
            sum.3 += r.one;
            sum.4 += g;
            sum.5 = sum.5.max(r.ms);
        }
        println!(
            "| **generated n={n}, {seeds} seeds** | {n} | {} | {} | **{:.1}% mean** | {} | {} | | | max {:.1} ms |",
            sum.0,
            sum.1,
            sum.4 / seeds as f64 * 100.0,
            sum.2,
            sum.3,
            sum.5
        );
    }
    if !no_sim {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios");
        for name in ["demo", "fleet-64", "mig-plan", "offpeak", "big-node"] {
            let path = root.join(format!("{name}.toml"));
            let s = sim::load_scenario(Some(&path))?;
            let dir = tempfile::tempdir()?;
            simulate(&s, 1, dir.path(), 30_000, 60_000)?;
            let src: Source = format!("history:{}", dir.path().display())
                .parse()
                .map_err(|e: ingest::IngestError| anyhow::anyhow!("{e}"))?;
            let (frames, _) = ingest::ingest(&[src], &IngestOptions::default())?;
            let d = demand::extract(&frames, &demand::DemandParams::default())?;
            let r = run(format!("simulator {name} (1 day)"), &d.workloads, &d.fleet)?;
            print(&r);
        }
    }
    Ok(())
}
