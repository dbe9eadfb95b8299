//! The safe layer against a real provider, in one process: an endpoint that talks to itself
//! (its own name is its only peer) writes, reads, injects and sends into its own registered
//! memory, and every record comes back exactly once, with the bytes where they belong.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaspi_fabric::{Endpoint, Event, Posted, Refused, Region, RemoteTarget};
use gaspi_segments::SegmentMemory;

const LEN: usize = 1 << 16;

/// An operation's record: which one it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Op(u32);

struct Loop {
    ep: Endpoint<Op>,
    region: Arc<Region>,
    /// Local completions and remote data seen so far, not yet taken by `drain`.
    seen: RefCell<(Vec<Op>, Vec<u64>)>,
}

fn open(provider: &str) -> Loop {
    let ep: Endpoint<Op> =
        Endpoint::open(provider, false, false, 1024).expect("opening the endpoint");
    ep.insert_peers(&[ep.name().expect("the endpoint's name")])
        .expect("inserting ourselves");
    let memory = SegmentMemory::allocate(LEN, "fabric-loopback").expect("segment memory");
    let region = Region::register(&ep, memory, 7).expect("registering");
    Loop {
        ep,
        region,
        seen: RefCell::new((Vec::new(), Vec::new())),
    }
}

impl Loop {
    fn target(&self, offset: u64) -> RemoteTarget {
        RemoteTarget {
            rank: 0,
            addr: self.region.base() + offset,
            key: self.region.key(),
        }
    }

    /// Polls once, recording what it reports.
    fn pump(&self) {
        let mut seen = self.seen.borrow_mut();
        self.ep
            .poll(|event| match event {
                Event::Done(op) => seen.0.push(op),
                Event::Remote { data } => seen.1.push(data),
                // Where injects report, untracked and tagged with the target rank (0 here).
                Event::Untracked {
                    tag: 0,
                    failure: None,
                } if self.ep.injects_report() => {}
                other => panic!("unexpected event {other:?}"),
            })
            .expect("polling");
    }

    /// Polls until `want` local completions and `remote` remote events arrived; takes them.
    fn drain(&self, want: usize, remote: usize) -> (Vec<Op>, Vec<u64>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let seen = self.seen.borrow();
                if seen.0.len() >= want && seen.1.len() >= remote {
                    break;
                }
                assert!(Instant::now() < deadline, "only {seen:?} in 10 s");
            }
            self.pump();
        }
        std::mem::take(&mut *self.seen.borrow_mut())
    }

    /// Posts with `attempt`, polling while the provider is busy (it is, while the endpoint
    /// connects to itself).
    fn post(&self, op: Op, mut attempt: impl FnMut(Op) -> Result<(), Refused<Op>>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut op = op;
        loop {
            match attempt(op) {
                Ok(()) => return,
                Err(Refused::Busy(back)) => op = back,
                Err(Refused::Failed(e, op)) => panic!("{op:?} refused: {e}"),
            }
            assert!(Instant::now() < deadline, "provider busy for 10 s");
            self.pump();
        }
    }

    fn inject(&self, mut attempt: impl FnMut() -> Posted) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while attempt() == Posted::Again {
            assert!(Instant::now() < deadline, "provider busy for 10 s");
            self.pump();
        }
    }
}

