// Each test binary uses a different part of this runner.
#![allow(dead_code)]

//! The runner of the multi-process tests: starts a job of separate rank processes under
//! `gaspirun` (or `mpiexec.hydra`), one job at a time, never lets it hang the test binary, and
//! reads what the ranks reported. Other packages of the workspace (`coll/`) use it too, with
//! `#[path]`: it finds every program through the test binary's own location.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

pub mod fresh;

/// `<target>/<profile>`, where cargo puts binaries and examples; test binaries live in its
/// `deps`. Cargo tells a package's tests only where that package's own binaries are, and the
/// launcher belongs to `gaspi-launcher`, hence the lookup.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binaries live in <target>/<profile>/deps")
        .to_path_buf()
}

/// A binary of this workspace, built in the same profile from the sources as they are.
fn binary(name: &str, package: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (or build it with \
         `cargo build -p {package}` in the same profile first)",
        path.display()
    );
    refuse_stale(&path);
    path
}

/// Fails the test when `program` is older than a file it is built from: a job would run the
/// code as it was, and pass or fail for it. Names the build that brings it up to date.
fn refuse_stale(program: &Path) {
    let Some(source) = fresh::newer_source(program) else {
        return;
    };
    let profile = match profile_dir().file_name().and_then(|name| name.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(name) => name.to_owned(),
        None => "<profile>".to_owned(),
    };
    panic!(
        "{} is older than {}, which it is built from (a single test file's run rebuilds no \
         example and no other package's binary): rebuild with `cargo build --profile {profile} \
         --workspace --examples --bins`, or run `cargo test --workspace`",
        program.display(),
        source.display()
    );
}

/// `gaspirun`, from the `gaspi-launcher` package.
pub fn gaspirun_path() -> PathBuf {
    binary("gaspirun", "gaspi-launcher")
}

/// `gaspi-selftest`, from the `gaspi` package.
pub fn selftest_path() -> PathBuf {
    binary("gaspi-selftest", "gaspi")
}

