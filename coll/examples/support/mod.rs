//! What the alltoallv examples share: how they start and fail, their options, threads'
//! results, and the conversion of numbers to the bytes of a segment. (Their deterministic
//! data is in `data.rs` beside this file, which each example's data module and the tests
//! include on its own.)

use std::collections::HashMap;
use std::process::ExitCode;
use std::str::FromStr;
use std::thread::ScopedJoinHandle;

use gaspi::{SegmentId, Timeout};

/// The segment an example packs its outgoing blocks in.
pub const SOURCE: SegmentId = 0;
/// The segment the blocks to a rank land in.
pub const RECEIVE: SegmentId = 1;

/// The timeout of every call that waits: generous, since 4 ranks of 4 threads share 2 cores
/// in CI; a call that takes this long means a lost block, and the example fails.
pub const TIMEOUT: Timeout = Timeout::Millis(TIMEOUT_MS);
/// [`TIMEOUT`] in milliseconds, for waits outside the runtime.
pub const TIMEOUT_MS: u64 = 30_000;

/// An example's outcome; `Send` so that threads can hand their errors back.
pub type Outcome<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Runs `run` with the command-line arguments: exit status 0 when it succeeds, 1 with the
/// error on stderr when it fails.
pub fn main_of(name: &str, run: impl FnOnce(&[String]) -> Outcome<()>) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
            // the job) leaves no half message.
            let line = format!("{name}: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

/// Makes an error say what was being done: `.map_err(during("round 3: reset"))?`.
pub fn during<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Options given as `--name value`.
pub struct Options(HashMap<String, String>);

impl Options {
    /// Parses `args`, accepting only the option names in `known`.
    pub fn parse(args: &[String], known: &[&str]) -> Outcome<Options> {
        let usage = || {
            let names: Vec<String> = known.iter().map(|k| format!("[--{k} N]")).collect();
            format!("usage: {}", names.join(" "))
        };
        let mut options = HashMap::new();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let name = arg
                .strip_prefix("--")
                .filter(|name| known.contains(name))
                .ok_or_else(usage)?;
            let value = rest.next().ok_or_else(usage)?;
            options.insert(name.to_owned(), value.clone());
        }
        Ok(Options(options))
    }

    /// The value of option `name`, or `default`.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Outcome<T> {
        match self.0.get(name) {
            None => Ok(default),
            Some(text) => text
                .parse()
                .map_err(|_| format!("--{name} {text}: not a valid value").into()),
        }
    }

    /// The value of option `name`, a count of at least 1 (0 is refused, not raised).
    pub fn count(&self, name: &str, default: usize) -> Outcome<usize> {
        match self.get(name, default)? {
            0 => Err(format!("--{name} 0: must be at least 1").into()),
            count => Ok(count),
        }
    }

    /// How an error names option `name` with `value`: as the user passed it, or as a default
    /// the user did not choose.
    pub fn describe(&self, name: &str, value: impl std::fmt::Display) -> String {
        if self.0.contains_key(name) {
            format!("--{name} {value}")
        } else {
            format!("the default --{name} {value}")
        }
    }
}

/// The results of scoped threads, the first error (or panic) of any of them as the error.
pub fn joined<T>(handles: Vec<ScopedJoinHandle<'_, Outcome<T>>>) -> Outcome<Vec<T>> {
    handles
        .into_iter()
        .map(|handle| handle.join().map_err(|_| "a thread panicked")?)
        .collect()
}

/// Where blocks of `sizes` bytes begin when packed one after the other from offset 0, and
/// the bytes they take together.
pub fn packed(sizes: impl IntoIterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut end = 0;
    let offsets = sizes
        .into_iter()
        .map(|bytes| {
            let offset = end;
            end += bytes;
            offset
        })
        .collect();
    (offsets, end)
}

/// `values` as the little-endian bytes a segment holds.
pub fn to_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The numbers in `bytes` (a multiple of 8 long), as [`to_bytes`] wrote them.
pub fn from_bytes(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            f64::from_le_bytes(word)
        })
        .collect()
}

/// The case of a callgrind harness's program (`cg_allreduce`, `cg_gasnet`): whether every rank
/// but 0 comes late (`late`: `Some(true)`), rank 0 does (`there`: `Some(false)`), or nobody, the
/// ranks calling in lock step (`step`: `None`); `None` outside for another word.
pub fn late_case(mode: &str) -> Option<Option<bool>> {
    match mode {
        "late" => Some(Some(true)),
        "there" => Some(Some(false)),
        "step" => Some(None),
        _ => None,
    }
}
