//! Typed access to collected frame columns for every module that walks rows (the advisor's
//! detectors, the report's tallies, the MIG demand, jobs): each accessor casts once and returns
//! a small reader with `get(i)`, so rows can be walked in order without copying strings; plus
//! the fast hash maps for row keys, `ts` as unix ms, and grouping rows by entity.
//!
//! This module does not decide anything; it only hides polars' casting and chunk handling.

use polars::prelude::*;
use polars_arrow::array::{Array as _, PrimitiveArray};

use super::FramesError;

pub use memo::{forget_ids, remember_ids};

/// A utf8 column.
pub struct Strs {
    ca: StringChunked,
    /// The chunks, and the row index each starts at (for [`Strs::get`] without rechunking).
    chunks: Vec<polars_arrow::array::Utf8ViewArray>,
    starts: Vec<usize>,
}
/// A float column (non-finite values read as missing): the column's values in one arrow array,
/// read in place (no per-row copy).
pub struct F64s(Option<PrimitiveArray<f64>>);
/// An integer column (read as i64), likewise.
pub struct I64s(Option<PrimitiveArray<i64>>);
/// A boolean column.
pub struct Bools(Vec<Option<bool>>);

impl Strs {
    fn new(ca: StringChunked) -> Strs {
        let chunks: Vec<_> = ca.downcast_iter().cloned().collect();
        let mut starts = Vec::with_capacity(chunks.len());
        let mut at = 0;
        for c in &chunks {
            starts.push(at);
            at += c.len();
        }
        Strs { ca, chunks, starts }
    }

    /// Row `i` (`None` when null or out of range): a binary search over the chunks.
    pub fn get(&self, i: usize) -> Option<&str> {
        let c = self.starts.partition_point(|&s| s <= i).checked_sub(1)?;
        let arr = &self.chunks[c];
        let j = i - self.starts[c];
        (j < arr.len() && arr.is_valid(j)).then(|| arr.value(j))
    }
}

/// A string's arrow view, tagged with its chunk unless inline: equal keys mean equal strings
/// (equal strings may have different keys).
type ViewKey = (u32, u128);

/// A string column's rows as small integers ([`Strs::ids`]): equal strings have equal ids.
#[derive(Clone)]
pub struct Ids<'a> {
    /// Per row, the id of its string (`None` when null); shared, so that a remembered column's
    /// ids are recalled without a copy.
    pub ids: std::sync::Arc<[Option<u32>]>,
    /// The strings by id, in order of first appearance.
    pub strings: Vec<&'a str>,
}

impl Strs {
    /// Per row, an id such that two rows have the same id exactly when their strings are equal
    /// (ids numbered in order of first appearance; `None` for null). A string is read only when
    /// its arrow view was not seen before, so a hot loop can key rows by integers instead of
    /// hashing strings.
    pub fn ids(&self) -> Ids<'_> {
        if let Some(ids) = memo::recall(self) {
            return ids;
        }
        let mut ids = Vec::with_capacity(self.ca.len());
        let mut strings: Vec<&str> = Vec::new();
        let mut by_view: FastMap<ViewKey, u32> = FastMap::default();
        let mut by_str: FastMap<&str, u32> = FastMap::default();
        for (c, arr) in self.chunks.iter().enumerate() {
            let valid = arr.validity();
            // Recent views (a node's rows cycle through a handful of GPUs).
            let mut cache: DirectCache<ViewKey, u32> = DirectCache::default();
            for (j, v) in arr.views().iter().enumerate() {
                if valid.is_some_and(|b| !b.get_bit(j)) {
                    ids.push(None);
                    continue;
                }
                let key = (if v.is_inline() { u32::MAX } else { c as u32 }, v.as_u128());
                let at = cache_slot([key.1 as u64, (key.1 >> 64) as u64, u64::from(key.0)]);
                let id = match cache.get(at, &key) {
                    Some(id) => id,
                    None => {
                        let id = match by_view.get(&key) {
                            Some(&id) => id,
                            None => {
                                let s = arr.value(j);
                                let id = *by_str.entry(s).or_insert_with(|| {
                                    strings.push(s);
                                    (strings.len() - 1) as u32
                                });
                                by_view.insert(key, id);
                                id
                            }
                        };
                        cache.put(at, key, id);
                        id
                    }
                };
                ids.push(Some(id));
            }
        }
        Ids {
            ids: ids.into(),
            strings,
        }
    }
}

