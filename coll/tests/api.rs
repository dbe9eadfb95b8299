//! The broadcast's contract within one process (a job of one rank, started without a
//! launcher): bad input is a clear error, never a panic, and leaves the object usable.

#![forbid(unsafe_code)]

use gaspi::{Context, Timeout, GROUP_ALL};
use gaspi_coll::{Broadcast, Collectives, Error};

const TIMEOUT: Timeout = Timeout::Millis(10_000);

#[test]
fn bad_input_is_a_clear_error() {
    let ctx = Context::init().expect("a job of one starts without a launcher");
    let coll = Collectives::new(&ctx).expect("the namespace registers");
    assert!(matches!(
        Collectives::new(&ctx),
        Err(Error::Gaspi(gaspi::Error::LibraryExists { ref name })) if name == Collectives::LIBRARY
    ));
    assert!(matches!(
        Broadcast::new(&coll, GROUP_ALL, u64::MAX, TIMEOUT),
        Err(Error::Unaddressable { max: u64::MAX })
    ));
    assert!(matches!(
        Broadcast::new(&coll, 200, 16, TIMEOUT),
        Err(Error::Gaspi(gaspi::Error::UnknownGroup { .. }))
    ));
    let building = ctx.group_create().expect("a group");
    ctx.group_add(building, 0).expect("rank 0 joins");
    assert!(matches!(
        Broadcast::new(&coll, building, 16, TIMEOUT),
        Err(Error::Gaspi(gaspi::Error::GroupNotCommitted { .. }))
    ));

    let mut bcast = Broadcast::new(&coll, GROUP_ALL, 16, TIMEOUT).expect("built");
    let mut buf = *b"0123456789abcdefg";
    assert!(matches!(
        bcast.broadcast(1, &mut buf[..4], TIMEOUT),
        Err(Error::RootNotMember {
            group: GROUP_ALL,
            root: 1
        })
    ));
    assert!(matches!(
        bcast.broadcast(0, &mut buf, TIMEOUT),
        Err(Error::TooLarge {
            rank: 0,
            len: 17,
            max: 16
        })
    ));
    assert!(matches!(
        bcast.broadcast_nb(0, &mut buf),
        Err(Error::TooLarge { .. })
    ));

    // Rejected calls began nothing: the object still works, and the root keeps its bytes.
    bcast
        .broadcast(0, &mut buf[..16], TIMEOUT)
        .expect("a broadcast in a group of one");
    let mut handle = bcast.broadcast_nb(0, &mut buf[..0]).expect("started");
    assert!(handle.test().expect("completed"));
    assert!(handle.test().expect("still completed"));
    handle.wait(Timeout::Test).expect("completed");
    assert_eq!(&buf, b"0123456789abcdefg");
    drop(bcast);
    drop(coll);
    ctx.finalize(TIMEOUT).expect("finalize");
}
