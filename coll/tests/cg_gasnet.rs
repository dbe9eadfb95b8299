//! The callgrind harness's program (`cg_gasnet`, see `scripts/callgrind-gasnet.sh`) as real
//! jobs of four processes under `gaspirun`, over `tcp` and `shm`, with `GASPI_INTRANODE` set
//! either way: a few calls of each rooted 8 B collective (and of the v forms) with rank 0 as
//! root and as leaf, every block checked by the program itself, which fails the job on a
//! mismatch; here, that every rank ran the case through.

#![forbid(unsafe_code)]

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{example, gaspirun_with_env, jobs, PROVIDERS};

/// Ranks: a binomial tree with a forwarding member.
const RANKS: u32 = 4;

/// Counted calls after the program's warm-up: enough to run every counted path.
const CALLS: &str = "10";

/// `cg_gasnet OP ROLE step` over `provider` with `GASPI_INTRANODE=intranode`.
fn check(provider: &str, intranode: &str, op: &str, role: &str) {
    assert!(PROVIDERS.contains(&provider));
    let env = [format!("GASPI_INTRANODE={intranode}")];
    let env: Vec<&str> = env.iter().map(String::as_str).collect();
    let args = [op, role, "step", CALLS];
    let job = gaspirun_with_env(&env, RANKS, provider, &example("cg_gasnet"), &args);
    let report = job.report();
    assert!(job.status.success(), "the job failed\n{report}");
    for rank in 0..RANKS {
        let data = job.data("cg_gasnet", rank);
        assert_eq!(data.get("check"), "ok", "rank {rank}\n{report}");
    }
}

jobs! {
    broadcast_root_direct_shm: check("shm", "direct", "broadcast", "root");
    scatter_leaf_direct_shm: check("shm", "direct", "scatter", "leaf");
    gather_root_fabric_tcp: check("tcp", "fabric", "gather", "root");
    gather_leaf_fabric_shm: check("shm", "fabric", "gather", "leaf");
    scatterv_root_direct_shm: check("shm", "direct", "scatterv", "root");
    gatherv_leaf_fabric_tcp: check("tcp", "fabric", "gatherv", "leaf");
}
