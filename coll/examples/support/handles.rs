//! What the team examples share about handles: syncing a set in an order of each rank's own.
//! (Included beside `data.rs`, whose `mix64` draws the order.)

use gaspi::Timeout;
use gaspi_coll::{wait_sync_some, Handle};

use crate::data::mix64;

/// Syncs every handle of `handles`, shuffled by `seed`, then taken as they complete with
/// `wait_sync_some`; returns how many were synced, or the first failure.
pub fn sync_shuffled(
    mut handles: Vec<Handle<'_, '_>>,
    seed: u64,
    timeout: Timeout,
) -> gaspi_coll::Result<usize> {
    let mut seed = mix64(seed);
    for i in (1..handles.len()).rev() {
        seed = mix64(seed);
        handles.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let mut synced = 0;
    while !handles.is_empty() {
        let mut done = wait_sync_some(&mut handles, timeout)?;
        done.sort_by_key(|&(i, _)| std::cmp::Reverse(i));
        for (i, outcome) in done {
            outcome?;
            handles.swap_remove(i);
            synced += 1;
        }
    }
    Ok(synced)
}
