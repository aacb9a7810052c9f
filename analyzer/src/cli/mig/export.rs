//! `tessera mig export`: write the node's current MIG layout as a tessera plan (and as a
//! mig-parted config). Flags and printing over `tessera_core::mig::apply::export_plan`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tessera_core::mig::apply;

use super::backend::{BackendArgs, open, write_out};

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Write the tessera plan here (default: standard output).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the layout as an nvidia-mig-parted v1 config to FILE.
    #[arg(long = "mig-parted-config", value_name = "FILE")]
    mig_parted_config: Option<PathBuf>,
    /// Label of the exported config.
    #[arg(long, default_value = "current")]
    label: String,
}

pub fn export(args: ExportArgs) -> Result<u8> {
    let mut ctrl = open(&args.backend)?;
    let state = ctrl.read_state()?;
    let (plan, warnings) = apply::export_plan(&state, &args.label);
    for w in warnings {
        eprintln!("tessera: warning: {w}");
    }
    plan.validate("the exported plan")?;
    match &args.output {
        Some(p) => write_out(p, &plan.to_yaml())?,
        None => print!("{}", plan.to_yaml()),
    }
    if let Some(p) = &args.mig_parted_config {
        write_out(p, &apply::export_mig_parted(&state, &args.label))?;
    }
    Ok(0)
}
