//! Test helper (not installed for users' sake, but harmless): exercises `gaspi_pmi::PmiClient`
//! across real processes under a real launcher (`gaspirun`, `mpiexec.hydra`).
//!
//! `gaspi-pmi-check [MODE]`, MODE one of:
//! * `exchange` (default): every rank puts a short and a 5000-character value, meets the others
//!   in a barrier, reads back and checks every rank's values, finalizes and prints
//!   `ok <rank> <size>`.
//! * `leave-early`: the last rank exits 0 right after connecting, while the others enter a
//!   barrier it never reaches; the launcher must end the job instead of hanging.
//! * `abort`: the last rank calls PMI abort with exit code 5 while the others wait in a barrier.

use std::process::ExitCode;

use gaspi_pmi::PmiClient;

/// Length of the long value; well above any PMI value limit, so it must be split.
const LONG_LEN: usize = 5000;

fn main() -> ExitCode {
    let mode = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "exchange".to_owned());
    match run(&mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gaspi-pmi-check: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(mode: &str) -> Result<(), String> {
    let mut pmi = PmiClient::from_env()
        .map_err(|e| e.to_string())?
        .ok_or("no PMI environment (PMI_FD / PMI_PORT unset)")?;
    let (rank, size) = (pmi.rank(), pmi.size());
    let last = rank + 1 == size;
    match mode {
        "exchange" => exchange(&mut pmi)?,
        "leave-early" if last => return Ok(()),
        "abort" if last => {
            pmi.abort(5, "requested by the test");
            std::process::exit(5);
        }
        "leave-early" | "abort" => pmi.barrier().map_err(|e| e.to_string())?,
        other => return Err(format!("unknown mode {other:?}")),
    }
    pmi.finalize().map_err(|e| e.to_string())?;
    println!("ok {rank} {size}");
    Ok(())
}

/// A value no other rank produces, hex digits only, of `LONG_LEN` characters.
fn long_value(rank: u32) -> String {
    (0..LONG_LEN)
        .map(|i| char::from(b"0123456789abcdef"[(i * 7 + rank as usize) % 16]))
        .collect()
}

fn exchange(pmi: &mut PmiClient) -> Result<(), String> {
    let (rank, size) = (pmi.rank(), pmi.size());
    let fail = |e: gaspi_pmi::Error| e.to_string();
    pmi.put(&format!("check-short-{rank}"), &format!("{rank:x}"))
        .map_err(fail)?;
    pmi.put(&format!("check-long-{rank}"), &long_value(rank))
        .map_err(fail)?;
    pmi.barrier().map_err(fail)?;
    for peer in 0..size {
        let short = pmi
            .get(peer, &format!("check-short-{peer}"))
            .map_err(fail)?;
        if short != format!("{peer:x}") {
            return Err(format!("rank {peer}'s short value is {short:?}"));
        }
        let long = pmi.get(peer, &format!("check-long-{peer}")).map_err(fail)?;
        if long != long_value(peer) {
            return Err(format!(
                "rank {peer}'s long value came back wrong ({} characters)",
                long.len()
            ));
        }
    }
    match pmi.get(0, "check-never-put") {
        Err(gaspi_pmi::Error::Bootstrap { .. }) => {}
        other => return Err(format!("getting a missing key gave {other:?}")),
    }
    // Nobody may finalize while a slower rank still reads.
    pmi.barrier().map_err(fail)
}
