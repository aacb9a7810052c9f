//! `tessera mig assert`: check the node against a plan; exit 0 when it matches, 1 with the
//! differences. Flags and printing over `tessera_core::mig::apply::diff`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tessera_core::mig::apply;

use super::backend::{BackendArgs, load, open};

#[derive(Debug, Args)]
pub struct AssertArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// A tessera plan (tessera-mig-plan v1) or an nvidia-mig-parted v1 config.
    plan: PathBuf,
    /// Config label in the plan (required when it has several).
    #[arg(long, value_name = "LABEL")]
    config: Option<String>,
}

pub fn assert(args: AssertArgs) -> Result<u8> {
    let mut ctrl = open(&args.backend)?;
    let plan = apply::read_plan(&args.plan)?;
    let (state, label, targets) = load(ctrl.as_mut(), &plan, &args.plan, args.config.as_deref())?;
    let d = apply::diff(&state, &targets)?;
    if d.matches() {
        println!(
            "node {} matches {} config {label} ({} GPUs checked)",
            state.node,
            args.plan.display(),
            targets.len()
        );
        return Ok(0);
    }
    println!(
        "node {} differs from {} config {label}:",
        state.node,
        args.plan.display()
    );
    print!("{}", d.render());
    for p in d.pending() {
        eprintln!("tessera: pending: {p}");
    }
    Ok(1)
}
