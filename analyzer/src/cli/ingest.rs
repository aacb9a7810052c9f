//! `tessera ingest`: read the sources and print what they hold (table or JSON on stdout;
//! warnings and progress on stderr).

use anyhow::Result;
use clap::Args;
use tessera::frames::Frames;
use tessera::ingest::summary;

use tessera::output::{Format, TABLE_JSON};

use super::source::{SourceArgs, name_file, part_files};

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Output format.
    #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
    format: Format,
}

pub fn run(args: IngestArgs) -> Result<()> {
    // Scans `ts` (not footer statistics): `tessera ingest` is also how a user checks the data.
    let (parts, report) = args.src.ingest_parts(false)?;
    let files = part_files(&parts);
    let frames: Vec<Frames> = parts.into_iter().map(|p| p.frames).collect();
    let summaries =
        summary::describe_parts(&frames, &report).map_err(|e| name_file(e.into(), &files))?;
    match args.format {
        Format::Json => print!(
            "{}",
            tessera::output::json::document(&summary::to_json(&summaries, &report))?
        ),
        _ => print!("{}", summary::render_table(&summaries, &report)),
    }
    Ok(())
}