impl Strs {
    /// This column's ids: `shared` when given (the same rows, interned before: see
    /// [`super::shared`]), else interned now.
    pub fn ids_or<'s>(&'s self, shared: Option<&'s Ids<'s>>) -> std::borrow::Cow<'s, Ids<'s>> {
        match shared {
            Some(ids) => std::borrow::Cow::Borrowed(ids),
            None => std::borrow::Cow::Owned(self.ids()),
        }
    }
}

impl<'a> Ids<'a> {
    /// Row `i`'s id (`None` when null or out of range).
    pub fn at(&self, i: usize) -> Option<u32> {
        self.ids.get(i).copied().flatten()
    }

    /// Row `i`'s string.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        self.at(i).map(|id| self.strings[id as usize])
    }
}

impl F64s {
    pub fn get(&self, i: usize) -> Option<f64> {
        let a = self.0.as_ref()?;
        if i >= a.len() || !a.is_valid(i) {
            return None;
        }
        let v = a.value(i);
        v.is_finite().then_some(v)
    }
}
impl I64s {
    pub fn get(&self, i: usize) -> Option<i64> {
        let a = self.0.as_ref()?;
        (i < a.len() && a.is_valid(i)).then(|| a.value(i))
    }
}
impl Bools {
    pub fn get(&self, i: usize) -> Option<bool> {
        self.0.get(i).copied().flatten()
    }
}

fn column(df: &DataFrame, name: &str, dt: &DataType) -> Result<Series, FramesError> {
    Ok(df.column(name)?.as_materialized_series().cast(dt)?)
}

/// A string column as it is (not rechunked: [`Strs::get`] is for occasional lookups; hot loops
/// use [`Strs::ids`]).
pub fn strs(df: &DataFrame, name: &str) -> Result<Strs, FramesError> {
    Ok(Strs::new(
        column(df, name, &DataType::String)?.str()?.clone(),
    ))
}
/// A primitive column as one arrow array (copied only when it has several chunks).
fn one_array<T: PolarsNumericType>(ca: &ChunkedArray<T>) -> Option<PrimitiveArray<T::Native>> {
    ca.rechunk().downcast_iter().next().cloned()
}

pub fn f64s(df: &DataFrame, name: &str) -> Result<F64s, FramesError> {
    let s = column(df, name, &DataType::Float64)?;
    Ok(F64s(one_array(s.f64()?)))
}
pub fn i64s(df: &DataFrame, name: &str) -> Result<I64s, FramesError> {
    let s = column(df, name, &DataType::Int64)?;
    Ok(I64s(one_array(s.i64()?)))
}
pub fn bools(df: &DataFrame, name: &str) -> Result<Bools, FramesError> {
    let s = column(df, name, &DataType::Boolean)?;
    Ok(Bools(s.bool()?.iter().collect()))
}

/// Slots of a [`DirectCache`].
const CACHE_SLOTS: usize = 64;

/// A small direct-mapped cache of recent keys in front of a map: rows that cycle through a few
/// keys (a node's GPUs, its processes) hit it and skip hashing the key. The caller gives each
/// key's slot ([`cache_slot`] of the key's words); a slot holds the last key put there.
pub struct DirectCache<K, V>([Option<(K, V)>; CACHE_SLOTS]);

impl<K: Copy, V: Copy> Default for DirectCache<K, V> {
    fn default() -> Self {
        DirectCache([None; CACHE_SLOTS])
    }
}

