//! Running one job: starting the ranks, the event loop that serves PMI and watches exits,
//! output and deadlines, and tearing everything down when a rank fails.
//!
//! Helper threads only block on one thing each (a PMI socket, an output pipe, a `waitid`, a
//! `sigwait`) and report to the main thread over a channel. The main thread owns all state and
//! makes every decision, so PMI traffic, exits and time limits are judged in one order. It is
//! also the only thread that forks: the ranks' parent-death signal is tied to it.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::guard::Guard;
use super::options::{Options, Output};
use super::output::{self, Target};
use super::rank::{self, Exit, Started};
use super::{leftovers, limits, report, signals};
use gaspi_pmi::server::{Action, KvsServer};
use gaspi_pmi::wire::{LineReader, Message, ReadError, MAX_LINE};

/// How long gaspirun waits at its end for the gaspi processes that wrappers started, killed
/// with their process groups, to be gone so that their files can be removed.
const WRAPPED_GRACE: Duration = Duration::from_millis(500);

/// Time between SIGTERM and SIGKILL when the job is torn down.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long output may keep flowing after the last rank exited (from processes it left behind)
/// before those are killed, and again before gaspirun stops waiting for it.
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// A rank that does not take a PMI reply within this time is not reading its socket; the
/// reply is dropped rather than stalling the launcher for all ranks.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Exit status when the time limit ends the job (as timeout(1) uses).
const TIMEOUT_STATUS: u8 = 124;
/// Exit status when gaspirun's stdout or stderr is a pipe nobody reads any more: that of a
/// program killed by SIGPIPE (128 + 13), as the shell reports for `mpiexec ... | head`.
const BROKEN_PIPE_STATUS: u8 = 141;
/// How long gaspirun waits at its end for its last reports to be written: a stderr that nobody
/// empties must not keep it (and the job's time limit) waiting for ever.
const REPORT_WAIT: Duration = Duration::from_secs(1);
/// Exit status for failures of gaspirun itself.
const INTERNAL_ERROR: u8 = 1;
/// How long a rank whose PMI connection closed without finalize may take to exit before the
/// closed connection is taken as its fate: a killed rank's connection and its exit reach the
/// launcher in either order.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// What the helper threads report.
#[derive(Debug)]
enum Event {
    /// A PMI message from a rank.
    Pmi(u32, Message),
    /// A rank's PMI connection ended (closed or reset).
    PmiClosed(u32),
    /// A rank sent something that is not a PMI message.
    PmiBroken(u32, String),
    /// A rank's process ended (it is not reaped yet).
    Exited(u32, Exit),
    /// One forwarded output stream reached end of file.
    OutputClosed,
    /// gaspirun's own stdout or stderr is a pipe whose reader is gone.
    OutputBroken(Target),
    /// gaspirun received a signal that ends the job or is passed on to the ranks.
    Signal(Signal),
    /// The guard ended before its dismissal (it is not reaped yet).
    GuardEnded,
}

/// A rank's stdout or stderr, as its forwarding thread reads it.
type Source = Box<dyn io::Read + Send>;

/// The launcher's view of one started rank.
#[derive(Debug)]
struct Rank {
    /// The process; its pid doubles as its process-group id. Reaped only at the very end.
    child: Child,
    /// Where PMI replies go; `None` once the rank cannot be written to.
    pmi: Option<UnixStream>,
    /// The rank closed its PMI connection.
    pmi_closed: bool,
    /// When its PMI connection closed without finalize while the process still ran: its exit
    /// (a kill, a crash) usually follows at once and says more, so the barrier check waits
    /// [`EXIT_GRACE`] for it before blaming the closed connection.
    pmi_closed_at: Option<Instant>,
    /// How the process ended, once it did.
    exit: Option<Exit>,
    /// The guard knows the pid of its gaspi process inside a wrapper.
    inner_guarded: bool,
}

