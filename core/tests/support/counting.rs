//! The counting global allocator of the property tests that bound the heap a parse holds
//! (`core/tests/*_props.rs`, `exporter/tests/web_props.rs`, `analyzer/tests/parsers_prop.rs`, included by `#[path]`): it
//! forwards every call to the system allocator unchanged and reports each change of live heap
//! bytes to the test's own counter (`note`), which keeps its live and peak figures (per thread,
//! process-wide, or per named thread: the test's choice). It does not measure anything itself.
//!
//! A `realloc` is reported as the difference of the sizes, or, with `realloc_holds_both`, as the
//! new size first and the old size freed after (old and new buffer are both live during the
//! copy, which a peak then counts).

use std::alloc::{GlobalAlloc, Layout, System};

pub struct Counting {
    /// Called with +bytes when memory is allocated, −bytes when it is freed. It must not
    /// allocate (thread-local cells or atomics with const initialisers).
    pub note: fn(isize),
    pub realloc_holds_both: bool,
}

// SAFETY: every call is forwarded to the system allocator unchanged; `note` only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            (self.note)(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            (self.note)(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (through this allocator).
        unsafe { System.dealloc(ptr, layout) };
        (self.note)(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.realloc_holds_both {
            (self.note)(new_size as isize);
        }
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if self.realloc_holds_both {
            (self.note)(-(layout.size() as isize));
        } else if !p.is_null() {
            (self.note)(new_size as isize - layout.size() as isize);
        }
        p
    }
}
