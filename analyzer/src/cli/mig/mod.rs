//! `tessera mig`: one module per verb — `plan` (layouts from history), `export`, `assert`,
//! `apply` (with `via_manager` for `--via mig-manager`) and `profiles` — and `backend`, the device
//! flags the node verbs share. Verbs never import each other; they share `backend` (and `apply`
//! its `via_manager`), and every workflow is in the library (`tessera::mig_planner`,
//! `tessera::mig_manager`, `tessera_core::mig`).
//!
//! Output: data (a plan, an exported layout, differences, the steps) on stdout; notes and
//! warnings on stderr. Exit codes: 0 ok (assert: the node matches; profiles: the tables match), 1
//! (assert, profiles) the node differs, 2 error (bad input, a plan naming no GPU of this node,
//! refused apply, rolled-back apply, lock held).

mod apply;
mod assert;
mod backend;
mod export;
mod plan;
mod profiles;
mod via_manager;

use anyhow::Result;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum MigCommand {
    /// Plan MIG layouts from history: a tessera plan, optionally a mig-parted config and a
    /// day/night schedule.
    Plan(plan::PlanArgs),
    /// Write the node's current MIG layout as a tessera plan (and as a mig-parted config).
    Export(export::ExportArgs),
    /// Check the node against a plan: exit 0 when it matches, 1 with the differences.
    Assert(assert::AssertArgs),
    /// Change the node to match a plan: prints the steps; changes nothing without --yes.
    Apply(apply::ApplyArgs),
    /// Read the MIG profile tables of the node's GPUs from NVML and compare them with the
    /// built-in ones: exit 0 when they match, 1 with the differences. Changes nothing.
    Profiles(profiles::ProfilesArgs),
}

/// Runs one `tessera mig` verb; the exit code.
pub fn run(command: MigCommand) -> Result<u8> {
    Ok(match command {
        MigCommand::Plan(args) => {
            plan::run(args)?;
            0
        }
        MigCommand::Export(args) => export::export(args)?,
        MigCommand::Assert(args) => assert::assert(args)?,
        MigCommand::Apply(args) => apply::apply(args)?,
        MigCommand::Profiles(args) => profiles::run(args)?,
    })
}
