//! `tessera ingest`: read the sources and print what they hold (table or JSON on stdout;
//! warnings and progress on stderr).

use anyhow::Result;
use clap::Args;
use tessera::frames::Frames;
use tessera::ingest::summary;

use super::source::{OutputFormat, SourceArgs, name_file, part_files};

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

pub fn run(args: IngestArgs) -> Result<()> {
    // Scans `ts` (not footer statistics): `tessera ingest` is also how a user checks the data.
    let (parts, report) = args.src.ingest_parts(false)?;
    let files = part_files(&parts);
    let frames: Vec<Frames> = parts.into_iter().map(|p| p.frames).collect();
    let summaries =
        summary::describe_parts(&frames, &report).map_err(|e| name_file(e.into(), &files))?;
    match args.format {
        OutputFormat::Table => print!("{}", summary::render_table(&summaries, &report)),
        OutputFormat::Json => println!(
            "{}",
            tessera::text::json_pretty(&summary::to_json(&summaries, &report))?
        ),
    }
    Ok(())
}