/// One `#[test]` per job: `jobs! { name: check(arguments); ... }`.
#[allow(unused_macros)]
macro_rules! jobs {
    ($($test:ident: $check:ident($($arg:expr),*);)*) => {
        $(
            #[test]
            fn $test() {
                $check($($arg),*);
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use jobs;

/// The providers every scenario runs over.
pub const PROVIDERS: [&str; 2] = ["tcp", "shm"];

/// `gaspirun --timeout` of the scenario jobs, in seconds.
pub const JOB_TIMEOUT_S: u64 = 120;

/// `GASPI_BOOTSTRAP_TIMEOUT` of every job the runner starts under `gaspirun`, in seconds: well
/// below [`JOB_TIMEOUT_S`]. The ranks that wait for a rank stalled in its start-up wait
/// silently until their bootstrap timeout; at the runtime's default (120 s, the same as the
/// job limit) the launcher killed such a job before any rank could say why. A test that sets
/// the variable itself (`selftest_with_env`) overrides this.
pub const BOOTSTRAP_TIMEOUT_S: u64 = 30;

/// How long the runner waits beyond a job's own limit before it kills the launcher itself.
const WATCHDOG_MARGIN: Duration = Duration::from_secs(30);

/// Multi-rank jobs run one at a time: several of them on a 2-core CI machine starve each other
/// into timeouts, and a timing check of one would measure the load of another.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A job that has ended (or was killed by the watchdog).
pub struct Finished {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Finished {
    /// Everything about the job, for assertion messages.
    pub fn report(&self) -> String {
        format!(
            "command: {}\nstatus: {} after {:.1} s\n--- stdout ---\n{}--- stderr ---\n{}",
            self.command,
            self.status,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }

    /// The job succeeded and each of its `ranks` ranks printed exactly one line containing
    /// `marker(rank)`.
    pub fn assert_every_rank(&self, ranks: u32, marker: impl Fn(u32) -> String) {
        assert!(self.status.success(), "the job failed\n{}", self.report());
        for rank in 0..ranks {
            let marker = marker(rank);
            let lines = self.stdout.lines().filter(|l| l.contains(&marker)).count();
            assert_eq!(
                lines,
                1,
                "expected exactly one line with {marker:?}\n{}",
                self.report()
            );
        }
    }
}

impl Finished {
    /// The observations rank `rank` reported on its `data <scenario> rank R:` line; panics
    /// (with the job's report) when there is no such line.
    pub fn data(&self, scenario: &str, rank: u32) -> RankData<'_> {
        let marker = format!("data {scenario} rank {rank}: ");
        let line = self
            .stdout
            .lines()
            .find_map(|l| l.split_once(&marker).map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("rank {rank} reported no data line\n{}", self.report()));
        let values = line
            .split("; ")
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        RankData {
            job: self,
            rank,
            values,
        }
    }
}

/// What one rank of a job reported on its data line. A missing or malformed value fails the
/// test with the job's report.
pub struct RankData<'a> {
    job: &'a Finished,
    rank: u32,
    values: HashMap<String, String>,
}

impl RankData<'_> {
    /// Value `key` as reported.
    pub fn get(&self, key: &str) -> &str {
        self.values.get(key).unwrap_or_else(|| {
            panic!(
                "rank {} reported no {key:?}\n{}",
                self.rank,
                self.job.report()
            )
        })
    }

    /// Value `key`, parsed.
    pub fn parse<T: FromStr>(&self, key: &str) -> T {
        let text = self.get(key);
        text.parse().unwrap_or_else(|_| {
            panic!(
                "rank {}: {key}={text:?} does not parse\n{}",
                self.rank,
                self.job.report()
            )
        })
    }

    /// The rank that reported these values.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Every `(key, value)` reported, in no particular order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Runs `command` to its end with a watchdog of `limit`, holding the one-job-at-a-time lock.
pub fn run(mut command: Command, limit: Duration) -> Finished {
    let _one = ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let described = format!("{command:?}");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {described}: {e}"));
    let stdout = drain(child.stdout.take().expect("stdout was piped"));
    let stderr = drain(child.stderr.take().expect("stderr was piped"));
    let status = wait_with_watchdog(&mut child, limit, &described);
    let elapsed = start.elapsed();
    Finished {
        command: described,
        status,
        stdout: collect(&stdout),
        stderr: collect(&stderr),
        elapsed,
    }
}

/// Starts `program args` as `ranks` ranks under `gaspirun` over `provider`, reads what the
/// job prints until `ready` returns true for a line, then kills gaspirun with SIGKILL (which
/// it cannot catch) and returns the lines read. Panics when `ready` never holds within
/// [`JOB_TIMEOUT_S`].
pub fn gaspirun_killed(
    ranks: u32,
    provider: &str,
    program: &Path,
    args: &[&str],
    ready: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let command = gaspirun_command(&[], ranks, provider, JOB_TIMEOUT_S, program, args);
    killed(command, ready)
}

/// Starts `command` (a job), reads what it prints until `ready` returns true for a line, then
/// kills it with SIGKILL and returns the lines read. Panics when `ready` never holds within
/// [`JOB_TIMEOUT_S`]. The job is killed whichever way this returns, a panic of `ready`
/// included: a failed check must not leave it running until its own time limit.
pub fn killed(mut command: Command, mut ready: impl FnMut(&str) -> bool) -> Vec<String> {
    let _one = ONE_JOB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let described = format!("{command:?}");
    let mut job = KilledOnDrop(
        command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {described}: {e}")),
    );
    let stdout = job.0.stdout.take().expect("stdout was piped");
    let (tx, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(JOB_TIMEOUT_S);
    let mut read = Vec::new();
    let outcome = loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let done = ready(&line);
                read.push(line);
                if done {
                    break Ok(());
                }
            }
            Err(e) => break Err(e),
        }
    };
    drop(job);
    if let Err(e) = outcome {
        panic!("{described}: the job never got ready ({e}); it printed {read:?}");
    }
    read
}

/// A started job that is killed (SIGKILL) and reaped when dropped, on unwinding too.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads a pipe to its end on a thread; the text arrives on the returned channel.
fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let text = match pipe.read_to_end(&mut bytes) {
            Ok(_) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => format!("<reading the output failed: {e}>"),
        };
        // The receiver is gone only if the test already panicked.
        let _ = tx.send(text);
    });
    rx
}

/// The drained text; a pipe still open after the launcher ended means some rank outlived it.
fn collect(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| {
            "<output still open 10 s after the launcher ended: a rank outlived it>\n".into()
        })
}

fn wait_with_watchdog(child: &mut Child, limit: Duration, described: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                // Only the launcher is ours to kill; the test fails below with its output.
                let _ = child.kill();
                let status = child.wait().expect("waiting for the killed launcher");
                panic!("{described} was still running after {limit:?}; killed it ({status})");
            }
            Err(e) => panic!("waiting for {described}: {e}"),
        }
    }
}

/// Runs `program args` as `ranks` ranks under `gaspirun` over `provider`.
pub fn gaspirun(
    ranks: u32,
    provider: &str,
    timeout_s: u64,
    program: &Path,
    args: &[&str],
) -> Finished {
    gaspirun_with(&[], ranks, provider, timeout_s, program, args)
}