/// All state of a running job.
struct Job {
    ranks: Vec<Rank>,
    kvs: KvsServer,
    events: Sender<Event>,
    /// Whether forwarded lines get a `[rank] ` prefix.
    tag_output: bool,
    /// Forwarded output streams not yet at end of file.
    open_outputs: usize,
    /// Exit status of the first failure.
    failure: Option<u8>,
    /// The job is being torn down.
    ending: bool,
    /// Survivors run on when a rank dies (`--keep-going`).
    keep_going: bool,
    /// When the job's time limit ends, and its length (for the message).
    time_limit: Option<(Instant, Duration)>,
    /// When to follow the SIGTERM of a teardown with SIGKILL.
    kill_at: Option<Instant>,
    /// When to stop waiting for output after the last rank exited.
    drain_until: Option<Instant>,
    leftovers_killed: bool,
    output_abandoned: bool,
    /// Removes the ranks' files should gaspirun be killed (see the `guard` module); `None`
    /// when it could not be started, which only loses that cleanup.
    guard: Option<Guard>,
    /// Writes gaspirun's reports off the main thread.
    reporter: Reporter,
}

/// gaspirun's reports on stderr, written by a thread of their own: a stderr that nobody
/// empties (`(gaspirun ... 2>&1) | slow-reader`) blocked the main thread in the middle of a
/// teardown, so that neither the SIGKILL after the grace nor the time limit came.
struct Reporter {
    /// `None` when no thread could be had: reports are then written in place.
    lines: Option<Sender<String>>,
    /// Says when the thread has written every report.
    written: Receiver<()>,
}

impl Reporter {
    fn start() -> Reporter {
        let (lines, queued) = mpsc::channel::<String>();
        let (done, written) = mpsc::channel();
        let started = thread::Builder::new().spawn(move || {
            for line in queued {
                report(&line);
            }
            // The receiver is gone only when gaspirun stopped waiting.
            let _ = done.send(());
        });
        Reporter {
            lines: started.is_ok().then_some(lines),
            written,
        }
    }

    fn say(&self, message: String) {
        match &self.lines {
            Some(lines) => {
                // The thread ends only once the sender is dropped, in `finish`.
                let _ = lines.send(message);
            }
            None => report(&message),
        }
    }

    /// Waits at most `wait` for the reports said so far to be written.
    fn finish(self, wait: Duration) {
        if let Some(lines) = self.lines {
            drop(lines);
            let _ = self.written.recv_timeout(wait);
        }
    }
}

/// Runs the job `options` describes and returns gaspirun's exit status.
pub(crate) fn run(options: Options) -> u8 {
    // Before the guard and the ranks, which inherit it.
    limits::raise_descriptors();
    // Before any thread exists: see `signals::block`.
    let blocked = match signals::block() {
        Ok(blocked) => blocked,
        Err(e) => {
            report(&format!("cannot block termination signals: {e}"));
            return INTERNAL_ERROR;
        }
    };
    let (events, received) = mpsc::channel();
    let signal_events = events.clone();
    blocked.deliver(move |signal| signal_events.send(Event::Signal(signal)).is_ok());

    if let Output::Separate(dir) = &options.output {
        if let Err(e) = std::fs::create_dir_all(dir) {
            report(&format!("cannot create {}: {e}", dir.display()));
            return INTERNAL_ERROR;
        }
    }
    let pid = std::process::id();
    let jobid = format!("gaspirun-{pid}");
    let mut job = Job {
        ranks: Vec::with_capacity(options.ranks as usize),
        kvs: KvsServer::new(options.ranks, format!("kvs_{pid}_0")),
        events,
        tag_output: options.output == Output::Tagged,
        open_outputs: 0,
        failure: None,
        ending: false,
        keep_going: options.keep_going,
        time_limit: options.timeout.map(|t| (Instant::now() + t, t)),
        kill_at: None,
        drain_until: None,
        leftovers_killed: false,
        output_abandoned: false,
        // Before the first rank: a rank started unguarded could leave its files behind.
        guard: Guard::start().ok(),
        reporter: Reporter::start(),
    };
    job.watch_guard();
    // Events that arrive while ranks are started; the event loop takes them first, in order.
    let mut held = Vec::new();
    for rank in 0..options.ranks {
        // Starting a large job takes seconds to minutes: a signal or the time limit must end
        // it between two starts, not once the last rank runs.
        job.interrupt_launch(&received, &mut held);
        // A rank that could not be taken charge of failed the job: start no more.
        if job.ending {
            break;
        }
        match rank::spawn(&options, rank, &jobid) {
            Ok(started) => job.adopt(rank, started),
            Err(e) => {
                let status = match e.kind() {
                    io::ErrorKind::NotFound => 127,
                    io::ErrorKind::PermissionDenied => 126,
                    _ => INTERNAL_ERROR,
                };
                let program = options.program.to_string_lossy();
                job.fail(
                    status,
                    format!("cannot start {program:?} as rank {rank}: {e}"),
                );
                break;
            }
        }
    }
    job.supervise(received, held)
}

