//! Broadcasts from every root, of 0 bytes to 1 MiB, blocking and not, and reports a digest of
//! everything each rank received. Run with `gaspirun -n 4 --provider shm broadcast`.
//!
//! Every rank prints one line, `data broadcast rank R: key=value; ...`:
//!
//! * `broadcasts` and `digest`: the main plan (see `plan.rs`) over `GROUP_ALL`, 50 rounds of
//!   0, 1, 4096 and 1 MiB bytes from a root that moves on with every broadcast, in the three
//!   forms (blocking, non-blocking polled with `test`, non-blocking with `wait`), and a last
//!   broadcast whose root joins late while the others call with a short timeout and resume;
//!   the digest covers every buffer after its broadcast;
//! * `late_timeouts`: how many of those short calls timed out before it completed;
//! * `mismatch`: what the broadcast in the middle of the plan, where rank 0 sends 64 bytes and
//!   the others pass 32, reported (`root/root_len/len` of the `LengthMismatch`, or `none`);
//! * `too_large`: what a broadcast of one byte more than the maximum reported on this rank,
//!   every rank passing that length (`len/max` of the `TooLarge`), just before that one (the
//!   plan's digest shows that the members stayed in step);
//! * `disagreed`: the member a second broadcast object named when rank 0 built it with
//!   another maximum than the others (`LibraryDisagreement`), or what it got instead;
//! * `sub_broadcasts` and `sub_digest`: a shorter plan on a second broadcast object over the
//!   group of every rank but 0 (`none` on rank 0 and in a job of one).
//!
//! `broadcast fault DEAD ROOT` (under `gaspirun --keep-going`): after one broadcast and a
//! barrier, rank DEAD exits without finalizing once the others are past it (`casualty`,
//! segment 0); the survivors then broadcast from ROOT and report
//! `data fault rank R: outcome=...` (`ok`, `failed:<rank>` for a `RankFailed`,
//! `aborted:<cause>:<parent>`, or `error:<message>`) and `digest` (of their buffer
//! afterwards; the root sends `plan::fill(ROOT, 1)`), then meet in a group of survivors.
//! `broadcast fault-known DEAD ROOT` does the same, but each survivor first waits until it
//! knows the death, and then broadcasts again (`again`, as `outcome`, or `abandoned`).
//!
//! `broadcast roots` (4 ranks): members that pass different roots. First ranks 0 to 2
//! broadcast from root 2 and rank 3 from root 0, whose trees both give rank 3 rank 2 as its
//! parent; then, on a second object, every rank broadcasts from itself with [`ROOTS_WAIT`].
//! Each reports `data roots rank R: shared_parent=...; self_rooted=...` (`ok`,
//! `root_mismatch:<root>/<parent>/<got>`, `timeout`, or `error:<message>`, each with
//! `/untouched` when the buffer still holds what it held before).

#![forbid(unsafe_code)]

#[path = "../support/casualty.rs"]
mod casualty;
#[path = "../support/data.rs"]
mod data;
mod plan;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use casualty::Casualty;
use gaspi::{Context, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Broadcast, Collectives, Error};
use plan::{Digest, Form, Step};

const TIMEOUT: Timeout = Timeout::Millis(30_000);

/// How long the members of `roots` that each take themselves for the root wait.
const ROOTS_WAIT: Timeout = Timeout::Millis(1_000);

