//! Deleting a segment of bound user memory while a `Segment` handle of it is alive: the
//! handle's safe `write` and `memory()` reach the memory after the deletion, when the contract
//! of `segment_bind` lets the user free it, so such a deletion must be refused (a job of one
//! rank, started without a launcher). The memory is leaked so that binding it needs no
//! `unsafe`; the refusal does not depend on how the memory was bound.

use gaspi::{Context, Error, SegmentMemory, Timeout};

const LEN: usize = 4096;
const T: Timeout = Timeout::Millis(10_000);

#[test]
fn bound_segment_is_not_deleted_under_a_live_handle() {
    let ctx = Context::init().expect("a job of one rank without a launcher");
    let memory =
        SegmentMemory::bind_static(Box::leak(vec![0u8; LEN].into_boxed_slice())).expect("bind");
    ctx.segment_bind(0, memory, T).expect("segment_bind");
    let seg = ctx.segment(0).expect("a handle");
    let second = seg.clone();
    match ctx.segment_delete(0) {
        Err(Error::SegmentHandled {
            segment: 0,
            handles: 2,
        }) => {}
        other => panic!("deleting bound segment 0 under two handles: {other:?}"),
    }
    seg.write(0, b"still there").expect("the segment was kept");
    drop((seg, second));
    ctx.segment_delete(0)
        .expect("deleted once no handle is left");
    assert!(matches!(
        ctx.segment(0),
        Err(Error::UnknownSegment { segment: 0, .. })
    ));
    // An allocated segment's handle keeps its own mapping: its deletion is not refused.
    ctx.segment_create(1, LEN as u64, T).expect("segment 1");
    let allocated = ctx.segment(1).expect("a handle");
    ctx.segment_delete(1)
        .expect("allocated memory is deleted under a handle");
    allocated
        .write(0, b"own mapping")
        .expect("the mapping outlives the deletion");
    drop(allocated);
    ctx.finalize(T).expect("finalize");
}
