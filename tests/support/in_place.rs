//! `IoQueue::submit_in_place`, checked the same way on every transport: an accepted
//! submission takes the buffer from the caller's place and gives it back in its completion
//! with the data; every refusal (out of range, buffer too small, a buffer on a command without
//! data) leaves the buffer in its place, untouched, and returns the error alone.

use std::time::{Duration, Instant};

use nvme_core::command::{Flush, Read, Write};
use nvme_core::{DmaBuffer, Error, IoQueue, Namespace};

/// Runs the checks on an idle `q` over `ns` (at least 16 blocks): `buf` holds at least 8
/// blocks, `small` fewer bytes than 8 blocks.
pub fn check_submit_in_place<Q: IoQueue>(
    q: &mut Q,
    ns: &Namespace,
    buf: DmaBuffer,
    small: DmaBuffer,
) {
    let bs = ns.block_size() as usize;
    let mut place = Some(buf);
    let pattern: Vec<u8> = (0..8 * bs).map(|i| (i * 7 + 3) as u8).collect();
    place.as_mut().unwrap()[..8 * bs].copy_from_slice(&pattern);

    // Refusals: the buffer stays where it was, with its content.
    let out_of_range = ns.blocks();
    let e = q
        .submit_in_place(ns, Write::new(out_of_range, 8), &mut place, 1)
        .unwrap_err();
    assert!(matches!(e, Error::LbaOutOfRange { .. }), "{e}");
    assert_eq!(
        &place.as_ref().expect("left in place")[..8 * bs],
        &pattern[..]
    );
    let e = q.submit_in_place(ns, Flush, &mut place, 2).unwrap_err();
    assert!(matches!(e, Error::InvalidRequest(_)), "{e}");
    assert!(
        place.is_some(),
        "a buffer on a command without data stays in place"
    );
    let mut small_place = Some(small);
    let e = q
        .submit_in_place(ns, Read::new(0, 8), &mut small_place, 3)
        .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e}");
    assert!(small_place.is_some());
    let e = q
        .submit_in_place(ns, Write::new(0, 8), &mut None, 4)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidRequest(_)), "{e}");
    assert_eq!(q.in_flight(), 0, "nothing refused reached the queue");

    // Accepted: the write takes the buffer, the read brings the data back in another place.
    q.submit_in_place(ns, Write::new(8, 8), &mut place, 5)
        .unwrap();
    assert!(place.is_none(), "taken by the request");
    place = Some(wait_one(q, 5).expect("the write's buffer comes back"));
    place.as_mut().unwrap().fill(0);
    q.submit_in_place(ns, Read::new(8, 8), &mut place, 6)
        .unwrap();
    assert!(place.is_none());
    let back = wait_one(q, 6).expect("the read's buffer comes back");
    assert_eq!(
        &back[..8 * bs],
        &pattern[..],
        "data read back equals data written"
    );
}

fn wait_one<Q: IoQueue>(q: &mut Q, user_data: u64) -> Option<DmaBuffer> {
    let start = Instant::now();
    let mut out = None;
    let mut done = false;
    while !done {
        assert!(start.elapsed() < Duration::from_secs(10), "no completion");
        q.poll(|c| {
            assert_eq!(c.user_data, user_data);
            assert!(c.result.is_ok(), "{:?}", c.result);
            out = c.buffer;
            done = true;
        });
    }
    out
}
