//! The crate's error type.

use std::io;

/// Why a PMI request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The conversation with the process manager (`gaspirun`, `mpiexec.hydra` or `srun`)
    /// failed.
    #[error("PMI bootstrap failed during {command}: {reason}")]
    Bootstrap {
        /// The PMI command in flight (`init`, `put`, `barrier_in`, ...).
        command: String,
        /// What went wrong.
        reason: String,
    },

    /// A setting from the environment is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What the client was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn bootstrap(command: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Bootstrap {
            command: command.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
