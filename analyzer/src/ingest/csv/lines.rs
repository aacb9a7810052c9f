//! The line reader: any CSV format line by line with the `csv` crate, each line handed to its
//! format's parser (`generic` or `smi`), with exact errors (file:line: what was expected) or,
//! with `--skip-bad-rows`, bad lines counted and skipped ([`BadLines`]); repeated headers are
//! ignored.
//!
//! It does not detect the format (the parent does) and does not resample.

use std::path::Path;

use super::Format;
use super::builder::{Bad, Builder, Parsed, short};
use super::generic::generic_line;
use super::smi::{SMI_LABELS, smi_line};
use crate::ingest::{IngestError, IngestOptions, IngestReport};

/// Counts bad lines, or fails on the first one.
struct BadLines<'a> {
    path: &'a Path,
    skip: bool,
    count: u64,
    first: Option<(u64, String)>,
}

impl BadLines<'_> {
    fn handle(
        &mut self,
        line: u64,
        bad: Bad,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        if !self.skip {
            return Err(IngestError::Line {
                path: self.path.to_path_buf(),
                line,
                reason: bad.1,
            });
        }
        self.count += 1;
        report.skip(format!("csv: {}", bad.0));
        self.first.get_or_insert((line, bad.1));
        Ok(())
    }

    fn finish(self, report: &mut IngestReport) {
        if let Some((line, reason)) = self.first {
            report.warnings.push(format!(
                "{}: skipped {} bad line(s) (--skip-bad-rows); first at line {line}: {reason}",
                self.path.display(),
                self.count
            ));
        }
    }
}

/// Any format, line by line with the `csv` crate: exact errors (file:line: what was expected)
/// or, with `--skip-bad-rows`, counted skips.
pub(super) fn read_lines(
    path: &Path,
    header: &[String],
    format: &Format,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<Parsed, IngestError> {
    let file = std::fs::File::open(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut rdr = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(std::io::BufReader::with_capacity(1 << 20, file));
    let mut b = Builder::new(match format {
        Format::Generic(_) => header.to_vec(),
        Format::NvidiaSmi(_) => SMI_LABELS.iter().map(|l| l.to_string()).collect(),
    });
    let mut bad = BadLines {
        path,
        skip: opts.skip_bad_rows,
        count: 0,
        first: None,
    };
    let mut repeated_headers = 0u64;
    let mut rec = ::csv::ByteRecord::new();
    let mut first = true;
    loop {
        match rdr.read_byte_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                bad.handle(line, Bad("unreadable line", e.to_string()), report)?;
                continue;
            }
        }
        if std::mem::take(&mut first) {
            continue; // the header
        }
        let line = rec.position().map_or(0, |p| p.line());
        let fields: Result<Vec<&str>, _> = rec.iter().map(std::str::from_utf8).collect();
        let Ok(fields) = fields else {
            bad.handle(
                line,
                Bad("not UTF-8", "the line is not UTF-8 text".into()),
                report,
            )?;
            continue;
        };
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        if fields.iter().zip(header).all(|(f, h)| f == h) && fields.len() == header.len() {
            repeated_headers += 1;
            continue;
        }
        if fields.len() != header.len() {
            bad.handle(
                line,
                Bad(
                    "wrong number of fields",
                    format!(
                        "expected {} fields ({}), found {}",
                        header.len(),
                        short(&header.join(", ")),
                        fields.len()
                    ),
                ),
                report,
            )?;
            continue;
        }
        let res = match format {
            Format::Generic(g) => generic_line(g, header, &fields, &mut b, line),
            Format::NvidiaSmi(cols) => smi_line(cols, &fields, &mut b, line),
        };
        if let Err(e) = res {
            bad.handle(line, e, report)?;
        }
    }
    if repeated_headers > 0 {
        report.warnings.push(format!(
            "{}: {repeated_headers} repeated header line(s) ignored",
            path.display()
        ));
    }
    bad.finish(report);
    b.finish(report, path)
        .map_err(|(line, e)| IngestError::Line {
            path: path.to_path_buf(),
            line,
            reason: e.1,
        })
}
