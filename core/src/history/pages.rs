//! Page headers checked before a Parquet row group is decoded: a corrupt page header can claim
//! any uncompressed size up to 2 GiB, and the parquet crate allocates what the header claims
//! before it finds out that the page does not decode. `check_pages` walks every column
//! chunk's pages (Thrift compact protocol, only as far as needed to find each header's length
//! and sizes) and refuses a page whose sizes are negative, run past its chunk, or whose
//! uncompressed size exceeds the chunk's total uncompressed size from the footer — an
//! invariant of every valid file (the total is the sum of its pages') — so decoding never
//! allocates more than the footer says the chunk holds.
//!
//! This module reads bytes and checks sizes only: it does not decode values, verify checksums
//! or check the footer's own figures (the reader's `check_chunks` bounds those by the file).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use parquet::file::metadata::ParquetMetaData;

/// Thrift structures nest this deep at most in a page header (statistics inside a data page
/// header inside the page header); deeper is corruption.
const MAX_DEPTH: usize = 8;

/// Why a chunk's pages do not check out: (byte offset of the page, message).
type PageError = (u64, String);

/// A cursor over one chunk's bytes, reading the Thrift compact protocol.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| "page header runs past its column chunk".to_string())?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        let n = usize::try_from(n).map_err(|_| "length out of range".to_string())?;
        match self.at.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                self.at = end;
                Ok(())
            }
            _ => Err("page header runs past its column chunk".into()),
        }
    }

    /// Skips one value of compact type `ty`.
    fn skip_value(&mut self, ty: u8, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("page header nested too deep".into());
        }
        match ty {
            1 | 2 => Ok(()),
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = if h >> 4 == 15 {
                    self.varint()?
                } else {
                    u64::from(h >> 4)
                };
                let elem = h & 0x0f;
                for _ in 0..n {
                    // A boolean element is one byte in a list.
                    if elem == 1 || elem == 2 {
                        self.skip(1)?;
                    } else {
                        self.skip_value(elem, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n > 0 {
                    let kv = self.byte()?;
                    for _ in 0..n {
                        self.skip_value(kv >> 4, depth + 1)?;
                        self.skip_value(kv & 0x0f, depth + 1)?;
                    }
                }
                Ok(())
            }
            12 => self.skip_struct(depth + 1, |_, _, _| Ok(false)),
            t => Err(format!("unknown Thrift type {t} in a page header")),
        }
    }

    /// Walks a struct's fields; `take(cursor, field id, type)` reads a field itself and returns
    /// true, or returns false to have it skipped.
    fn skip_struct(
        &mut self,
        depth: usize,
        mut take: impl FnMut(&mut Self, i16, u8) -> Result<bool, String>,
    ) -> Result<(), String> {
        let mut last: i16 = 0;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(());
            }
            let ty = h & 0x0f;
            let id = match h >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| "field id out of range")?,
                d => last
                    .checked_add(i16::from(d))
                    .ok_or("field id out of range")?,
            };
            last = id;
            if !take(self, id, ty)? {
                self.skip_value(ty, depth)?;
            }
        }
    }
}

/// A page header's length and its uncompressed and compressed sizes.
fn page_header(bytes: &[u8]) -> Result<(usize, i64, i64), String> {
    let mut c = Cursor { bytes, at: 0 };
    let (mut uncompressed, mut compressed) = (None, None);
    c.skip_struct(0, |c, id, ty| match (id, ty) {
        (2, 5) => {
            uncompressed = Some(c.zigzag()?);
            Ok(true)
        }
        (3, 5) => {
            compressed = Some(c.zigzag()?);
            Ok(true)
        }
        _ => Ok(false),
    })?;
    match (uncompressed, compressed) {
        (Some(u), Some(z)) => Ok((c.at, u, z)),
        _ => Err("page header without its sizes".into()),
    }
}

