//! The callgrind harness's program (`cg_pscw`, see `scripts/callgrind-pscw.sh`) as real jobs
//! of two processes under `gaspirun`, over `tcp` and `shm`, with `GASPI_INTRANODE` set either
//! way: a few rounds of the epoch ping-pong and of the write_notify ping-pong it counts, every
//! block checked by the program itself, which fails the job on a mismatch; here, that both
//! ranks ran the case through.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{example, gaspirun_with_env, jobs, PROVIDERS};

/// Counted rounds after the program's warm-up: enough to run every counted path.
const ROUNDS: &str = "10";

/// `cg_pscw CASE` over `provider` with `GASPI_INTRANODE=intranode`.
fn check(provider: &str, intranode: &str, case: &str) {
    assert!(PROVIDERS.contains(&provider));
    let env = [format!("GASPI_INTRANODE={intranode}")];
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let job = gaspirun_with_env(&env, 2, provider, &example("cg_pscw"), &[case, ROUNDS]);
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..2 {
        let data = job.data("cg_pscw", rank);
        assert_eq!(data.get(case), "ok", "rank {rank}\n{report}");
    }
}

jobs! {
    epoch_direct_tcp: check("tcp", "direct", "epoch");
    epoch_direct_shm: check("shm", "direct", "epoch");
    epoch_fabric_tcp: check("tcp", "fabric", "epoch");
    epoch_fabric_shm: check("shm", "fabric", "epoch");
    pingpong_direct_shm: check("shm", "direct", "pingpong");
    pingpong_fabric_tcp: check("tcp", "fabric", "pingpong");
}
