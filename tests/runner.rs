//! The test runner's own checks (`common/`): a program older than a file it is built from is
//! stale, one newer than all of them current; a job is killed however its reading ends; a rank
//! stalled in its start-up ends the job, named, well within the job's time limit.

mod common;

use std::fs::{self, File};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use common::fresh;

/// How long before the check the program was built.
const BUILT: Duration = Duration::from_secs(10);

/// Writes `path` and dates it `age` before `now`.
fn file_aged(path: &Path, now: SystemTime, age: Duration) {
    fs::write(path, b"x").expect("the temporary directory is writable");
    let file = File::options()
        .write(true)
        .open(path)
        .expect("just written");
    file.set_modified(now - age)
        .expect("the file's time can be set");
}

/// The name of the source [`fresh::newer_source`] names for a program built [`BUILT`] ago
/// from `sources` (each a name and its age in seconds, `None` for a file that is gone), in
/// a directory of `test`'s own; `dep_info: false` leaves out the program's dep-info.
fn judged(test: &str, sources: &[(&str, Option<u64>)], dep_info: bool) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("gaspi-runner-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("the temporary directory is writable");
    let now = SystemTime::now();
    let program = dir.join("prog");
    file_aged(&program, now, BUILT);
    let mut listed = Vec::new();
    for &(name, age) in sources {
        let path = dir.join(name);
        if let Some(age) = age {
            file_aged(&path, now, Duration::from_secs(age));
        }
        listed.push(path.display().to_string().replace(' ', "\\ "));
    }
    if dep_info {
        let info = format!("{}: {}\n", program.display(), listed.join(" "));
        fs::write(dir.join("prog.d"), info).expect("the temporary directory is writable");
    }
    let newer = fresh::newer_source(&program);
    fs::remove_dir_all(&dir).expect("the test's own directory");
    newer.map(|path| {
        path.strip_prefix(&dir)
            .unwrap_or(&path)
            .display()
            .to_string()
    })
}

#[test]
fn a_program_newer_than_its_sources_is_current() {
    let sources = [("a.rs", Some(20)), ("with space.rs", Some(30))];
    assert_eq!(judged("current", &sources, true), None);
}

#[test]
fn a_source_changed_after_the_build_makes_the_program_stale() {
    let sources = [("a.rs", Some(20)), ("with space.rs", Some(1))];
    let newer = judged("stale", &sources, true);
    assert_eq!(newer.as_deref(), Some("with space.rs"));
}

#[test]
fn a_source_gone_makes_the_program_stale() {
    let sources = [("a.rs", Some(20)), ("gone.rs", None)];
    assert_eq!(judged("gone", &sources, true).as_deref(), Some("gone.rs"));
}

#[test]
fn a_program_without_dep_info_is_not_judged() {
    let sources = [("a.rs", Some(1))];
    assert_eq!(judged("no-info", &sources, false), None);
}

/// A failed check inside `killed`'s `ready` (a panic) kills the job it started, which used
/// to run on until its own time limit.
#[test]
fn a_panic_while_reading_a_job_kills_it() {
    let mut command = Command::new("sh");
    command.args(["-c", "echo $$; exec sleep 600"]);
    let job = Mutex::new(None);
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        common::killed(command, |line| {
            *job.lock().expect("only this thread locks it") = line.parse::<u32>().ok();
            panic!("a check of the job's first line failed");
        })
    }));
    assert!(outcome.is_err(), "the check's panic goes on to the test");
    let pid = job
        .into_inner()
        .expect("only this thread locked it")
        .expect("the job printed its pid");
    // Killed and reaped: the process is gone.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the job (pid {pid}) still runs after its reader panicked"
    );
}

/// A rank stopped before it joins the job: the others give up at their bootstrap timeout,
/// which the runner sets well below the job limit, and the launcher names the missing rank.
/// With the runtime's default bootstrap timeout the launcher's time limit killed such a job
/// first, and nobody said anything.
#[test]
fn a_rank_stalled_in_start_up_fails_the_job_in_time_and_is_named() {
    let selftest = common::selftest_path();
    let selftest = selftest
        .to_str()
        .expect("the target directory is a UTF-8 path");
    let script = r#"if [ "$PMI_RANK" = 1 ]; then kill -s STOP $$; fi; exec "$0" "$@""#;
    let job = common::gaspirun(
        2,
        "tcp",
        common::JOB_TIMEOUT_S,
        Path::new("sh"),
        &["-c", script, selftest, "order"],
    );
    assert!(
        job.elapsed < Duration::from_secs(common::JOB_TIMEOUT_S),
        "the job ran into its time limit\n{}",
        job.report()
    );
    assert_eq!(job.status.code(), Some(1), "{}", job.report());
    for said in [
        "FAIL order: joining the job failed",
        "rank(s) 1 had not entered the first PMI barrier",
    ] {
        assert!(job.stderr.contains(said), "{said:?}\n{}", job.report());
    }
}
