//! The victim of the scenarios that stop or kill a rank (`stopped`, `dead-read`, `fault`,
//! `killed-target`): it sends rank 0 its pid and stops itself (SIGSTOP) once told; rank 0 waits
//! until `/proc` shows every thread of it stopped, then continues it (SIGCONT) or kills it
//! (SIGKILL). Or it kills itself. And what the survivors of a killed victim check alike.

use std::thread::sleep;
use std::time::{Duration, Instant};

use gaspi::{
    local, remote, Context, Error, GroupId, Notification, NotificationId, QueueId, Rank, ReduceOp,
    SegmentId, Timeout,
};
use rustix::process::{self, Signal};

use crate::check::{ensure, monotonic_us, stat_fields, Data, Doing, Failure, Outcome};

/// How long rank 0 waits for the victim to show up stopped in `/proc`.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// Where a scenario's victim and the other ranks meet: the same on every rank.
pub struct Handshake {
    /// The segment that carries the pid and the notifications.
    pub segment: SegmentId,
    /// Where the victim's pid lands on rank 0 (and where the victim keeps it).
    pub pid_at: u64,
    /// The notification announcing the pid to rank 0.
    pub pid_id: NotificationId,
    /// "Go ahead and stop" from rank `r` to the victim: notification `go + r`.
    pub go: NotificationId,
    /// The queue of the pid's write and of the go notifications.
    pub queue: QueueId,
}

impl Handshake {
    /// The victim: writes its pid into rank 0's segment, notifies it, and waits for the write.
    pub fn send_pid(&self, ctx: &Context, timeout: Timeout) -> Outcome {
        let pid = u64::from(std::process::id());
        ctx.segment_write(self.segment, self.pid_at, &pid.to_le_bytes())
            .doing(|| "writing the pid")?;
        let note = Notification {
            id: self.pid_id,
            value: 1,
        };
        ctx.write_notify(
            local(self.segment, self.pid_at),
            remote(0, self.segment, self.pid_at),
            8,
            note,
            self.queue,
        )
        .doing(|| "sending the pid to rank 0")?;
        ctx.wait(self.queue, timeout)
            .doing(|| "waiting for the pid's write")
    }

    /// Rank 0: waits for the victim's pid and takes its notification.
    pub fn receive_pid(&self, ctx: &Context, timeout: Timeout) -> Outcome<Pid> {
        ctx.notify_waitsome(self.segment, self.pid_id, 1, timeout)
            .doing(|| "waiting for the victim's pid")?;
        ctx.notify_reset(self.segment, self.pid_id)
            .doing(|| "resetting the pid's notification")?;
        self.read_pid(ctx)
    }

    /// Rank 0: the pid the victim sent, as it landed in the segment.
    pub fn read_pid(&self, ctx: &Context) -> Outcome<Pid> {
        let mut bytes = [0u8; 8];
        ctx.segment_read(self.segment, self.pid_at, &mut bytes)
            .doing(|| "reading the pid")?;
        let sent = u64::from_le_bytes(bytes);
        // Zero or less would make kill(2) signal a process group (or every process we may
        // signal), never the victim alone.
        i32::try_from(sent)
            .ok()
            .filter(|&pid| pid > 0)
            .and_then(process::Pid::from_raw)
            .map(Pid)
            .ok_or_else(|| Failure(format!("the victim sent pid {sent}")))
    }

    /// Every rank but the victim: tells it to stop (`round` tells the stops of a scenario
    /// apart). The notification's completion is left to the caller's queue.
    pub fn tell_to_stop(&self, ctx: &Context, victim: gaspi::Rank, round: u32) -> Outcome {
        let go = Notification {
            id: self.go + ctx.rank(),
            value: round,
        };
        ctx.notify(victim, self.segment, go, self.queue)
            .doing(|| format!("telling rank {victim} to stop (round {round})"))
    }

    /// The victim, the last rank: waits until every other rank told it to stop in `round`,
    /// then stops until continued. Each tells it once past a barrier, so none of them can
    /// still need a message of the victim's.
    pub fn stop_when_told(&self, ctx: &Context, round: u32, timeout: Timeout) -> Outcome {
        take_words(ctx, self.segment, self.go, round, timeout)?;
        stop_myself()
    }
}

/// The victim's process: its pid is positive, so a signal to it never reaches a group.
#[derive(Debug, Clone, Copy)]
pub struct Pid(process::Pid);

