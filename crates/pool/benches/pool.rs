//! Micro-benchmarks of the request pool. Reproduce with the command in docs/pool-benchmarks.md:
//!
//! ```text
//! cargo bench -p nvme-pool -- --warm-up-time 1 --measurement-time 2
//! ```
//!
//! * `alloc_free_pair`: one allocation and one free on the owning thread, with the fields of a
//!   read command set, for `TagSet`, `ObjectCache`, `Box::new`/drop and a `Mutex<Vec<Box<_>>>`.
//! * `recycle`: setting only the used fields of a recycled object vs. zeroing it first.
//! * `batch32`: a plug of 32 then 32 allocations vs. 32 single allocations vs. `alloc_many`.
//! * `cross_core_free`: objects allocated on one thread and freed on another, per object.
//! * `context_slab`: one take and one insert of a per-request context (the C API's three-word
//!   request) with 128 outstanding, for `Slab` and for the `Vec<Option<T>>` + `Vec<u32>` free
//!   list the typed pair, the async pair and the C API each had before (issue 20).

use std::hint::black_box;
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nvme_pool::{CacheConfig, ObjectCache, Slab, Tag, TagSet};

/// Size of the request object the issue asks to measure.
const REQUEST_BYTES: usize = 256;
/// Queue depth of the tag sets.
const DEPTH: u16 = 1024;
/// Requests per plug / batch.
const BATCH: u16 = 32;
/// Objects handed to the freeing thread per message in the cross-core benchmarks.
const HANDOFF: usize = 64;

/// A driver request of 256 bytes: a few hot fields a read command sets, then per-request state
/// (PRP list bookkeeping, callback context, timing) that a read of one page does not touch.
#[derive(Clone, Default)]
#[repr(C)]
struct Request {
    opcode: u8,
    flags: u8,
    cid: u16,
    nsid: u32,
    slba: u64,
    nlb: u32,
    status: u32,
    prp1: u64,
    prp2: u64,
    user_ctx: u64,
    deadline_ns: u64,
    cold: [u64; 25],
}

const _: () = assert!(std::mem::size_of::<Request>() == REQUEST_BYTES);

impl Request {
    /// Sets the fields a one-page read uses (the "no zeroing" discipline).
    #[inline(always)]
    fn fill(&mut self, i: u64) {
        self.opcode = 0x02;
        self.cid = i as u16;
        self.nsid = 1;
        self.slba = i;
        self.nlb = 0;
        self.prp1 = 0x1000 * i;
        self.user_ctx = i;
    }
}

fn alloc_free_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_free_pair");
    let mut i = 0u64;

    let mut tags = TagSet::new(DEPTH, |_| Request::default());
    g.bench_function("tagset", |b| {
        b.iter(|| {
            i += 1;
            let tag = tags.alloc().unwrap();
            tags.get_mut(tag).fill(i);
            black_box(tags.get(tag));
            tags.free(tag);
        })
    });

    let mut cache = ObjectCache::new(CacheConfig::default());
    g.bench_function("object_cache", |b| {
        b.iter(|| {
            i += 1;
            let mut req = cache.get(Request::default);
            req.fill(i);
            black_box(&*req);
            cache.put(req);
        })
    });

    g.bench_function("box_new_drop", |b| {
        b.iter(|| {
            i += 1;
            let mut req = Box::new(Request::default());
            req.fill(i);
            black_box(&*req);
            drop(req);
        })
    });

    let pool: Mutex<Vec<Box<Request>>> = Mutex::new(Vec::with_capacity(usize::from(DEPTH)));
    g.bench_function("mutex_vec_pool", |b| {
        b.iter(|| {
            i += 1;
            let popped = pool.lock().unwrap().pop();
            let mut req = popped.unwrap_or_else(|| Box::new(Request::default()));
            req.fill(i);
            black_box(&*req);
            pool.lock().unwrap().push(req);
        })
    });
    g.finish();
}

