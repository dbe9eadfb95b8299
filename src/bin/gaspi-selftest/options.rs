//! The command line of `gaspi-selftest`: scenario names, their options and the help text.

/// The text of `gaspi-selftest --help`.
pub const HELP: &str = "\
gaspi-selftest: check a gaspi installation with a real multi-rank job

Usage: gaspirun -n N [--provider P] gaspi-selftest <scenario> [options]
       gaspi-selftest --help

Every rank runs the scenario, verifies what it received and prints one line
`ok <scenario> rank R: <what was checked>`, then, for most scenarios, one line
`data <scenario> rank R: key=value; ...` with what it observed (counts,
digests, the error each call returned, elapsed milliseconds) for the test
suite to judge. On any mismatch it prints `FAIL <scenario> rank R: ...` on
stderr and exits with status 1.

Scenarios:
  integrity    every operation (write, write_notify, read, read_notify,
               write_list, write_list_notify, read_list, notify) at 1 B, 4 KiB,
               1 MiB and 64 MiB, between
               neighbours; checks every byte, the guard bytes around the
               target range, and every notification id and value
      --max-size BYTES   skip sizes above BYTES (default 67108864)
  stress       each even rank streams write_notify into a ring of slots of
               rank+1, which checks every byte the moment the notification
               appears and hands the slot back (64 KiB blocks, then 8..256 B
               messages)
      --blocks N         number of 64 KiB blocks (default 1000)
      --small N          number of small messages (default 20000)
      --threads N        writer threads, each with a ring of its own, and
                         receiving threads all waiting on every ring; blocks
                         and small messages are per ring (default 1)
  threads      4 threads per rank wait on and reset the same notification
               range while every rank sends to every rank; each value must be
               consumed exactly once
      --messages N       notifications from each rank to each rank (default 2000)
  timeouts     Test/Millis timeouts of notify_waitsome, wait and barrier, and
               that a call repeated after a timeout completes
  order        rank 0 sends rank 1 2,000 notifications of one id in 20 rounds
               (notify and write_notify) while 2 more threads of rank 1 drive
               progress; the id must end with the last value (2+ ranks)
  serialised   while rank 0's thread A waits in a barrier the others join
               2.5 s late, its thread B's barrier, allreduce and
               segment_create with Millis(200) and Test must each return
               Timeout by their deadline; then all of them complete (2+ ranks)
  crossed      a barrier and an allreduce of GROUP_ALL in flight at once:
               rank 0's barrier times out and it calls allreduce while the
               others call allreduce, then barrier; rank 0's thread A waits in
               a barrier while its thread B's allreduce completes; then every
               rank runs 20 barriers and 20 allreduces from two threads at
               once; every call must complete, every sum be right (2+ ranks)
  groups       GROUP_ALL's membership; a group of the even ranks committed by
               its members and refused to the others; repeated group barriers
               with a timeout in between; misuse errors; a commit whose
               members disagree fails with GroupMismatch (needs 3+ ranks)
  allreduce    every operator on every element type at 1, 7 and 2,500
               elements, checked against a local reference; 300,000 u64
               (many chunks); order-sensitive f64 sums bitwise identical on
               every member (each reports their digest); non-commutative
               2x2 matrix products in rank order, on all ranks and on the odd
               ranks; a commutative user operator; timeouts while the last
               rank is late, then resumed; misuse and a length mismatch
  passive      every rank sends passive messages of changing sizes (0 B up
               to the maximum) to every rank; each receiver checks every
               payload and that each sender's messages arrive in order; an
               oversized message is refused
  atomics      every rank adds to one counter on rank 0 with fetch_add (the
               total is exact, each rank's fetched values rise) and guards a
               plain read-modify-write counter with a compare_swap lock (no
               two holders: no lost update); misaligned and out-of-range
               targets are refused; fetch_add and compare_swap called
               again after Timeout::Test / Millis(0) until done happen
               once per call (exact word, each old value once, a lock
               taken and given back), abandoned ones happen once
  errors       every kind of bad input returns its Error variant (with the
               right fields) and the context keeps working afterwards
  early-exit   the last rank leaves right after init without finalize while
               the others wait in a barrier: the JOB IS EXPECTED TO FAIL, and
               a working launcher ends it promptly
      --leave exit|abort  how the last rank leaves: exit(0) (default) or abort()
  fault        the last rank stops (SIGSTOP) for 2.5 s, which the others must
               see as timeouts that mark nothing, then kills itself with SIGKILL
               after some write_notify traffic; the survivors must get
               RankFailed naming it (barrier,
               write, queue wait, proc_ping, finalize) within two timeouts,
               see it Corrupt in state_vec, keep the data received before the
               kill, and go on in a group of their own. Run it under
               `gaspirun --keep-going`; the dead rank prints no `ok` line
  stopped      the last rank stops itself (SIGSTOP) three times; meanwhile
               rank 0 makes every call that waits on it with a 500 ms timeout
               (barrier, group commit and barrier, allreduce, atomics,
               proc_ping, queue and batch waits, segment lookups,
               passive_send, notify_wait_any, library and user segment
               creation, finalize): each must return Timeout in time and mark
               nothing, then complete once rank 0 continues it (SIGCONT)
               (2+ ranks)
  library      two libraries and the user create segments, notification
               tables, teams and groups concurrently from three threads: the
               user's segment list and group ids are unchanged, a library
               name cannot be registered twice, and user and library segments
               of the same local id keep their own data and notifications;
               then a ring of write_notify through a library segment,
               write_notify_to (data into a user segment, notification into a
               library table), write_notify_each, read, notify and
               notify_wait_any over a user and a library range, each byte and
               value checked; contributions gathered over a library team and
               folded in member order with ReduceOp/UserOp::apply; atomics on
               library and user words (exact totals; a notifying add is seen
               with its new word); BatchFull, a notification beyond a table,
               a target range outside its segment and a table of 0
               notifications are refused
  dead-read    the last rank stops, rank 0 posts a read from it that goes
               unanswered, then kills it (SIGKILL); the survivors commit a
               group and run an allreduce on it with a 3 s timeout, then
               finalize with a 2 s timeout: each must end by its deadline and
               name no live rank (needs 3+ ranks and `gaspirun --keep-going`)
  killed-target  the last rank kills itself (SIGKILL) while every other rank
               streams large writes and small write_notify into its segment:
               no writer crashes, the next call of each fails with RankFailed
               naming it (each reports when, on the host's monotonic clock,
               beside the victim's last reading), later calls towards it fail
               at once, and a group of the survivors commits and runs a
               barrier and an allreduce (needs 3+ ranks and
               `gaspirun --keep-going`)
  blocked-death  the last rank kills itself (SIGKILL) while every other rank
               sleeps in a notify_wait_any and a notify_wait_range naming it
               and in a barrier, with 20 s timeouts: all fail with RankFailed
               naming it (each
               reports when, on the host's monotonic clock, beside the
               victim's last reading), and a group of the survivors goes on
               (needs 3+ ranks and `gaspirun --keep-going`)
  quiet-death  the last rank stops for 2.5 s (a barrier and a ping time out,
               nothing is marked), then is killed (SIGKILL) with nothing in
               flight towards it: a write to it and its queue's wait, a ping and
               a barrier fail with RankFailed naming it, also where every rank
               looks like another host (needs `gaspirun --keep-going`)
  unmapped     write_notify, read and an atomic into a segment of memory peers
               cannot map (its file unlinked, then bound) land through the
               fabric, also between ranks on one host; a segment deleted and
               created again larger is mapped anew (needs 2+ ranks)
  stale-files  every rank plants files named after its own pid (every kind the
               runtime makes, as a dead process of that pid leaves them) and
               two of live processes, then joins, creates a segment and
               write_notifies into its neighbour: its own must be gone, the
               others kept
  exit         a few barriers, then finalize: ranks that finish it leave the
               job while others may still wait in it, which must not be taken
               for a death (run many times on a loaded machine)
  unwaited     every rank writes megabytes into each of the next 3 ranks on two
               queues and finalizes without waiting for them: finalize must
               succeed everywhere (run through the fabric: GASPI_INTRANODE=fabric)
  linger       every rank prints its pid once all have joined, then sleeps
               60 s without finalize, for a test to kill gaspirun itself: the
               JOB IS EXPECTED TO BE KILLED, and nothing of it may be left

The provider comes from GASPI_PROVIDER (gaspirun --provider sets it).
";

/// A scenario of the self-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Integrity,
    Stress,
    Threads,
    Timeouts,
    Order,
    Serialised,
    Crossed,
    Groups,
    Allreduce,
    Passive,
    Atomics,
    Errors,
    EarlyExit,
    Fault,
    Stopped,
    Library,
    DeadRead,
    KilledTarget,
    BlockedDeath,
    QuietDeath,
    Unmapped,
    StaleFiles,
    Exit,
    Unwaited,
    Linger,
}

impl Scenario {
    const ALL: [Scenario; 25] = [
        Scenario::Integrity,
        Scenario::Stress,
        Scenario::Threads,
        Scenario::Timeouts,
        Scenario::Order,
        Scenario::Serialised,
        Scenario::Crossed,
        Scenario::Groups,
        Scenario::Allreduce,
        Scenario::Passive,
        Scenario::Atomics,
        Scenario::Errors,
        Scenario::EarlyExit,
        Scenario::Fault,
        Scenario::Stopped,
        Scenario::Library,
        Scenario::DeadRead,
        Scenario::KilledTarget,
        Scenario::BlockedDeath,
        Scenario::QuietDeath,
        Scenario::Unmapped,
        Scenario::StaleFiles,
        Scenario::Exit,
        Scenario::Unwaited,
        Scenario::Linger,
    ];

    /// The subcommand naming this scenario.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Integrity => "integrity",
            Scenario::Stress => "stress",
            Scenario::Threads => "threads",
            Scenario::Timeouts => "timeouts",
            Scenario::Order => "order",
            Scenario::Serialised => "serialised",
            Scenario::Crossed => "crossed",
            Scenario::Groups => "groups",
            Scenario::Allreduce => "allreduce",
            Scenario::Passive => "passive",
            Scenario::Atomics => "atomics",
            Scenario::Errors => "errors",
            Scenario::EarlyExit => "early-exit",
            Scenario::Fault => "fault",
            Scenario::Stopped => "stopped",
            Scenario::Library => "library",
            Scenario::DeadRead => "dead-read",
            Scenario::KilledTarget => "killed-target",
            Scenario::BlockedDeath => "blocked-death",
            Scenario::QuietDeath => "quiet-death",
            Scenario::Unmapped => "unmapped",
            Scenario::StaleFiles => "stale-files",
            Scenario::Exit => "exit",
            Scenario::Unwaited => "unwaited",
            Scenario::Linger => "linger",
        }
    }

    /// The options this scenario accepts.
    fn accepts(self, option: &str) -> bool {
        matches!(
            (self, option),
            (Scenario::Integrity, "--max-size")
                | (Scenario::Stress, "--blocks" | "--small" | "--threads")
                | (Scenario::Threads, "--messages")
                | (Scenario::EarlyExit, "--leave")
        )
    }
}

