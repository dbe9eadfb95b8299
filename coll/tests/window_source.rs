//! The epoch window's sources between epochs, within one process (a job of one rank,
//! started without a launcher, which is its own origin and target): the window keeps its last
//! source segment, and a deletion or a new segment under the same id is seen as by id.

#![forbid(unsafe_code)]

use gaspi::{Context, Timeout, GROUP_ALL};
use gaspi_coll::{Assert, Collectives, Error, Window};

const TIMEOUT: Timeout = Timeout::Millis(10_000);

/// One epoch with itself writing 8 bytes from segment `src` into the window at 0: the
/// write's outcome, the epoch closed either way.
fn epoch_from(win: &mut Window<'_>, src: gaspi::SegmentId) -> Result<(), Error> {
    win.post(&[0], Assert::NONE, TIMEOUT).expect("posted");
    win.start(&[0], Assert::NONE, TIMEOUT)
        .expect("the post matches");
    let written = win.write(src, 0, 0, 0, 8);
    win.complete(TIMEOUT).expect("completed");
    win.wait(TIMEOUT).expect("every origin completed");
    written
}

/// The window keeps its last source between epochs: a source deleted since is gone, one
/// made again under its id is the new one, and a source of bound memory is not held (its
/// deletion is not refused because of the window).
#[test]
fn a_source_deleted_or_made_again_between_epochs() {
    let ctx = Context::init().expect("a job of one starts without a launcher");
    ctx.segment_create(0, 64, TIMEOUT)
        .expect("the window segment");
    let coll = Collectives::new(&ctx).expect("the namespace registers");
    let mut win = Window::new(&coll, GROUP_ALL, 0, TIMEOUT).expect("built");
    let window_holds = |want: u8| {
        let mut got = [0u8; 8];
        ctx.segment_read(0, 0, &mut got).expect("read");
        assert_eq!(got, [want; 8]);
    };
    ctx.segment_create(1, 64, TIMEOUT).expect("source");
    ctx.segment_write(1, 0, &[1; 8]).expect("packed");
    epoch_from(&mut win, 1).expect("written");
    window_holds(1);
    ctx.segment_delete(1)
        .expect("the window holds no busy source");
    assert!(matches!(
        epoch_from(&mut win, 1),
        Err(Error::Gaspi(gaspi::Error::UnknownSegment {
            segment: 1,
            ..
        }))
    ));
    window_holds(1);
    ctx.segment_create(1, 64, TIMEOUT).expect("source again");
    ctx.segment_write(1, 0, &[2; 8]).expect("packed");
    epoch_from(&mut win, 1).expect("written from the new segment");
    window_holds(2);

    let memory = gaspi::SegmentMemory::bind_static(Box::leak(vec![3u8; 64].into_boxed_slice()))
        .expect("bind");
    ctx.segment_bind(2, memory, TIMEOUT).expect("bound source");
    epoch_from(&mut win, 2).expect("written from bound memory");
    window_holds(3);
    ctx.segment_delete(2)
        .expect("no handle of the bound source is left in the window");
}