type Outcome<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => run(),
        ["roots"] => roots(),
        [mode @ ("fault" | "fault-known"), dead, root] => match (dead.parse(), root.parse()) {
            (Ok(dead), Ok(root)) => fault(dead, root, mode == "fault-known"),
            _ => Err(format!("{mode} DEAD ROOT: ranks are numbers").into()),
        },
        _ => Err("usage: broadcast [roots | fault|fault-known DEAD ROOT]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
            // the job) leaves no half message.
            let line = format!("broadcast: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

fn run() -> Outcome<()> {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    let coll = Collectives::new(&ctx)?;
    let mut bcast = Broadcast::new(&coll, GROUP_ALL, plan::MAX_BYTES, TIMEOUT)?;
    let all: Vec<Rank> = (0..n).collect();
    let mut digest = Digest::default();
    let mut late_timeouts = 0;
    let mut mismatch = "none".to_owned();
    let mut too_large = "none".to_owned();
    let steps = plan::steps(n, plan::ROUNDS, true);
    for step in &steps {
        if step.round == plan::MISMATCH_AFTER && step.len == plan::LENGTHS[0] {
            too_large = refused(&mut bcast)?;
            mismatch = mismatched(&mut bcast, me)?;
        }
        let got = broadcast(&mut bcast, &all, me, step)?;
        digest.add(&got.data);
        late_timeouts += got.timeouts;
    }
    // Every rank but 0: a group whose member indices are not its ranks.
    let sub: Vec<Rank> = (1..n).collect();
    let group = ctx.group_create()?;
    for &rank in &sub {
        ctx.group_add(group, rank)?;
    }
    let (sub_broadcasts, sub_digest) = if sub.contains(&me) {
        ctx.group_commit(group, TIMEOUT)?;
        let mut bcast = Broadcast::new(&coll, group, plan::MAX_BYTES, TIMEOUT)?;
        let mut digest = Digest::default();
        let steps = plan::steps(sub.len() as u32, plan::SUB_ROUNDS, false);
        for step in &steps {
            digest.add(&broadcast(&mut bcast, &sub, me, step)?.data);
        }
        (steps.len().to_string(), digest.hex())
    } else {
        ("none".to_owned(), "none".to_owned())
    };
    let max = if me == 0 { 8 } else { 16 };
    let disagreed = match Broadcast::new(&coll, GROUP_ALL, max, TIMEOUT) {
        Err(Error::Gaspi(gaspi::Error::LibraryDisagreement { rank, .. })) => rank.to_string(),
        Err(e) => format!("error:{e}"),
        Ok(_) => "built".to_owned(),
    };
    println!(
        "data broadcast rank {me}: broadcasts={}; digest={}; late_timeouts={late_timeouts}; \
         mismatch={mismatch}; too_large={too_large}; sub_broadcasts={sub_broadcasts}; \
         sub_digest={sub_digest}; disagreed={disagreed}",
        steps.len(),
        digest.hex()
    );
    drop(bcast);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// What a member got from one broadcast.
struct Got {
    data: Vec<u8>,
    /// Calls that timed out before it completed (the late step).
    timeouts: u32,
}

/// Runs `step` on this member `me` of the group `members`: the root fills its buffer from the
/// plan, the others start from bytes that differ from anything a root sends.
fn broadcast(bcast: &mut Broadcast<'_>, members: &[Rank], me: Rank, step: &Step) -> Outcome<Got> {
    let root = members[step.root as usize];
    let mut data = plan::initial(me, step.len);
    if me == root {
        plan::fill(root, step.round, &mut data);
    }
    let mut timeouts = 0;
    match step.form {
        Form::Blocking => bcast.broadcast(root, &mut data, TIMEOUT)?,
        Form::Polled => {
            let give_up = Instant::now() + Duration::from_secs(30);
            let mut handle = bcast.broadcast_nb(root, &mut data)?;
            while !handle.test()? {
                if Instant::now() > give_up {
                    return Err(
                        format!("round {}: test never reported completion", step.round).into(),
                    );
                }
                std::thread::yield_now();
            }
        }
        Form::Waited => bcast.broadcast_nb(root, &mut data)?.wait(TIMEOUT)?,
        Form::Late if me == root => {
            std::thread::sleep(Duration::from_millis(plan::LATE_MS));
            bcast.broadcast(root, &mut data, TIMEOUT)?;
        }
        Form::Late => {
            let give_up = Instant::now() + Duration::from_secs(30);
            loop {
                match bcast.broadcast(root, &mut data, Timeout::Millis(plan::LATE_POLL_MS)) {
                    Ok(()) => break,
                    Err(e) if e.is_timeout() && Instant::now() < give_up => timeouts += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(Got { data, timeouts })
}

/// Every member broadcasts one byte more than the maximum from rank 0; returns what this rank
/// was told.
fn refused(bcast: &mut Broadcast<'_>) -> Outcome<String> {
    let mut data = vec![0u8; plan::MAX_BYTES as usize + 1];
    match bcast.broadcast(0, &mut data, TIMEOUT) {
        Ok(()) => Ok("none".to_owned()),
        Err(Error::TooLarge { len, max, .. }) => Ok(format!("{len}/{max}")),
        Err(e) => Err(e.into()),
    }
}

/// Rank 0 broadcasts [`plan::MISMATCH_LEN`] bytes while the others pass half as many; returns
/// what this rank was told.
fn mismatched(bcast: &mut Broadcast<'_>, me: Rank) -> Outcome<String> {
    let len = if me == 0 {
        plan::MISMATCH_LEN
    } else {
        plan::MISMATCH_LEN / 2
    };
    let mut data = vec![0u8; len];
    match bcast.broadcast(0, &mut data, TIMEOUT) {
        Ok(()) => Ok("none".to_owned()),
        Err(Error::LengthMismatch {
            root,
            root_len,
            len,
            ..
        }) => Ok(format!("{root}/{root_len}/{len}")),
        Err(e) => Err(e.into()),
    }
}

/// How a broadcast after the death ended, for the report.
fn shown(result: Result<(), Error>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(Error::Gaspi(gaspi::Error::RankFailed { rank, .. })) => format!("failed:{rank}"),
        Err(Error::Aborted { cause, parent }) => format!("aborted:{cause}:{parent}"),
        Err(Error::Abandoned { .. }) => "abandoned".to_owned(),
        Err(e) => format!("error:{e}"),
    }
}

/// `fault` (`known`: `fault-known`), see the module documentation.
fn fault(dead: Rank, root: Rank, known: bool) -> Outcome<()> {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    if dead >= n || root >= n {
        return Err(format!("fault {dead} {root}: a job of {n} ranks").into());
    }
    let casualty = Casualty::new(&ctx, dead, 0, TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let mut bcast = Broadcast::new(&coll, GROUP_ALL, plan::FAULT_LEN as u64, TIMEOUT)?;
    let mut data = plan::initial(me, plan::FAULT_LEN);
    if me == root {
        plan::fill(root, 0, &mut data);
    }
    // Once before the death: every member has resolved its neighbours in this tree.
    bcast.broadcast(root, &mut data, TIMEOUT)?;
    ctx.barrier(TIMEOUT)?;
    if me == dead {
        casualty.survivors_past(&ctx, TIMEOUT)?;
        // Without finalizing, as a crash would.
        std::process::exit(3);
    }
    casualty.past(&ctx, TIMEOUT)?;
    if known {
        let start = Instant::now();
        while ctx.known_failure([dead]).is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("rank {dead}'s death unknown after 20 s").into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    data = plan::initial(me, plan::FAULT_LEN);
    if me == root {
        plan::fill(root, 1, &mut data);
    }
    let start = Instant::now();
    let outcome = shown(bcast.broadcast(root, &mut data, TIMEOUT));
    let again = match known {
        true => shown(bcast.broadcast(root, &mut data.clone(), TIMEOUT)),
        false => "none".to_owned(),
    };
    let elapsed = start.elapsed();
    let mut received = Digest::default();
    received.add(&data);
    // The survivors meet, so that none leaves before what it sent has arrived.
    let group = ctx.group_create()?;
    for rank in (0..n).filter(|&r| r != dead) {
        ctx.group_add(group, rank)?;
    }
    ctx.group_commit(group, TIMEOUT)?;
    ctx.group_barrier(group, TIMEOUT)?;
    println!(
        "data fault rank {me}: outcome={outcome}; again={again}; digest={}; elapsed_ms={}",
        received.hex(),
        elapsed.as_millis()
    );
    drop(bcast);
    drop(coll);
    match ctx.finalize(TIMEOUT) {
        Ok(()) | Err(gaspi::Error::RankFailed { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `roots`, see the module documentation.
fn roots() -> Outcome<()> {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    if n != 4 {
        return Err(format!("roots: a job of 4 ranks, not {n}").into());
    }
    let coll = Collectives::new(&ctx)?;
    let ended = |result: Result<(), Error>, buf: &[u8], before: &[u8]| {
        let how = match result {
            Ok(()) => "ok".to_owned(),
            Err(Error::RootMismatch {
                root, parent, got, ..
            }) => format!("root_mismatch:{root}/{parent}/{got}"),
            Err(e) if e.is_timeout() => "timeout".to_owned(),
            Err(e) => format!("error:{e}"),
        };
        match buf == before {
            true => format!("{how}/untouched"),
            false => how,
        }
    };
    let mut shared = Broadcast::new(&coll, GROUP_ALL, plan::FAULT_LEN as u64, TIMEOUT)?;
    let root = if me == n - 1 { 0 } else { 2 };
    let before = plan::initial(me, plan::FAULT_LEN);
    let mut data = before.clone();
    if me == root {
        plan::fill(root, 0, &mut data);
    }
    let shared_parent = ended(shared.broadcast(root, &mut data, TIMEOUT), &data, &before);
    ctx.barrier(TIMEOUT)?;
    let mut own = Broadcast::new(&coll, GROUP_ALL, plan::FAULT_LEN as u64, TIMEOUT)?;
    let mut data = before.clone();
    let self_rooted = ended(own.broadcast(me, &mut data, ROOTS_WAIT), &data, &before);
    // Nobody drops an object while a member may still look at it.
    ctx.barrier(TIMEOUT)?;
    println!("data roots rank {me}: shared_parent={shared_parent}; self_rooted={self_rooted}");
    drop(own);
    drop(shared);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    Ok(())
}
