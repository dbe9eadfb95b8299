//! gaspirun's own resource limits, which every rank it starts inherits.
//!
//! A job of n ranks on one host needs about 4 descriptors per rank in gaspirun and, in each
//! rank, one pidfd per other rank on the host plus a socket per peer over tcp: at 256 ranks
//! both exceed the soft `RLIMIT_NOFILE` of 1024 that most distributions set, far below the
//! hard limit. As `mpiexec.hydra` and Open MPI's launcher do, gaspirun raises its soft limit
//! to the hard one before it starts anything, so that neither it nor its ranks fail for a
//! limit the user could have raised without privileges.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raises the soft limit on open file descriptors to the hard limit. A limit that cannot be
/// read or set is left as it is: gaspirun short of descriptors reports the rank it could not
/// start, and a rank short of them fails `Context::init` with `Error::Limit`, both naming the
/// limit to raise.
pub(crate) fn raise_descriptors() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
