//! An entity's [`State`] as the store and the changelog hold it (pure).
//!
//! Since store layout 6 a state value is packed: [`STATE_PACKED`], then
//! the state in bincode's varint form (every integer and length a varint,
//! signed ones zig-zagged), its newest inbox entries as one packed run of
//! [`encode_chunk`]'s form. An order with 16 newest entries takes 247
//! bytes where bincode's fixed-width form took 517 (most of what is left
//! is the entries' 8-byte id hashes); a write-out hands that much less to
//! sled and to the producer, and the store, the changelog and every restore
//! hold that much less.
//!
//! States written before (bincode's fixed-width form of [`State`]) still
//! read: such a value starts with its key's length as 8 little-endian
//! bytes, and [`STATE_PACKED`] read that way would be a key of more than
//! 4 GiB, which no value can hold. Nothing else tells the two apart.

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::engine::entity::{Entity, State};
use crate::engine::inbox::{ChunkRef, Inbox};

/// The first bytes of a packed state value. As the first bytes of an
/// earlier (fixed-width) state they would be a key length of at least
/// 0xFFFF_FFC3 bytes: no earlier value starts with them.
const STATE_PACKED: [u8; 4] = [0xC3, 0xFF, 0xFF, 0xFF];

fn packed() -> impl Options {
    // Varint integers, little-endian, no trailing bytes allowed.
    bincode::DefaultOptions::new()
}

#[derive(Serialize)]
#[serde(bound = "")]
struct PackedRef<'a, E: Entity> {
    key: &'a str,
    version: i64,
    data: &'a E::Data,
    event_id: &'a str,
    occurred_at: i64,
    #[serde(with = "serde_bytes")]
    recent: &'a [u8],
    chunks: Refs<'a>,
}

/// An inbox's chunk references as a sequence, decoded as they are written
/// (the stored form is the decoded list's).
struct Refs<'a>(&'a Inbox);

impl Serialize for Refs<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.chunk_refs())
    }
}

#[derive(Deserialize)]
#[serde(bound = "")]
struct Packed<E: Entity> {
    key: String,
    version: i64,
    data: E::Data,
    event_id: String,
    occurred_at: i64,
    #[serde(with = "serde_bytes")]
    recent: Vec<u8>,
    chunks: Vec<ChunkRef>,
}

/// A state's stored value, packed (module docs).
pub fn encode_state<E: Entity>(state: &State<E>) -> Result<Vec<u8>, String> {
    let recent = state.inbox.recent_packed();
    let value = PackedRef::<E> {
        key: &state.key,
        version: state.version,
        data: &state.data,
        event_id: &state.event_id,
        occurred_at: state.occurred_at,
        recent,
        chunks: Refs(&state.inbox),
    };
    // Room for the strings, the entries and a few bytes a field (the
    // domain's data is small): one allocation as a rule, without a
    // second pass to size it exactly.
    let room = STATE_PACKED.len()
        + state.key.len()
        + state.event_id.len()
        + recent.len()
        + state.inbox.chunk_refs().len() * 12
        + 64;
    let mut out = Vec::with_capacity(room);
    out.extend_from_slice(&STATE_PACKED);
    packed()
        .serialize_into(&mut out, &value)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// A state from its stored value: packed, or in bincode's fixed-width form
/// that orderly wrote before layout 6. An error (never a panic) for
/// anything else.
pub(crate) fn decode_state<E: Entity>(bytes: &[u8]) -> Result<State<E>, String> {
    let Some(body) = bytes.strip_prefix(&STATE_PACKED) else {
        return bincode::deserialize(bytes).map_err(|e| e.to_string());
    };
    let packed: Packed<E> = packed().deserialize(body).map_err(|e| e.to_string())?;
    let inbox = Inbox::from_stored(&packed.recent, packed.chunks)
        .ok_or_else(|| "the state's newest inbox entries are damaged".to_string())?;
    Ok(State {
        key: packed.key,
        version: packed.version,
        data: packed.data,
        event_id: packed.event_id,
        occurred_at: packed.occurred_at,
        inbox,
    })
}
