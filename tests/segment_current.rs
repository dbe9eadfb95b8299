//! `Segment::is_current`: a handle kept across calls tells whether its segment is still the
//! one its id names, through a deletion and a new segment under the same id (a job of one
//! rank, started without a launcher).

use gaspi::{Context, Error, SegmentMemory, Timeout};

const T: Timeout = Timeout::Millis(10_000);

#[test]
fn a_handle_is_current_until_its_segment_is_deleted() {
    let ctx = Context::init().expect("a job of one rank without a launcher");
    ctx.segment_create(1, 64, T).expect("segment 1");
    let first = ctx.segment(1).expect("a handle");
    assert!(first.is_current(), "a segment just made");
    ctx.segment_delete(1)
        .expect("allocated memory is deleted under a handle");
    assert!(!first.is_current(), "segment 1 was deleted");
    ctx.segment_create(1, 128, T).expect("segment 1 again");
    let second = ctx.segment(1).expect("a handle of the new segment");
    assert!(second.is_current(), "the new segment 1");
    assert!(
        !first.is_current(),
        "the old handle names the deleted segment"
    );
    assert_eq!((first.len(), second.len()), (64, 128));

    // A refused deletion leaves the segment current.
    let memory =
        SegmentMemory::bind_static(Box::leak(vec![0u8; 64].into_boxed_slice())).expect("bind");
    ctx.segment_bind(2, memory, T).expect("segment_bind");
    let bound = ctx.segment(2).expect("a handle");
    assert!(matches!(
        ctx.segment_delete(2),
        Err(Error::SegmentHandled { segment: 2, .. })
    ));
    assert!(bound.is_current(), "the deletion was refused");
    drop((first, second, bound));
    ctx.finalize(T).expect("finalize");
}
