//! The allocator of a policy built without WASI (`wasm32-unknown-unknown`,
//! see `scripts/build-plugins.sh`).
//!
//! The server gives every call a fresh instance and drops it afterwards,
//! so nothing allocated in a call needs to outlive it: a bump allocator is
//! enough. It starts at `__heap_base` (the end of the static data, in the
//! memory the component starts with) and asks for more pages only when
//! that runs out. Rust's default allocator on this target grows the memory
//! on the first allocation of every instance; in a fresh instance per call
//! that costs a page-protection change and its reset on every call (it made
//! a call 1.6 times slower than the same policy built for `wasm32-wasip2`).
//!
//! `dealloc` and `realloc` reuse the space of the most recent allocation
//! (a growing `Vec` or `String` being built, a temporary freed at once);
//! anything else is left until the instance is dropped.

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32::{memory_grow, memory_size};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

const PAGE: usize = 65536;

unsafe extern "C" {
    /// Defined by the linker: where the static data ends and the heap starts.
    static __heap_base: u8;
}

/// The next free address; 0 until the first allocation.
static NEXT: AtomicUsize = AtomicUsize::new(0);

struct Bump;

#[global_allocator]
static ALLOCATOR: Bump = Bump;

/// Makes `[.., end)` addressable: grows the memory when `end` is past it.
fn reserve(end: usize) -> bool {
    let have = memory_size::<0>() * PAGE;
    end <= have || memory_grow::<0>((end - have).div_ceil(PAGE)) != usize::MAX
}

// SAFETY: a component instance is single-threaded, so the loads and stores
// of `NEXT` never race; every block returned is `[start, start + size)` of
// addressable memory below `NEXT`, aligned as asked, and never handed out
// again while it is allocated (only the most recent block is ever reused,
// after it was freed or when it is resized in place).
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut next = NEXT.load(Relaxed);
        if next == 0 {
            next = &raw const __heap_base as usize;
        }
        let Some(start) = next.checked_next_multiple_of(layout.align()) else {
            return null_mut();
        };
        match start.checked_add(layout.size()) {
            Some(end) if reserve(end) => {
                NEXT.store(end, Relaxed);
                start as *mut u8
            }
            _ => null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let start = ptr as usize;
        if start + layout.size() == NEXT.load(Relaxed) {
            NEXT.store(start, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let start = ptr as usize;
        if start + layout.size() == NEXT.load(Relaxed) {
            return match start.checked_add(new_size) {
                Some(end) if reserve(end) => {
                    NEXT.store(end, Relaxed);
                    ptr
                }
                _ => null_mut(),
            };
        }
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (the caller's contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
        }
        new
    }
}
