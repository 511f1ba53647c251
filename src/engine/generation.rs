//! Generations of packed runs as the write path keeps them: what is held in
//! memory for each (the last key of every run and a Bloom filter of its
//! keys), how the list of live generations is stored, which of them to
//! merge, and the merge itself over entries in key order.
//!
//! A write-out writes the states it changed as one new generation of runs
//! ([`crate::engine::runs`]), on top of the older ones: a few sled values
//! instead of a sled insert per state (sled copies the leaf an insert lands
//! in, several microseconds whatever the value's size). A read asks the
//! generations newest first; the filter answers "not here" for most keys a
//! generation does not hold without touching sled, and the run index names
//! the one run that may hold it. Merges keep the number of generations
//! logarithmic in the state's size: sizes shrink at least by half from the
//! oldest to the newest, as in a binary counter, so each state byte is
//! rewritten about log2(state / write-out) times.
//!
//! Everything here is pure: the store reads and writes the generations.

use std::cmp::Ordering;

/// Bits of filter per key: about 1% false positives with [`FILTER_PROBES`].
const FILTER_BITS_PER_KEY: u64 = 10;
const FILTER_PROBES: u32 = 7;
/// Past this many generations, the two adjacent ones smallest together are
/// merged even when the sizes alone would not call for it.
pub(crate) const MAX_GENERATIONS: usize = 12;

/// A Bloom filter over a generation's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    bits: Vec<u64>,
}

/// A key's hash for the filters: computed once per lookup, probed in
/// every generation's filter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyHash(u64, u64);

impl KeyHash {
    pub(crate) fn of(key: &[u8]) -> Self {
        let hash = xxhash_rust::xxh3::xxh3_64(key);
        // The second hash is odd, so the probes of a key visit distinct bits.
        KeyHash(hash, hash.rotate_left(32) | 1)
    }
}

impl Filter {
    /// An empty filter sized for `keys` keys.
    pub(crate) fn for_keys(keys: u64) -> Self {
        let bits = (keys.max(1) * FILTER_BITS_PER_KEY).div_ceil(64);
        Filter {
            bits: vec![0; bits as usize],
        }
    }

    fn len(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    pub(crate) fn insert(&mut self, key: &[u8]) {
        let KeyHash(mut at, step) = KeyHash::of(key);
        let len = self.len();
        for _ in 0..FILTER_PROBES {
            let bit = at % len;
            self.bits[(bit / 64) as usize] |= 1 << (bit % 64);
            at = at.wrapping_add(step);
        }
    }

    /// False when the key of `hash` was surely never inserted.
    pub(crate) fn may_hold(&self, hash: KeyHash) -> bool {
        let KeyHash(mut at, step) = hash;
        let len = self.len();
        for _ in 0..FILTER_PROBES {
            let bit = at % len;
            if self.bits[(bit / 64) as usize] & (1 << (bit % 64)) == 0 {
                return false;
            }
            at = at.wrapping_add(step);
        }
        true
    }
}

/// What memory holds of one generation: enough to find the one run that
/// may hold a key, or to know that none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GenerationIndex {
    /// The generation's number: its runs are keyed `r` + this (u32,
    /// big-endian) + their last key. Numbers only grow; the position in the
    /// list of live generations, not the number, says which is newer.
    pub id: u32,
    /// Entries (values and deletions) its runs hold.
    pub keys: u64,
    /// Bytes of its runs.
    pub bytes: u64,
    /// The last key of each run, ascending.
    pub last_keys: Vec<Box<[u8]>>,
    pub filter: Filter,
}

impl GenerationIndex {
    /// The last key of the one run that may hold `key` (`None`: no run of
    /// this generation does).
    pub(crate) fn run_for(&self, key: &[u8], hash: KeyHash) -> Option<&[u8]> {
        if !self.filter.may_hold(hash) {
            return None;
        }
        let at = self.last_keys.partition_point(|last| last.as_ref() < key);
        self.last_keys.get(at).map(AsRef::as_ref)
    }