/// Like [`gaspirun`], with further gaspirun options (`options`) before the program.
pub fn gaspirun_with(
    options: &[&str],
    ranks: u32,
    provider: &str,
    timeout_s: u64,
    program: &Path,
    args: &[&str],
) -> Finished {
    let command = gaspirun_command(options, ranks, provider, timeout_s, program, args);
    run(command, Duration::from_secs(timeout_s) + WATCHDOG_MARGIN)
}

/// `gaspirun -n ranks --provider provider --timeout timeout_s options program args`, the
/// ranks' bootstrap timeout [`BOOTSTRAP_TIMEOUT_S`].
fn gaspirun_command(
    options: &[&str],
    ranks: u32,
    provider: &str,
    timeout_s: u64,
    program: &Path,
    args: &[&str],
) -> Command {
    let mut command = Command::new(gaspirun_path());
    command
        .args(["-n", &ranks.to_string(), "--provider", provider])
        .args(["--timeout", &timeout_s.to_string()])
        .env("GASPI_BOOTSTRAP_TIMEOUT", BOOTSTRAP_TIMEOUT_S.to_string())
        .args(options)
        .arg(program)
        .args(args);
    command
}

/// Runs `program args` under `gaspirun --keep-going` for a job in which one rank ends early
/// with exit status `status` (137: killed by SIGKILL), and checks that the job ended with it.
pub fn gaspirun_casualty(
    ranks: u32,
    provider: &str,
    program: &Path,
    args: &[&str],
    status: i32,
) -> Finished {
    let job = gaspirun_with(
        &["--keep-going"],
        ranks,
        provider,
        JOB_TIMEOUT_S,
        program,
        args,
    );
    assert_eq!(
        job.status.code(),
        Some(status),
        "the status of the rank that ended early\n{}",
        job.report()
    );
    job
}

/// Runs `gaspi-selftest <scenario>` and checks that every rank reported `ok`.
pub fn selftest(scenario: &str, ranks: u32, provider: &str) -> Finished {
    selftest_with_env(&[], scenario, ranks, provider)
}

/// [`selftest`] with `VAR=value` settings (`env`) in every rank's environment.
pub fn selftest_with_env(env: &[&str], scenario: &str, ranks: u32, provider: &str) -> Finished {
    selftest_with(env, scenario, &[], ranks, provider)
}

/// [`selftest_with_env`] with options of the scenario (`options`, e.g. `["--threads", "4"]`).
pub fn selftest_with(
    env: &[&str],
    scenario: &str,
    options: &[&str],
    ranks: u32,
    provider: &str,
) -> Finished {
    let args: Vec<&str> = [scenario]
        .into_iter()
        .chain(options.iter().copied())
        .collect();
    let job = gaspirun_with_env(env, ranks, provider, &selftest_path(), &args);
    job.assert_every_rank(ranks, |r| format!("ok {scenario} rank {r}: "));
    job
}

/// [`gaspirun`] with `VAR=value` settings (`env`) in every rank's environment, within
/// [`JOB_TIMEOUT_S`].
pub fn gaspirun_with_env(
    env: &[&str],
    ranks: u32,
    provider: &str,
    program: &Path,
    args: &[&str],
) -> Finished {
    let program = program
        .to_str()
        .expect("the target directory is a UTF-8 path");
    let args: Vec<&str> = env
        .iter()
        .copied()
        .chain([program])
        .chain(args.iter().copied())
        .collect();
    gaspirun(ranks, provider, JOB_TIMEOUT_S, Path::new("env"), &args)
}

/// An example program of the package under test, which `cargo test` builds (not
/// `cargo test --test <file>`: a stale one fails the test, see [`refuse_stale`]).
pub fn example(name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "{} does not exist: examples are built by a plain `cargo test`, or by \
         `cargo build --examples` (with the same profile)",
        path.display()
    );
    refuse_stale(&path);
    path
}

/// `program` if it is an executable file in a directory of `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Whether the jobs the tests start use the direct intra-node path (`GASPI_INTRANODE`, which
/// the ranks inherit: `scripts/test.sh` runs the multi-process tests once in each mode).
pub fn direct_mode() -> bool {
    std::env::var("GASPI_INTRANODE").map_or(true, |mode| mode != "fabric")
}

/// The intra-node mode of the jobs the tests start, as `GASPI_INTRANODE` names it (see
/// [`direct_mode`]), for what a test prints.
pub fn intranode_mode() -> &'static str {
    if direct_mode() {
        "direct"
    } else {
        "fabric"
    }
}
