//! The one output layer: every command's text for people and documents for programs goes
//! through it. One `--format` vocabulary ([`Format`], each command's subset by [`Formats`]);
//! tables in every layout ([`table`]: boxed, Markdown, aligned columns); the section model
//! rendered to text and Markdown ([`section`]); the one HTML page shell ([`html`]); JSON
//! documents ([`json`]). Data is escaped once, at this boundary ([`escape`]): a table escapes its
//! cells, a section its lines, the page shell its title.
//!
//! Architecture invariant: only this module builds tables (`tabled`, aligned columns) and HTML
//! page shells (`tests/e2e/tests/structure.rs` checks it). It decides nothing about what a
//! command says; that is each command's model (`report`, `replay`, `jobs`, `advisor`, ...).

pub mod escape;
mod format;
pub mod html;
pub mod json;
pub mod section;
pub mod table;

pub use format::{DOCUMENT, Format, Formats, TABLE_JSON, TEXT_JSON};
pub use section::Section;
pub use table::{Col, Columns, Table};
