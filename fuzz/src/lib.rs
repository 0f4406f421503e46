//! Shared by kroute's fuzz targets (docs/hardening.md, "Fuzzing"): a global allocator that
//! counts what a decoder allocates, the allocation bounds the targets check, and the driver
//! for the response rewriters.
//!
//! Every target reads its input as `[selector byte] [bytes for the decoder]` where a decoder
//! needs a version (or a mode): the selector picks it modulo the range, so every input is
//! valid and the seeds (examples/seeds.rs) say which version they are.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kroute::protocol::endpoints::carries_node_endpoints;
use kroute::rewrite::{AddressMap, Observed, rewrite_response};

/// Counts live bytes, the peak, and the largest single allocation. Allocations of
/// [`VIRTUAL_FROM`] bytes or more are served by `mmap(MAP_NORESERVE)`: address space, not
/// memory, so a decoder that sizes a vector from a hostile count (K1 in docs/hardening.md)
/// is measured and reported instead of aborting the process.
pub struct Counting;

/// See [`Counting`].
/// (1 MiB: the sanitizer's own malloc would poison shadow memory for the whole size, which
/// made every pre-sized allocation cost milliseconds.)
pub const VIRTUAL_FROM: usize = 1 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn noted(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
    LARGEST.fetch_max(size, Relaxed);
}

fn virtual_map(layout: Layout) -> *mut u8 {
    if layout.align() > 4096 {
        return std::ptr::null_mut();
    }
    // SAFETY: an anonymous private mapping; no file, no fixed address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            layout.size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: delegates to System, or to mmap/munmap for large sizes (page-aligned, zeroed).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if layout.size() >= VIRTUAL_FROM {
            virtual_map(layout)
        } else {
            unsafe { System.alloc(layout) }
        };
        if !p.is_null() {
            noted(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if layout.size() >= VIRTUAL_FROM {
            virtual_map(layout)
        } else {
            unsafe { System.alloc_zeroed(layout) }
        };
        if !p.is_null() {
            noted(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        if layout.size() >= VIRTUAL_FROM {
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() < VIRTUAL_FROM && new_size < VIRTUAL_FROM {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                LIVE.fetch_sub(layout.size(), Relaxed);
                noted(new_size);
            }
            return p;
        }
        // SAFETY: the caller guarantees new_size is valid for this alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let p = unsafe { self.alloc(new_layout) };
        if !p.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        p
    }
}

/// What one call allocated (Rust allocations only: the C decoders of lz4 and zstd allocate
/// with malloc, which libFuzzer's `-malloc_limit_mb` watches under a sanitizer).
#[derive(Debug, Clone, Copy)]
pub struct Allocs {
    /// Most bytes live at once during the call, above what was live before it.
    pub peak: usize,
    /// The largest single allocation.
    pub largest: usize,
}

/// Runs `f`, measuring its allocations.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Allocs) {
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    LARGEST.store(0, Relaxed);
    let out = f();
    let allocs = Allocs {
        peak: PEAK.load(Relaxed).saturating_sub(before),
        largest: LARGEST.load(Relaxed),
    };
    (out, allocs)
}

/// Panics when `f` allocated more than `bound` bytes at once: kroute's own readers hold
/// only what is in their input (plus a documented budget).
pub fn assert_within(what: &str, allocs: Allocs, bound: usize) {
    assert!(
        allocs.peak <= bound,
        "{what}: {} bytes live at peak (largest allocation {}), bound {bound}",
        allocs.peak,
        allocs.largest
    );
}

/// kafka-protocol sized arrays from counts read off the wire before reading any element (K1
/// in docs/hardening.md); kroute builds it with a bound (vendor/kafka-protocol). An allocation
/// this far above the input means the bound is gone or another decoder pre-sizes: a crash.
pub fn assert_not_presized(what: &str, input_len: usize, allocs: Allocs) {
    let bound = 256 * input_len + (1 << 20);
    assert!(
        allocs.peak <= bound,
        "{what}: {} bytes allocated for {input_len} input bytes (largest {}): a count \
         from the wire sized an allocation (K1)",
        allocs.peak,
        allocs.largest
    );
}

/// The version `selector` picks in `versions`.
pub fn pick(selector: u8, versions: RangeInclusive<i16>) -> i16 {
    let span = versions.end() - versions.start() + 1;
    versions.start() + i16::from(selector) % span
}

/// kroute's address for every broker in the rewriter targets.
pub const HOST: &str = "kroute.fuzz";

/// Drives [`rewrite_response`] for `api` at a version in `versions` picked by the first byte;
/// the rest is the response body. Checks: no panic, no allocation sized by a wire count (K1), and
/// kroute's own output rewritten again comes back byte for byte (it decodes, and the
/// rewrite is idempotent), every address in it being kroute's.
pub fn rewrite_target(api: ApiKey, versions: RangeInclusive<i16>, data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let version = pick(selector, versions);
    let body = Bytes::copy_from_slice(body);
    let map = AddressMap::new(HOST, 9100);
    let mut seen = Observed::default();
    let (out, allocs) = measure(|| rewrite_response(api as i16, version, &body, &map, &mut seen));
    assert_not_presized("rewrite", body.len(), allocs);
    // What kroute forwards without decoding must be what decoding would leave unchanged.
    if let Ok(Some(_)) = &out {
        assert_ne!(
            carries_node_endpoints(api, version, &body),
            Some(false),
            "the walk missed node endpoints the decoder rewrote"
        );
    }
    let Ok(Some(out)) = out else {
        return;
    };
    for (id, _, _) in &seen.brokers {
        assert!(*id >= 0, "a placeholder node id was reported as a broker");
    }
    let mut again_seen = Observed::default();
    let again = rewrite_response(api as i16, version, &out, &map, &mut again_seen)
        .expect("kroute's own output decodes");
    if let Some(again) = again {
        assert_eq!(again, out, "rewriting kroute's own output changed it");
    }
    for (id, host, port) in &again_seen.brokers {
        assert_eq!(host, HOST, "node {id} kept a real host");
        assert_eq!(*port, map.port(*id), "node {id} kept a real port");
    }
}
