//! `tessera job ID`: one Slurm job's GPU use and a verdict, in the manner of `jobstats` (table or
//! the versioned JSON on stdout; warnings on stderr). Exit 2 when the sources hold no row of the
//! job.

use anyhow::{Result, bail};
use clap::Args;
use tessera::advisor::Params;
use tessera::jobs;

use super::source::{OutputFormat, OwnersArgs, SourceArgs, load_search, name_file, part_files};

#[derive(Debug, Args)]
pub struct JobArgs {
    /// The Slurm job id, as `squeue` and `sacct` print it (e.g. 81234).
    pub job: String,
    #[command(flatten)]
    pub src: SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// The job's owner: `"slurm job N" = "contact"` in this file (docs/jobs.md).
    #[command(flatten)]
    owners: OwnersArgs,
}

pub fn run(args: JobArgs) -> Result<()> {
    if args.job.is_empty() || args.job.len() > 64 {
        bail!(
            "bad job id {:?}: expected a Slurm job id such as 81234",
            args.job
        );
    }
    let owners = args.owners.file()?;
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
    summary.owner = owners.of(None, Some(&args.job)).map(str::to_string);
    match args.format {
        OutputFormat::Table => print!("{}", jobs::render_table(&summary)),
        OutputFormat::Json => println!("{}", tessera::text::json_pretty(&summary)?),
    }
    Ok(())
}
