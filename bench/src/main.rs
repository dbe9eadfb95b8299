//! `gaspi-bench`: write_notify ping-pong latency and streaming bandwidth, beside the same
//! patterns in raw libfabric and the host's floors (a shared-memory flag ping-pong, memcpy), the
//! all-ranks barrier and allreduce, rounds of `gaspi-coll`'s sparse alltoallv, epochs of its
//! post / start / complete / wait window, and GASNet's data-movement collectives on its teams,
//! as JSON lines. Run it under a launcher:
//!
//! ```text
//! gaspirun -n 2 --provider tcp gaspi-bench [pingpong|bandwidth|barrier|allreduce|alltoallv|pscw|gasnet|all]...
//! ```

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "usage: gaspirun -n N [--provider tcp|shm] gaspi-bench [pingpong|bandwidth|barrier|allreduce|alltoallv|pscw|gasnet|all]... [--only gaspi|yardsticks] [--max-rounds N]"
        );
        println!(
            "Prints one JSON line per figure on rank 0: gaspi beside raw libfabric, a shared-memory flag and memcpy."
        );
        return;
    }
    if let Err(e) = gaspi_bench::run(&args) {
        eprintln!("gaspi-bench: {e}");
        std::process::exit(1);
    }
}
