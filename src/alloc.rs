//! The process's global allocator: the system allocator, plus a guard that makes
//! decoding untrusted requests safe.
//!
//! `kafka-protocol` 0.18 calls `Vec::with_capacity(n)` with the array length a request
//! *claims*, before reading any element. A 4-byte Metadata v1 body `7f ff ff ff` claims
//! 2^31 topics, the allocator is asked for ~150 GB, fails, and Rust aborts the process.
//! We cannot change the crate, and a claimed length can't be told from other integers
//! without the schema, so the guard works at the allocation itself: while a thread is
//! inside [`decoding`], an allocation of [`LARGE_BYTES`] or more is served by an
//! anonymous `MAP_NORESERVE` mapping. That reserves address space only; memory is
//! committed page by page as the decoder writes elements, and it writes at most one
//! element per wire byte it reads, so committed memory stays bounded by the frame size
//! (itself capped by `max_request_bytes`). The decode then fails on the first missing
//! element and the mapping is returned with `munmap`.
//!
//! Outside the guard every allocation goes to the system allocator unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use crate::limits::GUARDED_ALLOCATION_BYTES as LARGE_BYTES;
use crate::limits::GUARDED_ALLOCATION_SLOTS as SLOTS;
const PAGE_BYTES: usize = 4096;

thread_local! {
    static DECODING: Cell<bool> = const { Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Test support: remembers the largest allocation of [`LARGE_BYTES`] or more.
#[cfg(test)]
fn note_large(size: usize) {
    if size >= LARGE_BYTES {
        let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
    }
}

/// Test support: the largest allocation of at least [`LARGE_BYTES`] (reserved or not)
/// made on this thread since the previous call, 0 if none; the count restarts.
#[cfg(test)]
pub(crate) fn take_largest_allocation() -> usize {
    LARGEST.with(|largest| largest.replace(0))
}

/// Addresses of the live reserved mappings, an open-addressing table hashed by address;
/// 0 marks a free slot. Fixed size: the allocator cannot allocate for itself.
static RESERVED: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// How many slots of `RESERVED` are taken.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The farthest any mapping was ever placed from its hash slot: a lookup need not probe
/// beyond it (freed slots become 0 and are reused, so there are no tombstones to skip).
static MAX_PROBE: AtomicUsize = AtomicUsize::new(0);

/// Reserved mappings alive now: [`crate::wire::decode_untrusted`] refuses to
/// start a decode above [`GUARDED_ALLOCATION_HIGH_WATER`](crate::limits::GUARDED_ALLOCATION_HIGH_WATER),
/// which keeps the table from ever filling.
pub fn live_reservations() -> usize {
    LIVE.load(Ordering::Acquire)
}

/// The slots to probe for `address`, starting at its hash.
fn probe(address: usize) -> impl Iterator<Item = &'static AtomicUsize> {
    // Mappings are page-aligned: drop the always-zero bits, then mix (Fibonacci hashing).
    let start = ((address >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) & (SLOTS - 1);
    (0..SLOTS).map(move |i| &RESERVED[(start + i) & (SLOTS - 1)])
}

/// The slots where `address` may be: its probe sequence up to [`MAX_PROBE`].
fn candidates(address: usize) -> impl Iterator<Item = &'static AtomicUsize> {
    probe(address).take(MAX_PROBE.load(Ordering::Acquire) + 1)
}

fn is_reserved(address: usize) -> bool {
    LIVE.load(Ordering::Acquire) > 0
        && candidates(address).any(|slot| slot.load(Ordering::Acquire) == address)
}

/// Runs `f` with large allocations reserved lazily (see the module doc). Use it around
/// the decoding of bytes that came from the network, and nothing else.
pub fn decoding<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            DECODING.with(|d| d.set(self.0));
        }
    }
    let _reset = Reset(DECODING.with(|d| d.replace(true)));
    f()
}

fn in_decoding() -> bool {
    DECODING.try_with(Cell::get).unwrap_or(false)
}

