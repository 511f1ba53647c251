//! jemalloc's options, compiled into every binary that measures or runs
//! orderly (the `orderly` binary and the pipeline bench), so a phase the
//! bench runs in its own process allocates as `orderly run` does.
//!
//! jemalloc is the malloc of the whole process (feature
//! `unprefixed_malloc_on_supported_platforms`): librdkafka's fetched
//! messages and producer queues, and OpenSSL, used glibc's malloc before,
//! whose per-thread arenas kept freed memory in `orderly run`'s RSS. One arena
//! (jemalloc's default is four per CPU, each holding freed pages of its
//! own); freed pages returned to the system by jemalloc's background
//! thread, not by the threads that free them; thread caches for allocations
//! up to 4 KiB only (each of orderly's ~30 threads holds its own). Measured
//! on the side-by-side bench (docs/performance.md, "Memory of `orderly
//! run`"). `MALLOC_CONF` in the environment still overrides them
//! (`_RJEM_MALLOC_CONF` where jemalloc stays prefixed: macOS, Windows,
//! Android, musl).

/// The options (jemalloc's `malloc_conf` syntax).
pub const JEMALLOC_OPTIONS: &std::ffi::CStr =
    c"narenas:1,dirty_decay_ms:50,muzzy_decay_ms:0,background_thread:true,tcache_max:4096";

/// A C string pointer jemalloc reads once at start-up (Rust never does).
pub struct MallocConf(pub *const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable, NUL-terminated string.
unsafe impl Sync for MallocConf {}

/// The global allocator this build of orderly runs with: jemalloc (the
/// default feature `jemalloc`), mimalloc (feature `mimalloc`), or the
/// system's malloc (`default-features = false`).
#[cfg(feature = "mimalloc")]
pub type Allocator = mimalloc::MiMalloc;
/// The global allocator this build of orderly runs with.
#[cfg(feature = "mimalloc")]
pub const ALLOCATOR: Allocator = mimalloc::MiMalloc;

/// The global allocator this build of orderly runs with: jemalloc (the
/// default feature `jemalloc`), mimalloc (feature `mimalloc`), or the
/// system's malloc (`default-features = false`).
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
pub type Allocator = tikv_jemallocator::Jemalloc;
/// The global allocator this build of orderly runs with.
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
pub const ALLOCATOR: Allocator = tikv_jemallocator::Jemalloc;

/// The global allocator this build of orderly runs with: jemalloc (the
/// default feature `jemalloc`), mimalloc (feature `mimalloc`), or the
/// system's malloc (`default-features = false`).
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
pub type Allocator = std::alloc::System;
/// The global allocator this build of orderly runs with.
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
pub const ALLOCATOR: Allocator = std::alloc::System;

/// Makes orderly's allocator the binary's global allocator, with the options
/// orderly runs with ([`JEMALLOC_OPTIONS`] under jemalloc). Called once, at
/// the crate root of a binary: `orderly`'s own, the pipeline bench's, and a
/// team's binary of its own entity:
///
/// ```ignore
/// orderly::allocator!();
///
/// fn main() -> std::process::ExitCode {
///     orderly::main_with(my_entity())
/// }
/// ```
///
/// Which allocator is orderly's features' choice (the default: jemalloc),
/// evaluated in orderly, so the caller needs no feature or allocator crate
/// of its own.
#[macro_export]
macro_rules! allocator {
    () => {
        #[global_allocator]
        static ORDERLY_GLOBAL_ALLOCATOR: $crate::Allocator = $crate::ALLOCATOR;

        $crate::__jemalloc_options!();
    };
}

/// jemalloc's options under the names jemalloc reads (`malloc_conf`, and
/// `_rjem_malloc_conf` where jemalloc keeps its prefix: macOS, Windows,
/// Android, musl); nothing when this build does not run jemalloc.
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __jemalloc_options {
    () => {
        #[export_name = "malloc_conf"]
        static ORDERLY_MALLOC_CONF: $crate::MallocConf =
            $crate::MallocConf($crate::JEMALLOC_OPTIONS.as_ptr());

        #[export_name = "_rjem_malloc_conf"]
        static ORDERLY_PREFIXED_MALLOC_CONF: $crate::MallocConf =
            $crate::MallocConf($crate::JEMALLOC_OPTIONS.as_ptr());
    };
}

/// jemalloc's options: nothing to export without jemalloc.
#[cfg(not(all(feature = "jemalloc", not(feature = "mimalloc"))))]
#[doc(hidden)]
#[macro_export]
macro_rules! __jemalloc_options {
    () => {};
}
