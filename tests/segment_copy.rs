//! `Segment::copy_into`: bytes of one of this rank's segments copied into another, or into
//! the same one, memory to memory (a job of one rank, started without a launcher), and its
//! errors.

#![forbid(unsafe_code)]

use gaspi::{Context, Error, Timeout};

const LEN: u64 = 4096;
const T: Timeout = Timeout::Millis(10_000);

fn pattern(seed: u64) -> Vec<u8> {
    (0..LEN).map(|i| ((i + seed) * 131 % 251) as u8).collect()
}

fn bytes(ctx: &Context, id: gaspi::SegmentId) -> Vec<u8> {
    let mut got = vec![0u8; LEN as usize];
    ctx.segment_read(id, 0, &mut got).expect("read back");
    got
}

#[test]
fn copies_between_and_within_segments_and_names_what_fails() {
    let ctx = Context::init().expect("a job of one rank without a launcher");
    let me = ctx.rank();
    ctx.segment_create(0, LEN, T).expect("segment 0");
    ctx.segment_create(1, LEN, T).expect("segment 1");
    let (from, to) = (pattern(0), pattern(7));
    ctx.segment_write(0, 0, &from).expect("fill 0");
    ctx.segment_write(1, 0, &to).expect("fill 1");
    let zero = ctx.segment(0).expect("a handle on segment 0");

    // 100 bytes from offset 10 of segment 0 to offset 3000 of segment 1; nothing else moves.
    zero.copy_into(10, 1, 3000, 100).expect("copy");
    let mut want = to.clone();
    want[3000..3100].copy_from_slice(&from[10..110]);
    assert_eq!(bytes(&ctx, 1), want);
    assert_eq!(bytes(&ctx, 0), from, "the source is unchanged");

    // Within segment 0, overlapping both ways: as memmove.
    for (src, dst) in [(0, 1), (1, 0), (0, 1000)] {
        ctx.segment_write(0, 0, &from).expect("refill 0");
        zero.copy_into(src, 0, dst, 2048).expect("overlapping copy");
        let mut want = from.clone();
        want.copy_within(src as usize..src as usize + 2048, dst as usize);
        assert_eq!(bytes(&ctx, 0), want, "{src} -> {dst}");
    }

    // Zero bytes at the end of both is in bounds; a byte past either end is not, and the
    // error names the segment whose range is left.
    zero.copy_into(LEN, 1, LEN, 0)
        .expect("an empty copy at the ends");
    for (offset, dst_offset, segment) in [(LEN - 1, 0, 0), (0, LEN - 1, 1)] {
        match zero.copy_into(offset, 1, dst_offset, 2) {
            Err(Error::OutOfBounds {
                rank,
                segment: named,
                size: 2,
                segment_size: LEN,
                ..
            }) => assert_eq!((rank, named), (me, segment)),
            other => panic!("{offset} -> {dst_offset}: {other:?}"),
        }
    }
    match zero.copy_into(0, 2, 0, 8) {
        Err(Error::UnknownSegment { rank, segment: 2 }) => assert_eq!(rank, me),
        other => panic!("into a segment that does not exist: {other:?}"),
    }

    // The copy holds no handle on its destination: deleting it needs none dropped, and a
    // copy after the deletion finds it gone.
    ctx.segment_delete(1).expect("delete segment 1");
    match zero.copy_into(0, 1, 0, 8) {
        Err(Error::UnknownSegment { rank, segment: 1 }) => assert_eq!(rank, me),
        other => panic!("into a deleted segment: {other:?}"),
    }
    drop(zero);
    ctx.finalize(T).expect("finalize");
}
