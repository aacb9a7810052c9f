//! Tables, the only place that lays out rows and columns: boxed terminal tables and
//! GitHub-flavoured Markdown tables (both through `tabled`), a plain pipe table, and aligned
//! columns (each column left or right, a minimum width or the width of its widest cell, its own
//! separator). Every cell is escaped here ([`super::escape::printable`]), so a caller cannot
//! forget to; Markdown cells also have their `|` escaped.
//!
//! It lays out text only: no colour, no titles, no decision about which rows to show.

use tabled::builder::Builder;
use tabled::settings::Style;

use super::escape::printable;

/// A header and rows of cells. A header of empty strings is a key-value table.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column of an aligned layout ([`Table::columns`]).
#[derive(Debug, Clone, Copy)]
pub struct Col {
    align: Align,
    /// Padded to at least this many characters (a longer cell widens its own row only).
    min: usize,
    /// Padded to its widest cell (over the header and every row).
    fit: bool,
    /// What comes before it (ignored for the first column).
    sep: &'static str,
}

impl Col {
    /// Left-aligned, at least `min` characters wide.
    pub const fn left(min: usize) -> Col {
        Col {
            align: Align::Left,
            min,
            fit: false,
            sep: " ",
        }
    }
    /// Right-aligned, at least `min` characters wide.
    pub const fn right(min: usize) -> Col {
        Col {
            align: Align::Right,
            min,
            fit: false,
            sep: " ",
        }
    }
    /// Left-aligned, as wide as its widest cell.
    pub const fn fit() -> Col {
        Col {
            align: Align::Left,
            min: 0,
            fit: true,
            sep: " ",
        }
    }
    /// The same column, with `sep` before it.
    pub const fn after(self, sep: &'static str) -> Col {
        Col { sep, ..self }
    }
}

/// An aligned layout: an indent before every line, the columns, and whether trailing spaces are
/// cut.
#[derive(Debug, Clone, Copy)]
pub struct Columns<'a> {
    pub indent: &'a str,
    pub cols: &'a [Col],
    pub trim_end: bool,
}

impl Table {
    pub fn new(header: Vec<String>) -> Table {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    /// A header from string literals.
    pub fn with_header(header: &[&str]) -> Table {
        Table::new(header.iter().map(|h| h.to_string()).collect())
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    fn key_value(&self) -> bool {
        self.header.iter().all(|h| h.is_empty())
    }

    /// A boxed terminal table (no header line for a key-value table). No trailing newline.
    pub fn boxed(&self) -> String {
        self.tabled(false)
    }

    /// A GitHub-flavoured Markdown table, padded; a key-value table keeps its empty header (as
    /// Markdown needs one). No trailing newline.
    pub fn markdown(&self) -> String {
        self.tabled(true)
    }

    fn tabled(&self, markdown: bool) -> String {
        let mut b = Builder::default();
        if !self.key_value() || markdown {
            b.push_record(self.header.iter().cloned());
        }
        for row in &self.rows {
            b.push_record(row.iter().map(|c| {
                let c = printable(c);
                if markdown {
                    c.replace('|', "\\|")
                } else {
                    c.into_owned()
                }
            }));
        }
        let mut t = b.build();
        if markdown {
            t.with(Style::markdown());
        } else {
            t.with(Style::sharp());
        }
        t.to_string()
    }

    /// A Markdown table without padding (`| a | b |`, then `|---|---|`), a line each, every line
    /// ending in a newline.
    pub fn pipes(&self) -> String {
        let md = |c: &str| printable(c).replace('|', "\\|");
        let mut o = format!("| {} |\n", self.header.join(" | "));
        o.push('|');
        o.push_str(&"---|".repeat(self.header.len()));
        o.push('\n');
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| md(c)).collect();
            o.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        o
    }

    /// The header and rows in aligned columns, a line each, every line ending in a newline; an
    /// empty header is not written.
    pub fn columns(&self, layout: &Columns) -> String {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| printable(c).into_owned()).collect())
            .collect();
        let width = |i: usize, c: &Col| {
            if !c.fit {
                return c.min;
            }
            std::iter::once(&self.header)
                .chain(&rows)
                .filter_map(|r| r.get(i))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
                .max(c.min)
        };
        let widths: Vec<usize> = layout
            .cols
            .iter()
            .enumerate()
            .map(|(i, c)| width(i, c))
            .collect();
        let mut o = String::new();
        let lines = (!self.header.is_empty())
            .then_some(&self.header)
            .into_iter()
            .chain(&rows);
        for row in lines {
            let mut line = layout.indent.to_string();
            for (i, cell) in row.iter().enumerate() {
                let (c, w) = match layout.cols.get(i) {
                    Some(c) => (*c, widths[i]),
                    None => (Col::left(0), 0),
                };
                if i > 0 {
                    line.push_str(c.sep);
                }
                match c.align {
                    Align::Left => line.push_str(&format!("{cell:<w$}")),
                    Align::Right => line.push_str(&format!("{cell:>w$}")),
                }
            }
            if layout.trim_end {
                line.truncate(line.trim_end().len());
            }
            o.push_str(&line);
            o.push('\n');
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Table {
        let mut t = Table::with_header(&["a", "bb"]);
        t.push(vec!["x\u{1b}[31m".into(), "1".into()]);
        t.push(vec!["longer|cell".into(), "22".into()]);
        t
    }

    #[test]
    fn every_layout_escapes_its_cells() {
        let t = t();
        for s in [t.boxed(), t.markdown(), t.pipes(), {
            t.columns(&Columns {
                indent: "",
                cols: &[Col::fit(), Col::right(3)],
                trim_end: true,
            })
        }] {
            assert!(!s.contains('\u{1b}'), "{s}");
            assert!(s.contains("x\\u{1b}[31m"), "{s}");
        }
        assert!(t.markdown().contains("longer\\|cell"));
        assert!(t.pipes().contains("| longer\\|cell | 22 |"));
    }

    #[test]
    fn columns_fit_pad_and_separate() {
        let mut t = Table::with_header(&["n", "v", "w"]);
        t.push(vec!["abc".into(), "1".into(), "z".into()]);
        let s = t.columns(&Columns {
            indent: "  ",
            cols: &[Col::fit(), Col::right(3), Col::left(2).after("  ")],
            trim_end: false,
        });
        assert_eq!(s, "  n     v  w \n  abc   1  z \n");
        let trimmed = t.columns(&Columns {
            indent: "",
            cols: &[Col::fit(), Col::right(3), Col::left(2).after("  ")],
            trim_end: true,
        });
        assert_eq!(trimmed, "n     v  w\nabc   1  z\n");
    }

    #[test]
    fn a_key_value_table_has_no_header_line_in_a_box() {
        let mut t = Table::new(vec![String::new(), String::new()]);
        t.push(vec!["k".into(), "v".into()]);
        assert_eq!(t.boxed().lines().count(), 3);
        assert_eq!(t.markdown().lines().count(), 3);
    }
}
