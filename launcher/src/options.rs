//! The command line of `gaspirun`: parsing, validation and the help text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable giving the job time limit when `--timeout` is absent.
pub(crate) const TIMEOUT_ENV: &str = "GASPIRUN_TIMEOUT";

/// The most ranks a job may have: the gaspi runtime's own limit (its wire format names a rank
/// in 22 bits), far beyond the processes one host can run.
const MAX_RANKS: u32 = 1 << 22;

/// The text of `gaspirun --help`.
pub(crate) const HELP: &str = "\
gaspirun: run a GASPI job of N ranks on this host

Usage: gaspirun -n N [options] [--] program [args...]

Starts N processes of `program`, serves them the PMI-1 bootstrap protocol and
forwards their output.

Options:
  -n, --np N                number of ranks to start (1 to 4194304; required)
      --provider P          set GASPI_PROVIDER=P (libfabric provider) for every rank
      --timeout S           kill the job after S seconds (fractions allowed, at
                            least 0.001; 0 = no limit); default: $GASPIRUN_TIMEOUT
                            (unset or empty: no limit)
      --tag-output          prefix every line a rank prints with \"[rank] \" (default)
      --no-prefix           forward output lines unchanged, e.g. for JSON lines; lines
                            of different ranks still never mix (a rank's last line
                            without a newline gets one; a line over 1 MiB is passed
                            on in pieces of 1 MiB, between which other ranks' lines
                            may come, as tagged output cuts it into lines)
      --separate-output DIR write the output of rank R to DIR/rank.R.out and
                            DIR/rank.R.err instead of the terminal
      --keep-going          when a rank dies (killed, crashed, non-zero exit, or
                            exit without PMI finalize), let the other ranks run
                            on: the gaspi runtime reports the dead rank to them
                            (Error::RankFailed) and they may continue without it
  -h, --help                print this help
  -V, --version             print the version

An option that takes a value may be given once; empty values are refused.

Each rank gets PMI_FD, PMI_RANK, PMI_SIZE, PMI_JOBID, MPI_LOCALNRANKS and
MPI_LOCALRANKID; all other variables are inherited. Rank 0 reads gaspirun's
stdin unless that is a terminal; the other ranks read /dev/null.

When a rank exits with a non-zero status, is killed by a signal, calls PMI
abort, exits without PMI finalize while others still run, or the time limit
passes, gaspirun stops the whole job (SIGTERM, then
SIGKILL) and says on stderr which rank failed and why. With --keep-going only
PMI abort, the time limit, a signal to gaspirun that ends jobs, a closed
output pipe, and ranks left waiting in a PMI barrier that a dead rank can
never enter stop the job; other failures are reported and the job runs until
every rank has ended.

SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGALRM sent to gaspirun end the job as
above (a second one: SIGKILL at once); SIGUSR1 and SIGUSR2 are passed on to
every rank's process group. When gaspirun's stdout or stderr is a pipe whose
reader is gone (`gaspirun ... | head`), it ends the job as above, as a program
killed by SIGPIPE would.

Exit status: 0 when every rank exits 0; otherwise (with --keep-going too)
the status of the first failure: the rank's exit status, 128+N for a rank
killed by signal N, the PMI abort code, 124 when the time limit passed, 128+N
for signal N to gaspirun, 141 for a closed output pipe, 126/127 when the
program cannot be started, 1 for a rank that exited 0 without PMI finalize and
for errors of gaspirun itself (a PMI protocol error, no thread or process to be
had), 2 for usage errors.
";

/// Where the ranks' stdout and stderr go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    /// To gaspirun's stdout/stderr, each line prefixed with `[rank] `.
    Tagged,
    /// To gaspirun's stdout/stderr, whole lines, unchanged.
    Raw,
    /// To `DIR/rank.R.out` and `DIR/rank.R.err`.
    Separate(PathBuf),
}

/// A validated `gaspirun` invocation.
#[derive(Debug)]
pub(crate) struct Options {
    /// Number of ranks, at least 1.
    pub(crate) ranks: u32,
    /// Value for `GASPI_PROVIDER`, if given.
    pub(crate) provider: Option<OsString>,
    /// Job time limit.
    pub(crate) timeout: Option<Duration>,
    /// Output handling.
    pub(crate) output: Output,
    /// Survivors run on when a rank dies (`--keep-going`).
    pub(crate) keep_going: bool,
    /// The program every rank runs.
    pub(crate) program: OsString,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Start a job.
    Run(Options),
    /// Print the help text.
    Help,
    /// Print the version.
    Version,
}

