//! The `orderly` binary: the command line of `orderly::ops::cli` for the entity
//! `entity.kind` names (orders by default).

// The allocator and jemalloc's compiled options (see src/allocator.rs and
// docs/performance.md).
orderly::global_allocator!();

fn main() -> std::process::ExitCode {
    orderly::ops::cli::main()
}
