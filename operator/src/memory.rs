//! The operator's allocator, and handing freed memory back to the operating system.
//!
//! The binary allocates with jemalloc (`main.rs`), configured here: one arena, and
//! a background thread that returns pages unused for a second. Against glibc's
//! malloc (one arena, trimmed after every large step and every 30 s), measured at
//! 5,000 nodes over three fleet-wide taints and untaints
//! (docs/performance.md#allocator-and-memory-release): the same settled heap (20.6 against 20.9 MiB), 0.6 MiB more code, and 16%
//! less CPU on the cores the API server shares. Without its thread caches (see
//! below) it keeps 2.7 MiB less and uses 10% more CPU, still less than glibc's.
//! Tests and other programs linking this library keep their own allocator.

/// jemalloc reads its options from this symbol at start-up: one arena (the
/// operator has two worker threads), pages freed and unused for a second returned
/// by a background thread, so an idle operator shrinks without anything calling
/// it, and no per-thread caches. A thread's cache keeps up to 200 freed objects of
/// every size class for its next allocations, and each one holds its slab of
/// pages resident until the thread's next burst. Measured at 5,000 nodes a minute
/// after the last phase (docs/performance.md#allocator-and-memory-release): 15.6 MiB of heap without the
/// caches against 18.3 with them, a peak 1.7 MiB lower, and 10% more of the
/// operator's CPU (15.7 s for the whole run against 14.2).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static JEMALLOC_OPTIONS: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: a pointer to the first byte of a static, NUL-terminated string.
    unsafe {
        &*c"background_thread:true,narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache:false"
            .as_ptr()
    },
);

/// Returns the pages jemalloc holds unused to the OS now, rather than over the
/// next second: called after large transient allocations (a cache sync, a status
/// computation over every node, a batch of events).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: "arena.4096.purge" (4096: every arena) takes no argument and
    // returns nothing; the name is NUL-terminated.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::ffi::CStr;

    /// Reads a jemalloc option of type `T` by its mallctl name.
    fn option<T: Default>(name: &CStr) -> T {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `value` is a `T` of `len` bytes, the type jemalloc documents for
        // the options read below; the name is NUL-terminated.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {name:?}");
        value
    }

    /// jemalloc ignores an option it cannot parse (with a line on stderr): this
    /// checks that each one took.
    #[test]
    fn jemalloc_runs_with_the_options_compiled_in() {
        assert!(option::<bool>(c"opt.background_thread"));
        assert_eq!(option::<u32>(c"opt.narenas"), 1);
        assert_eq!(option::<isize>(c"opt.dirty_decay_ms"), 1000);
        assert_eq!(option::<isize>(c"opt.muzzy_decay_ms"), 0);
        assert!(!option::<bool>(c"opt.tcache"));
    }
}
