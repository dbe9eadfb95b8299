//! `early-exit`: a rank that vanishes must not leave the others hanging.
//!
//! The last rank leaves with status 0 right after init, without finalize (as a program that
//! forgot to call it, or `exit`ed from a library, would). The others enter a barrier that can
//! never complete, with a timeout far longer than any sane job would wait. A working launcher
//! ends the job promptly, with a non-zero status; at the latest, the survivors' barrier fails.
//! Either way the job fails, so this scenario never prints an `ok` line: the caller (the test
//! suite) checks that `gaspirun` returned non-zero quickly and that no rank process survived.
//! Every rank prints its pid first, on its data line, so that the caller can check the latter.

use std::time::{Duration, Instant};

use gaspi::{Context, Timeout};

use crate::check::{Data, Failure};
use crate::options::Leave;

/// Well beyond the 30 s the test suite allows for the whole job, so that a job ended by this
/// timeout rather than by the launcher fails the test.
const SURVIVOR_TIMEOUT: Duration = Duration::from_secs(45);

/// Runs the scenario; returns only on the survivors, with the failure they observed.
pub fn run(ctx: &Context, leave: Leave) -> Failure {
    let (me, n) = (ctx.rank(), ctx.size());
    let mut data = Data::default();
    data.put("pid", std::process::id());
    data.print_now("early-exit", me);
    // Everyone has reported its pid before anyone leaves: on a loaded machine a rank could
    // otherwise be killed between init and its report.
    if let Err(e) = ctx.barrier(Timeout::from(SURVIVOR_TIMEOUT)) {
        return Failure(format!("the barrier before leaving failed: {e}"));
    }
    if me == n - 1 {
        // Neither runs destructors: the context is neither finalized nor dropped, which is
        // exactly the situation the other ranks must survive.
        match leave {
            Leave::Exit => {
                println!("early-exit rank {me}: leaving with status 0, without finalize");
                std::process::exit(0);
            }
            Leave::Abort => {
                println!("early-exit rank {me}: aborting");
                std::process::abort();
            }
        }
    }
    let start = Instant::now();
    let outcome = ctx.barrier(Timeout::from(SURVIVOR_TIMEOUT));
    let took = start.elapsed();
    match outcome {
        Ok(()) => Failure(format!(
            "the barrier completed after {took:?} although rank {} had left",
            n - 1
        )),
        Err(e) => Failure(format!(
            "the barrier failed after {took:?} as it must (rank {} left): {e}",
            n - 1
        )),
    }
}
