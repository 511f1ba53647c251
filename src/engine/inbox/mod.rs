//! The inbox: the applied event ids an entity's state remembers within the
//! retention window, so a redelivery is recognised as a duplicate.
//!
//! Two halves: [`encoding`] is how the entries are held and stored (the
//! packed form of a chunk and of the newest entries, bytes on disk that
//! must not change); [`policy`] is what they mean (what counts as a
//! duplicate, when the newest entries leave the state value as a chunk,
//! which chunks expire).

mod encoding;
mod policy;
#[cfg(test)]
mod tests;

pub use encoding::InboxEntry;
pub(crate) use encoding::{decode_chunk, event_id_hash, Chunk, ChunkRef};
pub use policy::Inbox;
pub(crate) use policy::InboxSlot;
// Named by the store's notes on its layouts, and by the tests.
#[cfg(any(test, doc))]
pub(crate) use encoding::encode_chunk;
#[cfg(test)]
pub(crate) use policy::INBOX_CHUNK;
