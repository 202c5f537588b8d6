//! `Slab` against a model (a `HashMap` from index to value, and one of generations): any
//! sequence of inserts, takes and lookups, with indices in range, out of range and vacant,
//! gives the model's answers, and the slab's counts match.

use std::collections::HashMap;

use nvme_pool::Slab;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    TryInsert(u64),
    Insert(u64),
    /// Index given as a raw `u32`, often beyond the table (untrusted input).
    Take(u32),
    Get(u32),
    Set(u32, u64),
}

fn op(capacity: u32) -> impl Strategy<Value = Op> {
    // Mostly indices near the table, some anywhere.
    let index = prop_oneof![4 => 0..capacity + 3, 1 => any::<u32>()];
    prop_oneof![
        3 => any::<u64>().prop_map(Op::TryInsert),
        1 => any::<u64>().prop_map(Op::Insert),
        3 => index.clone().prop_map(Op::Take),
        2 => index.clone().prop_map(Op::Get),
        1 => (index, any::<u64>()).prop_map(|(i, v)| Op::Set(i, v)),
    ]
}

fn case() -> impl Strategy<Value = (u32, Vec<Op>)> {
    (0u32..16)
        .prop_flat_map(|capacity| (Just(capacity), prop::collection::vec(op(capacity), 0..200)))
}

proptest! {
    #[test]
    fn slab_matches_a_hash_map((capacity, ops) in case()) {
        let mut slab = Slab::new(capacity as usize);
        let mut model: HashMap<u32, u64> = HashMap::new();
        let mut generations: HashMap<u32, u32> = HashMap::new();
        let mut size = capacity as usize;
        for op in ops {
            match op {
                Op::TryInsert(v) => match slab.try_insert(v) {
                    Ok(i) => {
                        prop_assert!((i as usize) < size);
                        prop_assert!(model.insert(i, v).is_none(), "index {} handed out twice", i);
                    }
                    Err(back) => {
                        prop_assert_eq!(back, v);
                        prop_assert_eq!(model.len(), size, "refused while not full");
                    }
                },
                Op::Insert(v) => {
                    let full = model.len() == size;
                    let i = slab.insert(v);
                    if full {
                        prop_assert_eq!(i as usize, size, "growth appends one entry");
                        size += 1;
                    }
                    prop_assert!((i as usize) < size);
                    prop_assert!(model.insert(i, v).is_none(), "index {} handed out twice", i);
                }
                Op::Take(i) => {
                    let expect = model.remove(&i);
                    prop_assert_eq!(slab.take(i), expect);
                    if expect.is_some() {
                        *generations.entry(i).or_default() += 1;
                    }
                }
                Op::Get(i) => {
                    prop_assert_eq!(slab.get(i), model.get(&i));
                    prop_assert_eq!(slab.contains(i), model.contains_key(&i));
                    let generation = ((i as usize) < size).then(|| generations.get(&i).copied().unwrap_or(0));
                    prop_assert_eq!(slab.generation(i), generation);
                }
                Op::Set(i, v) => {
                    match (slab.get_mut(i), model.get_mut(&i)) {
                        (Some(a), Some(b)) => {
                            *a = v;
                            *b = v;
                        }
                        (None, None) => {}
                        (a, b) => prop_assert!(false, "get_mut({}): slab {:?}, model {:?}", i, a, b),
                    }
                }
            }
            prop_assert_eq!(slab.len(), model.len());
            prop_assert_eq!(slab.capacity(), size);
            prop_assert_eq!(slab.is_full(), model.len() == size);
            prop_assert_eq!(slab.is_empty(), model.is_empty());
        }
        let mut listed: Vec<(u32, u64)> = slab.iter().map(|(i, v)| (i, *v)).collect();
        let mut expected: Vec<(u32, u64)> = model.into_iter().collect();
        expected.sort_unstable();
        prop_assert!(listed.windows(2).all(|w| w[0].0 < w[1].0), "iter in index order");
        listed.sort_unstable();
        prop_assert_eq!(listed, expected);
    }
}
