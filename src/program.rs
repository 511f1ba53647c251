//! The name the running binary is called by, for the hints its messages
//! give (`orderly run creates it`, `shipments config check`): a team's own
//! binary built with [`crate::main_with`] names itself, not `orderly`. At
//! the root, below every layer: the processor's hints name it as ops' do.

use std::sync::OnceLock;

static NAME: OnceLock<String> = OnceLock::new();

/// What a binary is called when its own name cannot be read.
const FALLBACK: &str = "orderly";

/// Takes the name from the process's first argument (its file name, as a
/// shell user types it). Called once, first thing in `main`; later calls
/// change nothing.
pub(crate) fn set_from_args() {
    let name = std::env::args_os()
        .next()
        .and_then(|arg0| {
            std::path::Path::new(&arg0)
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
        })
        .filter(|stem| !stem.is_empty());
    if let Some(name) = name {
        let _ = NAME.set(name);
    }
}

/// The binary's name (`orderly` unless [`set_from_args`] found another).
pub(crate) fn name() -> &'static str {
    NAME.get().map(String::as_str).unwrap_or(FALLBACK)
}