impl Job {
    /// Takes charge of a freshly started rank: threads for its PMI socket, its output and its
    /// exit. A thread that cannot be started (the system is out of them) fails the job.
    fn adopt(&mut self, rank: u32, started: Started) {
        let Started { mut child, pmi } = started;
        let reader = pmi.try_clone();
        let connected = reader.as_ref().ok().map(|_| {
            // Cannot fail: the timeout is not zero.
            let _ = pmi.set_write_timeout(Some(REPLY_TIMEOUT));
            pmi
        });
        let outputs = [
            child
                .stdout
                .take()
                .map(|s| (Box::new(s) as Source, Target::Stdout)),
            child
                .stderr
                .take()
                .map(|s| (Box::new(s) as Source, Target::Stderr)),
        ];
        let pid = child.id();
        if let Some(guard) = &mut self.guard {
            guard.watch(pid);
        }
        let events = self.events.clone();
        let watched = thread::Builder::new().spawn(move || {
            let exit = rank::wait_for_exit(pid);
            // The receiver only goes away when gaspirun is exiting anyway.
            let _ = events.send(Event::Exited(rank, exit));
        });
        self.ranks.push(Rank {
            child,
            pmi_closed: connected.is_none(),
            pmi_closed_at: None,
            pmi: connected,
            exit: None,
            inner_guarded: false,
        });
        // Everything below fails the job after the push, so that the teardown reaches this
        // rank too.
        if let Err(e) = watched {
            self.fail(
                INTERNAL_ERROR,
                format!("cannot start a thread to wait for rank {rank}: {e}"),
            );
            // Nothing else would see it exit: it is killed and waited for here.
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = self
                .events
                .send(Event::Exited(rank, rank::wait_for_exit(pid)));
        }
        for (source, target) in outputs.into_iter().flatten() {
            if let Err(e) = self.forward(source, target, rank) {
                self.fail(
                    INTERNAL_ERROR,
                    format!("cannot start a thread for the output of rank {rank}: {e}"),
                );
            }
        }
        let served = reader.and_then(|reader| {
            let events = self.events.clone();
            thread::Builder::new().spawn(move || read_pmi(rank, reader, events))
        });
        if let Err(e) = served {
            self.fail(
                INTERNAL_ERROR,
                format!("cannot serve PMI to rank {rank}: {e}"),
            );
        }
    }

    /// Forwards `source`, a stream of `rank`'s, on a thread of its own.
    fn forward(&mut self, source: Source, target: Target, rank: u32) -> io::Result<()> {
        let prefix = self.tag_output.then(|| format!("[{rank}] "));
        let events = self.events.clone();
        thread::Builder::new().spawn(move || {
            let broken = events.clone();
            output::forward(source, target, prefix, move || {
                // The receiver only goes away when gaspirun is exiting anyway.
                let _ = broken.send(Event::OutputBroken(target));
            });
            // The receiver only goes away when gaspirun is exiting anyway.
            let _ = events.send(Event::OutputClosed);
        })?;
        self.open_outputs += 1;
        Ok(())
    }

