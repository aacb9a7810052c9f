//! `tessera job ID`: one Slurm job's GPU use and a verdict, in the manner of `jobstats` (table or
//! the versioned JSON on stdout; warnings on stderr). Exit 2 when the sources hold no row of the
//! job. With a `prometheus:` source, the job's work per GPU-hour (docs/jobs.md "Work").

use anyhow::{Result, bail};
use std::path::PathBuf;

use clap::Args;
use tessera::advisor::Params;
use tessera::jobs;

use tessera::output::{Format, TABLE_JSON};

use super::source::{
    OwnersArgs, SourceArgs, add_slurm_accounts, job_work, load_search, name_file, part_files,
};

#[derive(Debug, Args)]
pub struct JobArgs {
    /// The Slurm job id, as `squeue` and `sacct` print it (e.g. 81234).
    pub job: String,
    #[command(flatten)]
    pub src: SourceArgs,
    /// Output format.
    #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
    format: Format,
    /// The job's owner: `"slurm job N" = "contact"` in this file (docs/jobs.md).
    #[command(flatten)]
    owners: OwnersArgs,
    /// Your own work counters (TOML: [[work]] entries, each with unit = "steps" and counter =
    /// 'trainer_steps_total', a counter selector), read beside the built-in ones from the
    /// prometheus: sources, restricted to the job's series (label slurm_job_id="ID"), for the
    /// job's work per GPU-hour (docs/work.md, "Slurm jobs").
    #[arg(long = "work-metrics", value_name = "FILE")]
    work_metrics: Option<PathBuf>,
}

pub fn run(args: JobArgs) -> Result<()> {
    if args.job.is_empty() || args.job.len() > 64 {
        bail!(
            "bad job id {:?}: expected a Slurm job id such as 81234",
            args.job
        );
    }
    let owners = args.owners.file()?;
    let declared = match &args.work_metrics {
        Some(p) => tessera::work::declared::load(p)?,
        None => Vec::new(),
    };
    // The range is where to look for the job: a window reaching past the data is not news.
    let (parts, _range, _rows) = load_search(&args.src)?;
    let files = part_files(&parts);
    let params = Params::default();
    let mut rows = jobs::JobRows::default();
    for p in &parts {
        let r = jobs::job_rows(&p.frames, &args.job, &params)
            .map_err(|e| name_file(e.into(), &files))?;
        rows.merge(r);
    }
    let Some(mut summary) = jobs::summarise(&args.job, &rows) else {
        bail!(
            "no rows of Slurm job {} in the sources for the chosen range (its processes carry \
             slurm_job_id from the job's cgroup; see --since for older jobs)",
            args.job
        );
    };
    let mut owners = owners;
    add_slurm_accounts(&mut owners, [args.job.clone()]);
    for n in &owners.notes {
        eprintln!("tessera: warning: {n}");
    }
    summary.owner = owners.of(None, Some(&args.job)).map(str::to_string);
    // The work its counters counted in its runs, per GPU-hour held (docs/jobs.md "Work").
    let found = job_work(&args.src, &args.job, &jobs::work::spans(&rows), &declared);
    jobs::work::set(&mut summary, &rows, found);
    match args.format {
        Format::Json => print!("{}", tessera::output::json::document(&summary)?),
        _ => print!("{}", jobs::render_table(&summary)),
    }
    Ok(())
}
