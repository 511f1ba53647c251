//! The layout of a partition tree (the module's comment describes it): its
//! keys and their prefixes, the keys' changelog form, the layout version a
//! store is marked with, and the encoding of its values.

use serde::Serialize;

use crate::engine::inbox::ChunkRef;

pub(crate) const CHECKPOINT_KEY: &[u8] = b"\x00checkpoint";
/// Present while a restore from the changelog is under way: the tree's
/// states may be ahead of its checkpoint until the restore ends.
pub(crate) const RESTORING_KEY: &[u8] = b"\x00restoring";
/// Present after `orderly repair` moved the partition back, until its
/// checkpoint passes the value (an input offset, big-endian): status
/// changes and dead letters of records below it were published already.
pub(crate) const REPUBLISHED_BELOW_KEY: &[u8] = b"\x00republished-below";
pub(crate) const BINDING_KEY: &[u8] = b"binding";
/// Prefix of changelog keys that are not orders (no UTF-8 text has it).
pub(crate) const CHANGELOG_RESERVED: u8 = 0xFF;
pub(crate) const ORDER_PREFIX: u8 = b'o';
/// Inbox chunks as layouts 2 to 6 keyed them: by order, then first version.
pub(crate) const LEGACY_CHUNK_PREFIX: u8 = b'i';
/// Inbox chunks as layout 7 keys them: by the time of their newest entry
/// first ([`chunk_key`]).
pub(crate) const CHUNK_PREFIX: u8 = b'j';
pub(crate) const OUTBOX_PREFIX: u8 = b'x';
pub(crate) const FORMAT_KEY: &[u8] = b"format";
/// The store layout this build reads and writes. 1: whole inbox in the
/// state value (before write coalescing); 2: recent entries plus chunks;
/// 3: the checkpoint records its changelog position; 4: packed runs; 5:
/// inbox chunks packed ([`crate::engine::inbox::encode_chunk`]); 6: states
/// packed ([`crate::engine::stored_state`]); 7: inbox chunks keyed by the
/// time of their newest entry ([`chunk_key`]); 8: states in generations of
/// packed runs only, written by every write-out (`generations.rs`). Each of
/// 3 to 7 is a layout-8 store without what came later (states and chunks
/// in bincode's form still read, chunks under their order-grouped keys
/// still found and deleted, a tree's states held key by key brought into a
/// generation when the tree is first opened), and is marked 8 at open, so
/// an older orderly refuses it from then on.
pub(crate) const FORMAT: u32 = 8;
/// The layouts a store is opened from as it is, and marked [`FORMAT`].
pub(crate) const FORMATS_OPENED_AS_IS: [u32; 5] = [3, 4, 5, 6, 7];

/// A key of a partition tree in its changelog form: an order's `order_id`,
/// anything else behind [`CHANGELOG_RESERVED`].
pub(crate) fn to_changelog_key(key: &[u8]) -> Vec<u8> {
    match key.split_first() {
        Some((&ORDER_PREFIX, order_id)) => order_id.to_vec(),
        _ => {
            let mut out = Vec::with_capacity(1 + key.len());
            out.push(CHANGELOG_RESERVED);
            out.extend_from_slice(key);
            out
        }
    }
}

/// The tree key of a changelog key.
pub(crate) fn from_changelog_key(key: &[u8]) -> Vec<u8> {
    match key.split_first() {
        Some((&CHANGELOG_RESERVED, rest)) => rest.to_vec(),
        _ => {
            let mut out = Vec::with_capacity(1 + key.len());
            out.push(ORDER_PREFIX);
            out.extend_from_slice(key);
            out
        }
    }
}

/// The changelog key of a partition's checkpoint record.
pub(crate) fn changelog_checkpoint_key() -> Vec<u8> {
    to_changelog_key(CHECKPOINT_KEY)
}

/// True for the keys packed runs may hold: states and inbox chunks.
pub(crate) fn packable(key: &[u8]) -> bool {
    matches!(
        key.first(),
        Some(&ORDER_PREFIX) | Some(&CHUNK_PREFIX) | Some(&LEGACY_CHUNK_PREFIX)
    )
}

pub(crate) fn order_key(order_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + order_id.len());
    key.push(ORDER_PREFIX);
    key.extend_from_slice(order_id.as_bytes());
    key
}

pub(crate) fn outbox_key(source_offset: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(OUTBOX_PREFIX);
    key.extend_from_slice(&source_offset.to_be_bytes());
    key
}

/// An inbox chunk's key: the time its newest entry was applied, then its
/// order and first version. A chunk is written once, when it fills, so new
/// chunks land at the tree's right edge, among the other chunks of the same
/// write-out; a leaf of chunks is written when it fills and never again
/// until its chunks expire, oldest first. (Keyed by order, as layouts 2 to
/// 6 did, every write-out inserted into a leaf per order it changed,
/// copying and rewriting leaves of older chunks, and read evicted ones
/// back from disk to do it.)
pub(crate) fn chunk_key(order_id: &str, chunk: &ChunkRef) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 8 + 4 + order_id.len() + 8);
    key.push(CHUNK_PREFIX);
    // Sign bit flipped: big-endian bytes then sort as the numbers do.
    let at = (chunk.last_applied_at_ms as u64) ^ (1 << 63);
    key.extend_from_slice(&at.to_be_bytes());
    key.extend_from_slice(&(order_id.len() as u32).to_be_bytes());
    key.extend_from_slice(order_id.as_bytes());
    key.extend_from_slice(&chunk.first_version.to_be_bytes());
    key
}

/// An inbox chunk's key in layouts 2 to 6 (and in changelogs they wrote):
/// its order, then its first version.
pub(crate) fn legacy_chunk_key(order_id: &str, first_version: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + order_id.len() + 8);
    key.push(LEGACY_CHUNK_PREFIX);
    key.extend_from_slice(&(order_id.len() as u32).to_be_bytes());
    key.extend_from_slice(order_id.as_bytes());
    key.extend_from_slice(&first_version.to_be_bytes());
    key
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(value).map_err(|e| e.to_string())
}
