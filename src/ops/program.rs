//! The binary's own name, for hints: it lives at the root
//! ([`crate::program`]), where the processor's hints reach it too; ops
//! names it here as before.

pub(crate) use crate::program::{name, set_from_args};
