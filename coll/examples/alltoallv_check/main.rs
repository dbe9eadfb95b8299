//! Checks of the sparse alltoallv as real jobs: `gaspirun -n 4 --provider shm alltoallv_check
//! exchange 1000`. Every rank computes the bytes it must receive (see `plan.rs`), compares each
//! block the moment it is handed out, and prints one line per check, `data <scenario> rank R:
//! key=value; ...`, with what it was given (plans, errors as `Variant(fields)`, counts) and a
//! digest of every byte it read, which `coll/tests/alltoallv.rs` recomputes and judges.
//!
//! Scenarios (the first argument):
//! * `exchange LONG`: the cases of `plan.rs` (dense, sparse, a rank that sends or receives
//!   nothing, self only, 0 B to 16 MiB, consumer threads, and a long run of `LONG` rounds), one
//!   line per case, `data exchange-<case> rank R`: `sources` and `destinations` as the plan gave
//!   them, `required`, `rounds`, and `digest` (every block of every round, ascending source, then
//!   the bytes around the receive area); consumers also `taken` and `taken_digest`.
//! * `late`: one rank joins late while the others call with short timeouts and resume, in the
//!   discovery and in three kinds of rounds; then a sender runs a round ahead of a receiver that
//!   holds back its reset (see `late.rs`).
//! * `ahead`: a sender of small blocks rounds ahead of a receiver that holds back its resets
//!   (see `ahead.rs`).
//! * `errors`: every misuse, each reported by its variant, then rounds that still work (see
//!   `errors.rs`).
//! * `jitter ROUNDS`: fast senders against a slow receiver that pauses before each reset,
//!   the rounds cycling through plans of several block sizes; every block checked
//!   when handed out and again before its reset (see `jitter.rs`).
//! * `kill`: the last rank is killed (SIGKILL) in the middle of a round; the survivors report
//!   what the round told them (see `kill.rs`). Run it under `gaspirun --keep-going`.

#![forbid(unsafe_code)]

mod ahead;
#[path = "../support/casualty.rs"]
mod casualty;
mod check;
#[path = "../support/data.rs"]
mod data;
mod errors;
mod exchange;
mod jitter;
mod kill;
mod late;
mod plan;

use std::process::ExitCode;

use gaspi::{Context, Timeout};

/// The timeout of every call that is not meant to time out.
pub const TIMEOUT: Timeout = Timeout::Millis(30_000);

/// A check that failed, or an error that was not expected.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;
/// The result of a step.
pub type Outcome<T = ()> = Result<T, Failure>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["exchange", long] => match long.parse() {
            Ok(long) => in_job(Context::init(), false, |ctx| exchange::run(ctx, long)),
            Err(_) => Err("exchange LONG: a number of rounds".into()),
        },
        ["jitter", rounds] => match rounds.parse() {
            Ok(rounds) => in_job(Context::init(), false, |ctx| jitter::run(ctx, rounds)),
            Err(_) => Err("jitter ROUNDS: a number of rounds".into()),
        },
        ["late"] => in_job(Context::init(), false, late::run),
        ["ahead"] => in_job(Context::init(), false, ahead::run),
        ["errors"] => in_job(Context::init(), false, errors::run),
        ["kill"] => {
            kill::config().and_then(|config| in_job(Context::init_with(config), true, kill::run))
        }
        ["kill_discovery"] => kill::config()
            .and_then(|config| in_job(Context::init_with(config), true, kill::discovery)),
        _ => Err(
            "usage: alltoallv_check exchange LONG | jitter ROUNDS | late | ahead | errors | kill | kill_discovery"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
            // the job) leaves no half message.
            let line = format!("alltoallv_check: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

/// Runs `scenario` in the context `ctx`, then finalizes it; with `dead_rank`, a finalize that
/// names a dead rank is no failure (the survivors of the `kill` scenario finalize without their
/// victim).
fn in_job(
    ctx: gaspi::Result<Context>,
    dead_rank: bool,
    scenario: impl FnOnce(&Context) -> Outcome,
) -> Outcome {
    let ctx = ctx?;
    scenario(&ctx)?;
    match ctx.finalize(TIMEOUT) {
        Err(gaspi::Error::RankFailed { .. }) if dead_rank => Ok(()),
        done => Ok(done?),
    }
}