/// Parses the arguments after the program name; `env_timeout` is the value of
/// [`TIMEOUT_ENV`]. `Err` holds a one-line usage error.
pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    env_timeout: Option<OsString>,
) -> Result<Parsed, String> {
    let mut args = args.into_iter();
    let mut ranks = None;
    let mut provider = None;
    let mut timeout = None;
    let mut output = None;
    let mut keep_going = false;
    let program = loop {
        let Some(arg) = args.next() else {
            return Err("no program to run".to_owned());
        };
        // A non-UTF-8 argument cannot be an option, so it is the program.
        let Some(text) = arg.to_str() else { break arg };
        if text == "--" {
            break args.next().ok_or("no program to run after '--'")?;
        }
        if !text.starts_with('-') || text == "-" {
            break arg;
        }
        let (name, mut inline) = match text.split_once('=') {
            Some((name, value)) if text.starts_with("--") => (name, Some(OsString::from(value))),
            _ if text.starts_with("-n") && text.len() > 2 && !text.starts_with("--") => {
                ("-n", Some(OsString::from(&text[2..])))
            }
            _ => (text, None),
        };
        let name = name.to_owned();
        let mut value = || {
            inline
                .take()
                .or_else(|| args.next())
                .ok_or_else(|| format!("option {name} needs a value"))
        };
        match name.as_str() {
            "-n" | "--np" => set_once(&mut ranks, "-n/--np", parse_ranks(&value()?)?)?,
            "--provider" => set_once(&mut provider, "--provider", parse_provider(value()?)?)?,
            "--timeout" => set_once(
                &mut timeout,
                "--timeout",
                parse_timeout("--timeout", &value()?)?,
            )?,
            "--keep-going" => keep_going = true,
            "--tag-output" => set_output(&mut output, Output::Tagged)?,
            "--no-prefix" => set_output(&mut output, Output::Raw)?,
            "--separate-output" => {
                let dir = value()?;
                if dir.is_empty() {
                    // Would have written the files into the current directory.
                    return Err("--separate-output needs a directory, not an empty name".into());
                }
                set_output(&mut output, Output::Separate(PathBuf::from(dir)))?
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            _ => return Err(format!("unknown option {name}")),
        }
        if inline.is_some() {
            return Err(format!("option {name} takes no value"));
        }
    };
    let ranks = ranks.ok_or("the number of ranks (-n N) is required")?;
    let timeout = match (timeout, env_timeout) {
        (Some(flag), _) => flag,
        // Empty is unset, as for the runtime's GASPI_* variables.
        (None, Some(env)) if env.is_empty() => None,
        (None, Some(env)) => parse_timeout(TIMEOUT_ENV, &env)?,
        (None, None) => None,
    };
    Ok(Parsed::Run(Options {
        ranks,
        provider,
        timeout,
        output: output.unwrap_or(Output::Tagged),
        keep_going,
        program,
        args: args.collect(),
    }))
}

/// Stores the value of an option that may be given once: a second one, which the last would
/// silently have won, is refused (as `mpiexec.hydra` refuses a second `-n`).
fn set_once<T>(slot: &mut Option<T>, option: &str, value: T) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("option {option} given more than once"));
    }
    *slot = Some(value);
    Ok(())
}

/// An empty provider is refused: `GASPI_PROVIDER=` counts as unset, so `--provider=$P` with
/// `P` unset silently ran on the default provider.
fn parse_provider(name: OsString) -> Result<OsString, String> {
    if name.is_empty() {
        return Err(
            "--provider needs a libfabric provider name (tcp, shm, ...), not an empty one".into(),
        );
    }
    Ok(name)
}

fn parse_ranks(text: &OsString) -> Result<u32, String> {
    match text.to_str().and_then(|t| t.parse::<u32>().ok()) {
        Some(n) if (1..=MAX_RANKS).contains(&n) => Ok(n),
        _ => Err(format!(
            "the number of ranks must be a whole number from 1 to {MAX_RANKS}, not {text:?}"
        )),
    }
}

/// Seconds as a decimal number; 0 means no limit. A limit below a millisecond is refused: it
/// would end every job at once (and `1e-12` became a limit of 0 s, which ended it as such).
fn parse_timeout(source: &str, text: &OsString) -> Result<Option<Duration>, String> {
    let seconds = text
        .to_str()
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= f64::from(u32::MAX))
        .ok_or_else(|| format!("{source} must be a number of seconds, not {text:?}"))?;
    match seconds {
        0.0 => Ok(None),
        s if s < MIN_TIMEOUT_S => Err(format!(
            "{source} must be 0 (no limit) or at least {MIN_TIMEOUT_S} s, not {text:?}"
        )),
        s => Ok(Some(Duration::from_secs_f64(s))),
    }
}

