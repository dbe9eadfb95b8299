//! `gaspi-selftest`: checks a `gaspi` installation with real multi-rank jobs.
//!
//! ```text
//! gaspirun -n 4 gaspi-selftest integrity
//! gaspirun -n 4 --provider shm gaspi-selftest stress
//! ```
//!
//! Each subcommand is one scenario. Every rank runs it, checks what it received (every byte,
//! every notification value, every error variant) and prints exactly one line
//! `ok <scenario> rank R: <what was checked>`, followed, for scenarios that report
//! observations for the tests to judge, by one line `data <scenario> rank R: key=value; ...`
//! (see `check::Data`); on any mismatch it prints
//! `FAIL <scenario> rank R: <what differed>` on stderr and exits with status 1, which makes the
//! launcher stop the job. `early-exit` is the exception: it makes the job fail on purpose, to
//! check that the launcher and the survivors notice a rank that vanished; so is `linger`,
//! whose job the test suite kills. `fault`, `quiet-death`, `killed-target` and
//! `blocked-death` kill their last rank and need `gaspirun --keep-going`; only the survivors
//! print `ok`.
//!
//! The integration tests in `tests/multiprocess*.rs` run every scenario under `gaspirun` over
//! the `tcp` and `shm` providers.

mod allreduce;
mod atomics;
mod blocked_death;
mod check;
mod crossed;
mod dead_read;
mod early_exit;
mod errors;
mod exit;
mod fault;
mod groups;
mod integrity;
mod killed_target;
mod library;
mod linger;
mod options;
mod order;
mod passive;
mod quiet_death;
mod serialised;
mod stale_files;
mod stopped;
mod stress;
mod threads;
mod timeouts;
mod unmapped;
mod unwaited;
mod victim;

use std::process::ExitCode;

use gaspi::{Config, Context, Timeout};

use check::{Failure, Report};
use options::{Command, Options, Scenario};

/// Bound for collective steps outside the scenarios (the final barrier): generous, because
/// ranks of a job on an oversubscribed CI machine may arrive seconds apart.
pub const FINALIZE_TIMEOUT: Timeout = Timeout::Millis(60_000);

fn main() -> ExitCode {
    match options::parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{}", options::HELP);
            ExitCode::SUCCESS
        }
        Ok(Command::Run(scenario, opts)) => run(scenario, &opts),
        Err(message) => {
            eprintln!("gaspi-selftest: {message}\nTry 'gaspi-selftest --help'.");
            ExitCode::from(2)
        }
    }
}

fn run(scenario: Scenario, opts: &Options) -> ExitCode {
    let name = scenario.name();
    // Held to the end: removes the files of live processes the scenario planted.
    let _live_files = match scenario {
        Scenario::StaleFiles => match stale_files::plant() {
            Ok(live) => Some(live),
            Err(failure) => {
                eprintln!("FAIL {name}: {}", failure.0);
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let ctx = match init(scenario) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("FAIL {name}: joining the job failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let me = ctx.rank();
    let outcome: Result<Report, Failure> = match scenario {
        Scenario::Integrity => integrity::run(&ctx, opts),
        Scenario::Stress => stress::run(&ctx, opts),
        Scenario::Threads => threads::run(&ctx, opts).map(Report::from),
        Scenario::Timeouts => timeouts::run(&ctx),
        Scenario::Order => order::run(&ctx),
        Scenario::Serialised => serialised::run(&ctx),
        Scenario::Crossed => crossed::run(&ctx),
        Scenario::Groups => groups::run(&ctx).map(Report::from),
        Scenario::Allreduce => allreduce::run(&ctx),
        Scenario::Passive => passive::run(&ctx).map(Report::from),
        Scenario::Atomics => atomics::run(&ctx),
        Scenario::Errors => errors::run(&ctx),
        Scenario::EarlyExit => Err(early_exit::run(&ctx, opts.leave)),
        Scenario::Fault => fault::run(&ctx),
        Scenario::Stopped => stopped::run(&ctx),
        Scenario::Library => library::run(&ctx),
        Scenario::DeadRead => dead_read::run(&ctx),
        Scenario::KilledTarget => killed_target::run(&ctx),
        Scenario::BlockedDeath => blocked_death::run(&ctx),
        Scenario::QuietDeath => quiet_death::run(&ctx),
        Scenario::Unmapped => unmapped::run(&ctx),
        Scenario::StaleFiles => stale_files::run(&ctx),
        Scenario::Exit => exit::run(&ctx),
        Scenario::Unwaited => unwaited::run(&ctx),
        Scenario::Linger => Err(linger::run(&ctx)),
    };
    let mut report = match outcome {
        Ok(report) => report,
        Err(failure) => return failed(name, me, &failure, ctx),
    };
    // Scenarios whose finalize is itself a check say what it showed; the others must simply
    // finalize.
    let finalized = match scenario {
        Scenario::Timeouts => timeouts::finalize_resumes_after_timeout(ctx),
        Scenario::Fault => fault::finalize_reports_the_dead_rank(ctx, &mut report.data),
        Scenario::DeadRead
        | Scenario::KilledTarget
        | Scenario::BlockedDeath
        | Scenario::QuietDeath => dead_read::finalize_names_the_dead_rank(ctx, &mut report.data),
        Scenario::Stopped => stopped::finalize_while_stopped(ctx, &mut report.data),
        _ => match ctx.finalize(FINALIZE_TIMEOUT) {
            Ok(()) => return passed(name, me, &report),
            // A finalize that timed out or was refused hands the context back in `e`.
            Err(e) => {
                let failure = Failure(format!("finalize failed after the checks passed: {e}"));
                return failed(name, me, &failure, e);
            }
        },
    };
    match finalized {
        Ok(finalized) => {
            report.summary = format!("{}; {finalized}", report.summary);
            passed(name, me, &report)
        }
        Err(failure) => failed(name, me, &failure, ()),
    }
}

/// Prints the `ok` line (and the `data` line, if any).
fn passed(name: &str, me: gaspi::Rank, report: &Report) -> ExitCode {
    println!("ok {name} rank {me}: {}", report.summary);
    if !report.data.is_empty() {
        println!("data {name} rank {me}: {}", report.data.line());
    }
    ExitCode::SUCCESS
}

/// Prints the `FAIL` line, and only then drops `held` (the context, or an error holding it):
/// its teardown may block (a PMI finalize that the launcher, ending the job, leaves unanswered
/// until the bootstrap timeout) or the rank may be killed meanwhile, and the reason for the
/// failure must not be lost with it.
fn failed<T>(name: &str, me: gaspi::Rank, failure: &Failure, held: T) -> ExitCode {
    eprintln!("FAIL {name} rank {me}: {}", failure.0);
    drop(held);
    ExitCode::FAILURE
}

fn init(scenario: Scenario) -> gaspi::Result<Context> {
    let mut config = Config::from_env()?;
    if scenario == Scenario::Errors {
        // See `errors::QUEUE_DEPTH`: makes full queues and busy segments deterministic.
        config.queue_depth = errors::QUEUE_DEPTH;
        config.progress_thread = false;
    }
    // Both kill a rank that takes writes (see `killed_target::configure`).
    if matches!(scenario, Scenario::KilledTarget | Scenario::Fault) {
        killed_target::configure(&mut config);
    }
    Context::init_with(config)
}
