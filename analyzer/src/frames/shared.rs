//! One node partition's string columns interned once ([`Strs::ids`]) for every consumer that
//! reads the partition's in-memory rows: the report pass (`crate::report::pass`) hands them to
//! the report's tallies and the MIG demand, which would otherwise each intern the same node,
//! uuid, status and team columns of the same rows again.
//!
//! A consumer uses a table's ids only when it reads exactly that table's rows, in frame order:
//! [`PartIds::whole`] gives them only for the tables whose every row has its `ts` in the
//! consumer's range (the consumer's filter would keep every row), and the consumer checks the
//! row count. Otherwise it interns its own rows, as it does when nothing is shared. Ids are
//! keys only (nothing reads their numbering for order), so either way the output is the same.
//!
//! This module reads frames and decides nothing.

use polars::prelude::*;

use super::columns::{Ids, Strs, forget_ids, i64s, remember_ids, strs, ts_ms};
use super::{Frames, FramesError, Table};

/// The string columns shared, per table.
const GPU: &[&str] = &["node", "uuid", "status"];
const PROCESS: &[&str] = &[
    "node",
    "uuid",
    "namespace",
    "slurm_job_id",
    "process",
    "pod",
];

/// One table's shared string columns, its row count and the range of its `ts`.
struct TableStrs {
    height: usize,
    ts: Option<(i64, i64)>,
    cols: Vec<(&'static str, Strs)>,
}

impl TableStrs {
    fn read(lf: &LazyFrame, names: &[&'static str]) -> Result<TableStrs, FramesError> {
        let df = lf
            .clone()
            .select(
                std::iter::once(ts_ms())
                    .chain(names.iter().map(|c| col(*c)))
                    .collect::<Vec<_>>(),
            )
            .collect()?;
        let height = df.height();
        let ts = i64s(&df, "ts")?;
        let mut range: Option<(i64, i64)> = None;
        for i in 0..height {
            // A row without `ts` is kept by no range filter: nothing is shared then.
            let t = ts.get(i).unwrap_or(i64::MIN);
            range = Some(range.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
        }
        let cols = names
            .iter()
            .map(|c| Ok((*c, strs(&df, c)?)))
            .collect::<Result<_, FramesError>>()?;
        Ok(TableStrs {
            height,
            ts: range,
            cols,
        })
    }
}

/// A partition's shared string columns ([`PartStrs::ids`] interns them).
pub struct PartStrs {
    gpu: TableStrs,
    process: TableStrs,
}

impl PartStrs {
    /// Reads the shared columns of `frames` (in-memory frames: the rows every consumer reads).
    pub fn read(frames: &Frames) -> Result<PartStrs, FramesError> {
        Ok(PartStrs {
            gpu: TableStrs::read(frames.table(Table::Gpu), GPU)?,
            process: TableStrs::read(frames.table(Table::Process), PROCESS)?,
        })
    }

    /// Each shared column interned, once, and remembered on this thread for the other readers
    /// of the same arrays (`columns::remember_ids`; the previous partition's are forgotten).
    pub fn ids(&self) -> PartIds<'_> {
        fn of(t: &TableStrs) -> TableIds<'_> {
            TableIds {
                height: t.height,
                ts: t.ts,
                cols: t
                    .cols
                    .iter()
                    .map(|(c, s)| {
                        let ids = s.ids();
                        remember_ids(s, &ids);
                        (*c, ids)
                    })
                    .collect(),
            }
        }
        forget_ids();
        PartIds {
            gpu: of(&self.gpu),
            process: of(&self.process),
        }
    }
}

/// One table's shared ids.
pub struct TableIds<'a> {
    height: usize,
    ts: Option<(i64, i64)>,
    cols: Vec<(&'static str, Ids<'a>)>,
}

impl<'a> TableIds<'a> {
    /// The ids of column `name` for a consumer whose frame has `height` rows (`None` when the
    /// column is not shared or the frame is not the shared one).
    pub fn col(&self, name: &str, height: usize) -> Option<&Ids<'a>> {
        if height != self.height {
            return None;
        }
        self.cols
            .iter()
            .find(|(c, _)| *c == name)
            .map(|(_, ids)| ids)
    }

    fn within(&self, from: i64, until: i64) -> bool {
        self.ts.is_none_or(|(lo, hi)| lo >= from && hi <= until)
    }
}

/// A partition's shared ids ([`PartStrs::ids`]).
pub struct PartIds<'a> {
    gpu: TableIds<'a>,
    process: TableIds<'a>,
}

impl<'a> PartIds<'a> {
    /// The ids of the tables whose every row has its `ts` in `[from, until]` (unix ms): those a
    /// consumer reading that range reads whole.
    pub fn whole(&self, from: i64, until: i64) -> Whole<'_, 'a> {
        Whole {
            gpu: self.gpu.within(from, until).then_some(&self.gpu),
            process: self.process.within(from, until).then_some(&self.process),
        }
    }
}

/// The shared ids a consumer may use, per table ([`PartIds::whole`]); `Whole::default()` shares
/// nothing.
#[derive(Clone, Copy, Default)]
pub struct Whole<'s, 'a> {
    pub gpu: Option<&'s TableIds<'a>>,
    pub process: Option<&'s TableIds<'a>>,
}

impl Whole<'_, '_> {
    /// Whether the tables' rows are all in the range (the consumer may read them unfiltered).
    pub fn has(&self, t: Table) -> bool {
        match t {
            Table::Gpu => self.gpu.is_some(),
            Table::Process => self.process.is_some(),
            Table::Mig => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(ts: &[i64]) -> Frames {
        let n = ts.len();
        let gpu = df!(
            "ts" => ts,
            "node" => vec!["n1"; n],
            "uuid" => (0..n).map(|i| format!("GPU-{}", i % 2)).collect::<Vec<_>>(),
            "status" => vec!["ok"; n],
        )
        .unwrap();
        let process = df!(
            "ts" => [ts[0]],
            "node" => ["n1"],
            "uuid" => ["GPU-0"],
            "namespace" => ["team-a"],
            "slurm_job_id" => [None::<&str>],
            "process" => ["python"],
            "pod" => ["p"],
        )
        .unwrap();
        Frames {
            gpu: gpu.lazy(),
            mig: DataFrame::empty().lazy(),
            process: process.lazy(),
        }
    }

    #[test]
    fn tables_are_shared_only_when_every_row_is_in_the_range() {
        let strs = PartStrs::read(&frames(&[10, 20, 30])).unwrap();
        let ids = strs.ids();
        let all = ids.whole(10, 30);
        assert!(all.has(Table::Gpu) && all.has(Table::Process) && !all.has(Table::Mig));
        let uuid = all.gpu.unwrap().col("uuid", 3).unwrap();
        assert_eq!(
            (uuid.get(0), uuid.get(1), uuid.at(2)),
            (Some("GPU-0"), Some("GPU-1"), uuid.at(0))
        );
        // Another row count: not the shared frame.
        assert!(all.gpu.unwrap().col("uuid", 2).is_none());
        assert!(all.gpu.unwrap().col("model", 3).is_none());
        // The GPU rows reach past the range; the process row does not.
        let part = ids.whole(11, 30);
        assert!(part.gpu.is_none() && part.process.is_none());
        let part = ids.whole(10, 29);
        assert!(part.gpu.is_none() && part.process.is_some());
        forget_ids();
    }
}
