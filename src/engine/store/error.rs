//! Why the store cannot be opened, read or written ([`StoreError`]).

use std::path::PathBuf;

use crate::engine::store::layout::FORMAT;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the store at {path}: {cause}. If another orderly process is running on this store, stop it first; \
         if the store is damaged, move the directory aside and rebuild it (see docs/replay-and-restore.md, \"Rebuilding the store\")"
    )]
    Open { path: PathBuf, cause: sled::Error },
    /// Another process holds the store's lock (sled opens a store in one
    /// process at a time; it has no read-only mode).
    #[error(
        "the store at {path} is in use by another process (a running processor on this store holds it: a store \
         opens in one process at a time)"
    )]
    Locked { path: PathBuf },
    #[error("store I/O error at {path}: {cause}")]
    Io { path: PathBuf, cause: sled::Error },
    #[error("corrupt value under key {key:?} in tree {tree}: {message}")]
    Corrupt {
        tree: String,
        key: String,
        message: String,
    },
    #[error(
        "the store at {path} has layout {found}, this orderly reads layout {FORMAT}; \
         move the directory aside and rebuild it (see docs/replay-and-restore.md, \"Rebuilding the store\")"
    )]
    Format { path: PathBuf, found: String },
    #[error(
        "the store at {path} was built for {found}, and this configuration is for {wanted}; point store.path at \
         another directory (each group, input topic and changelog topic needs its own store)"
    )]
    Binding {
        path: PathBuf,
        found: String,
        wanted: String,
    },
}
