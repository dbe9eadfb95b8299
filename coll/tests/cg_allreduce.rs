//! The callgrind harness's program (`cg_allreduce`, see `scripts/callgrind-allreduce.sh`) as
//! real jobs of separate processes under `gaspirun`, over `tcp` and `shm`, with
//! `GASPI_INTRANODE` set either way: a few calls of each allreduce it counts (the engine's, the
//! runtime's and the floor on the public calls), every result checked to the bit by the
//! program itself, which fails the job on a mismatch; here, that every rank ran each of them,
//! and that the floor, which only the direct path takes, is skipped and says so under
//! `fabric`.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{example, gaspirun_with_env, jobs, PROVIDERS};

/// Calls of each allreduce after the program's warm-up: enough to run every counted path.
const CALLS: &str = "10";

/// `cg_allreduce all CASE` on `ranks` ranks over `provider` with `GASPI_INTRANODE=intranode`.
fn check(ranks: u32, provider: &str, intranode: &str, case: &str) {
    assert!(PROVIDERS.contains(&provider));
    let env = [format!("GASPI_INTRANODE={intranode}")];
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let job = gaspirun_with_env(
        &env,
        ranks,
        provider,
        &example("cg_allreduce"),
        &["all", case, CALLS],
    );
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    let floor = match intranode {
        "direct" => "ok",
        _ => "skipped",
    };
    for rank in 0..ranks {
        let data = job.data("cg_allreduce", rank);
        assert_eq!(data.get("engine"), "ok", "rank {rank}\n{report}");
        assert_eq!(data.get("runtime"), "ok", "rank {rank}\n{report}");
        assert_eq!(data.get("floor"), floor, "rank {rank}\n{report}");
    }
    if floor == "skipped" {
        assert!(
            job.stderr
                .contains("floor skipped: rank 1 is not reached directly"),
            "the skipped floor says why\n{report}"
        );
    }
}

jobs! {
    direct_2_tcp: check(2, "tcp", "direct", "late");
    direct_2_shm: check(2, "shm", "direct", "there");
    direct_4_tcp: check(4, "tcp", "direct", "there");
    direct_4_shm: check(4, "shm", "direct", "late");
    fabric_2_tcp: check(2, "tcp", "fabric", "there");
    fabric_2_shm: check(2, "shm", "fabric", "late");
    fabric_4_tcp: check(4, "tcp", "fabric", "late");
    fabric_4_shm: check(4, "shm", "fabric", "there");
    step_direct_4_shm: check(4, "shm", "direct", "step");
    step_fabric_2_tcp: check(2, "tcp", "fabric", "step");
}