impl<K: Copy + PartialEq, V: Copy> DirectCache<K, V> {
    /// The value cached for `key` at `slot`, if it is there.
    pub fn get(&self, slot: usize, key: &K) -> Option<V> {
        match &self.0[slot] {
            Some((k, v)) if k == key => Some(*v),
            _ => None,
        }
    }

    pub fn put(&mut self, slot: usize, key: K, value: V) {
        self.0[slot] = Some((key, value));
    }
}

/// An optional part of a key as a word for [`cache_slot`] (`None` as all ones).
pub fn cache_word<T: Into<i64>>(x: Option<T>) -> u64 {
    x.map_or(u64::MAX, |v| v.into() as u64)
}

/// The [`DirectCache`] slot of a key given as words (one multiply, whatever the number of words).
pub fn cache_slot(words: impl IntoIterator<Item = u64>) -> usize {
    let x = words.into_iter().fold(0u64, |x, w| x.rotate_left(7) ^ w);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// A hash map with a fast, deterministic (non-DoS-resistant) hasher, for row keys.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;
/// A hash set with the same hasher.
pub type FastSet<K> = rustc_hash::FxHashSet<K>;

/// Where `t` is in `list` (ascending), looked for first where the last search ended (`cursor`)
/// and just after it (rows in time order ask for the same or the next entry), else by binary
/// search; `cursor` is moved to the answer. `None` when `t` is not in `list`.
pub fn find_from(list: &[i64], cursor: &mut usize, t: i64) -> Option<usize> {
    let c = *cursor;
    let at = if list.get(c) == Some(&t) {
        c
    } else if list.get(c + 1) == Some(&t) {
        c + 1
    } else {
        list.binary_search(&t).ok()?
    };
    *cursor = at;
    Some(at)
}

/// `ts` as unix ms (Int64) under the same name.
pub fn ts_ms() -> Expr {
    col("ts").cast(DataType::Int64)
}

/// Row indices of each entity (rows with equal `keys`, e.g. node and uuid), each sorted by
/// `ts`, entities in key order. Grouping happens here, not in polars: rows are keyed by their
/// strings' ids ([`Strs::ids`]: each string read once per distinct view), which is much cheaper
/// than a multi-column string sort of the whole frame.
pub fn groups(keys: &[&Strs], ts: &I64s, n: usize) -> Vec<Vec<usize>> {
    let ids: Vec<Ids<'_>> = keys.iter().map(|k| k.ids()).collect();
    groups_of(&ids.iter().collect::<Vec<_>>(), ts, n)
}

/// [`groups`] of key columns already interned.
pub fn groups_of<'a>(ids: &[&Ids<'a>], ts: &I64s, n: usize) -> Vec<Vec<usize>> {
    /// Key columns held in a fixed array; more are keyed by a vector per row (slower).
    const MAX: usize = 4;
    type Group<'a> = (Vec<Option<&'a str>>, Vec<usize>);
    let n = ids.iter().map(|c| c.ids.len()).fold(n, usize::min);
    let mut out: Vec<Group<'a>> = Vec::new();
    let new_group = |i: usize, out: &mut Vec<Group<'a>>| {
        out.push((ids.iter().map(|c| c.get(i)).collect(), Vec::new()));
        out.len() - 1
    };
    if ids.len() <= MAX {
        let mut by_key: FastMap<[Option<u32>; MAX], usize> = FastMap::default();
        // Recent keys in a small direct-mapped cache in front of the map: a node's rows cycle
        // through a handful of GPUs (or instances), so most rows hit it.
        let mut recent: DirectCache<[Option<u32>; MAX], usize> = DirectCache::default();
        for i in 0..n {
            let mut key = [None; MAX];
            for (slot, c) in key.iter_mut().zip(ids) {
                *slot = c.ids[i];
            }
            let at = cache_slot(key.iter().map(|v| v.map_or(u64::MAX, u64::from)));
            let g = match recent.get(at, &key) {
                Some(g) => g,
                None => {
                    let g = match by_key.get(&key) {
                        Some(&g) => g,
                        None => {
                            let g = new_group(i, &mut out);
                            by_key.insert(key, g);
                            g
                        }
                    };
                    recent.put(at, key, g);
                    g
                }
            };
            out[g].1.push(i);
        }
    } else {
        let mut by_key: FastMap<Vec<Option<u32>>, usize> = FastMap::default();
        for i in 0..n {
            let key: Vec<Option<u32>> = ids.iter().map(|c| c.ids[i]).collect();
            let g = match by_key.get(&key) {
                Some(&g) => g,
                None => {
                    let g = new_group(i, &mut out);
                    by_key.insert(key, g);
                    g
                }
            };
            out[g].1.push(i);
        }
    }
    out.sort_by(|x, y| x.0.cmp(&y.0));
    out.into_iter()
        .map(|(_, mut v)| {
            if !v.windows(2).all(|w| ts.get(w[0]) <= ts.get(w[1])) {
                v.sort_by_key(|&i| ts.get(i));
            }
            v
        })
        .collect()
}

