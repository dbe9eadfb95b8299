//! Runtime configuration: the GASPI-like knobs, with defaults, environment overrides and checks.
//!
//! Defaults follow GPI-2 where its users expect them (65,536 notifications per segment, 8 queues
//! of depth 1,024, 255 list entries). Every field is validated by [`Config::validate`], which
//! [`Context::init_with`](crate::Context::init_with) calls, so a bad value is an
//! [`Error::Config`] naming the field rather than a failure deep inside the transport.

use std::time::Duration;

use crate::error::{Error, Result};

/// Largest number of notifications per segment: ids travel in 23 bits of the 64-bit remote
/// completion data, next to the segment id, the value and a system flag.
pub const MAX_NOTIFICATIONS: u32 = 1 << 23;

/// Largest number of queues.
pub const MAX_QUEUES: u8 = 16;

/// Largest number of groups.
pub const MAX_GROUPS: u8 = 64;

/// Largest passive message payload.
pub const MAX_PASSIVE_BYTES: u32 = 1 << 20;

/// Largest allreduce chunk ([`Config::reduce_chunk`]).
pub const MAX_REDUCE_CHUNK: usize = 1 << 24;

/// Largest number of entries in one list operation.
pub const MAX_LIST_ENTRIES: usize = 255;

/// Configuration of a [`Context`](crate::Context).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// libfabric provider: `tcp` (default), `shm`, `verbs`, or any raw provider string
    /// (`GASPI_PROVIDER`). Every rank must open the same provider.
    pub provider: String,
    /// Notification slots per segment (`GASPI_NOTIFICATIONS`, default 65,536, at most
    /// [`MAX_NOTIFICATIONS`]). Every rank must use the same value.
    pub notifications: u32,
    /// Queues created at init (`GASPI_QUEUES`, default 8, at most [`MAX_QUEUES`]).
    pub queues: u8,
    /// Operations a queue holds before it reports [`Error::QueueFull`] (`GASPI_QUEUE_DEPTH`,
    /// default 1,024, at most 65,536).
    pub queue_depth: u32,
    /// How long [`Context::init`](crate::Context::init) waits for every rank to be reachable
    /// over the fabric (`GASPI_OP_TIMEOUT_MS`, default 30 s). Every other call runs under the
    /// timeout its caller passes.
    pub op_timeout: Duration,
    /// Largest number of groups, the all-ranks group included (`GASPI_MAX_GROUPS`, default 32,
    /// at most [`MAX_GROUPS`]).
    pub max_groups: u8,
    /// Largest passive message payload in bytes (`GASPI_PASSIVE_MAX_BYTES`, default 65,536, in
    /// 1..=[`MAX_PASSIVE_BYTES`]). Every rank must use the same value.
    pub passive_max_bytes: u32,
    /// Bytes an allreduce moves per step and message at most (`GASPI_REDUCE_CHUNK`, default
    /// 1 MiB, a multiple of 8 in 64..=[`MAX_REDUCE_CHUNK`]); longer vectors are reduced in
    /// several runs. Every committed group of `n > 1` members maps `4 · c · (2·⌊log2 n⌋ + 2)`
    /// bytes for its allreduce (32 MiB for 8 members at the default), of which only what the
    /// group's allreduces actually move is ever touched (and so backed by memory) on providers
    /// that do not pin registrations (tcp, shm), and keeps the buffer of its last allreduce
    /// of at most `max(c, 64 KiB)` bytes for the next one. Unlike segments, the area's file
    /// is not reserved when it is made: only its size is checked against the free space
    /// then, so a `/dev/shm` that other files fill up afterwards can still cost a rank that
    /// touches a new page of it a `SIGBUS`. Measured over tcp at 2 to 8 ranks, a 1 MiB
    /// allreduce took 20–30% longer with 256 KiB chunks than with 1 MiB ones (shm: no
    /// difference).
    pub reduce_chunk: usize,
    /// Run remote atomics as provider atomics (`GASPI_ATOMICS=1`; default off). Off, or on a
    /// provider without `FI_ATOMIC`, the target's progress engine executes them (see
    /// [`Context::provider_atomics`](crate::Context::provider_atomics)). Off by default because,
    /// measured with libfabric 1.17, asking `tcp;ofi_rxm` for `FI_ATOMIC` doubles small
    /// write_notify latency (11 µs to 22 µs).
    pub atomics: bool,
    /// Whether this node runs more ranks than it has cores (`GASPI_OVERSUBSCRIBED=0|1`; unset:
    /// decided at init by counting the job's ranks on this host). Oversubscribed, waits yield
    /// the core at every poll instead of spinning (see
    /// [`set_oversubscribed`](gaspi_notifications::set_oversubscribed)).
    pub oversubscribed: Option<bool>,
    /// Run a progress thread (`GASPI_PROGRESS_THREAD=0` disables it). Providers with manual
    /// data progress need one for one-sided writes to land while the target computes.
    pub progress_thread: bool,
    /// Ignore the provider's write-after-write ordering even when granted and use the
    /// ordering-free notification path everywhere (`GASPI_FORCE_UNORDERED=1`); for testing the
    /// path that providers without ordering take. Every rank must use the same value.
    pub force_unordered: bool,
    /// How ranks on the same host reach each other (`GASPI_INTRANODE=direct|fabric`, default
    /// `direct`); see [`Intranode`]. Every rank must use the same value.
    pub intranode: Intranode,
    /// A notified write through the fabric of at least this many bytes travels as a write
    /// followed by a notification instead of one write carrying the notification as remote
    /// completion data (`GASPI_SPLIT_NOTIFY=bytes`, `0`: never; `None`, the default: from
    /// [`TCP_SPLIT_NOTIFY`] bytes over tcp, never over other providers). It applies only where
    /// the provider places the write's data before it processes the later notification
    /// ([`Context::ordered_writes`](crate::Context::ordered_writes) and its ordering size),
    /// so the notification still never becomes visible before its data. Such a write takes
    /// two places on its queue when the queue has them, else it goes as one write.
    pub split_notify: Option<u64>,
}

