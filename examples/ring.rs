//! A ring of write_notify: the smallest complete gaspi program, the one the README's "Running
//! programs" section runs.
//!
//! Each rank writes a message into its right neighbour's segment with one write-with-notification
//! and waits for the one from its left neighbour, for a number of laps; every lap the message
//! changes, and every rank checks every byte it receives. Run with `gaspirun -n 4 ring`.

use gaspi::{local, remote, Context, Notification, Timeout};

const SEGMENT: u8 = 0;
const LAPS: u32 = 100;
const LEN: usize = 4096;
const TIMEOUT: Timeout = Timeout::Millis(30_000);

fn message(from: u32, lap: u32) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(from * 7 + lap) as u8)
        .collect()
}

fn main() {
    if let Err(e) = run() {
        // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
        // the job) leaves no half message.
        let line = format!("ring: {e}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        std::process::exit(1);
    }
}

fn run() -> Result<(), gaspi::Error> {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    // Two halves: what we send from, and what our left neighbour writes into.
    ctx.segment_create(SEGMENT, 2 * LEN as u64, TIMEOUT)?;
    let start = std::time::Instant::now();
    for lap in 0..LAPS {
        ctx.segment_write(SEGMENT, 0, &message(me, lap))?;
        ctx.write_notify(
            local(SEGMENT, 0),
            remote(right, SEGMENT, LEN as u64),
            LEN as u64,
            Notification {
                id: 0,
                value: lap + 1,
            },
            0,
        )?;
        let id = ctx.notify_waitsome(SEGMENT, 0, 1, TIMEOUT)?;
        let value = ctx.notify_reset(SEGMENT, id)?;
        let mut got = vec![0u8; LEN];
        ctx.segment_read(SEGMENT, LEN as u64, &mut got)?;
        if value != lap + 1 || got != message(left, lap) {
            eprintln!("rank {me}: lap {lap}: wrong data or notification {value} from rank {left}");
            std::process::exit(1);
        }
        // Our send buffer is rewritten next lap: wait until the write has left it.
        ctx.wait(0, TIMEOUT)?;
        // And our neighbour must not overwrite the receive half before we read it: the ring's
        // lock-step (everyone waits for its left neighbour each lap) plus a barrier guarantees it.
        ctx.barrier(TIMEOUT)?;
    }
    println!(
        "ring ok: rank {me} of {n} received {LAPS} messages of {LEN} B from rank {left} over {} in {:.1} ms, every byte checked",
        ctx.provider(),
        start.elapsed().as_secs_f64() * 1e3
    );
    ctx.finalize(TIMEOUT)
}