fn mapping_len(size: usize) -> usize {
    size.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

/// Reserves `size` bytes of address space, or returns null.
fn reserve(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no address hint touches no existing
    // memory; failure is reported as MAP_FAILED and turned into null.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            mapping_len(size),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    for (distance, slot) in probe(ptr as usize).enumerate() {
        if slot
            .compare_exchange(0, ptr as usize, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            MAX_PROBE.fetch_max(distance, Ordering::AcqRel);
            LIVE.fetch_add(1, Ordering::AcqRel);
            return ptr.cast();
        }
    }
    // No slot to remember it by: give it back and fail like any allocator would.
    // SAFETY: `ptr` is the mapping just made, of exactly this length.
    unsafe { libc::munmap(ptr, mapping_len(size)) };
    std::ptr::null_mut()
}

/// Forgets and unmaps `ptr` if it is a reserved mapping; false otherwise.
fn release(ptr: *mut u8, size: usize) -> bool {
    if LIVE.load(Ordering::Acquire) == 0 {
        return false;
    }
    for slot in candidates(ptr as usize) {
        if slot
            .compare_exchange(ptr as usize, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            LIVE.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: `ptr` was returned by `reserve` for an allocation of `size` bytes
            // (the allocator API hands back the same layout) and is freed only once.
            unsafe { libc::munmap(ptr.cast(), mapping_len(size)) };
            return true;
        }
    }
    false
}

/// The system allocator with the decode guard; installed as `#[global_allocator]`.
#[derive(Debug)]
pub struct GuardedAllocator;

// SAFETY: every path either delegates to `System` with the caller's layout or serves
// the request from a page-aligned private mapping at least `size` bytes long, which
// satisfies any alignment up to a page (larger alignments go to `System`).
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(test)]
        note_large(layout.size());
        if layout.size() >= LARGE_BYTES && layout.align() <= PAGE_BYTES && in_decoding() {
            return reserve(layout.size());
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        #[cfg(test)]
        note_large(layout.size());
        if layout.size() >= LARGE_BYTES && layout.align() <= PAGE_BYTES && in_decoding() {
            // Fresh anonymous pages are zero.
            return reserve(layout.size());
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= LARGE_BYTES && release(ptr, layout.size()) {
            return;
        }
        // SAFETY: not one of ours, so `System` allocated it with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(test)]
        note_large(new_size);
        let ours = layout.size() >= LARGE_BYTES && is_reserved(ptr as usize);
        let goes_large = new_size >= LARGE_BYTES && layout.align() <= PAGE_BYTES && in_decoding();
        if !ours && !goes_large {
            // SAFETY: forwarded with the caller's layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the caller
        // guarantees it does not overflow when rounded to the alignment).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a fresh allocation, then a copy of the smaller of the two sizes from
        // the old block (valid for `layout.size()` bytes), then the old block is freed.
        unsafe {
            let new_ptr = self.alloc(new_layout);
            if !new_ptr.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new_ptr
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_claimed_capacity_is_only_reserved_while_decoding() {
        // 2^31 elements of 72 bytes: what a hostile Metadata v1 body asks for.
        let v: Vec<[u8; 72]> = decoding(|| Vec::with_capacity(1 << 31));
        assert!(v.capacity() >= 1 << 31);
        let address = v.as_ptr() as usize;
        let reserved = |a: usize| RESERVED.iter().any(|s| s.load(Ordering::Acquire) == a);
        assert!(reserved(address), "served by a reservation");
        drop(v);
        assert!(!reserved(address), "mapping returned");
    }

    #[test]
    fn the_largest_allocation_on_a_thread_is_remembered_for_tests() {
        take_largest_allocation();
        // black_box: LLVM may elide an allocation whose memory is never observed.
        let small = std::hint::black_box(vec![1u8; 1000]);
        assert_eq!(
            take_largest_allocation(),
            0,
            "below LARGE_BYTES is not tracked"
        );
        let large = std::hint::black_box(vec![1u8; 3 << 20]);
        assert_eq!(take_largest_allocation(), 3 << 20);
        assert_eq!(take_largest_allocation(), 0, "taking it restarts the count");
        drop((small, large));
    }

    #[test]
    fn reserved_memory_is_usable_and_grows() {
        let mut v: Vec<u64> = decoding(|| Vec::with_capacity(1 << 18));
        v.extend(0..(1 << 18));
        decoding(|| v.reserve(1 << 20));
        v.push(7);
        assert_eq!(v[12345], 12345);
        assert_eq!(v.last(), Some(&7));
    }
}
