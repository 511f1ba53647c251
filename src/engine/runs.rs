//! Packed runs: how the store writes a partition's states (and, in a
//! restore from nothing, its inbox chunks) many to a sled value instead of
//! one sled key each.
//!
//! sled 0.34 copies the leaf an insert lands in, so every key costs several
//! microseconds of CPU however small its value (docs/performance.md, "sled's
//! own floor"). A write-out or a restore batch therefore writes its keys as
//! one *generation* of runs: in key order, cut into values of about
//! [`RUN_BYTES`], each stored under `r` + generation (u32, big-endian) + the
//! last key it holds. The generations, how a key is found among them and
//! how they are merged are in [`crate::engine::generation`]; a run marks a
//! deleted key, so a newer generation hides an older one's value.
//!
//! A run's value:
//!
//! * `count` (u32, little-endian), then `count` entry offsets (u32, from the
//!   start of the value), then the entries;
//! * an entry: key length (u32), key, a kind byte (1: a value follows, 0:
//!   deleted), value length (u32), value.
//!
//! Everything here is pure: the store reads and writes the runs.

/// Prefix of run keys in a partition tree.
pub(crate) const RUN_PREFIX: u8 = b'r';
/// Layout 7's key of the number of run generations a tree held (u32,
/// big-endian), numbered from 0; read once when the tree is brought over.
pub(crate) const RUNS_KEY: &[u8] = b"\x00runs";
/// A run is cut once its entries reach this many bytes. sled splits a leaf
/// at 17 values, and a leaf past the log's blob threshold (128 KiB) is a
/// file of its own that its cache counts at the size of a pointer and so
/// never evicts: 32 KiB runs (as `benches/sled_floor.rs --packed` first
/// chose, docs/performance.md, "Packed runs") held the whole state in
/// memory once write-outs wrote them. Runs of 4 KiB keep a leaf of 17 under
/// it (`tests/sled_batches/leaves.rs`, `leaves_of_packed_runs_are_held_within_the_cache`).
pub(crate) const RUN_BYTES: usize = 4 << 10;

const KIND_DELETED: u8 = 0;
const KIND_VALUE: u8 = 1;

/// The key of the run of `generation` whose last key is `last`.
pub(crate) fn run_key(generation: u32, last: &[u8]) -> Vec<u8> {
    let mut key = generation_start(generation, &[]);
    key.extend_from_slice(last);
    key
}

/// The first run key of `generation` that may hold `key` or any key after it.
pub(crate) fn generation_start(generation: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + key.len());
    out.push(RUN_PREFIX);
    out.extend_from_slice(&generation.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The first key after every run of `generation` (exclusive bound).
pub(crate) fn generation_end(generation: u32) -> Vec<u8> {
    match generation.checked_add(1) {
        Some(next) => generation_start(next, &[]),
        None => vec![RUN_PREFIX + 1],
    }
}

/// What a run, or a generation of them, says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found<'a> {
    /// The key's value.
    Value(&'a [u8]),
    /// The key was deleted: older generations do not count.
    Deleted,
    /// Not in this run.
    Absent,
}

/// A run's entries, read in place.
#[derive(Clone, Copy)]
pub(crate) struct Run<'a> {
    bytes: &'a [u8],
    count: usize,
}

fn read_u32(bytes: &[u8], at: usize) -> Result<u32, String> {
    bytes
        .get(at..at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| format!("run cut short at byte {at} of {}", bytes.len()))
}

impl<'a> Run<'a> {
    /// Reads a run's header; fails on a value that cannot be a run.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let count = read_u32(bytes, 0)? as usize;
        if 4 + count * 4 > bytes.len() {
            return Err(format!("run of {count} entries in {} bytes", bytes.len()));
        }
        Ok(Run { bytes, count })
    }

    /// Entries in the run.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The `index`th entry's key, and where its kind byte is.
    fn key(&self, index: usize) -> Result<(&'a [u8], usize), String> {
        let start = read_u32(self.bytes, 4 + index * 4)? as usize;
        let key_len = read_u32(self.bytes, start)? as usize;
        let key_at = start + 4;
        let key = self
            .bytes
            .get(key_at..key_at + key_len)
            .ok_or_else(|| format!("entry {index}'s key runs past the run"))?;
        Ok((key, key_at + key_len))
    }

    /// The `index`th entry: its key, and its value (`None`: deleted).
    pub(crate) fn entry(&self, index: usize) -> Result<(&'a [u8], Option<&'a [u8]>), String> {
        let (key, kind_at) = self.key(index)?;
        match self.bytes.get(kind_at) {
            Some(&KIND_DELETED) => Ok((key, None)),
            Some(&KIND_VALUE) => {
                let value_len = read_u32(self.bytes, kind_at + 1)? as usize;
                let value_at = kind_at + 5;
                let value = self
                    .bytes
                    .get(value_at..value_at + value_len)
                    .ok_or_else(|| format!("entry {index}'s value runs past the run"))?;
                Ok((key, Some(value)))
            }
            other => Err(format!("entry {index} has kind {other:?}")),
        }
    }

    /// The first entry whose key is not below `key` (`len()`: none).
    pub(crate) fn lower_bound(&self, key: &[u8]) -> Result<usize, String> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.key(middle)?.0 < key {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }

    /// What the run holds for `key`.
    pub(crate) fn find(&self, key: &[u8]) -> Result<Found<'a>, String> {
        let at = self.lower_bound(key)?;
        if at == self.count {
            return Ok(Found::Absent);
        }
        Ok(match self.entry(at)? {
            (found, Some(value)) if found == key => Found::Value(value),
            (found, None) if found == key => Found::Deleted,
            _ => Found::Absent,
        })
    }

    /// The byte range of `value` within the run (to share the run's buffer).
    pub(crate) fn range_of(&self, value: &[u8]) -> (usize, usize) {
        let offset = value.as_ptr() as usize - self.bytes.as_ptr() as usize;
        (offset, value.len())
    }
}