/// The shortest time limit accepted, in seconds.
const MIN_TIMEOUT_S: f64 = 0.001;

fn set_output(slot: &mut Option<Output>, choice: Output) -> Result<(), String> {
    match slot {
        Some(previous) if *previous != choice => {
            Err("--tag-output, --no-prefix and --separate-output exclude each other".to_owned())
        }
        _ => {
            *slot = Some(choice);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(args.iter().map(OsString::from), None)? {
            Parsed::Run(options) => Ok(options),
            other => panic!("expected a job, got {other:?}"),
        }
    }

    #[test]
    fn full_command_line() {
        let o = run(&[
            "-n",
            "4",
            "--provider=tcp",
            "--timeout",
            "1.5",
            "--no-prefix",
            "prog",
            "-n",
            "--x",
        ])
        .unwrap();
        assert_eq!(o.ranks, 4);
        assert_eq!(o.provider, Some("tcp".into()));
        assert_eq!(o.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(o.output, Output::Raw);
        assert!(!o.keep_going);
        assert_eq!(o.program, "prog");
        // Everything after the program belongs to it, options included.
        assert_eq!(o.args, vec![OsString::from("-n"), OsString::from("--x")]);
    }

    #[test]
    fn short_forms_and_defaults() {
        let o = run(&["-n3", "--", "-dash-prog"]).unwrap();
        assert_eq!(o.ranks, 3);
        assert_eq!(o.program, "-dash-prog");
        assert_eq!(o.output, Output::Tagged);
        assert_eq!(o.timeout, None);
        let o = run(&["--np=2", "--separate-output", "out", "--keep-going", "p"]).unwrap();
        assert_eq!(o.output, Output::Separate(PathBuf::from("out")));
        assert!(o.keep_going);
    }

    #[test]
    fn usage_errors() {
        for bad in [
            &["prog"][..],
            &["-n", "0", "prog"],
            &["-n", "x", "prog"],
            &["-n", "4194305", "prog"],
            &["-n", "4294967295", "prog"],
            &["-n", "2"],
            &["-n"],
            &["-n", "2", "--bogus", "prog"],
            &["-n", "2", "--timeout", "-1", "prog"],
            &["-n", "2", "--no-prefix", "--separate-output", "d", "prog"],
            &["-n", "2", "--no-prefix=yes", "prog"],
            &["-n", "2", "--keep-going=1", "prog"],
            &["-n", "2", "--"],
            &["-n", "2", "-n", "3", "prog"],
            &["-n2", "--np=2", "prog"],
            &["-n", "2", "--provider", "tcp", "--provider=shm", "prog"],
            &["-n", "2", "--timeout", "1", "--timeout", "2", "prog"],
            &["-n", "2", "--provider=", "prog"],
            &["-n", "2", "--provider", "", "prog"],
            &["-n", "2", "--separate-output", "", "prog"],
            &["-n", "2", "--separate-output=", "prog"],
        ] {
            assert!(
                parse(bad.iter().map(OsString::from), None).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn timeout_from_environment_unless_overridden() {
        let args = || ["-n", "1", "p"].iter().map(OsString::from);
        let Ok(Parsed::Run(o)) = parse(args(), Some("7".into())) else {
            panic!("expected a job")
        };
        assert_eq!(o.timeout, Some(Duration::from_secs(7)));
        let with_flag = ["-n", "1", "--timeout", "0", "p"]
            .iter()
            .map(OsString::from);
        let Ok(Parsed::Run(o)) = parse(with_flag, Some("7".into())) else {
            panic!("expected a job")
        };
        assert_eq!(o.timeout, None);
        assert!(parse(args(), Some("soon".into())).is_err());
        assert!(parse(args(), Some("1e-12".into())).is_err());
        let Ok(Parsed::Run(o)) = parse(args(), Some("0.001".into())) else {
            panic!("a millisecond is a limit")
        };
        assert_eq!(o.timeout, Some(Duration::from_millis(1)));
        let Ok(Parsed::Run(o)) = parse(args(), Some("".into())) else {
            panic!("an empty GASPIRUN_TIMEOUT is unset")
        };
        assert_eq!(o.timeout, None);
    }

    #[test]
    fn help_and_version_win() {
        let help = parse(["-n", "1", "--help"].iter().map(OsString::from), None);
        assert!(matches!(help, Ok(Parsed::Help)));
        let version = parse(["-V"].iter().map(OsString::from), None);
        assert!(matches!(version, Ok(Parsed::Version)));
    }
}