    /// Between two rank starts: fails the job on a terminating signal, a broken output pipe,
    /// or when its time limit has passed; passes forwarded signals on. Other events wait in
    /// `held` for the event loop, so that they are judged as they were before, with every
    /// rank started (a rank that exits early is not taken for the last one running).
    fn interrupt_launch(&mut self, received: &Receiver<Event>, held: &mut Vec<Event>) {
        while let Ok(event) = received.try_recv() {
            match event {
                // Taken at once: they end the job, or reach the ranks started so far (USR1, USR2).
                Event::Signal(_) | Event::OutputBroken(_) => self.handle(event),
                other => held.push(other),
            }
        }
        self.check_time_limit(Instant::now());
    }

    /// The event loop, after the events `held` back while the ranks were started; returns
    /// gaspirun's exit status once every rank has ended.
    fn supervise(mut self, received: Receiver<Event>, held: Vec<Event>) -> u8 {
        for event in held {
            self.handle(event);
        }
        loop {
            if self.ranks.iter().all(|r| r.exit.is_some()) {
                if self.open_outputs == 0 || self.output_abandoned {
                    break;
                }
                self.drain_until
                    .get_or_insert_with(|| Instant::now() + DRAIN_GRACE);
            }
            let event = match self.next_wake() {
                None => Some(
                    received
                        .recv()
                        .expect("the job holds a sender, so the channel stays connected"),
                ),
                Some(at) => {
                    match received.recv_timeout(at.saturating_duration_since(Instant::now())) {
                        Ok(event) => Some(event),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => {
                            unreachable!("the job holds a sender, so the channel stays connected")
                        }
                    }
                }
            };
            match event {
                Some(event) => self.handle(event),
                None => self.wake(Instant::now()),
            }
        }
        // Nothing of the job may outlive gaspirun, not even what a successful rank left running.
        self.signal_all(Signal::SIGKILL);
        for rank in &mut self.ranks {
            // The exit is known already; this only reaps the zombie.
            let _ = rank.child.wait();
        }
        // What wrappers left running was killed with their groups just now: its files go once
        // it is gone, which takes a moment (its parent, or init, reaps it).
        let wrapped: Vec<u32> = (0..self.ranks.len() as u32)
            .filter_map(|rank| self.wrapped(rank))
            .collect();
        leftovers::remove_when_gone(wrapped, WRAPPED_GRACE, Duration::from_millis(5));
        if let Some(guard) = self.guard.take() {
            guard.dismiss();
        }
        let status = self.failure.unwrap_or(0);
        self.reporter.finish(REPORT_WAIT);
        status
    }

    /// The pid of `rank`'s gaspi process when it is not the process gaspirun started (a
    /// wrapper started it), as it published it.
    fn wrapped(&self, rank: u32) -> Option<u32> {
        let started = self.ranks.get(rank as usize)?.child.id();
        self.kvs
            .value(&gaspi_pmi::pid_key(rank))
            .and_then(|pid| pid.parse().ok())
            .filter(|&pid| pid != started)
    }

    /// Has a thread wait for the guard to end, so that a guard killed while the job runs is
    /// reaped then, not left a zombie until gaspirun's end. Without the thread only that reaping
    /// is lost.
    fn watch_guard(&self) {
        let Some(guard) = &self.guard else { return };
        let (pid, events) = (guard.pid(), self.events.clone());
        let _ = thread::Builder::new().spawn(move || {
            // Ends without waiting once gaspirun has reaped the guard itself (ECHILD).
            let _ = rank::wait_for_exit(pid);
            // The receiver only goes away when gaspirun is exiting anyway.
            let _ = events.send(Event::GuardEnded);
        });
    }

