//! The `gaspirun` launcher: starts the ranks of a job on this host, serves them PMI-1, forwards
//! their output, and turns their fates into one exit status.
//!
//! The binary (`src/main.rs`) only calls [`main`]; everything lives here so the pieces can
//! be unit-tested.

#![warn(missing_docs)]

mod guard;
mod job;
mod leftovers;
mod limits;
mod options;
mod output;
mod rank;
mod signals;

use std::io::{self, Write};

use options::Parsed;

/// Exit status for command-line mistakes.
const USAGE_ERROR: u8 = 2;

/// Runs `gaspirun` with this process's command line and returns its exit status.
pub fn main() -> u8 {
    if guard::is_guard() {
        guard::serve(io::stdin().lock());
        return 0;
    }
    let args = std::env::args_os().skip(1);
    match options::parse(args, std::env::var_os(options::TIMEOUT_ENV)) {
        Ok(Parsed::Help) => {
            let _ = io::stdout().write_all(options::HELP.as_bytes());
            0
        }
        Ok(Parsed::Version) => {
            let _ = writeln!(io::stdout(), "gaspirun {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(Parsed::Run(options)) => job::run(options),
        Err(message) => {
            report(&format!(
                "{message}\nTry 'gaspirun --help' for more information."
            ));
            USAGE_ERROR
        }
    }
}

/// Prints `gaspirun: <message>` to stderr. Write errors are ignored: a closed stderr must not
/// become a panic that abandons a job half torn down.
fn report(message: &str) {
    let _combined = output::combined_lock();
    let _ = writeln!(io::stderr().lock(), "gaspirun: {message}");
}