/// Where a notified write over tcp splits by default ([`Config::split_notify`]): measured
/// with libfabric 1.17 (`tcp;ofi_rxm`, loopback), a `write_notify` ping-pong of 1 MiB took
/// 165–275 µs per half round trip as one write with remote data against 107–110 µs as a
/// write and a notification, while below 1 MiB the single write was 10–15% faster; above,
/// the split was as fast or faster at every size up to 4 MiB. Over shm both took the same.
pub const TCP_SPLIT_NOTIFY: u64 = 1 << 20;

/// How operations between ranks on the same host travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Intranode {
    /// The caller copies straight into the peer's segment, which it maps, and publishes the
    /// notification into the peer's shared table (see the crate documentation on the direct
    /// path). Segments of bound user memory, and atomics under [`Config::atomics`], keep the
    /// fabric.
    #[default]
    Direct,
    /// Everything goes through libfabric, as between hosts.
    Fabric,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            provider: "tcp".into(),
            notifications: 65_536,
            queues: 8,
            queue_depth: 1_024,
            op_timeout: Duration::from_secs(30),
            max_groups: 32,
            atomics: false,
            reduce_chunk: 1 << 20,
            passive_max_bytes: 65_536,
            oversubscribed: None,
            progress_thread: true,
            force_unordered: false,
            intranode: Intranode::Direct,
            split_notify: None,
        }
    }
}