/// Builds one generation's runs from entries given in key order.
#[derive(Default)]
pub(crate) struct RunBuilder {
    data: Vec<u8>,
    offsets: Vec<u32>,
    last: Vec<u8>,
}

impl RunBuilder {
    /// Adds an entry (`None`: the key was deleted). Keys must come in
    /// ascending order. Returns a finished run (its last key and value)
    /// once the run reaches [`RUN_BYTES`].
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) -> Option<(Vec<u8>, Vec<u8>)> {
        debug_assert!(
            self.offsets.is_empty() || self.last.as_slice() < key,
            "run keys in ascending order"
        );
        self.offsets.push(self.data.len() as u32);
        self.data
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.data.extend_from_slice(key);
        match value {
            None => self.data.push(KIND_DELETED),
            Some(value) => {
                self.data.push(KIND_VALUE);
                self.data
                    .extend_from_slice(&(value.len() as u32).to_le_bytes());
                self.data.extend_from_slice(value);
            }
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        if self.data.len() >= RUN_BYTES {
            self.finish()
        } else {
            None
        }
    }

    /// The run of the entries pushed since the last one (`None`: none).
    pub(crate) fn finish(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        if self.offsets.is_empty() {
            return None;
        }
        let header = 4 + 4 * self.offsets.len();
        let mut value = Vec::with_capacity(header + self.data.len());
        value.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        for offset in self.offsets.drain(..) {
            value.extend_from_slice(&(offset + header as u32).to_le_bytes());
        }
        value.append(&mut self.data);
        Some((self.last.clone(), value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(entries: &[(&str, Option<&str>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut builder = RunBuilder::default();
        let mut runs = Vec::new();
        for (key, value) in entries {
            runs.extend(builder.push(key.as_bytes(), value.map(str::as_bytes)));
        }
        runs.extend(builder.finish());
        runs
    }

    #[test]
    fn every_key_is_found_with_its_value_or_its_deletion_and_no_other_key_is() {
        let runs = build(&[("a", Some("1")), ("c", None), ("e", Some(""))]);
        assert_eq!(runs.len(), 1);
        let (last, value) = &runs[0];
        assert_eq!(last, b"e");
        let run = Run::parse(value).expect("a run");
        assert_eq!(run.len(), 3);
        assert_eq!(run.find(b"a"), Ok(Found::Value(b"1")));
        assert_eq!(run.find(b"c"), Ok(Found::Deleted));
        assert_eq!(run.find(b"e"), Ok(Found::Value(b"")));
        for absent in ["", "b", "d", "f", "aa"] {
            assert_eq!(run.find(absent.as_bytes()), Ok(Found::Absent), "{absent}");
        }
        assert_eq!(run.lower_bound(b"b"), Ok(1));
        assert_eq!(run.lower_bound(b"z"), Ok(3));
    }

    #[test]
    fn runs_are_cut_at_their_size_and_each_is_keyed_by_its_last_key() {
        let value = "v".repeat(1000);
        let keys: Vec<String> = (0..200).map(|i| format!("o{i:05}")).collect();
        let entries: Vec<(&str, Option<&str>)> = keys
            .iter()
            .map(|k| (k.as_str(), Some(value.as_str())))
            .collect();
        let runs = build(&entries);
        assert!(runs.len() >= 6, "{} runs", runs.len());
        let mut seen = 0;
        for (last, bytes) in &runs {
            let run = Run::parse(bytes).expect("a run");
            assert!(bytes.len() <= RUN_BYTES + 1100);
            assert_eq!(run.entry(run.len() - 1).expect("entry").0, last.as_slice());
            for i in 0..run.len() {
                let (key, found) = run.entry(i).expect("entry");
                assert_eq!(key, keys[seen].as_bytes());
                assert_eq!(found, Some(value.as_bytes()));
                seen += 1;
            }
        }
        assert_eq!(seen, keys.len());
    }

    #[test]
    fn a_damaged_run_is_an_error_not_a_panic() {
        let runs = build(&[("a", Some("1")), ("b", Some("22"))]);
        let bytes = &runs[0].1;
        for cut in 0..bytes.len() {
            if let Ok(run) = Run::parse(&bytes[..cut]) {
                assert!(run.find(b"b").is_err(), "cut at {cut}");
            }
        }
        assert!(Run::parse(&[200, 0, 0, 0]).is_err());
    }

    #[test]
    fn run_keys_of_a_generation_sort_between_its_bounds() {
        let key = run_key(3, b"order-9");
        assert!(generation_start(3, b"order-1") <= key);
        assert!(key < generation_end(3));
        assert!(generation_end(2) <= generation_start(3, b""));
        assert!(run_key(u32::MAX, b"\xff\xff") < generation_end(u32::MAX));
    }
}