fn recycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("recycle");
    let mut i = 0u64;
    let mut cache = ObjectCache::new(CacheConfig::default());
    g.bench_function("cache_set_used_fields", |b| {
        b.iter(|| {
            i += 1;
            let mut req = cache.get(Request::default);
            req.fill(i);
            black_box(&*req);
            cache.put(req);
        })
    });
    g.bench_function("cache_zero_whole_object", |b| {
        b.iter(|| {
            i += 1;
            let mut req = cache.get(Request::default);
            *black_box(&mut *req) = Request::default();
            req.fill(i);
            black_box(&*req);
            cache.put(req);
        })
    });
    let mut tags = TagSet::new(DEPTH, |_| Request::default());
    g.bench_function("tagset_set_used_fields", |b| {
        b.iter(|| {
            i += 1;
            let tag = tags.alloc().unwrap();
            tags.get_mut(tag).fill(i);
            black_box(tags.get(tag));
            tags.free(tag);
        })
    });
    g.bench_function("tagset_zero_whole_object", |b| {
        b.iter(|| {
            i += 1;
            let tag = tags.alloc().unwrap();
            let req = tags.get_mut(tag);
            *black_box(&mut *req) = Request::default();
            req.fill(i);
            black_box(tags.get(tag));
            tags.free(tag);
        })
    });
    g.finish();
}

fn batch32(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch32");
    g.throughput(Throughput::Elements(u64::from(BATCH)));
    let mut tags = TagSet::new(DEPTH, |_| Request::default());
    let mut out = [tags.alloc().unwrap(); BATCH as usize];
    tags.free(out[0]);

    fn fill_and_free(tags: &mut TagSet<Request>, out: &[Tag]) {
        for (k, &tag) in out.iter().enumerate() {
            tags.get_mut(tag).fill(k as u64);
        }
        black_box(out);
        for &tag in out {
            tags.free(tag);
        }
    }

    g.bench_function("plug32_then_32_allocs", |b| {
        b.iter(|| {
            tags.plug(BATCH).unwrap();
            for slot in out.iter_mut() {
                *slot = tags.alloc().unwrap();
            }
            black_box(tags.unplug());
            fill_and_free(&mut tags, &out);
        })
    });
    g.bench_function("32_single_allocs", |b| {
        b.iter(|| {
            for slot in out.iter_mut() {
                *slot = tags.alloc().unwrap();
            }
            fill_and_free(&mut tags, &out);
        })
    });
    g.bench_function("alloc_many32", |b| {
        b.iter(|| {
            assert!(tags.alloc_many(BATCH, &mut out));
            fill_and_free(&mut tags, &out);
        })
    });
    g.finish();
}

/// Runs `iters` objects through: `take` on this thread (the owner), `give` on a second thread.
/// Objects cross in messages of `HANDOFF`. Returns the wall time of the whole run.
fn two_threads<O: Send + 'static>(
    iters: u64,
    mut take: impl FnMut() -> Option<O>,
    give: impl Fn(O) + Send + 'static,
) -> Duration {
    let (tx, rx) = mpsc::sync_channel::<Vec<O>>(4);
    let freer = thread::spawn(move || {
        for batch in rx {
            batch.into_iter().for_each(&give);
        }
    });
    let start = Instant::now();
    let mut left = iters;
    while left > 0 {
        let n = left.min(HANDOFF as u64) as usize;
        let mut batch = Vec::with_capacity(n);
        while batch.len() < n {
            match take() {
                Some(obj) => batch.push(obj),
                // Everything is in flight: wait for the other thread to free some.
                None => thread::yield_now(),
            }
        }
        tx.send(batch).unwrap();
        left -= n as u64;
    }
    drop(tx);
    freer.join().unwrap();
    start.elapsed()
}