    /// Tells the guard the pid of `rank`'s gaspi process inside a wrapper, once it is known.
    fn guard_inner(&mut self, rank: u32) {
        if self.ranks[rank as usize].inner_guarded {
            return;
        }
        if self.kvs.value(&gaspi_pmi::pid_key(rank)).is_none() {
            return;
        }
        self.ranks[rank as usize].inner_guarded = true;
        if let (Some(inner), Some(guard)) = (self.wrapped(rank), &mut self.guard) {
            guard.watch(inner);
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Pmi(rank, msg) => {
                self.serve(rank, &msg);
                self.guard_inner(rank);
            }
            Event::PmiClosed(rank) => {
                let r = &mut self.ranks[rank as usize];
                r.pmi_closed = true;
                r.pmi = None;
                if r.exit.is_none() {
                    r.pmi_closed_at = Some(Instant::now());
                }
                self.check_barrier();
            }
            Event::PmiBroken(rank, why) => {
                self.ranks[rank as usize].pmi = None;
                self.fail(
                    INTERNAL_ERROR,
                    format!("rank {rank} broke the PMI protocol: {why}"),
                );
            }
            Event::Exited(rank, exit) => {
                leftovers::remove(self.ranks[rank as usize].child.id());
                if let Some(inner) = self.wrapped(rank) {
                    leftovers::remove_if_gone(inner);
                }
                if exit.status != 0 {
                    self.rank_died(exit.status, format!("rank {rank} {}", exit.description));
                } else if self.kvs.is_initialized(rank)
                    && !self.kvs.is_finalized(rank)
                    && self
                        .ranks
                        .iter()
                        .enumerate()
                        .any(|(r, other)| r != rank as usize && other.exit.is_none())
                {
                    // A rank that joined the job and left without finalizing is a dead peer to
                    // the others, whatever its status: end the job instead of letting the
                    // survivors wait for it until their timeouts.
                    self.rank_died(
                        INTERNAL_ERROR,
                        format!("rank {rank} exited without calling PMI finalize while other ranks still run"),
                    );
                }
                self.ranks[rank as usize].exit = Some(exit);
                self.check_barrier();
            }
            Event::OutputClosed => self.open_outputs -= 1,
            // After a dismissal the guard is gone from `self` and was reaped there.
            Event::GuardEnded => self.guard = self.guard.take().and_then(Guard::reap),
            Event::OutputBroken(target) => self.fail(
                BROKEN_PIPE_STATUS,
                format!(
                    "cannot write to its {}: the pipe's reader is gone (broken pipe)",
                    target.name()
                ),
            ),
            Event::Signal(signal) if signals::is_forwarded(signal) => self.signal_all(signal),
            Event::Signal(signal) => {
                let name = signal.as_str();
                if self.ending {
                    // Asked twice: no more grace.
                    self.signal_all(Signal::SIGKILL);
                    self.kill_at = None;
                } else {
                    self.fail(
                        (128 + signal as i32).clamp(0, 255) as u8,
                        format!("received {name}"),
                    );
                }
            }
        }
    }

    /// Handles one PMI request and delivers the replies.
    fn serve(&mut self, rank: u32, msg: &Message) {
        if self.ending {
            // The job is going down; a reply could only let the rank run on a little longer.
            return;
        }
        match self.kvs.handle(rank, msg) {
            Ok(actions) => {
                for action in actions {
                    match action {
                        Action::Reply(to, reply) => self.reply(to, &reply),
                        Action::Abort(code) => {
                            let status = match code & 0xff {
                                0 => 1,
                                status => status as u8,
                            };
                            self.fail(
                                status,
                                format!("rank {rank} called PMI abort with exit code {code}"),
                            );
                        }
                    }
                }
            }
            Err(why) => self.fail(INTERNAL_ERROR, format!("rank {rank} {why}")),
        }
        self.check_barrier();
    }