fn round_trip(provider: &str) {
    let l = open(provider);
    let memory = l.region.memory();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    memory.write(0, &pattern).expect("writing the source");
    assert_eq!(l.ep.posts(), 0, "opening and registering post nothing");

    // A write with data lands, then its data arrives: both exactly once.
    let src = l.region.slice(0, 4096).expect("source slice");
    l.post(Op(1), |op| {
        l.ep.write(src, l.target(8192), Some(0xfeed), false, op)
    });
    let (done, data) = l.drain(1, 1);
    assert_eq!((done, data), (vec![Op(1)], vec![0xfeed]));
    let mut got = vec![0u8; 4096];
    memory.read(8192, &mut got).expect("reading the target");
    assert_eq!(got, pattern);

    // A read brings the bytes back into a third place.
    let dst = l.region.slice(16384, 4096).expect("destination slice");
    l.post(Op(2), |op| l.ep.read(dst, l.target(8192), op));
    assert_eq!(l.drain(1, 0).0, vec![Op(2)]);
    memory.read(16384, &mut got).expect("reading the copy");
    assert_eq!(got, pattern);
    // Every attempt counts, refused ones (while the endpoint connects) too.
    let posted = l.ep.posts();
    assert!(posted >= 2, "a write and a read posted, {posted} counted");

    // Injected writes complete at the origin without a record; their data still arrives.
    let small = l.region.slice(0, 8).expect("small slice");
    l.inject(|| {
        l.ep.inject_write_from(small, l.target(24576), Some(0xbeef))
            .expect("injecting")
    });
    l.inject(|| {
        l.ep.inject_write(&[9u8; 8], l.target(24584), None)
            .expect("injecting bytes")
    });
    assert_eq!(l.drain(0, 1).1, vec![0xbeef]);
    assert!(
        l.ep.posts() >= posted + 2,
        "two injects posted, {} counted",
        l.ep.posts() - posted
    );
    let mut eight = [0u8; 8];
    memory.read(24576, &mut eight).expect("reading");
    assert_eq!(eight, pattern[..8]);

    // A record survives its region being dropped by everyone else until it completes.
    let keep = Arc::downgrade(&l.region);
    let src = l.region.slice(0, 64).expect("slice");
    l.post(Op(3), |op| {
        l.ep.write(src, l.target(32768), None, false, op)
    });
    let Loop { ep, region, .. } = l;
    drop(region);
    assert!(
        keep.upgrade().is_some(),
        "the write in flight keeps its region registered"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while done.is_empty() {
        ep.poll(|e| {
            if let Event::Done(op) = e {
                done.push(op);
            }
        })
        .expect("polling");
        assert!(Instant::now() < deadline, "the last write never completed");
    }
    assert_eq!(done, [Op(3)]);
    assert!(
        keep.upgrade().is_none(),
        "the completed write let its region go"
    );
}

#[test]
fn loopback_over_tcp() {
    round_trip("tcp");
}

#[test]
fn loopback_over_shm() {
    round_trip("shm");
}

#[test]
fn bad_ranges_and_atomic_words_are_refused() {
    let l = open("shm");
    assert!(l.region.slice(LEN as u64 - 4, 8).is_err());
    assert!(l.region.slice(u64::MAX, 2).is_err());
    let word = l.region.slice(0, 8).expect("a word");
    let wide = l.region.slice(8, 16).expect("two words");
    match l.ep.atomic_u64(word, None, wide, l.target(0), Op(4)) {
        Err(Refused::Failed(gaspi_fabric::Error::Invalid(_), Op(4))) => {}
        other => panic!("a 16-byte result word: {other:?}"),
    }
}

/// Whether this process maps the file at `path` (`/proc/self/maps` names a mapping's file).
fn mapped(path: &std::path::Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let path = path.to_str().expect("a UTF-8 path");
    maps.lines().any(|line| line.contains(path))
}

/// A region closed after `keep_memory_until_closed` keeps its memory mapped until the endpoint
/// is gone (a provider may still write a peer's data into it while the endpoint closes); one
/// closed before releases it at once.
#[test]
fn memory_outlives_the_endpoint_once_kept() {
    let l = open("shm");
    let region = |name: &str| {
        let memory = SegmentMemory::allocate(LEN, name).expect("segment memory");
        let path = memory
            .shm_path()
            .expect("a shared-memory file")
            .to_path_buf();
        (
            Region::register(&l.ep, memory, 8).expect("registering"),
            path,
        )
    };
    let (early, early_path) = region("fabric-early");
    assert!(mapped(&early_path));
    drop(early);
    assert!(!mapped(&early_path), "closed before: released at once");
    let (late, late_path) = region("fabric-late");
    l.ep.keep_memory_until_closed();
    drop(late);
    assert!(
        mapped(&late_path),
        "closed after: kept while the endpoint is open"
    );
    drop(l);
    assert!(
        !mapped(&late_path),
        "released once the endpoint and domain closed"
    );
}

/// `poll_settled` while another thread's read holds the queue (its thread lost its core with
/// an event in its hands): it returns only once that event was handed on, where `poll`
/// returns 0 at once with the event still in the other thread's hands.
fn settled_read(provider: &str) {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let l = open(provider);
    let src = l.region.slice(0, 8).expect("source slice");
    l.post(Op(1), |op| {
        l.ep.write(src, l.target(4096), Some(0xbeef), false, op)
    });
    let (taken, handed) = (AtomicBool::new(false), AtomicBool::new(false));
    let ep = &l.ep;
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !taken.load(SeqCst) {
                assert!(Instant::now() < deadline, "the write's data never came");
                ep.poll(|event| {
                    if let Event::Remote { data: 0xbeef } = event {
                        taken.store(true, SeqCst);
                        std::thread::sleep(Duration::from_millis(200));
                        handed.store(true, SeqCst);
                    }
                })
                .expect("polling");
            }
        });
        while !taken.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        ep.poll_settled(Duration::from_secs(5), |_| {})
            .expect("polling");
        assert!(
            handed.load(SeqCst),
            "poll_settled returned while another thread's read had an event in its hands"
        );
    });
}

#[test]
fn a_settled_poll_waits_for_another_threads_read_over_tcp() {
    settled_read("tcp");
}

#[test]
fn a_settled_poll_waits_for_another_threads_read_over_shm() {
    settled_read("shm");
}
