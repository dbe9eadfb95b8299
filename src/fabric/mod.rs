//! The libfabric layer: the only place where the runtime calls into C for communication.
//!
//! It owns every fid (fabric, domain, completion queue, address vector, endpoint, memory
//! registrations) in a Rust value that closes it on drop, in the order libfabric requires. The rest
//! of the runtime sees a small, safe vocabulary: open an [`Endpoint`] for a provider, exchange
//! names, register memory, post RMA operations (which may report "try again"), read completions.
//!
//! Every `unsafe` block of the transport lives in this module and its children.

mod endpoint;
mod info;
mod mr;

pub(crate) use endpoint::{CqEvent, CqFailure, Endpoint, Posted, RemoteTarget};
pub(crate) use info::{available_providers, Capabilities};
pub(crate) use mr::MemoryRegion;

use std::ffi::CStr;

use crate::error::Error;
use gaspi_sys as sys;

/// Turns a negative libfabric return code into [`Error::Fabric`].
pub(crate) fn fabric_error(call: &'static str, ret: i64) -> Error {
    let code = ret.unsigned_abs() as i32;
    Error::Fabric {
        call,
        code,
        message: strerror(code),
    }
}

pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any input.
    unsafe { CStr::from_ptr(sys::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// Checks an `int` return code of a libfabric control call.
fn check(call: &'static str, ret: i32) -> Result<(), Error> {
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
