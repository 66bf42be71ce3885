//! Handing freed memory back to the operating system.
//!
//! glibc's malloc keeps memory freed in the middle of its heaps (and in the
//! per-thread arenas) resident. The operator's large transient allocations, the
//! first list of every node and pod and each status computation over every node,
//! would otherwise leave its RSS near their peak for good.

/// Returns free heap pages to the OS. Cheap enough to call after every large
/// transient allocation (it walks the free lists, a few milliseconds at most).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganizes the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
