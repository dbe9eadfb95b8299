//! PMI-1 bootstrap: how the ranks of a job find each other.
//!
//! A launcher (`gaspirun`, `mpiexec.hydra`, Slurm's `srun --mpi=pmi2`) hands every rank a
//! connection to its process manager. Over it, ranks publish small strings (their endpoint
//! addresses) in a shared key-value space, meet in a barrier, and read each other's strings.
//! This crate owns that conversation in the PMI-1 "simple" wire protocol: the client each rank
//! uses ([`PmiClient`]), and the server state `gaspirun` runs.

#![warn(missing_docs)]

mod client;
mod error;
pub mod server;
mod split;
pub mod wire;

pub use client::PmiClient;
pub use error::{Error, Result};

/// The key under which rank `rank` publishes its process id, first thing after it connected:
/// a launcher that started the rank through a wrapper (a shell, a script) knows the
/// wrapper's pid only, and reads here whose shared-memory files to remove when the rank dies.
pub fn pid_key(rank: u32) -> String {
    format!("gaspi-pid-{rank}")
}
