//! `passive`: passive messages arrive whole, in order per sender, from every rank.
//!
//! Every rank sends `MESSAGES` messages to every rank (itself included), of sizes cycling from
//! 0 B to the configured maximum, each payload a pattern of (sender, sequence number). Every
//! rank receives `n * MESSAGES` messages and checks each payload byte by byte and that each
//! sender's sequence numbers arrive in order. A message one byte over the maximum is refused.

use gaspi::{Context, Error, Rank, Timeout};

use crate::check::{compare, fill_pattern, seed, Doing, Failure, Outcome};

const MESSAGES: u32 = 200;
const TIMEOUT: Timeout = Timeout::Millis(30_000);

fn size_of(seq: u32, max: usize) -> usize {
    const SIZES: [usize; 6] = [0, 1, 7, 100, 4096, usize::MAX];
    SIZES[seq as usize % SIZES.len()].min(max)
}

fn payload(from: Rank, seq: u32, max: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; size_of(seq, max)];
    fill_pattern(seed(&[u64::from(from), u64::from(seq)]), &mut bytes);
    // The sequence number leads, where it fits, so order can be checked even before the
    // pattern is.
    if bytes.len() >= 4 {
        bytes[..4].copy_from_slice(&seq.to_le_bytes());
    }
    bytes
}

pub fn run(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let max = ctx.config().passive_max_bytes as usize;
    match ctx.passive_send(me, &vec![0u8; max + 1], TIMEOUT) {
        Err(Error::PassiveTooLarge { size, max: m }) if size == max + 1 && m == max => {}
        other => return Err(Failure(format!("an oversized message: {other:?}"))),
    }
    let mut inbox = Inbox {
        next: vec![0; n as usize],
        received: 0,
        max,
    };
    for seq in 0..MESSAGES {
        for to in 0..n {
            ctx.passive_send(to, &payload(me, seq, max), TIMEOUT)
                .doing(|| format!("passive_send of message {seq} to rank {to}"))?;
        }
        // Receiving while sending keeps the peers' messages flowing on a small machine.
        while inbox.take(ctx, Timeout::Test)? {}
    }
    while inbox.next.iter().any(|&k| k < MESSAGES) {
        inbox.take(ctx, TIMEOUT)?;
    }
    if let Ok((from, _)) = ctx.passive_receive(Timeout::Test) {
        return Err(Failure(format!("an extra message from rank {from}")));
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the messages")?;
    Ok(format!(
        "{} messages from {n} ranks (0 B..{max} B, {} payload bytes) checked byte by byte, in \
         order per sender: {}",
        u64::from(n) * u64::from(MESSAGES),
        inbox.received,
        ctx.passive_ordered()
    ))
}

/// What has arrived so far: the next sequence number due from each sender.
struct Inbox {
    next: Vec<u32>,
    received: u64,
    max: usize,
}

impl Inbox {
    /// Receives and checks one message; `false` when a `Test` receive found none.
    fn take(&mut self, ctx: &Context, timeout: Timeout) -> Outcome<bool> {
        let (from, bytes) = match ctx.passive_receive(timeout) {
            Ok(m) => m,
            Err(Error::Timeout) if timeout == Timeout::Test => return Ok(false),
            Err(e) => return Err(Failure(format!("passive_receive: {e}"))),
        };
        let slot = self
            .next
            .get_mut(from as usize)
            .ok_or_else(|| Failure(format!("a message from rank {from}, beyond the job")))?;
        let seq = *slot;
        if ctx.passive_ordered() && bytes.len() >= 4 {
            let got = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            if got != seq {
                return Err(Failure(format!(
                    "from rank {from}: message {got} arrived when {seq} was due"
                )));
            }
        }
        compare(
            format_args!("message {seq} from rank {from}"),
            &bytes,
            &payload(from, seq, self.max),
        )?;
        *slot += 1;
        self.received += bytes.len() as u64;
        Ok(true)
    }
}
