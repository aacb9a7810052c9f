//! `tessera mig profiles`: per GPU, the MIG profile table the backend reports and its differences
//! from tessera's built-in table (`tessera_core::mig::profile_compare`). A module of the binary:
//! reading (through the backend spec's `ProfileReader`, never naming a backend), comparing and
//! printing; no logic of its own.
//!
//! Read-only: through NVML it calls the inventory, `nvmlDeviceGetGpuInstanceProfileInfo` (and its
//! `V` variant for the names, where the driver has it) and
//! `nvmlDeviceGetGpuInstancePossiblePlacements_v2`, and never changes a GPU. With `--backend sim`
//! it prints the built-in tables of every model and reads nothing from hardware; with
//! `--sim.scenario` or `--sim.node` too, the simulated node's GPUs (their models' built-in
//! tables).
//!
//! Output: the tables and differences on stdout (text or versioned JSON), notes on stderr. Exit
//! codes: 0 every GPU matches, 1 a GPU differs (or has MIG profiles but no built-in table), 2
//! error.

use std::io::Write;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use tessera::output::{Col, Columns, Format, TABLE_JSON};
use tessera_core::backend::{BackendKind, BackendSpec};
use tessera_core::mig;
use tessera_core::mig::profile_compare::{self, Comparison, ReportedProfile, fmt_placements};

#[derive(Debug, Args)]
pub struct ProfilesArgs {
    /// Where the tables come from: the node's GPUs through NVML, or (sim) the built-in tables
    /// of every model, or with --sim.scenario/--sim.node those of a simulated node's GPUs.
    #[command(flatten)]
    spec: BackendSpec,
    /// Output format.
    #[arg(long, value_parser = TABLE_JSON, default_value = "table")]
    format: Format,
}

/// One GPU's (or, with `--backend sim`, one model's) table and comparison.
#[derive(Debug, Serialize)]
struct Table {
    /// GPU index; absent for a built-in table.
    gpu: Option<u32>,
    /// NVML product name.
    name: String,
    profiles: Vec<ReportedProfile>,
    comparison: Comparison,
}

/// The JSON document (`tessera-mig-profiles` v1).
#[derive(Debug, Serialize)]
struct Output {
    format: &'static str,
    version: u32,
    /// `nvml` (read from the GPUs) or `built-in` (nothing read from hardware).
    source: &'static str,
    tables: Vec<Table>,
}

pub fn run(args: ProfilesArgs) -> Result<u8> {
    let spec = &args.spec;
    let (source, tables) = if spec.backend == BackendKind::Sim
        && spec.sim_scenario.is_none()
        && spec.sim_node.is_none()
    {
        // No backend is opened here, so its flag check runs on its own.
        spec.check(&[])?;
        eprintln!(
            "tessera: --backend sim: tessera's built-in MIG profile tables; nothing was read from hardware"
        );
        ("built-in", builtin_tables())
    } else {
        let mut reader = spec.profile_reader()?;
        let tables = reader
            .profile_tables()?
            .into_iter()
            .map(|t| Table {
                gpu: Some(t.gpu),
                comparison: profile_compare::compare(&t.name, &t.profiles),
                name: t.name,
                profiles: t.profiles,
            })
            .collect();
        (reader.backend_name(), tables)
    };
    // A GPU with no built-in table and no MIG profiles is simply not MIG-capable.
    let differ = tables
        .iter()
        .filter(|t| !t.comparison.matches() && !is_non_mig(t))
        .count();
    let text = match args.format {
        Format::Json => tessera::output::json::document(&Output {
            format: "tessera-mig-profiles",
            version: 1,
            source,
            tables,
        })?,
        _ if tables.is_empty() => "no GPUs\n".to_string(),
        _ => tables.iter().map(|t| render(t, source)).collect(),
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A closed pipe (`| head`) is not an error of the check.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing to standard output");
        }
        _ => {}
    }
    Ok(u8::from(differ > 0))
}

fn is_non_mig(t: &Table) -> bool {
    matches!(t.comparison, Comparison::UnknownModel { .. }) && t.profiles.is_empty()
}

fn builtin_tables() -> Vec<Table> {
    mig::models()
        .iter()
        .filter(|m| m.supports_mig())
        .map(|m| {
            let profiles: Vec<ReportedProfile> = m
                .profiles
                .iter()
                .map(ReportedProfile::from_builtin)
                .collect();
            Table {
                gpu: None,
                name: m.nvml_name.to_string(),
                comparison: profile_compare::compare(m.nvml_name, &profiles),
                profiles,
            }
        })
        .collect()
}

/// The profiles' columns.
const PROFILE_COLUMNS: Columns = Columns {
    indent: "  ",
    cols: &[
        Col::right(3),
        Col::right(5),
        Col::left(15).after("  "),
        Col::right(7),
        Col::right(6),
        Col::right(9),
        Col::right(5),
        Col::left(0).after("  "),
    ],
    trim_end: false,
};

fn render(t: &Table, source: &str) -> String {
    let mut s = String::new();
    let head = match t.gpu {
        Some(i) => format!("GPU {i}: {}", t.name),
        None => format!("built-in: {}", t.name),
    };
    if is_non_mig(t) {
        return format!("{head}: no MIG profiles reported and no built-in table (no MIG)\n\n");
    }
    s.push_str(&format!("{head}: {}\n", t.comparison));
    let model = mig::model_by_nvml_name(&t.name);
    let mut table = tessera::output::Table::with_header(&[
        "id",
        "index",
        "name",
        "compute",
        "memory",
        "MiB",
        "max",
        "placements",
    ]);
    for p in &t.profiles {
        // Without a name from NVML (old driver): show the built-in name of the id, marked.
        let name = match (&p.name, model.and_then(|m| m.profile(p.id))) {
            (Some(n), _) => n.clone(),
            (None, Some(b)) => format!("({})", b.name),
            (None, None) => "-".into(),
        };
        table.push(vec![
            p.id.to_string(),
            p.index.to_string(),
            name,
            p.compute_slices.to_string(),
            p.memory_slices
                .map_or_else(|| "?".to_string(), |m| m.to_string()),
            p.memory_mib.to_string(),
            p.max_count.to_string(),
            fmt_placements(&p.placements),
        ]);
    }
    s.push_str(&table.columns(&PROFILE_COLUMNS));
    if source == "nvml" && t.profiles.iter().any(|p| p.name.is_none()) {
        s.push_str("  (names in parentheses are the built-in table's: this driver reports none)\n");
    }
    if let Comparison::Compared { differences, .. } = &t.comparison {
        for d in differences {
            s.push_str(&format!("  difference: {d}\n"));
        }
    }
    s.push('\n');
    s
}
