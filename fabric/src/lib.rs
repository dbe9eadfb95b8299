//! A safe layer over libfabric: one reliable-datagram endpoint per process, registered memory,
//! and operations that own what they need until they complete.
//!
//! This crate is the only place where gaspi calls into C for communication, and every `unsafe`
//! block of the transport lives here. What it hands upwards is safe to use:
//!
//! * an [`Endpoint`] owns the fabric, domain, completion queue, address vector and endpoint of
//!   one provider and closes them in the order libfabric requires;
//! * a [`Region`] is [`SegmentMemory`](gaspi_segments::SegmentMemory) registered with the
//!   domain; operations name their local bytes as a [`Slice`] of a region, bounds-checked;
//! * every posted operation carries an *operation record* of the caller's type `T`. The
//!   endpoint boxes the record together with a reference to the region the operation reads or
//!   writes, passes the box to libfabric as the operation's context, and hands the record back
//!   in exactly one [`Event`] when the operation completes (or fails). So the memory an
//!   operation uses stays registered and mapped for as long as the provider may touch it,
//!   whatever the caller drops meanwhile, and the caller dispatches completions on a typed
//!   record instead of decoding a context word.
//!
//! An operation that never completes (towards a peer that died, on a provider that then never
//! reports it) keeps its record and region alive for good: a leak, never a use-after-free.

#![warn(missing_docs)]

mod endpoint;
mod info;
mod region;
mod stale;

pub use endpoint::{Endpoint, Event, Failure, Posted, Refused, RemoteTarget};
pub use info::{available_providers, Capabilities};
pub use region::{Region, Slice};

use std::ffi::CStr;

use gaspi_sys as sys;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libfabric call failed.
    #[error("libfabric {call} failed: {message} (fi_errno {code})")]
    Fabric {
        /// The libfabric function that failed.
        call: &'static str,
        /// Positive libfabric error number.
        code: i32,
        /// `fi_strerror` of `code`.
        message: String,
    },

    /// The requested provider does not exist or cannot give what gaspi needs.
    #[error("libfabric provider {requested:?} is not usable here: {reason}; providers on this host: {available}")]
    ProviderUnavailable {
        /// The provider asked for.
        requested: String,
        /// Why it was rejected.
        reason: String,
        /// Comma-separated providers that `fi_getinfo` lists on this host.
        available: String,
    },

    /// A byte range outside its region.
    #[error("range {offset}+{len} is outside a registered region of {region_len} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Length of the region.
        region_len: u64,
    },

    /// The arguments of an operation do not fit together (an atomic's words in different
    /// regions, a word that is not 8 bytes, a name libfabric cannot take).
    #[error("invalid operation: {0}")]
    Invalid(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns a negative libfabric return code into [`Error::Fabric`].
fn fabric_error(call: &'static str, ret: i64) -> Error {
    let code = ret.unsigned_abs() as i32;
    Error::Fabric {
        call,
        code,
        message: strerror(code),
    }
}

/// libfabric's description of error number `code`.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any input.
    unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// Checks an `int` return code of a libfabric control call.
fn check(call: &'static str, ret: i32) -> Result<()> {
    if ret < 0 {
        Err(fabric_error(call, ret as i64))
    } else {
        Ok(())
    }
}

/// The version of the API we were compiled against, as `FI_VERSION(major, minor)` computes it.
fn api_version() -> u32 {
    (sys::FI_MAJOR_VERSION << 16) | sys::FI_MINOR_VERSION
}
