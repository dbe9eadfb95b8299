//! The epoch window's contract within one process (a job of one rank, started without a
//! launcher, which is its own origin and target): epochs with itself move data, bad input is
//! a clear error that leaves the window usable, and a window may move to another thread.

#![forbid(unsafe_code)]

use gaspi::{Context, Timeout, GROUP_ALL};
use gaspi_coll::{Assert, Collectives, Epoch, Error, Window};

const TIMEOUT: Timeout = Timeout::Millis(10_000);

#[test]
fn epochs_with_itself_and_misuse() {
    let ctx = Context::init().expect("a job of one starts without a launcher");
    ctx.segment_create(0, 64, TIMEOUT)
        .expect("the window segment");
    ctx.segment_create(1, 64, TIMEOUT)
        .expect("the source segment");
    let coll = Collectives::new(&ctx).expect("the namespace registers");
    let mut win = Window::new(&coll, GROUP_ALL, 0, TIMEOUT).expect("built");
    assert!(matches!(
        win.complete(TIMEOUT),
        Err(Error::NoEpoch {
            epoch: Epoch::Access
        })
    ));
    assert!(matches!(
        win.wait(TIMEOUT),
        Err(Error::NoEpoch {
            epoch: Epoch::Exposure
        })
    ));
    assert!(matches!(
        win.post(&[1], Assert::NONE, TIMEOUT),
        Err(Error::NotMember { rank: 1, .. })
    ));
    // A start without the post times out naming the target, then continues once it posted.
    assert!(matches!(
        win.start(&[0], Assert::NONE, Timeout::Test),
        Err(Error::PostsMissing { ref ranks }) if ranks == &[0]
    ));
    assert!(matches!(
        win.write(1, 0, 0, 0, 8),
        Err(Error::NotPosted { rank: 0 })
    ));
    for epoch in 1..=50u8 {
        ctx.segment_write(1, 0, &[epoch; 8]).expect("packed");
        // The first epoch's start timed out above; the others time out here.
        if epoch > 1 {
            assert!(matches!(
                win.start(&[0], Assert::NONE, Timeout::Test),
                Err(Error::PostsMissing { .. })
            ));
        }
        win.post(&[0], Assert::NONE, TIMEOUT).expect("posted");
        assert!(!win.test().expect("nothing completed yet"));
        win.start(&[0], Assert::NONE, TIMEOUT)
            .expect("the post matches");
        win.write(1, 0, 0, 8, 8).expect("written");
        assert!(matches!(
            win.write(1, 0, 0, 60, 8),
            Err(Error::Gaspi(gaspi::Error::OutOfBounds { .. }))
        ));
        win.complete(TIMEOUT).expect("completed");
        win.wait(TIMEOUT).expect("every origin completed");
        let mut got = [0u8; 8];
        ctx.segment_read(0, 8, &mut got).expect("read");
        assert_eq!(got, [epoch; 8], "epoch {epoch}");
    }
    // Once every member is in the access epoch, `start_any` has nobody left to find: it
    // says so at once, even when it may wait for as long as it takes.
    win.post(&[0], Assert::NONE, TIMEOUT).expect("posted");
    assert_eq!(win.start_any(TIMEOUT).expect("its own post"), 0);
    assert!(matches!(
        win.start_any(Timeout::Block),
        Err(Error::NoneToStart)
    ));
    win.complete(TIMEOUT).expect("completed");
    win.wait(TIMEOUT).expect("every origin completed");
    // The window moves to another thread and goes on there.
    std::thread::scope(|s| {
        s.spawn(|| {
            win.post(&[0], Assert::NOCHECK, TIMEOUT).expect("posted");
            win.start(&[0], Assert::NOCHECK, TIMEOUT)
                .expect("no handshake");
            win.complete(TIMEOUT).expect("completed");
            // complete means done locally: through the fabric, the notification to itself
            // may still be on its way, so wait rather than test.
            win.wait(TIMEOUT).expect("completed");
        });
    });
}