/// Checks one chunk's bytes: every page header parses, its sizes are not negative, its page
/// fits in the chunk and it claims at most `total_uncompressed` bytes.
fn check_chunk(bytes: &[u8], start: u64, total_uncompressed: i64) -> Result<(), PageError> {
    let mut at = 0usize;
    while at < bytes.len() {
        let page_at = start + at as u64;
        let (len, uncompressed, compressed) =
            page_header(&bytes[at..]).map_err(|m| (page_at, m))?;
        if uncompressed < 0 || compressed < 0 {
            return Err((
                page_at,
                format!("page sizes {uncompressed} (uncompressed) and {compressed} (compressed)"),
            ));
        }
        if uncompressed > total_uncompressed {
            return Err((
                page_at,
                format!(
                    "page of {uncompressed} bytes uncompressed in a column chunk of {total_uncompressed}"
                ),
            ));
        }
        let next = at
            .checked_add(len)
            .and_then(|a| a.checked_add(compressed as usize))
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| {
                (
                    page_at,
                    format!("page of {compressed} bytes runs past its column chunk"),
                )
            })?;
        at = next;
    }
    Ok(())
}

/// Checks the page headers of every column chunk of row group `group` (whose chunks
/// `check_chunks` already placed inside the file). The error names the column and the byte.
pub(crate) fn check_pages(
    file: &File,
    meta: &ParquetMetaData,
    group: usize,
) -> Result<(), (String, String)> {
    let mut f = file;
    for c in meta.row_group(group).columns() {
        let start = c
            .dictionary_page_offset()
            .unwrap_or_else(|| c.data_page_offset())
            .max(0) as u64;
        let len = c.compressed_size().max(0) as u64;
        let mut bytes = vec![0u8; len as usize];
        f.seek(SeekFrom::Start(start))
            .and_then(|_| f.read_exact(&mut bytes))
            .map_err(|e| {
                (
                    c.column_path().string(),
                    format!("reading byte {start}: {e}"),
                )
            })?;
        check_chunk(&bytes, start, c.uncompressed_size())
            .map_err(|(at, m)| (c.column_path().string(), format!("byte {at}: {m}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol page header: type, sizes, and a data page header with a statistics
    /// struct holding a binary and a list.
    fn header(uncompressed: i64, compressed: i64) -> Vec<u8> {
        let zz = |v: i64| -> Vec<u8> {
            let mut u = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (u & 0x7f) as u8;
                u >>= 7;
                if u == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut h = vec![0x15];
        h.extend(zz(0)); // 1: type = DATA_PAGE (i32)
        h.push(0x15);
        h.extend(zz(uncompressed)); // 2
        h.push(0x15);
        h.extend(zz(compressed)); // 3
        h.push(0x2c); // 5: data_page_header (struct, delta 2)
        h.push(0x15);
        h.extend(zz(10)); // num_values
        h.push(0x5c); // 5: statistics (struct, delta 4 from 1)
        h.extend([0x18, 3, b'a', b'b', b'c']); // 1: binary "abc"
        h.extend([0x19, 0x25, 2, 4]); // 2: list of 2 i32
        h.push(0); // end statistics
        h.push(0); // end data page header
        h.push(0); // end page header
        h
    }

    #[test]
    fn pages_that_fit_pass_and_a_lying_header_is_refused() {
        let mut chunk = header(100, 3);
        chunk.extend([1, 2, 3]);
        chunk.extend(header(50, 2));
        chunk.extend([4, 5]);
        assert_eq!(check_chunk(&chunk, 0, 150), Ok(()));
        // A header claiming a gigabyte in a chunk of 150 bytes.
        let mut bad = header(1 << 30, 3);
        bad.extend([1, 2, 3]);
        let e = check_chunk(&bad, 4, 150).unwrap_err();
        assert_eq!(e.0, 4);
        assert!(e.1.contains("1073741824 bytes uncompressed"), "{}", e.1);
        // A page that runs past the chunk, a negative size, a truncated header, garbage.
        let mut long = header(100, 30);
        long.extend([1, 2, 3]);
        assert!(
            check_chunk(&long, 0, 150)
                .unwrap_err()
                .1
                .contains("runs past")
        );
        let mut neg = header(-1, 3);
        neg.extend([1, 2, 3]);
        assert!(
            check_chunk(&neg, 0, 150)
                .unwrap_err()
                .1
                .contains("page sizes -1")
        );
        assert!(check_chunk(&header(10, 0)[..5], 0, 150).is_err());
        assert!(check_chunk(&[214, 128, 128, 128, 161, 0, 0], 0, 150).is_err());
        // Deep nesting is refused, not recursed into.
        let mut deep = vec![0x1c; 64];
        deep.extend([0; 64]);
        assert!(
            check_chunk(&deep, 0, 150)
                .unwrap_err()
                .1
                .contains("nested too deep")
        );
    }
}
