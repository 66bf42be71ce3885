//! The operator's allocator, and handing freed memory back to the operating system.
//!
//! The binary allocates with jemalloc (`main.rs`), configured here: one arena, and
//! a background thread that returns pages unused for a second. Against glibc's
//! malloc (one arena, trimmed after every large step and every 30 s), measured at
//! 5,000 nodes over three fleet-wide taints and untaints (e2e/scale.md, session
//! 17): the same settled heap (20.6 against 20.9 MiB), 0.6 MiB more code, and 16%
//! less CPU on the cores the API server shares. Tests and other programs linking
//! this library keep their own allocator.

/// jemalloc reads its options from this symbol at start-up: one arena (the
/// operator has two worker threads; each thread's cache serves most allocations
/// without the arena's lock), and pages freed and unused for a second returned by
/// a background thread, so an idle operator shrinks without anything calling it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static JEMALLOC_OPTIONS: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: a pointer to the first byte of a static, NUL-terminated string.
    unsafe { &*c"background_thread:true,narenas:1,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() },
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
