//! End-to-end tests of `gaspirun` and of the PMI client across real processes.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const GASPIRUN: &str = env!("CARGO_BIN_EXE_gaspirun");
const PMI_CHECK: &str = env!("CARGO_BIN_EXE_gaspi-pmi-check");

/// A test run that takes longer than this is a hang.
const HANG: Duration = Duration::from_secs(60);

struct Finished {
    status: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Finished {
    fn sorted_stdout(&self) -> Vec<&str> {
        let mut lines: Vec<&str> = self.stdout.lines().collect();
        lines.sort_unstable();
        lines
    }
}

/// Runs `command` to completion, killing it (and failing the test) if it hangs.
fn finish(command: &mut Command) -> Finished {
    finish_started(command, |_| ())
}

/// As [`finish`], calling `started` with the pid of the process once it runs.
fn finish_started(command: &mut Command, started: impl FnOnce(u32)) -> Finished {
    let start = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the launcher starts");
    started(child.id());
    let collect = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).expect("output is UTF-8");
            text
        })
    };
    let stdout = collect(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = collect(Box::new(child.stderr.take().expect("stderr is piped")));
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting works") {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            panic!("{command:?} still runs after {HANG:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    Finished {
        status: status.code(),
        stdout: stdout.join().expect("reader thread"),
        stderr: stderr.join().expect("reader thread"),
        elapsed,
    }
}

fn gaspirun(args: &[&str]) -> Finished {
    finish(
        Command::new(GASPIRUN)
            .args(args)
            .env_remove("GASPIRUN_TIMEOUT"),
    )
}

#[test]
fn output_lines_are_prefixed_with_the_rank() {
    let run = gaspirun(&["-n", "3", "sh", "-c", "echo hi $PMI_RANK; echo oops >&2"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.sorted_stdout(), ["[0] hi 0", "[1] hi 1", "[2] hi 2"]);
    let mut errors: Vec<&str> = run.stderr.lines().collect();
    errors.sort_unstable();
    assert_eq!(errors, ["[0] oops", "[1] oops", "[2] oops"]);
}

#[test]
fn ranks_get_their_environment_and_raw_output_is_unchanged() {
    let script = r#"printf '{"rank":%s,"size":%s,"local":"%s/%s","provider":"%s","job":"%s","fd_open":%s}\n' \
        "$PMI_RANK" "$PMI_SIZE" "$MPI_LOCALRANKID" "$MPI_LOCALNRANKS" "$GASPI_PROVIDER" \
        "${PMI_JOBID:+set}" "$( [ -e /proc/self/fd/$PMI_FD ] && echo true || echo false )""#;
    let run = gaspirun(&[
        "-n",
        "2",
        "--provider",
        "tcp",
        "--no-prefix",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(
        run.sorted_stdout(),
        [
            r#"{"rank":0,"size":2,"local":"0/2","provider":"tcp","job":"set","fd_open":true}"#,
            r#"{"rank":1,"size":2,"local":"1/2","provider":"tcp","job":"set","fd_open":true}"#,
        ]
    );
}

#[test]
fn separate_output_writes_one_file_pair_per_rank() {
    let dir = std::env::temp_dir().join(format!("gaspirun-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().expect("temp dir is UTF-8");
    let run = gaspirun(&[
        "-n",
        "2",
        "--separate-output",
        dir_arg,
        "sh",
        "-c",
        "echo out $PMI_RANK; echo err $PMI_RANK >&2",
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).expect("output file exists");
    assert_eq!(read("rank.0.out"), "out 0\n");
    assert_eq!(read("rank.1.out"), "out 1\n");
    assert_eq!(read("rank.1.err"), "err 1\n");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn first_failing_exit_code_is_returned_and_the_rest_is_killed() {
    let run = gaspirun(&[
        "-n",
        "3",
        "sh",
        "-c",
        r#"if [ "$PMI_RANK" = 1 ]; then sleep 0.2; exit 3; fi; sleep 60"#,
    ]);
    assert_eq!(run.status, Some(3), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(
        run.stderr.contains("rank 1 exited with status 3"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_rank_killed_by_a_signal_counts_as_128_plus_signal() {
    let run = gaspirun(&[
        "-n",
        "2",
        "sh",
        "-c",
        r#"if [ "$PMI_RANK" = 0 ]; then kill -9 $$; fi; sleep 60"#,
    ]);
    assert_eq!(run.status, Some(137), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(
        run.stderr.contains("rank 0 was killed by signal 9"),
        "{}",
        run.stderr
    );
}

#[test]
fn timeout_kills_the_job_promptly() {
    let run = gaspirun(&["-n", "2", "--timeout", "0.5", "sleep", "100"]);
    assert_eq!(run.status, Some(124), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(run.stderr.contains("time limit"), "{}", run.stderr);

    let run = finish(
        Command::new(GASPIRUN)
            .args(["-n", "1", "sleep", "100"])
            .env("GASPIRUN_TIMEOUT", "0.5"),
    );
    assert_eq!(run.status, Some(124), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
}

/// The live processes of the job gaspirun `pid` ran: those whose environment carries its job
/// id, as every rank's does (a zombie's environment reads as empty).
fn processes_of_job(pid: u32) -> Vec<String> {
    let needle = format!("PMI_JOBID=gaspirun-{pid}\0");
    let entries = std::fs::read_dir("/proc").expect("/proc is readable");
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.bytes().all(|b| b.is_ascii_digit()).then_some(name)
        })
        .filter(|proc_pid| {
            // Processes of other users, or gone by now, are not the job's.
            std::fs::read(Path::new("/proc").join(proc_pid).join("environ")).is_ok_and(|env| {
                env.windows(needle.len())
                    .any(|window| window == needle.as_bytes())
            })
        })
        .collect()
}

#[test]
fn the_time_limit_and_signals_end_a_job_still_starting_its_ranks() {
    // Starting 600 ranks takes 5-8 s on the 2-core CI machine: gaspirun used to start all of
    // them before it looked at its time limit or at a SIGTERM (300 ranks: 3.9 s in all, 4.3 s
    // after the signal). The bounds leave room for a loaded machine's teardown.
    let mut pid = 0;
    let run = finish_started(
        Command::new(GASPIRUN)
            .args(["-n", "600", "--timeout", "1", "/bin/sleep", "100"])
            .env_remove("GASPIRUN_TIMEOUT"),
        |started| pid = started,
    );
    assert_eq!(run.status, Some(124), "{}", run.stderr);
    assert!(run.stderr.contains("time limit"), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(3), "{:?}", run.elapsed);
    assert_eq!(processes_of_job(pid), Vec::<String>::new());

    let mut pid = 0;
    let mut signalled = None;
    let run = finish_started(
        Command::new(GASPIRUN)
            .args(["-n", "600", "/bin/sleep", "100"])
            .env_remove("GASPIRUN_TIMEOUT"),
        |started| {
            pid = started;
            thread::sleep(Duration::from_millis(300));
            let sent = Command::new("kill")
                .args(["-TERM", &started.to_string()])
                .status()
                .expect("kill runs");
            assert!(sent.success(), "kill -TERM {started}: {sent}");
            signalled = Some(Instant::now());
        },
    );
    let after_signal = signalled.expect("the signal was sent").elapsed();
    assert_eq!(run.status, Some(128 + 15), "{}", run.stderr);
    assert!(run.stderr.contains("received SIGTERM"), "{}", run.stderr);
    // What remains after the signal is the teardown of the ranks started so far.
    assert!(after_signal < Duration::from_secs(2), "{after_signal:?}");
    assert_eq!(processes_of_job(pid), Vec::<String>::new());
}

#[test]
fn nothing_the_ranks_started_survives_the_job() {
    // Each rank reports the pid of a background sleep, then the job times out.
    let run = gaspirun(&[
        "-n",
        "2",
        "--no-prefix",
        "--timeout",
        "1",
        "sh",
        "-c",
        "sleep 100 & echo $!; wait",
    ]);
    assert_eq!(run.status, Some(124), "{}", run.stderr);
    let pids: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(pids.len(), 2, "{}", run.stdout);
    for pid in pids {
        // Gone, or a zombie waiting for a reaper that is not ours.
        let stat = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat"));
        if let Ok(stat) = stat {
            let state = stat.rsplit(')').next().unwrap_or_default().trim_start();
            assert!(state.starts_with('Z'), "process {pid} still runs: {stat}");
        }
    }
}

#[test]
fn a_last_line_without_newline_never_runs_into_another_ranks() {
    let run = gaspirun(&[
        "-n",
        "3",
        "--no-prefix",
        "sh",
        "-c",
        r#"printf '{"rank":%s}' "$PMI_RANK""#,
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(
        run.sorted_stdout(),
        [r#"{"rank":0}"#, r#"{"rank":1}"#, r#"{"rank":2}"#],
        "{}",
        run.stdout
    );
}

#[test]
fn long_lines_of_different_ranks_never_mix() {
    // 300,000 bytes of its own rank's digit per rank, in one line: the old bound of 64 KiB
    // let pieces of the ranks' lines interleave (3 of 5 runs at 2 ranks).
    const LEN: usize = 300_000;
    let run = gaspirun(&[
        "-n",
        "4",
        "--no-prefix",
        "sh",
        "-c",
        r#"head -c 300000 /dev/zero | tr '\0' "$PMI_RANK"; echo"#,
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let lines = run.sorted_stdout();
    assert_eq!(lines.len(), 4, "{} lines", lines.len());
    for (rank, line) in lines.iter().enumerate() {
        let digit = char::from(b'0' + rank as u8);
        assert!(
            line.len() == LEN && line.chars().all(|c| c == digit),
            "line of rank {rank}: {} bytes, not all {digit}",
            line.len()
        );
    }
}

/// gaspirun with `args`, its stderr joined to its stdout in one pipe the test reads (as
/// `gaspirun ... 2>&1 | ...`), no stdin, and no time limit from the environment.
fn combined_output(args: &[&str]) -> Command {
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"exec "$0" "$@" 2>&1"#, GASPIRUN])
        .args(args)
        .env_remove("GASPIRUN_TIMEOUT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    command
}

#[test]
fn stdout_and_stderr_lines_never_mix_in_one_pipe() {
    // `gaspirun ... 2>&1 | tee log`: rank 0's long stdout lines and rank 1's short stderr
    // lines share one pipe that a slow reader empties. The streams' own locks do not exclude
    // each other and the kernel cuts a write longer than PIPE_BUF that waits for room, so
    // stderr lines landed inside stdout lines (28 to 43 of 20,300 lines, 2 of 2 runs).
    const LEN: usize = 100_000;
    let start = Instant::now();
    let mut child = combined_output(&["-n", "2", "sh", "-c"])
        .arg(format!(
            r#"if [ "$PMI_RANK" = 0 ]; then
                 for i in $(seq 100); do head -c {LEN} /dev/zero | tr '\0' O; echo; done
               else
                 seq 20000 | sed 's/^/E/' >&2
               fi"#
        ))
        .spawn()
        .expect("the launcher starts");
    let mut pipe = child.stdout.take().expect("stdout is piped");
    let mut combined = Vec::new();
    let mut chunk = [0u8; 3000];
    loop {
        match pipe.read(&mut chunk).expect("the pipe reads") {
            0 => break,
            n => combined.extend_from_slice(&chunk[..n]),
        }
        assert!(
            start.elapsed() < HANG,
            "gaspirun still writes after {HANG:?}"
        );
        // Slower than the ranks write, so that the pipe fills and writes wait for room.
        thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(child.wait().expect("waiting works").code(), Some(0));
    let long = format!("[0] {}", "O".repeat(LEN));
    let mut counts = [0usize; 2];
    for line in combined.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let line = String::from_utf8_lossy(line);
        if line == long {
            counts[0] += 1;
        } else if line
            .strip_prefix("[1] E")
            .is_some_and(|n| n.parse::<u32>().is_ok())
        {
            counts[1] += 1;
        } else {
            let shown: String = line.chars().take(80).collect();
            panic!("a mixed line of {} bytes: {shown}...", line.len());
        }
    }
    assert_eq!(counts, [100, 20000]);
}

#[test]
fn usage_errors_exit_with_2() {
    for args in [
        &["-n", "0", "true"][..],
        &["-n", "4294967295", "true"],
        &["-n", "2"],
        &["true"],
        &["-n", "2", "--no-such-flag", "true"],
        &["-n", "two", "true"],
        // Given twice, the last silently won; empty values meant the default provider and the
        // current directory.
        &["-n", "2", "-n", "3", "true"],
        &["-n", "2", "--provider", "tcp", "--provider", "shm", "true"],
        &["-n", "2", "--timeout", "1", "--timeout", "2", "true"],
        &["-n", "2", "--provider=", "true"],
        &["-n", "2", "--separate-output", "", "true"],
    ] {
        let run = gaspirun(args);
        assert_eq!(run.status, Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("gaspirun --help"), "{}", run.stderr);
    }
    let help = gaspirun(&["--help"]);
    assert_eq!(help.status, Some(0));
    assert!(help.stdout.contains("Usage: gaspirun -n N"));
    assert!(help.stdout.contains("--no-prefix"));
}

#[test]
fn the_guards_variable_in_the_users_environment_is_not_obeyed() {
    // It made gaspirun act as a guard: read stdin, run nothing, exit 0.
    let run = finish(
        Command::new(GASPIRUN)
            .args(["-n", "2", "sh", "-c", "echo hi $PMI_RANK"])
            .env_remove("GASPIRUN_TIMEOUT")
            .env("GASPIRUN_GUARD", "1"),
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.sorted_stdout(), ["[0] hi 0", "[1] hi 1"]);
}

#[test]
fn a_program_that_cannot_start_is_reported() {
    let run = gaspirun(&["-n", "2", "/nonexistent/gaspi-program"]);
    assert_eq!(run.status, Some(127), "{}", run.stderr);
    assert!(run.stderr.contains("cannot start"), "{}", run.stderr);
}

#[test]
fn pmi_client_exchanges_split_values_across_processes() {
    let run = gaspirun(&["-n", "4", PMI_CHECK]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(
        run.sorted_stdout(),
        ["[0] ok 0 4", "[1] ok 1 4", "[2] ok 2 4", "[3] ok 3 4"]
    );
}

#[test]
fn ranks_run_with_the_soft_descriptor_limit_raised_to_the_hard_one() {
    // One below the hard limit, so that the ranks see the hard one only if gaspirun raised it.
    let script = format!(
        "ulimit -Sn $(($(ulimit -Hn) - 1)) && exec {GASPIRUN} -n 2 sh -c 'echo $(ulimit -Sn) $(ulimit -Hn)'"
    );
    let run = finish(
        Command::new("sh")
            .args(["-c", &script])
            .env_remove("GASPIRUN_TIMEOUT"),
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let lines = run.sorted_stdout();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    for line in lines {
        let limits = line.split_once("] ").map_or(line, |(_, l)| l);
        let (soft, hard) = limits.split_once(' ').expect("two limits");
        assert_eq!(soft, hard, "{line}");
    }
}

/// The pid of the guard that gaspirun `pid` started, once it runs as the guard.
fn guard_of(pid: u32) -> Option<u32> {
    let parent = pid.to_string();
    std::fs::read_dir("/proc")
        .expect("/proc is readable")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok()?.parse().ok())
        .find(|child: &u32| {
            let proc = Path::new("/proc").join(child.to_string());
            // After the parenthesised name: the state, then the parent's pid.
            let child_of = std::fs::read_to_string(proc.join("stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(1))
                    == Some(parent.as_str())
            });
            child_of
                && std::fs::read(proc.join("cmdline"))
                    .is_ok_and(|cmdline| cmdline.starts_with(b"gaspirun-guard\0"))
        })
}

#[test]
fn a_guard_killed_during_the_job_is_reaped_at_once() {
    let mut gaspirun = Command::new(GASPIRUN)
        .args(["-n", "1", "/bin/sleep", "20"])
        .env_remove("GASPIRUN_TIMEOUT")
        .stdin(Stdio::null())
        .spawn()
        .expect("the launcher starts");
    let pid = gaspirun.id();
    let started = Instant::now();
    let guard = loop {
        if let Some(guard) = guard_of(pid) {
            break guard;
        }
        assert!(
            started.elapsed() < HANG,
            "no guard of gaspirun {pid} appeared"
        );
        thread::sleep(Duration::from_millis(20));
    };
    send_signal(guard, "KILL");
    let killed = Instant::now();
    // Before, its zombie stayed until gaspirun ended (here after 20 s).
    let stat = Path::new("/proc").join(guard.to_string()).join("stat");
    while stat.exists() && killed.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(20));
    }
    let left = std::fs::read_to_string(&stat);
    send_signal(pid, "TERM");
    exit_within(&mut gaspirun, HANG, "after SIGTERM");
    assert!(left.is_err(), "the killed guard is still there: {left:?}");
}

/// A rank's `/dev/shm` files go when it exits, but not the files of a process of the same pid
/// in another pid namespace (a container sharing `/dev/shm`): those are a live job's. Nor
/// does a file of libfabric's default region name for that pid (`<pid>:<uid>:<n>`), which
/// carries no namespace: the launcher used to remove it.
#[test]
fn leftovers_of_a_rank_spare_the_same_pid_of_another_pid_namespace() {
    use std::os::unix::fs::MetadataExt;
    let namespace = std::fs::metadata("/proc/self/ns/pid")
        .expect("the pid namespace of this process")
        .ino();
    // Inode number 1 is no namespace's: it stands for another one.
    let script = "touch /dev/shm/gaspi-spare-$1-$$-0 /dev/shm/gaspi-spare-1-$$-0 \
                  /dev/shm/$$:$(id -u):0 && echo $$";
    let run = gaspirun(&[
        "-n",
        "1",
        "--no-prefix",
        "sh",
        "-c",
        script,
        "sh",
        &namespace.to_string(),
    ]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let pid = run.stdout.trim();
    let own = Path::new("/dev/shm").join(format!("gaspi-spare-{namespace}-{pid}-0"));
    let foreign = Path::new("/dev/shm").join(format!("gaspi-spare-1-{pid}-0"));
    let uid = std::fs::metadata("/proc/self")
        .expect("this process's /proc entry")
        .uid();
    let unnamespaced = Path::new("/dev/shm").join(format!("{pid}:{uid}:0"));
    let (own_left, foreign_kept) = (own.exists(), foreign.exists());
    let unnamespaced_kept = unnamespaced.exists();
    let _ = std::fs::remove_file(&own);
    let _ = std::fs::remove_file(&foreign);
    let _ = std::fs::remove_file(&unnamespaced);
    assert!(!own_left, "{} outlived its rank", own.display());
    assert!(
        foreign_kept,
        "{} of another namespace was removed",
        foreign.display()
    );
    assert!(
        unnamespaced_kept,
        "{}, whose namespace nothing tells, was removed",
        unnamespaced.display()
    );
}

#[test]
fn a_rank_leaving_without_finalize_does_not_hang_a_barrier() {
    let run = gaspirun(&["-n", "3", PMI_CHECK, "leave-early"]);
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    // Whichever the launcher notices first: the barrier that cannot complete, or the rank that
    // left without finalizing while the others still run.
    assert!(
        run.stderr.contains("can no longer enter")
            || run.stderr.contains("exited without calling PMI finalize"),
        "{}",
        run.stderr
    );

    // Also when the missing rank never spoke PMI at all.
    let script = format!(r#"if [ "$PMI_RANK" = 2 ]; then exit 0; fi; exec "{PMI_CHECK}""#);
    let run = gaspirun(&["-n", "3", "sh", "-c", &script]);
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("rank 2 can no longer enter"),
        "{}",
        run.stderr
    );
}

#[test]
fn keep_going_lets_the_other_ranks_finish_and_reports_the_death() {
    // Rank 1 kills itself at once; the others finish their work a moment later.
    let script = r#"if [ "$PMI_RANK" = 1 ]; then kill -9 $$; fi; sleep 2; echo done $PMI_RANK"#;
    let run = gaspirun(&["-n", "3", "--keep-going", "sh", "-c", script]);
    assert_eq!(run.status, Some(137), "{}", run.stderr);
    assert_eq!(run.sorted_stdout(), ["[0] done 0", "[2] done 2"]);
    assert!(
        run.stderr.contains(
            "rank 1 was killed by signal 9 (SIGKILL); the other ranks keep running (--keep-going)"
        ),
        "{}",
        run.stderr
    );
    // The last rank's death leaves nobody to keep running, and says so.
    let run = gaspirun(&["-n", "1", "--keep-going", "sh", "-c", "kill -9 $$"]);
    assert_eq!(run.status, Some(137), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("rank 0 was killed by signal 9 (SIGKILL); no other rank is running"),
        "{}",
        run.stderr
    );
    // Without the option the same death ends the job before the others finish.
    let run = gaspirun(&["-n", "3", "sh", "-c", script]);
    assert_eq!(run.status, Some(137), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

#[test]
fn keep_going_still_ends_a_job_stuck_in_a_pmi_barrier() {
    // PMI-1 cannot tell the others that their barrier failed: the job must end, not hang.
    let script = format!(r#"if [ "$PMI_RANK" = 2 ]; then kill -9 $$; fi; exec "{PMI_CHECK}""#);
    let run = gaspirun(&["-n", "3", "--keep-going", "sh", "-c", &script]);
    assert_eq!(run.status, Some(137), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(
        run.stderr.contains("rank 2 can no longer enter"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_time_limit_names_the_rank_that_never_reached_the_start_up_barrier() {
    // Rank 2 stops before it speaks PMI; the others wait for it in the first barrier, silent
    // until their bootstrap timeout, which is longer than the job's time limit.
    let script = format!(r#"if [ "$PMI_RANK" = 2 ]; then kill -s STOP $$; fi; exec "{PMI_CHECK}""#);
    let run = gaspirun(&["-n", "3", "--timeout", "2", "sh", "-c", &script]);
    assert_eq!(run.status, Some(124), "{}", run.stderr);
    for said in [
        "rank(s) 2 had not entered the first PMI barrier",
        "which rank(s) 0, 1 waited in",
        "rank 0 waits in PMI barrier 1 (process sleeping)",
        "rank 2 sent no PMI message (process stopped)",
    ] {
        assert!(run.stderr.contains(said), "{said:?} in\n{}", run.stderr);
    }
}

#[test]
fn pmi_abort_ends_the_job_with_its_exit_code() {
    let run = gaspirun(&["-n", "3", PMI_CHECK, "abort"]);
    assert_eq!(run.status, Some(5), "{}", run.stderr);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    // The abort request and the rank's exit race to the launcher; either names rank 2.
    assert!(
        run.stderr
            .contains("rank 2 called PMI abort with exit code 5")
            || run.stderr.contains("rank 2 exited with status 5"),
        "{}",
        run.stderr
    );
    // The client's own explanation reaches the terminal either way.
    assert!(
        run.stderr
            .contains("[2] gaspi: rank 2 aborts the job (exit code 5)"),
        "{}",
        run.stderr
    );
}

/// Needs MPICH's `mpiexec.hydra` (`scripts/setup.sh` installs the `mpich` package): a missing
/// launcher fails the test rather than skipping it, so that CI cannot pass without running it.
#[test]
fn pmi_client_works_under_mpiexec_hydra() {
    let found = Command::new("mpiexec.hydra")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "mpiexec.hydra is not installed: run scripts/setup.sh (it installs mpich)"
    );
    // Default: an inherited socket (PMI_FD); with -pmi-port: TCP (PMI_PORT + PMI_ID handshake).
    for extra in [&[][..], &["-pmi-port"]] {
        let run = finish(
            Command::new("mpiexec.hydra")
                .args(extra)
                .args(["-n", "3", PMI_CHECK]),
        );
        assert_eq!(run.status, Some(0), "{extra:?}: {}", run.stderr);
        assert_eq!(run.sorted_stdout(), ["ok 0 3", "ok 1 3", "ok 2 3"]);
    }
}

/// Waits at most `bound` for `child` to exit; kills it and fails the test when it does not.
fn exit_within(child: &mut std::process::Child, bound: Duration, what: &str) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting works") {
            return status.code();
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: gaspirun still runs after {bound:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// What `child` wrote on its piped stderr, to the end.
fn stderr_to_end(child: &mut std::process::Child) -> String {
    let mut errors = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut errors)
        .expect("stderr reads");
    errors
}

fn send_signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{signal} {pid}: {sent}");
}

#[test]
fn a_closed_output_pipe_ends_the_job_as_sigpipe_would() {
    // `gaspirun -n 2 yes | head -2` ran until killed (still at 15 s) while mpiexec.hydra ends
    // at once with 141: gaspirun ignored its failing writes and kept reading the ranks.
    for stream in ["stdout", "stderr"] {
        let script = if stream == "stdout" { "yes" } else { "yes >&2" };
        let mut command = Command::new(GASPIRUN);
        command
            .args(["-n", "2", "sh", "-c", script])
            .env_remove("GASPIRUN_TIMEOUT")
            .stdin(Stdio::null());
        let mut child = if stream == "stdout" {
            command.stdout(Stdio::piped()).stderr(Stdio::piped())
        } else {
            command.stdout(Stdio::null()).stderr(Stdio::piped())
        }
        .spawn()
        .expect("the launcher starts");
        let pid = child.id();
        let mut closed: Box<dyn Read> = if stream == "stdout" {
            Box::new(child.stdout.take().expect("stdout is piped"))
        } else {
            Box::new(child.stderr.take().expect("stderr is piped"))
        };
        let mut first = [0u8; 64];
        closed.read_exact(&mut first).expect("the ranks print");
        drop(closed);
        let start = Instant::now();
        let status = exit_within(&mut child, Duration::from_secs(20), stream);
        assert_eq!(status, Some(141), "{stream}");
        assert!(start.elapsed() < Duration::from_secs(10), "{stream}");
        assert_eq!(processes_of_job(pid), Vec::<String>::new(), "{stream}");
        if stream == "stdout" {
            // The other stream, still open, has the report.
            let errors = stderr_to_end(&mut child);
            assert!(
                errors.contains("cannot write to its stdout")
                    && errors.contains("(broken pipe); terminating the job"),
                "{errors}"
            );
        }
    }
}

#[test]
fn the_time_limit_holds_while_nobody_reads_the_output() {
    // `(gaspirun -n 1 --timeout 3 yes 2>&1) | sleep 15` ended after 15 s: the main thread
    // blocked writing the time-limit message to the full pipe before it signalled the ranks.
    let mut child = combined_output(&["-n", "1", "--timeout", "1", "yes"])
        .spawn()
        .expect("the launcher starts");
    let pid = child.id();
    // Never read while gaspirun runs: the pipe stays full.
    let pipe = child.stdout.take().expect("stdout is piped");
    let start = Instant::now();
    let status = exit_within(&mut child, Duration::from_secs(20), "stalled output");
    let elapsed = start.elapsed();
    drop(pipe);
    assert_eq!(status, Some(124));
    // The limit, the wait for output that cannot drain (twice DRAIN_GRACE) and for the report.
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
    assert_eq!(processes_of_job(pid), Vec::<String>::new());
}

#[test]
fn usr1_and_usr2_reach_the_ranks_and_quit_and_alrm_end_the_job_in_order() {
    // These signals killed gaspirun outright, without a word, and its ranks died of their
    // parent-death SIGKILL without the SIGTERM that lets them clean up.
    let script = r#"trap 'echo usr1 $PMI_RANK' USR1; trap 'echo usr2 $PMI_RANK' USR2
        trap 'echo term $PMI_RANK; exit 0' TERM; echo ready
        while :; do sleep 100 & wait $!; done"#;
    for (ending, number) in [("QUIT", 3), ("ALRM", 14)] {
        let mut child = Command::new(GASPIRUN)
            .args(["-n", "2", "--no-prefix", "sh", "-c", script])
            .env_remove("GASPIRUN_TIMEOUT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the launcher starts");
        let pid = child.id();
        let (lines, received) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("stdout is piped");
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        // Waits for every line of `want`, as many times as it is there, in any order.
        let expect = |want: &[&str]| {
            let mut pending: Vec<&str> = want.to_vec();
            let mut seen = Vec::new();
            let until = Instant::now() + Duration::from_secs(20);
            while !pending.is_empty() {
                let left = until.saturating_duration_since(Instant::now());
                match received.recv_timeout(left) {
                    Ok(line) => {
                        if let Some(at) = pending.iter().position(|p| *p == line) {
                            pending.remove(at);
                        }
                        seen.push(line);
                    }
                    Err(_) => panic!("{ending}: waited for {pending:?}, saw {seen:?}"),
                }
            }
        };
        expect(&["ready", "ready"]);
        send_signal(pid, "USR1");
        expect(&["usr1 0", "usr1 1"]);
        send_signal(pid, "USR2");
        expect(&["usr2 0", "usr2 1"]);
        send_signal(pid, ending);
        expect(&["term 0", "term 1"]);
        let status = exit_within(&mut child, Duration::from_secs(20), ending);
        assert_eq!(status, Some(128 + number), "{ending}");
        let errors = stderr_to_end(&mut child);
        assert!(
            errors.contains(&format!("received SIG{ending}; terminating the job")),
            "{errors}"
        );
    }
}
