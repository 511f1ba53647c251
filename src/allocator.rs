//! jemalloc's options, compiled into every binary that measures or runs
//! orderly (the `orderly` binary and the pipeline bench), so a phase the
//! bench runs in its own process allocates as `orderly run` does.
//!
//! jemalloc is the malloc of the whole process (feature
//! `unprefixed_malloc_on_supported_platforms`): librdkafka's fetched
//! messages and producer queues, and OpenSSL, used glibc's malloc before,
//! whose per-thread arenas held 40-45 MiB of `orderly run`'s RSS. One arena
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

/// Defines the global allocator (feature `jemalloc`, the default, or
/// `mimalloc`) and, with jemalloc, exports [`JEMALLOC_OPTIONS`] under the
/// names jemalloc reads. Called once, at a binary's crate root.
///
/// Hidden from the docs, not API: it is for this package's own binary and
/// pipeline bench, and its expansion names this package's features and
/// allocator dependencies.
#[doc(hidden)]
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[cfg(feature = "mimalloc")]
        #[global_allocator]
        static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

        #[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
        #[global_allocator]
        static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

        #[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
        #[export_name = "malloc_conf"]
        static MALLOC_CONF: $crate::testkit::MallocConf =
            $crate::testkit::MallocConf($crate::testkit::JEMALLOC_OPTIONS.as_ptr());

        /// The same options under the prefixed name, read where jemalloc
        /// cannot replace the platform's malloc and keeps the `_rjem_` prefix.
        #[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
        #[export_name = "_rjem_malloc_conf"]
        static PREFIXED_MALLOC_CONF: $crate::testkit::MallocConf =
            $crate::testkit::MallocConf($crate::testkit::JEMALLOC_OPTIONS.as_ptr());
    };
}