/// Tunables of the scenarios; each scenario reads only its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `integrity`: largest transfer size tried.
    pub max_size: u64,
    /// `stress`: number of 64 KiB blocks.
    pub blocks: u64,
    /// `stress`: number of small messages.
    pub small: u64,
    /// `stress`: writer threads (one ring each) and receiving threads.
    pub threads: u32,
    /// `threads`: notifications from each rank to each rank.
    pub messages: u32,
    /// `early-exit`: how the last rank leaves.
    pub leave: Leave,
}

/// How the leaving rank of `early-exit` ends its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// `exit(0)`: looks like success to anyone who only checks exit statuses.
    Exit,
    /// `abort()`: killed by SIGABRT.
    Abort,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_size: 64 << 20,
            blocks: 1_000,
            small: 20_000,
            threads: 1,
            messages: 2_000,
            leave: Leave::Exit,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Run(Scenario, Options),
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let first = args.next().ok_or("missing scenario")?;
    if first == "-h" || first == "--help" {
        return Ok(Command::Help);
    }
    let scenario = Scenario::ALL
        .into_iter()
        .find(|s| s.name() == first)
        .ok_or_else(|| format!("unknown scenario {first:?}"))?;
    let mut opts = Options::default();
    while let Some(option) = args.next() {
        if option == "-h" || option == "--help" {
            return Ok(Command::Help);
        }
        if !scenario.accepts(&option) {
            return Err(format!("{} does not take {option:?}", scenario.name()));
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{option} needs a value"))?;
        let bad = |_| format!("{option} {value:?} is not a number");
        match option.as_str() {
            "--max-size" => opts.max_size = value.parse().map_err(bad)?,
            "--blocks" => opts.blocks = value.parse().map_err(bad)?,
            "--small" => opts.small = value.parse().map_err(bad)?,
            "--threads" => opts.threads = value.parse().map_err(bad)?,
            "--messages" => opts.messages = value.parse().map_err(bad)?,
            "--leave" => {
                opts.leave = match value.as_str() {
                    "exit" => Leave::Exit,
                    "abort" => Leave::Abort,
                    _ => return Err(format!("--leave {value:?} must be exit or abort")),
                }
            }
            _ => return Err(format!("{} does not take {option:?}", scenario.name())),
        }
    }
    Ok(Command::Run(scenario, opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Command, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn scenarios_and_their_options_parse() {
        assert_eq!(
            parse_str("stress --blocks 5 --small 7 --threads 4"),
            Ok(Command::Run(
                Scenario::Stress,
                Options {
                    blocks: 5,
                    small: 7,
                    threads: 4,
                    ..Options::default()
                }
            ))
        );
        assert_eq!(
            parse_str("early-exit"),
            Ok(Command::Run(Scenario::EarlyExit, Options::default()))
        );
        assert_eq!(
            parse_str("early-exit --leave abort"),
            Ok(Command::Run(
                Scenario::EarlyExit,
                Options {
                    leave: Leave::Abort,
                    ..Options::default()
                }
            ))
        );
        assert_eq!(parse_str("--help"), Ok(Command::Help));
        assert_eq!(parse_str("errors -h"), Ok(Command::Help));
    }

    #[test]
    fn mistakes_are_reported() {
        assert!(parse_str("").is_err());
        assert!(parse_str("bogus").is_err());
        assert!(parse_str("errors --blocks 3").is_err());
        assert!(parse_str("stress --blocks").is_err());
        assert!(parse_str("stress --blocks many").is_err());
        assert!(parse_str("early-exit --leave later").is_err());
    }

    #[test]
    fn help_names_every_scenario() {
        for scenario in Scenario::ALL {
            assert!(
                HELP.contains(&format!("  {}  ", scenario.name())),
                "{scenario:?}"
            );
        }
    }
}