impl Pid {
    /// Sends `signal` (named `name` in the error) to the victim.
    fn signal(self, signal: Signal, name: &str) -> Outcome {
        process::kill_process(self.0, signal).map_err(|e| {
            Failure(format!(
                "{name} to the victim's process {}: {e}",
                self.0.as_raw_nonzero()
            ))
        })
    }
}

/// Stops this process (all its threads) until someone sends SIGCONT.
pub fn stop_myself() -> Outcome {
    // SIGSTOP on our own pid stops every thread until SIGCONT.
    process::kill_process(process::getpid(), Signal::STOP)
        .map_err(|e| Failure(format!("stopping myself: {e}")))
}

/// The victim of `scenario`, rank `rank`: prints its pid and its last reading of the host's
/// monotonic clock on its data line (`pid`, `killed_at_us`), then ends with [`kill_myself`].
pub fn report_and_kill_myself(scenario: &str, rank: Rank) -> ! {
    let mut data = Data::default();
    data.put("pid", std::process::id());
    data.put("killed_at_us", monotonic_us());
    data.print_now(scenario, rank);
    kill_myself()
}

/// Ends this process with SIGKILL, a real `kill -9`: no exit handler, no finalize.
pub fn kill_myself() -> ! {
    let _ = process::kill_process(process::getpid(), Signal::KILL);
    unreachable!("SIGKILL cannot be caught");
}

/// Where the survivors tell a victim that they are past the point after which it dies: a
/// victim that died as soon as its own part of a barrier was over could fail a survivor still
/// in that barrier (a dead member ends it), before the checks the scenario is about.
pub struct LastWords {
    /// The segment of the notifications.
    pub segment: SegmentId,
    /// Rank `r` tells the victim on notification `first + r`.
    pub first: NotificationId,
    /// The queue of the notifications.
    pub queue: QueueId,
}

impl LastWords {
    /// Every rank but `victim`: tells it that this rank is past the point, and waits for the
    /// notification, whose completion may report the victim's death.
    pub fn tell(&self, ctx: &Context, victim: Rank, timeout: Timeout) -> Outcome {
        let word = Notification {
            id: self.first + ctx.rank(),
            value: 1,
        };
        ctx.notify(victim, self.segment, word, self.queue)
            .doing(|| format!("telling rank {victim} to go"))?;
        match ctx.wait(self.queue, timeout) {
            Err(Error::RankFailed { rank, .. }) if rank == victim => Ok(()),
            done => done.doing(|| format!("waiting for the word to rank {victim}")),
        }
    }

    /// The victim: waits until every other rank told it that it is past the point.
    pub fn wait_for_all(&self, ctx: &Context, timeout: Timeout) -> Outcome {
        take_words(ctx, self.segment, self.first, 1, timeout)
    }
}

/// The victim: takes every other rank `r`'s word, notification `first + r` of `segment`,
/// which must carry `value` (a scenario's round).
fn take_words(
    ctx: &Context,
    segment: SegmentId,
    first: NotificationId,
    value: u32,
    timeout: Timeout,
) -> Outcome {
    for r in (0..ctx.size()).filter(|&r| r != ctx.rank()) {
        ctx.notify_waitsome(segment, first + r, 1, timeout)
            .doing(|| format!("waiting for rank {r}'s word (value {value})"))?;
        let got = ctx
            .notify_reset(segment, first + r)
            .doing(|| "resetting a word")?;
        if got != value {
            return Err(Failure(format!(
                "the word of rank {r}: value {got}, expected {value}"
            )));
        }
    }
    Ok(())
}

/// `Ok` when `got` is `RankFailed` naming `dead`; a failure saying what `what` returned instead.
pub fn expect_failed<T: std::fmt::Debug>(what: &str, got: gaspi::Result<T>, dead: Rank) -> Outcome {
    match got {
        Err(Error::RankFailed { rank, .. }) if rank == dead => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected RankFailed naming rank {dead}, got {other:?}"
        ))),
    }
}

