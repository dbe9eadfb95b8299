//! `linger`: ranks that stay in the job until it is killed from outside.
//!
//! Every rank creates a segment, and once every rank has (so that all its shared-memory files
//! exist) prints its pid on its data line, then sleeps without finalize. The test suite kills `gaspirun`
//! itself (SIGKILL, which it cannot catch) and checks that nothing of the job is left: no
//! rank process, no shared-memory file. This scenario never prints an `ok` line; left alone
//! it fails after [`LINGER`].

use std::time::Duration;

use gaspi::{Context, Timeout};

use crate::check::{Data, Failure};

/// Far longer than the test suite waits before it kills the job.
const LINGER: Duration = Duration::from_secs(60);

/// Runs the scenario; returns only if nobody ended the job within [`LINGER`].
pub fn run(ctx: &Context) -> Failure {
    if let Err(e) = ctx.segment_create(0, 4096, Timeout::from(LINGER)) {
        return Failure(format!("creating the segment failed: {e}"));
    }
    let mut data = Data::default();
    data.put("pid", std::process::id());
    data.print_now("linger", ctx.rank());
    std::thread::sleep(LINGER);
    Failure(format!("nobody ended the job within {LINGER:?}"))
}
