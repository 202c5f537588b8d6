//! Model checks of the cross-thread free paths with `loom`: every interleaving of remote pushes
//! against the owner's swap-and-walk drain must return each freed slot or object exactly once.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p nvme-pool --test loom --release`
#![cfg(loom)]

use std::collections::HashSet;

use loom::thread;
use nvme_pool::{CacheConfig, ObjectCache, TagSet};

/// Two threads free one tag each through `RemoteFreer` while the owner allocates (and so drains
/// the remote stack) concurrently. Afterwards every freed slot is back exactly once, with a new
/// generation.
#[test]
fn tagset_remote_frees_race_owner_drain() {
    loom::model(|| {
        let mut tags = TagSet::new(3, |i| i);
        let a = tags.alloc().unwrap();
        let b = tags.alloc().unwrap();
        let kept = tags.alloc().unwrap();
        assert_eq!(tags.available(), 0);

        let handles: Vec<_> = [a, b]
            .into_iter()
            .map(|tag| {
                let freer = tags.remote_freer();
                thread::spawn(move || freer.free(tag))
            })
            .collect();

        // Races with the pushes: sees none, one or both of them.
        let during = tags.alloc();
        for h in handles {
            h.join().unwrap();
        }

        let mut indices = HashSet::new();
        let mut reused = Vec::new();
        if let Some(tag) = during {
            reused.push(tag);
        }
        while let Some(tag) = tags.alloc() {
            reused.push(tag);
        }
        for tag in &reused {
            assert!(
                indices.insert(tag.index()),
                "slot {} handed out twice",
                tag.index()
            );
            assert_eq!(tags.lookup(tag.cid()), Some(*tag));
        }
        assert_eq!(indices, HashSet::from([a.index(), b.index()]));
        assert_eq!(tags.stats().remote_frees, 2);
        assert_eq!(tags.lookup(a.cid()), None);
        assert_eq!(tags.lookup(b.cid()), None);
        assert_eq!(tags.lookup(kept.cid()), Some(kept));
        assert_eq!(tags.in_use(), 3);
    });
}

/// A tag is freed remotely, the owner drains it, re-allocates the slot and hands the new tag
/// to a second thread which frees it again: the reset link must be visible to that thread.
#[test]
fn tagset_slot_cycles_through_remote_stack_twice() {
    loom::model(|| {
        let mut tags = TagSet::new(1, |_| ());
        let first = tags.alloc().unwrap();
        let freer = tags.remote_freer();
        let f1 = freer.clone();
        thread::spawn(move || f1.free(first)).join().unwrap();

        let second = tags.alloc().expect("drained from the remote stack");
        assert_ne!(second.cid(), first.cid());
        let t = thread::spawn(move || freer.free(second));
        let during = tags.alloc();
        t.join().unwrap();
        let third = during
            .or_else(|| tags.alloc())
            .expect("second remote free returned");
        assert_eq!(tags.lookup(third.cid()), Some(third));
        assert_eq!(tags.stats().remote_frees, 2);
        assert_eq!(tags.stats().bad_frees, 0);
    });
}

/// Two threads put one object each through `RemoteHandle` while the owner gets concurrently.
/// Every object comes back exactly once; none is lost or duplicated, and dropping the cache
/// frees whatever is still on the remote list.
#[test]
fn cache_remote_puts_race_owner_drain() {
    loom::model(|| {
        let mut cache = ObjectCache::new(CacheConfig { max: 4, slack: 1 });
        let one = cache.get(|| 1u32);
        let two = cache.get(|| 2u32);
        let handles: Vec<_> = [one, two]
            .into_iter()
            .map(|obj| {
                let handle = cache.remote_handle();
                thread::spawn(move || handle.put(obj))
            })
            .collect();

        // A miss (value 99) if no push is visible yet, else one of the returned objects.
        let during = *cache.get(|| 99u32);
        for h in handles {
            h.join().unwrap();
        }
        let mut seen: Vec<u32> = vec![during];
        while !(seen.contains(&1) && seen.contains(&2)) {
            seen.push(*cache.get(|| panic!("object lost: {seen:?}")));
        }
        seen.sort_unstable();
        seen.dedup();
        assert!(seen == [1, 2] || seen == [1, 2, 99], "{seen:?}");
        assert_eq!(cache.stats().remote_frees, 2);
    });
}

/// The owner drops its cache while a remote put may still be in flight: the node is freed
/// either by the owner's drop or, if the put comes after it, by the last handle's drop.
#[test]
fn cache_dropped_while_remote_put_in_flight() {
    loom::model(|| {
        let mut cache = ObjectCache::<u64>::new(CacheConfig::default());
        let obj = cache.get(|| 7);
        let handle = cache.remote_handle();
        let t = thread::spawn(move || handle.put(obj));
        drop(cache);
        t.join().unwrap();
    });
}