fn cross_core_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("cross_core_free");
    g.throughput(Throughput::Elements(1));

    g.bench_function("tagset_remote_freer", |b| {
        b.iter_custom(|iters| {
            let mut tags = TagSet::new(DEPTH, |_| Request::default());
            let freer = tags.remote_freer();
            let mut i = 0;
            two_threads(
                iters,
                move || {
                    i += 1;
                    let tag = tags.alloc()?;
                    tags.get_mut(tag).fill(i);
                    Some(tag)
                },
                move |tag| freer.free(tag),
            )
        })
    });

    g.bench_function("object_cache_remote_handle", |b| {
        b.iter_custom(|iters| {
            let mut cache = ObjectCache::new(CacheConfig::default());
            let handle = cache.remote_handle();
            let mut i = 0;
            two_threads(
                iters,
                move || {
                    i += 1;
                    let mut req = cache.get(Request::default);
                    req.fill(i);
                    Some(req)
                },
                move |req| handle.put(req),
            )
        })
    });

    g.bench_function("mutex_vec_pool", |b| {
        b.iter_custom(|iters| {
            let pool = std::sync::Arc::new(Mutex::new(Vec::<Box<Request>>::new()));
            let remote = pool.clone();
            let mut i = 0;
            two_threads(
                iters,
                move || {
                    i += 1;
                    let popped = pool.lock().unwrap().pop();
                    let mut req = popped.unwrap_or_else(|| Box::new(Request::default()));
                    req.fill(i);
                    Some(req)
                },
                move |req| remote.lock().unwrap().push(req),
            )
        })
    });

    g.bench_function("box_new_drop", |b| {
        b.iter_custom(|iters| {
            let mut i = 0;
            two_threads(
                iters,
                move || {
                    i += 1;
                    let mut req = Box::new(Request::default());
                    req.fill(i);
                    Some(req)
                },
                drop,
            )
        })
    });
    g.finish();
}

/// The C API's per-request context: callback, argument, buffer handle.
#[derive(Clone, Copy, Debug)]
struct Context {
    cb: Option<fn(usize)>,
    arg: usize,
    buf: usize,
}

/// Requests outstanding in `context_slab` (a QD 128 loop), out of `DEPTH` entries.
const OUTSTANDING: usize = 128;

/// The table each layer kept before `Slab`: contexts by index plus a stack of free indices.
struct VecFreeList {
    contexts: Vec<Option<Context>>,
    free: Vec<u32>,
}

impl VecFreeList {
    fn new(n: usize) -> Self {
        Self {
            contexts: (0..n).map(|_| None).collect(),
            free: (0..n as u32).rev().collect(),
        }
    }

    #[inline]
    fn insert(&mut self, c: Context) -> u32 {
        let i = self.free.pop().expect("room");
        self.contexts[i as usize] = Some(c);
        i
    }

    #[inline]
    fn take(&mut self, i: u32) -> Option<Context> {
        let c = self.contexts.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(c)
    }
}

fn context_slab(c: &mut Criterion) {
    let mut g = c.benchmark_group("context_slab");
    g.throughput(Throughput::Elements(1));
    let ctx = |i: usize| Context {
        cb: None,
        arg: i,
        buf: i ^ 0x55,
    };

    let mut slab = Slab::new(usize::from(DEPTH));
    let mut ring: Vec<u32> = (0..OUTSTANDING)
        .map(|i| slab.try_insert(ctx(i)).unwrap())
        .collect();
    let mut pos = 0;
    g.bench_function("slab", |b| {
        b.iter(|| {
            let old = slab.take(black_box(ring[pos])).unwrap();
            black_box((old.cb, old.buf));
            ring[pos] = slab.try_insert(ctx(old.arg + 1)).unwrap();
            pos = (pos + 1) % OUTSTANDING;
        })
    });

    let mut table = VecFreeList::new(usize::from(DEPTH));
    let mut ring: Vec<u32> = (0..OUTSTANDING).map(|i| table.insert(ctx(i))).collect();
    let mut pos = 0;
    g.bench_function("vec_free_list", |b| {
        b.iter(|| {
            let old = table.take(black_box(ring[pos])).unwrap();
            black_box((old.cb, old.buf));
            ring[pos] = table.insert(ctx(old.arg + 1));
            pos = (pos + 1) % OUTSTANDING;
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    alloc_free_pair,
    recycle,
    batch32,
    cross_core_free,
    context_slab
);
criterion_main!(benches);