/// Interned columns remembered on this thread by the identity of their arrays (the report pass
/// remembers a partition's node, uuid and team columns, `super::shared`): [`Strs::ids`] of a
/// column whose chunks are the very same arrays (same views, buffers and validity in memory)
/// returns the remembered ids instead of interning every row again. The entries hold the arrays,
/// so their addresses cannot be reused by other data while remembered.
mod memo {
    use std::cell::RefCell;

    use polars_arrow::array::{Array as _, Utf8ViewArray};

    use super::{Ids, Strs};

    /// A chunk's identity: its views (address, length), buffers and validity (address, offset).
    type ChunkKey = (usize, usize, usize, Option<(usize, usize)>);

    struct Entry {
        key: Vec<ChunkKey>,
        _keep: Vec<Utf8ViewArray>,
        ids: std::sync::Arc<[Option<u32>]>,
        /// Per id, the row where its string first appears.
        first: Vec<usize>,
    }

    thread_local! {
        static MEMO: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    }

    fn key(s: &Strs) -> Vec<ChunkKey> {
        s.chunks
            .iter()
            .map(|a| {
                let validity = a.validity().map(|b| {
                    let (bytes, offset, _) = b.as_slice();
                    (bytes.as_ptr() as usize, offset)
                });
                (
                    a.views().as_ptr() as usize,
                    a.len(),
                    a.data_buffers().as_ptr() as usize,
                    validity,
                )
            })
            .collect()
    }

    /// Remembers `ids` of `s` on this thread (until [`forget_ids`]).
    pub fn remember_ids(s: &Strs, ids: &Ids) {
        let mut first = vec![usize::MAX; ids.strings.len()];
        for (i, id) in ids.ids.iter().enumerate() {
            if let Some(id) = *id
                && first[id as usize] == usize::MAX
            {
                first[id as usize] = i;
            }
        }
        let entry = Entry {
            key: key(s),
            _keep: s.chunks.clone(),
            ids: ids.ids.clone(),
            first,
        };
        MEMO.with(|m| m.borrow_mut().push(entry));
    }

    /// Forgets what this thread remembered.
    pub fn forget_ids() {
        MEMO.with(|m| m.borrow_mut().clear());
    }

