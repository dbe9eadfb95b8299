//! A rank's writes and reads between two overlapping ranges of one of its own segments, on
//! the direct path (a job of one rank, started without a launcher): they must move the bytes
//! as `memmove` does (through the fabric they need not, see `Context::write`). The direct
//! path reaches this rank's segment through a second mapping of the same pages, so a copy
//! that judged overlap by address took the ranges for disjoint ones and copied overlapping
//! memory as if it were not.

#![forbid(unsafe_code)]

use gaspi::{local, remote, Config, Context, Intranode, Timeout};

const LEN: u64 = 64 << 10;
const T: Timeout = Timeout::Millis(10_000);

fn pattern() -> Vec<u8> {
    (0..3 * LEN).map(|i| (i * 131 % 251) as u8).collect()
}

#[test]
fn overlapping_ranges_of_own_segment_copy_as_memmove() {
    // The direct path whatever the environment says: the suite runs again under
    // `GASPI_INTRANODE=fabric`.
    let mut config = Config::from_env().expect("the environment's settings");
    config.intranode = Intranode::Direct;
    let ctx = Context::init_with(config).expect("a job of one rank without a launcher");
    let me = ctx.rank();
    assert!(
        ctx.reaches_directly(me),
        "the check is about the direct path"
    );
    ctx.segment_create(0, 3 * LEN, T).expect("segment 0");
    // (source offset, destination offset): forwards and backwards, by less than a cache
    // line and by more than a page.
    let cases = [(0, 1), (0, 16), (0, 4096 + 8), (1, 0), (100, 0), (8192, 3)];
    let queue = 0;
    for (src, dst) in cases {
        for read in [false, true] {
            let before = pattern();
            ctx.segment_write(0, 0, &before).expect("fill");
            if read {
                // A read from this rank's segment into the same segment.
                ctx.read(local(0, dst), remote(me, 0, src), LEN, queue)
                    .expect("read");
            } else {
                ctx.write(local(0, src), remote(me, 0, dst), LEN, queue)
                    .expect("write");
            }
            ctx.wait(queue, T).expect("local completion");
            let mut got = vec![0u8; LEN as usize];
            ctx.segment_read(0, dst, &mut got).expect("read back");
            let want = &before[src as usize..(src + LEN) as usize];
            let wrong = got.iter().zip(want).filter(|(a, b)| a != b).count();
            let what = if read { "read" } else { "write" };
            assert_eq!(
                wrong, 0,
                "{what} of {LEN} bytes from offset {src} to {dst} of this rank's segment 0: \
                 {wrong} bytes wrong"
            );
        }
    }
    ctx.finalize(T).expect("finalize");
}