    fn reply(&mut self, to: u32, reply: &Message) {
        let rank = &mut self.ranks[to as usize];
        if let Some(socket) = &mut rank.pmi {
            // A rank that stopped reading, or is gone, loses its connection; its exit (or the
            // time limit) decides the job's fate. A vanished peer is an EPIPE error here, not a
            // signal: Rust's runtime ignores SIGPIPE in binaries, and gaspirun is one.
            if socket.write_all(reply.encode().as_bytes()).is_err() {
                rank.pmi = None;
            }
        }
    }

    /// Fails the job when ranks wait in a barrier that some rank can no longer enter.
    /// This applies under `--keep-going` too: PMI-1 has no way to tell the waiting ranks that
    /// their barrier failed, so the job cannot go on.
    fn check_barrier(&mut self) {
        if self.ending {
            return;
        }
        let waiting = self.kvs.barrier_waiters();
        if waiting.is_empty() {
            return;
        }
        let gone = (0..self.ranks.len() as u32)
            .filter(|r| !waiting.contains(r))
            .find_map(|r| self.cannot_enter_barrier(r).map(|why| (r, why)));
        if let Some((rank, why)) = gone {
            let waiting: Vec<String> = waiting.iter().map(u32::to_string).collect();
            self.fail(
                INTERNAL_ERROR,
                format!(
                    "rank(s) {} wait in a PMI barrier that rank {rank} can no longer enter: it {why}",
                    waiting.join(", ")
                ),
            );
        }
    }

    fn cannot_enter_barrier(&self, rank: u32) -> Option<String> {
        let r = &self.ranks[rank as usize];
        if let Some(exit) = &r.exit {
            Some(exit.description.clone())
        } else if self.kvs.is_finalized(rank) {
            Some("already called PMI finalize".to_owned())
        } else if r.pmi_closed && r.pmi_closed_at.is_none_or(|at| at.elapsed() >= EXIT_GRACE) {
            Some("closed its PMI connection without calling finalize".to_owned())
        } else {
            None
        }
    }

    /// A rank died: under `--keep-going` the failure is recorded for the exit status and the
    /// other ranks run on (the runtime tells them which peer is gone); otherwise the job ends.
    fn rank_died(&mut self, status: u8, message: String) {
        let message = message + &self.start_up_stragglers();
        if !self.keep_going {
            return self.fail(status, message);
        }
        if self.ending {
            return;
        }
        // The rank that died has no exit recorded yet.
        let others = self
            .ranks
            .iter()
            .filter(|r| r.exit.is_none())
            .count()
            .saturating_sub(1);
        let others = match others {
            0 => "no other rank is running",
            1 => "the other rank keeps running (--keep-going)",
            _ => "the other ranks keep running (--keep-going)",
        };
        self.reporter.say(format!("{message}; {others}"));
        self.failure.get_or_insert(status);
    }

    /// Records the first failure, starts tearing the job down, and reports it; the ranks are
    /// signalled first, so that a report that cannot be written at once never delays them.
    fn fail(&mut self, status: u8, message: String) {
        if self.ending {
            return;
        }
        self.failure.get_or_insert(status);
        self.ending = true;
        self.signal_all(Signal::SIGTERM);
        self.kill_at = Some(Instant::now() + KILL_GRACE);
        self.reporter.say(format!("{message}; terminating the job"));
    }

    /// Sends `signal` to the process group of every rank, including ranks that already exited:
    /// their unreaped zombies keep the group ids valid, and group members may still run.
    fn signal_all(&self, signal: Signal) {
        for rank in &self.ranks {
            // ESRCH (the group is empty) is expected and harmless.
            let _ = killpg(Pid::from_raw(rank.child.id() as i32), signal);
        }
    }

    /// The next moment something has to happen without an event.
    fn next_wake(&self) -> Option<Instant> {
        let limit = self.time_limit.filter(|_| !self.ending).map(|(at, _)| at);
        let grace = self
            .ranks
            .iter()
            .filter(|r| r.exit.is_none())
            .filter_map(|r| r.pmi_closed_at)
            .map(|at| at + EXIT_GRACE)
            .min();
        [limit, self.kill_at, self.drain_until, grace]
            .into_iter()
            .flatten()
            .min()
    }

