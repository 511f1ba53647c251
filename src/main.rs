//! The `orderly` binary: `orderly::main`: the command line for the entity
//! `entity.kind` names (orders by default).

// The allocator and jemalloc's compiled options (see src/allocator.rs and
// docs/performance.md).
orderly::allocator!();

fn main() -> std::process::ExitCode {
    orderly::main()
}