    /// The remembered ids of `s`, when its chunks are the arrays of a remembered column.
    pub(super) fn recall(s: &Strs) -> Option<Ids<'_>> {
        MEMO.with(|m| {
            let m = m.borrow();
            if m.is_empty() {
                return None;
            }
            let k = key(s);
            let e = m.iter().find(|e| e.key == k)?;
            let strings = e
                .first
                .iter()
                .map(|&i| s.get(i))
                .collect::<Option<Vec<&str>>>()?;
            Some(Ids {
                ids: e.ids.clone(),
                strings,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_from_answers_like_a_binary_search_and_moves_the_cursor() {
        let list = [10i64, 20, 30, 40];
        let mut cursor = 0;
        for (t, want) in [
            (10, Some(0)),
            (20, Some(1)),
            (20, Some(1)),
            (40, Some(3)),
            (15, None),
            (10, Some(0)),
            (30, Some(2)),
        ] {
            assert_eq!(find_from(&list, &mut cursor, t), want, "{t}");
            if let Some(w) = want {
                assert_eq!(cursor, w);
            }
        }
        assert_eq!(find_from(&[], &mut 0, 1), None);
    }

    /// A frame whose string column has two chunks (so equal long strings have different views)
    /// and nulls; a float column with nulls and non-finite values.
    fn two_chunks() -> DataFrame {
        let long = "a-string-longer-than-twelve-bytes";
        let a = df!(
            "s" => [Some("x"), Some(long), None, Some("y")],
            "f" => [Some(1.0), None, Some(f64::NAN), Some(2.5)],
        )
        .unwrap();
        let b = df!(
            "s" => [Some(long), Some("x"), Some("another-long-string-of-bytes"), None],
            "f" => [Some(f64::INFINITY), Some(-0.0), None, Some(3.0)],
        )
        .unwrap();
        let mut d = a;
        d.vstack_mut(&b).unwrap();
        d
    }

    #[test]
    fn ids_are_equal_exactly_when_strings_are() {
        let d = two_chunks();
        let s = strs(&d, "s").unwrap();
        assert_eq!(s.chunks.len(), 2, "the test needs two chunks");
        let ids = s.ids();
        for i in 0..d.height() {
            assert_eq!(ids.get(i), s.get(i), "row {i}");
            for j in 0..d.height() {
                assert_eq!(
                    ids.at(i) == ids.at(j),
                    s.get(i) == s.get(j),
                    "rows {i} and {j}"
                );
            }
        }
        assert_eq!(ids.strings.len(), 4);
        assert_eq!(ids.at(99), None);
    }

    #[test]
    fn remembered_ids_are_recalled_only_for_the_same_arrays() {
        let d = two_chunks();
        let s = strs(&d, "s").unwrap();
        // Interned with a different numbering than a fresh interning would give (the strings
        // reversed), so that a recall is told apart from interning again.
        let fresh = s.ids();
        let n = fresh.strings.len() as u32;
        let reversed = Ids {
            ids: fresh.ids.iter().map(|id| id.map(|id| n - 1 - id)).collect(),
            strings: fresh.strings.iter().rev().copied().collect(),
        };
        remember_ids(&s, &reversed);
        // The same arrays (another reader of a clone of the frame): recalled, strings and all.
        let copy = strs(&d.clone(), "s").unwrap();
        let again = copy.ids();
        assert_eq!(again.ids, reversed.ids);
        assert_eq!(again.strings, reversed.strings);
        // Equal strings in other arrays: interned afresh.
        let other = two_chunks();
        assert_eq!(strs(&other, "s").unwrap().ids().ids, fresh.ids);
        // A slice of the same arrays is another column.
        let sliced = d.slice(1, 5);
        let sliced = strs(&sliced, "s").unwrap();
        let ids = sliced.ids();
        assert_eq!(ids.get(0), Some("a-string-longer-than-twelve-bytes"));
        assert_eq!(ids.at(0), Some(0));
        forget_ids();
        assert_eq!(strs(&d, "s").unwrap().ids().ids, fresh.ids);
    }

    #[test]
    fn numeric_columns_keep_nulls_and_drop_non_finite_values() {
        let d = two_chunks();
        let f = f64s(&d, "f").unwrap();
        let got: Vec<Option<f64>> = (0..d.height()).map(|i| f.get(i)).collect();
        assert_eq!(
            got,
            [
                Some(1.0),
                None,
                None,
                Some(2.5),
                None,
                Some(-0.0),
                None,
                Some(3.0)
            ]
        );
        let d = df!("i" => [Some(1i64), None, Some(-3)]).unwrap();
        let i = i64s(&d, "i").unwrap();
        assert_eq!(
            (i.get(0), i.get(1), i.get(2), i.get(3)),
            (Some(1), None, Some(-3), None)
        );
    }
}