impl Config {
    /// The defaults, overridden by the `GASPI_*` environment variables listed on each field.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable that does not parse or is out of range.
    pub fn from_env() -> Result<Self> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables `get` gives.
    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| get(name).filter(|v| !v.is_empty());
        let mut cfg = Config::default();
        if let Some(p) = var("GASPI_PROVIDER") {
            cfg.provider = p;
        }
        if let Some(v) = var("GASPI_NOTIFICATIONS") {
            cfg.notifications = parse("GASPI_NOTIFICATIONS", &v)?;
        }
        if let Some(v) = var("GASPI_QUEUES") {
            cfg.queues = parse("GASPI_QUEUES", &v)?;
        }
        if let Some(v) = var("GASPI_QUEUE_DEPTH") {
            cfg.queue_depth = parse("GASPI_QUEUE_DEPTH", &v)?;
        }
        if let Some(v) = var("GASPI_OP_TIMEOUT_MS") {
            cfg.op_timeout = Duration::from_millis(parse("GASPI_OP_TIMEOUT_MS", &v)?);
        }
        if let Some(v) = var("GASPI_MAX_GROUPS") {
            cfg.max_groups = parse("GASPI_MAX_GROUPS", &v)?;
        }
        if let Some(v) = var("GASPI_PASSIVE_MAX_BYTES") {
            cfg.passive_max_bytes = parse("GASPI_PASSIVE_MAX_BYTES", &v)?;
        }
        if let Some(v) = var("GASPI_REDUCE_CHUNK") {
            cfg.reduce_chunk = parse("GASPI_REDUCE_CHUNK", &v)?;
        }
        if let Some(v) = var("GASPI_ATOMICS") {
            cfg.atomics = flag("GASPI_ATOMICS", &v)?;
        }
        if let Some(v) = var("GASPI_OVERSUBSCRIBED") {
            cfg.oversubscribed = Some(flag("GASPI_OVERSUBSCRIBED", &v)?);
        }
        if let Some(v) = var("GASPI_PROGRESS_THREAD") {
            cfg.progress_thread = flag("GASPI_PROGRESS_THREAD", &v)?;
        }
        if let Some(v) = var("GASPI_FORCE_UNORDERED") {
            cfg.force_unordered = flag("GASPI_FORCE_UNORDERED", &v)?;
        }
        if let Some(v) = var("GASPI_SPLIT_NOTIFY") {
            cfg.split_notify = Some(parse("GASPI_SPLIT_NOTIFY", &v)?);
        }
        if let Some(v) = var("GASPI_INTRANODE") {
            cfg.intranode = match v.as_str() {
                "direct" => Intranode::Direct,
                "fabric" => Intranode::Fabric,
                _ => {
                    return Err(Error::Config(format!(
                        "GASPI_INTRANODE={v:?}: expected `direct` or `fabric`"
                    )))
                }
            };
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field against its limits.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first field out of range, and the variable that sets it.
    pub fn validate(&self) -> Result<()> {
        if self.provider.is_empty() {
            return Err(Error::Config(
                "provider (GASPI_PROVIDER) must not be empty".into(),
            ));
        }
        if self.notifications == 0 || self.notifications > MAX_NOTIFICATIONS {
            return Err(Error::Config(format!(
                "notifications (GASPI_NOTIFICATIONS) = {} must be in 1..={MAX_NOTIFICATIONS}",
                self.notifications
            )));
        }
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(Error::Config(format!(
                "queues (GASPI_QUEUES) = {} must be in 1..={MAX_QUEUES}",
                self.queues
            )));
        }
        if self.queue_depth == 0 || self.queue_depth > 65_536 {
            return Err(Error::Config(format!(
                "queue_depth (GASPI_QUEUE_DEPTH) = {} must be in 1..=65536",
                self.queue_depth
            )));
        }
        if self.max_groups == 0 || self.max_groups > MAX_GROUPS {
            return Err(Error::Config(format!(
                "max_groups (GASPI_MAX_GROUPS) = {} must be in 1..={MAX_GROUPS}",
                self.max_groups
            )));
        }
        // 0 would leave only empty passive messages and save no memory (the receive buffers
        // keep room for the runtime's own messages), so it is a mistake, as 0 queues are.
        if self.passive_max_bytes == 0 || self.passive_max_bytes > MAX_PASSIVE_BYTES {
            return Err(Error::Config(format!(
                "passive_max_bytes (GASPI_PASSIVE_MAX_BYTES) = {} must be in 1..={MAX_PASSIVE_BYTES}",
                self.passive_max_bytes
            )));
        }
        if !(64..=MAX_REDUCE_CHUNK).contains(&self.reduce_chunk) || self.reduce_chunk % 8 != 0 {
            return Err(Error::Config(format!(
                "reduce_chunk (GASPI_REDUCE_CHUNK) = {} must be a multiple of 8 in 64..={MAX_REDUCE_CHUNK}",
                self.reduce_chunk
            )));
        }
        if self.op_timeout.is_zero() {
            return Err(Error::Config(
                "op_timeout (GASPI_OP_TIMEOUT_MS) must be positive".into(),
            ));
        }
        Ok(())
    }
}

fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    let value = value.trim();
    value.parse().map_err(|_| {
        // A number too large for the field is out of range, as one its limits refuse is.
        let why = match value.parse::<u128>() {
            Ok(_) => "is out of range",
            Err(_) => "is not a valid number",
        };
        Error::Config(format!("{name}={value:?} {why}"))
    })
}

fn flag(name: &str, value: &str) -> Result<bool> {
    match value.trim() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::Config(format!(
            "{name}={value:?} must be 1, true, yes or on, or 0, false, no or off"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().expect("defaults validate");
    }

    #[test]
    fn limits_are_enforced() {
        let bad = [
            Config {
                notifications: 0,
                ..Config::default()
            },
            Config {
                notifications: MAX_NOTIFICATIONS + 1,
                ..Config::default()
            },
            Config {
                queues: MAX_QUEUES + 1,
                ..Config::default()
            },
            Config {
                queue_depth: 0,
                ..Config::default()
            },
            Config {
                max_groups: MAX_GROUPS + 1,
                ..Config::default()
            },
            Config {
                passive_max_bytes: 0,
                ..Config::default()
            },
            Config {
                provider: String::new(),
                ..Config::default()
            },
        ];
        for cfg in bad {
            assert!(matches!(cfg.validate(), Err(Error::Config(_))), "{cfg:?}");
        }
    }

    #[test]
    fn errors_from_the_environment_name_the_variable() {
        let with = |name: &'static str, value: &'static str| {
            Config::from_vars(move |n| (n == name).then(|| value.to_string()))
        };
        for (name, value, why) in [
            ("GASPI_QUEUES", "17", "must be in 1..=16"),
            ("GASPI_QUEUES", "300", "is out of range"),
            ("GASPI_QUEUES", "many", "is not a valid number"),
            ("GASPI_MAX_GROUPS", "1000", "is out of range"),
            ("GASPI_NOTIFICATIONS", "0", "must be in 1..="),
            ("GASPI_QUEUE_DEPTH", "0", "must be in 1..=65536"),
            ("GASPI_PASSIVE_MAX_BYTES", "4194304", "must be in 1..="),
            ("GASPI_PASSIVE_MAX_BYTES", "0", "must be in 1..="),
            ("GASPI_REDUCE_CHUNK", "65", "must be a multiple of 8"),
            ("GASPI_OP_TIMEOUT_MS", "0", "must be positive"),
            (
                "GASPI_ATOMICS",
                "2",
                "must be 1, true, yes or on, or 0, false, no or off",
            ),
            ("GASPI_PROGRESS_THREAD", "enabled", "must be 1, true"),
        ] {
            match with(name, value) {
                Err(Error::Config(message)) => assert!(
                    message.contains(name) && message.contains(why),
                    "{name}={value}: {message}"
                ),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let cfg = with("GASPI_QUEUES", " 4 ").expect("a value in range");
        assert_eq!(cfg.queues, 4);
        for (value, on) in [("yes", true), ("on", true), ("true", true), ("off", false)] {
            let cfg = with("GASPI_PROGRESS_THREAD", value).expect("a flag word");
            assert_eq!(cfg.progress_thread, on, "GASPI_PROGRESS_THREAD={value}");
        }
    }
}