    /// The stored form: id, keys, bytes, the filter's words, the last keys.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(32 + self.filter.bits.len() * 8 + self.last_keys.len() * 24);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.keys.to_le_bytes());
        out.extend_from_slice(&self.bytes.to_le_bytes());
        out.extend_from_slice(&(self.filter.bits.len() as u32).to_le_bytes());
        for word in &self.filter.bits {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&(self.last_keys.len() as u32).to_le_bytes());
        for key in &self.last_keys {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut reader = Reader { bytes, at: 0 };
        let id = reader.u32()?;
        let keys = reader.u64()?;
        let index_bytes = reader.u64()?;
        let words = reader.u32()? as usize;
        let mut bits = Vec::with_capacity(words.min(bytes.len() / 8));
        for _ in 0..words {
            bits.push(reader.u64()?);
        }
        if bits.is_empty() {
            return Err("a filter of no words".into());
        }
        let runs = reader.u32()? as usize;
        let mut last_keys = Vec::with_capacity(runs.min(bytes.len() / 4));
        for _ in 0..runs {
            let len = reader.u32()? as usize;
            last_keys.push(reader.take(len)?.into());
        }
        if reader.at != bytes.len() {
            return Err(format!("{} bytes after the index", bytes.len() - reader.at));
        }
        Ok(GenerationIndex {
            id,
            keys,
            bytes: index_bytes,
            last_keys,
            filter: Filter { bits },
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let slice = self
            .bytes
            .get(self.at..self.at.saturating_add(len))
            .ok_or_else(|| format!("cut short at byte {} of {}", self.at, self.bytes.len()))?;
        self.at += len;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut word = [0; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }
}

/// Builds a generation's index as its runs are cut.
pub(crate) struct IndexBuilder {
    index: GenerationIndex,
}

impl IndexBuilder {
    /// For generation `id` of at most `keys` entries.
    pub(crate) fn new(id: u32, keys: u64) -> Self {
        IndexBuilder {
            index: GenerationIndex {
                id,
                keys: 0,
                bytes: 0,
                last_keys: Vec::new(),
                filter: Filter::for_keys(keys),
            },
        }
    }

    pub(crate) fn key(&mut self, key: &[u8]) {
        self.index.keys += 1;
        self.index.filter.insert(key);
    }

    pub(crate) fn run(&mut self, last: &[u8], bytes: usize) {
        self.index.last_keys.push(last.into());
        self.index.bytes += bytes as u64;
    }

    pub(crate) fn finish(self) -> GenerationIndex {
        self.index
    }
}

/// The list of live generations as stored: the next generation number to
/// give, then the numbers of the live ones, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LiveList {
    pub next_id: u32,
    pub ids: Vec<u32>,
}

impl LiveList {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 4 * self.ids.len());
        out.extend_from_slice(&self.next_id.to_be_bytes());
        for id in &self.ids {
            out.extend_from_slice(&id.to_be_bytes());
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < 4 || bytes.len() % 4 != 0 {
            return Err(format!("{} bytes, not a list of u32", bytes.len()));
        }
        let mut words = bytes
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        let next_id = words.next().unwrap_or(0);
        let ids: Vec<u32> = words.collect();
        if let Some(bad) = ids.iter().find(|id| **id >= next_id) {
            return Err(format!(
                "generation {bad} at or past the next number {next_id}"
            ));
        }
        Ok(LiveList { next_id, ids })
    }
}

/// Which adjacent generations to merge, given each one's bytes oldest
/// first: a range of positions (at least two), or `None`.
///
/// The newest generations are merged while the one below them is at most
/// twice their size together, so sizes at least halve from the oldest to
/// the newest. Past [`MAX_GENERATIONS`] (many small write-outs on top of a
/// large restore), the adjacent pair smallest together is merged.
pub(crate) fn plan_merge(sizes: &[u64]) -> Option<std::ops::Range<usize>> {
    let n = sizes.len();
    if n < 2 {
        return None;
    }
    let mut start = n - 1;
    let mut together = sizes[n - 1];
    while start > 0 && sizes[start - 1] <= together.saturating_mul(2) {
        start -= 1;
        together = together.saturating_add(sizes[start]);
    }
    if start < n - 1 {
        return Some(start..n);
    }
    if n > MAX_GENERATIONS {
        let pair = (0..n - 1).min_by_key(|&i| sizes[i].saturating_add(sizes[i + 1]))?;
        return Some(pair..pair + 2);
    }
    None
}

/// One entry of a generation: its key, and its value (`None`: deleted).
pub(crate) type Entry = (Vec<u8>, Option<Vec<u8>>);

/// Merges sources of entries in ascending key order, `sources[0]` the
/// newest: each key once, with the newest source's value. With
/// `drop_deletions` (the merge reaches the oldest generation, so nothing is
/// below to hide), deleted keys are left out.
pub(crate) struct Merge<I> {
    sources: Vec<I>,
    /// Each source's next entry (`None`: not read yet or ended).
    heads: Vec<Option<Entry>>,
    started: bool,
    drop_deletions: bool,
}

impl<I, X> Merge<I>
where
    I: Iterator<Item = Result<Entry, X>>,
{
    pub(crate) fn new(sources: Vec<I>, drop_deletions: bool) -> Self {
        let heads = sources.iter().map(|_| None).collect();
        Merge {
            sources,
            heads,
            started: false,
            drop_deletions,
        }
    }

    fn advance(&mut self, index: usize) -> Result<(), X> {
        self.heads[index] = self.sources[index].next().transpose()?;
        Ok(())
    }
}

impl<I, X> Iterator for Merge<I>
where
    I: Iterator<Item = Result<Entry, X>>,
{
    type Item = Result<Entry, X>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for index in 0..self.sources.len() {
                if let Err(error) = self.advance(index) {
                    return Some(Err(error));
                }
            }
        }
        loop {
            // The smallest key; among equal ones the newest source's.
            let mut winner: Option<usize> = None;
            for (index, head) in self.heads.iter().enumerate() {
                let Some((key, _)) = head else { continue };
                let smaller = match winner.and_then(|w| self.heads[w].as_ref()) {
                    None => true,
                    Some((least, _)) => key.cmp(least) == Ordering::Less,
                };
                if smaller {
                    winner = Some(index);
                }
            }
            let winner = winner?;
            let entry = self.heads[winner].take()?;
            if let Err(error) = self.advance(winner) {
                return Some(Err(error));
            }
            // Older sources' entries of the same key are hidden by it.
            for index in winner + 1..self.sources.len() {
                while matches!(&self.heads[index], Some((key, _)) if *key == entry.0) {
                    if let Err(error) = self.advance(index) {
                        return Some(Err(error));
                    }
                }
            }
            if self.drop_deletions && entry.1.is_none() {
                continue;
            }
            return Some(Ok(entry));
        }
    }
}

#[cfg(test)]
mod tests;