    fn check_time_limit(&mut self, now: Instant) {
        if let Some((at, limit)) = self.time_limit {
            if now >= at && !self.ending {
                let message = format!(
                    "the job exceeded its time limit of {} s{}; what each rank was last seen \
                     doing: {}",
                    limit.as_secs_f64(),
                    self.start_up_stragglers(),
                    self.whereabouts()
                );
                self.fail(TIMEOUT_STATUS, message);
            }
        }
    }

    /// `"; rank(s) 2 had not entered ..."` while some ranks wait in the first PMI barrier (for
    /// gaspi, the end of its start-up) that others have not entered; otherwise empty. The
    /// waiting ones give up only after their bootstrap timeout, silently until then: this names
    /// the ranks that held them up.
    fn start_up_stragglers(&self) -> String {
        let missing = self.kvs.missing_from_first_barrier();
        if missing.is_empty() || missing.len() == self.ranks.len() {
            return String::new();
        }
        let waiting: Vec<String> = (0..self.ranks.len() as u32)
            .filter(|r| !missing.contains(r))
            .map(|r| r.to_string())
            .collect();
        let missing: Vec<String> = missing.iter().map(u32::to_string).collect();
        format!(
            "; rank(s) {} had not entered the first PMI barrier (the end of a gaspi start-up), \
             which rank(s) {} waited in",
            missing.join(", "),
            waiting.join(", ")
        )
    }

    /// Each rank's last PMI activity and its process's state (or how it ended), e.g.
    /// "rank 2 sent no PMI message (process stopped)", separated by "; ".
    fn whereabouts(&self) -> String {
        (0..self.ranks.len() as u32)
            .map(|rank| {
                let r = &self.ranks[rank as usize];
                let process = match &r.exit {
                    Some(exit) => format!("process {}", exit.description),
                    None => {
                        let pid = self.wrapped(rank).unwrap_or_else(|| r.child.id());
                        rank::process_state(pid).map_or_else(
                            || "process state unknown".to_owned(),
                            |s| format!("process {s}"),
                        )
                    }
                };
                format!("rank {rank} {} ({process})", self.kvs.activity(rank))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn wake(&mut self, now: Instant) {
        self.check_time_limit(now);
        if self.kill_at.is_some_and(|at| now >= at) {
            self.signal_all(Signal::SIGKILL);
            self.kill_at = None;
        }
        let mut graced = false;
        for r in &mut self.ranks {
            if r.pmi_closed_at.is_some_and(|at| now >= at + EXIT_GRACE) {
                r.pmi_closed_at = None;
                graced = true;
            }
        }
        if graced {
            self.check_barrier();
        }
        if self.drain_until.is_some_and(|at| now >= at) {
            if self.leftovers_killed {
                self.output_abandoned = true;
                self.drain_until = None;
            } else {
                self.reporter
                    .say("all ranks exited; killing processes they left behind".to_owned());
                self.signal_all(Signal::SIGKILL);
                self.leftovers_killed = true;
                self.drain_until = Some(now + DRAIN_GRACE);
            }
        }
    }
}

/// Reads PMI messages from one rank until its connection ends.
fn read_pmi(rank: u32, socket: UnixStream, events: Sender<Event>) {
    let mut reader = LineReader::new(socket, MAX_LINE);
    loop {
        // No timeout: a rank may legitimately compute for hours between PMI calls.
        let event = match reader.read_message(None) {
            Ok(msg) => Event::Pmi(rank, msg),
            Err(ReadError::Malformed(why)) => Event::PmiBroken(rank, why),
            // A rank dying with replies unread resets the connection rather than closing it;
            // either way it is gone, and its exit status tells why.
            Err(ReadError::Closed | ReadError::Io(_) | ReadError::Timeout) => {
                Event::PmiClosed(rank)
            }
        };
        let last = !matches!(event, Event::Pmi(..));
        if events.send(event).is_err() || last {
            return;
        }
    }
}