/// The survivors of `dead` go on without it: a group of every other rank commits, its barrier
/// completes and an allreduce over it sums the members' ranks, which must add up. Each step is
/// recorded (`survivors_commit`, `survivors_barrier`, `survivors_allreduce`, `survivors_sum`).
pub fn survivors_group(ctx: &Context, dead: Rank, data: &mut Data) -> Outcome<GroupId> {
    let survivors = || (0..ctx.size()).filter(move |&r| r != dead);
    let group = ctx.group_create().doing(|| "group_create")?;
    for r in survivors() {
        ctx.group_add(group, r)
            .doing(|| format!("group_add({r})"))?;
    }
    let timeout = Timeout::Millis(30_000);
    let commit = ctx.group_commit(group, timeout);
    data.outcome("survivors_commit", &commit);
    commit.doing(|| "committing the group of the survivors")?;
    let barrier = ctx.group_barrier(group, timeout);
    data.outcome("survivors_barrier", &barrier);
    barrier.doing(|| "the barrier of the survivors")?;
    let mut sum = [0u64];
    let input = [u64::from(ctx.rank())];
    let reduced = ctx.allreduce(group, &input, &mut sum, ReduceOp::Sum, timeout);
    data.outcome("survivors_allreduce", &reduced);
    reduced.doing(|| "allreduce among the survivors")?;
    data.put("survivors_sum", sum[0]);
    let want: u64 = survivors().map(u64::from).sum();
    ensure!(
        sum[0] == want,
        "the survivors' allreduce summed their ranks to {}, expected {want}",
        sum[0]
    );
    Ok(group)
}

/// The victim stopped (`/proc` says so) until [`resume`](Self::resume) or
/// [`kill`](Self::kill); dropped otherwise, it is continued, so a failed check never leaves
/// the job hanging.
pub struct Stopped {
    pid: Pid,
    done: bool,
}

impl Stopped {
    /// Waits until every thread of the victim shows stopped.
    pub fn wait_for(pid: Pid) -> Outcome<Stopped> {
        // Made first: a failure below still continues the victim.
        let guard = Stopped { pid, done: false };
        watch_threads(pid, "stop", |states| match states {
            Some(states) => states.chars().all(|s| s == 'T').then_some(Ok(())),
            None => Some(Err(Failure(format!(
                "the victim's process {} is gone",
                pid.0
            )))),
        })?;
        Ok(guard)
    }

    /// Continues the victim.
    pub fn resume(mut self) -> Outcome {
        self.done = true;
        self.pid.signal(Signal::CONT, "SIGCONT")
    }

    /// Kills the victim and waits until its process is dead (gone, or a zombie the launcher
    /// has not reaped yet): SIGKILL is delivered asynchronously, and a look at a process that
    /// is still exiting finds it alive.
    pub fn kill(mut self) -> Outcome {
        self.done = true;
        self.pid.signal(Signal::KILL, "SIGKILL")?;
        watch_threads(self.pid, "die", |states| match states {
            Some(states) => states
                .chars()
                .all(|s| matches!(s, 'Z' | 'X'))
                .then_some(Ok(())),
            None => Some(Ok(())),
        })
    }
}

/// Looks at the threads of `pid` every millisecond until `over` says how the wait ends (given
/// their state letters, `None` once the process is gone); fails when the process did not
/// `what` within [`STOP_LIMIT`].
fn watch_threads(pid: Pid, what: &str, over: impl Fn(Option<&str>) -> Option<Outcome>) -> Outcome {
    let start = Instant::now();
    loop {
        let states = thread_states(pid.0.as_raw_nonzero().get());
        if let Some(end) = over(states.as_deref()) {
            return end;
        }
        if start.elapsed() > STOP_LIMIT {
            return Err(Failure(format!(
                "the victim's process {} did not {what} within {STOP_LIMIT:?} (its threads: {})",
                pid.0.as_raw_nonzero(),
                states.unwrap_or_default()
            )));
        }
        sleep(Duration::from_millis(1));
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.done {
            // Nothing better to do with a failure here: the launcher's time limit remains.
            let _ = self.pid.signal(Signal::CONT, "SIGCONT");
        }
    }
}

/// The state letters of the threads of `pid` (`T` when stopped), `None` when the process is
/// gone. Every thread counts: the process shows stopped as soon as its main thread is, while
/// its progress thread may still be on its way to the stop.
fn thread_states(pid: i32) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let states: String = tasks
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            stat_fields(&stat)?.next()?.chars().next()
        })
        .collect();
    // A thread that ended between the listing and the read is left out; no thread at all
    // means the process is gone.
    (!states.is_empty()).then_some(states)
}
