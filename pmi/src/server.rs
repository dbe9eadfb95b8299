//! The process-manager side of PMI-1 as `gaspirun` serves it: one key-value space shared by
//! all ranks of the job and a job-wide barrier.
//!
//! Pure state: the caller reads messages off the ranks' sockets, hands them to
//! [`KvsServer::handle`] and delivers the returned replies. Keeping I/O out makes the protocol
//! testable without processes and lets the launcher fold PMI events into the same loop that
//! watches exits and timeouts.

use std::collections::HashMap;

use crate::split::{self, Stored};
use crate::wire::{Message, MAX_LINE};

/// Longest key-value-space name clients must accept (advertised in `maxes`).
pub const KVSNAME_MAX: usize = 256;
/// Key buffer size advertised in `maxes`; keys are at most one byte shorter (C's NUL).
pub const KEYLEN_MAX: usize = 64;
/// Value buffer size advertised in `maxes`; values are at most one byte shorter (C's NUL).
pub const VALLEN_MAX: usize = 1024;

/// The fixed part of the reply to a successful `get`, which must fit into [`MAX_LINE`].
const GET_RESULT_PREFIX: &str = "cmd=get_result rc=0 msg=success value=";

/// Something the caller has to do after a message was handled.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `Message` to the given rank.
    Reply(u32, Message),
    /// The rank asked to abort the whole job with this exit code.
    Abort(i32),
}

/// Where a rank is in its PMI life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Active,
    InBarrier,
    Finalized,
}

/// PMI-1 state of one job.
#[derive(Debug)]
pub struct KvsServer {
    kvsname: String,
    kvs: HashMap<String, String>,
    phases: Vec<Phase>,
    /// Ranks that sent `init`: they take part in the job's life cycle and must finalize.
    initialized: Vec<bool>,
    /// The command each rank sent last, for reports on a job that got stuck.
    last_command: Vec<Option<String>>,
    /// How many barriers all ranks have left.
    barriers_completed: u32,
}

impl KvsServer {
    /// A server for ranks `0..size` whose key-value space is called `kvsname`.
    pub fn new(size: u32, kvsname: String) -> Self {
        KvsServer {
            kvsname,
            kvs: HashMap::new(),
            phases: vec![Phase::Active; size as usize],
            initialized: vec![false; size as usize],
            last_command: vec![None; size as usize],
            barriers_completed: 0,
        }
    }

    /// True once `rank` has sent `init`.
    pub fn is_initialized(&self, rank: u32) -> bool {
        self.initialized[rank as usize]
    }

    /// True once `rank` has sent `finalize`.
    pub fn is_finalized(&self, rank: u32) -> bool {
        self.phases[rank as usize] == Phase::Finalized
    }

    /// The value a rank's [`PmiClient`](crate::PmiClient) put under `key`, if it is there
    /// whole: what the process manager may read of the job's key-value space (a rank's process
    /// id, for one).
    pub fn value(&self, key: &str) -> Option<String> {
        match split::parse_header(self.kvs.get(key)?).ok()? {
            Stored::Inline(value) => Some(value),
            Stored::Split(chunks) => (0..chunks)
                .map(|i| self.kvs.get(&split::chunk_key(key, i)).cloned())
                .collect(),
        }
    }

    /// The ranks currently blocked in `barrier_in`, in rank order.
    pub fn barrier_waiters(&self) -> Vec<u32> {
        (0..self.phases.len() as u32)
            .filter(|&r| self.phases[r as usize] == Phase::InBarrier)
            .collect()
    }

    /// The ranks that have not entered the job's first barrier while it is still incomplete:
    /// for a gaspi job, those that have not reached the end of their start-up. Empty once
    /// every rank has left that barrier.
    pub fn missing_from_first_barrier(&self) -> Vec<u32> {
        if self.barriers_completed > 0 {
            return Vec::new();
        }
        (0..self.phases.len() as u32)
            .filter(|&r| self.phases[r as usize] != Phase::InBarrier)
            .collect()
    }

    /// What `rank` was last seen doing over PMI, in words for a report on a stuck job: e.g.
    /// "sent no PMI message", "waits in PMI barrier 1", "last sent cmd=put (before PMI
    /// barrier 1)".
    pub fn activity(&self, rank: u32) -> String {
        let barrier = self.barriers_completed + 1;
        match (
            self.phases[rank as usize],
            &self.last_command[rank as usize],
        ) {
            (Phase::Finalized, _) => "called PMI finalize".to_owned(),
            (Phase::InBarrier, _) => format!("waits in PMI barrier {barrier}"),
            (Phase::Active, None) => "sent no PMI message".to_owned(),
            (Phase::Active, Some(cmd)) => {
                format!("last sent cmd={cmd} (before PMI barrier {barrier})")
            }
        }
    }

    /// Handles one message from `rank` (which must be below the job size).
    ///
    /// # Errors
    /// A description of the protocol violation (an unknown command, a missing argument, a
    /// command out of order): the rank cannot recover from it, and the launcher treats it as
    /// a failure.
    pub fn handle(&mut self, rank: u32, msg: &Message) -> Result<Vec<Action>, String> {
        let phase = self.phases[rank as usize];
        if phase != Phase::Active {
            return Err(format!(
                "sent cmd={} while {}",
                msg.cmd(),
                match phase {
                    Phase::InBarrier => "waiting in a barrier",
                    _ => "already finalized",
                }
            ));
        }
        self.last_command[rank as usize] = Some(msg.cmd().to_owned());
        let reply = |m: Message| Ok(vec![Action::Reply(rank, m)]);
        match msg.cmd() {
            "init" => {
                self.initialized[rank as usize] = true;
                let base = Message::new("response_to_init")
                    .arg("pmi_version", 1)
                    .arg("pmi_subversion", 1);
                if msg.get("pmi_version") == Some("1") {
                    reply(base.arg("rc", 0))
                } else {
                    reply(
                        base.arg("rc", -1)
                            .arg("msg", "only_pmi_version_1_is_supported"),
                    )
                }
            }
            "get_maxes" => reply(
                Message::new("maxes")
                    .arg("kvsname_max", KVSNAME_MAX)
                    .arg("keylen_max", KEYLEN_MAX)
                    .arg("vallen_max", VALLEN_MAX),
            ),
            "get_appnum" => reply(Message::new("appnum").arg("appnum", 0)),
            "get_universe_size" => {
                reply(Message::new("universe_size").arg("size", self.phases.len()))
            }
            "get_my_kvsname" => reply(
                Message::new("my_kvsname")
                    .arg("kvsname", &self.kvsname)
                    .arg("rc", 0),
            ),
            "put" => reply(self.put(msg)),
            "get" => reply(self.get(msg)),
            "barrier_in" => {
                self.phases[rank as usize] = Phase::InBarrier;
                Ok(self.release_barrier_if_complete())
            }
            "finalize" => {
                self.phases[rank as usize] = Phase::Finalized;
                reply(Message::new("finalize_ack").arg("rc", 0))
            }
            "abort" => {
                let code = msg
                    .get("exitcode")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                Ok(vec![Action::Abort(code)])
            }
            other => Err(format!("sent the unsupported PMI command cmd={other}")),
        }
    }

    fn put(&mut self, msg: &Message) -> Message {
        let fail = |why: &str| Message::new("put_result").arg("rc", -1).arg("msg", why);
        if msg.get("kvsname") != Some(self.kvsname.as_str()) {
            return fail("unknown_kvsname");
        }
        let (Some(key), Some(value)) = (msg.get("key"), msg.get("value")) else {
            return fail("put_needs_key_and_value");
        };
        if key.is_empty() || key.len() >= KEYLEN_MAX {
            return fail("key_length_out_of_range");
        }
        if value.len() >= VALLEN_MAX || GET_RESULT_PREFIX.len() + value.len() + 1 > MAX_LINE {
            return fail("value_too_long");
        }
        self.kvs.insert(key.to_owned(), value.to_owned());
        Message::new("put_result")
            .arg("rc", 0)
            .arg("msg", "success")
    }

    fn get(&self, msg: &Message) -> Message {
        let fail = |why: String| Message::new("get_result").arg("rc", -1).arg("msg", why);
        if msg.get("kvsname") != Some(self.kvsname.as_str()) {
            return fail("unknown_kvsname".to_owned());
        }
        let key = msg.get("key").unwrap_or_default();
        match self.kvs.get(key) {
            Some(value) => Message::new("get_result")
                .arg("rc", 0)
                .arg("msg", "success")
                .arg("value", value),
            None => fail(format!("key_{key}_not_found")),
        }
    }

    /// Lets everybody out once every rank is in the barrier.
    fn release_barrier_if_complete(&mut self) -> Vec<Action> {
        if self.phases.iter().any(|&p| p != Phase::InBarrier) {
            return Vec::new();
        }
        self.phases.fill(Phase::Active);
        self.barriers_completed += 1;
        (0..self.phases.len() as u32)
            .map(|r| Action::Reply(r, Message::new("barrier_out")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(line: &str) -> Message {
        Message::parse(line).unwrap()
    }

    fn only_reply(actions: Vec<Action>) -> Message {
        match <[Action; 1]>::try_from(actions) {
            Ok([Action::Reply(_, m)]) => m,
            other => panic!("expected one reply, got {other:?}"),
        }
    }

    #[test]
    fn put_then_get_and_missing_key() {
        let mut s = KvsServer::new(2, "kvs_1_0".into());
        let put = s
            .handle(0, &msg("cmd=put kvsname=kvs_1_0 key=a value=xyz"))
            .unwrap();
        assert_eq!(only_reply(put).get("rc"), Some("0"));
        let got = only_reply(s.handle(1, &msg("cmd=get kvsname=kvs_1_0 key=a")).unwrap());
        assert_eq!((got.get("rc"), got.get("value")), (Some("0"), Some("xyz")));
        let missing = only_reply(s.handle(1, &msg("cmd=get kvsname=kvs_1_0 key=b")).unwrap());
        assert_eq!(missing.get("rc"), Some("-1"));
        assert_eq!(missing.get("msg"), Some("key_b_not_found"));
    }

    #[test]
    fn the_process_manager_reads_values_as_the_client_stored_them() {
        let mut s = KvsServer::new(1, "kvs_1_0".into());
        for line in [
            "cmd=put kvsname=kvs_1_0 key=pid value=.4242",
            "cmd=put kvsname=kvs_1_0 key=long#0 value=abc",
            "cmd=put kvsname=kvs_1_0 key=long#1 value=de",
            "cmd=put kvsname=kvs_1_0 key=long value=#2",
            "cmd=put kvsname=kvs_1_0 key=torn value=#2",
            "cmd=put kvsname=kvs_1_0 key=torn#0 value=abc",
        ] {
            s.handle(0, &msg(line)).unwrap();
        }
        assert_eq!(s.value("pid").as_deref(), Some("4242"));
        assert_eq!(s.value("long").as_deref(), Some("abcde"));
        // A piece missing, or no such key: nothing.
        assert_eq!(s.value("torn"), None);
        assert_eq!(s.value("absent"), None);
    }

    #[test]
    fn put_enforces_limits_and_kvsname() {
        let mut s = KvsServer::new(1, "kvs_1_0".into());
        let long_key = "k".repeat(KEYLEN_MAX);
        let wrong = s.handle(0, &msg("cmd=put kvsname=other key=a value=b"));
        assert_eq!(only_reply(wrong.unwrap()).get("rc"), Some("-1"));
        let line = format!("cmd=put kvsname=kvs_1_0 key={long_key} value=b");
        assert_eq!(
            only_reply(s.handle(0, &msg(&line)).unwrap()).get("rc"),
            Some("-1")
        );
        let line = format!("cmd=put kvsname=kvs_1_0 key=a value={}", "v".repeat(1000));
        assert_eq!(
            only_reply(s.handle(0, &msg(&line)).unwrap()).get("msg"),
            Some("value_too_long")
        );
    }

    #[test]
    fn barrier_releases_all_ranks_only_when_complete() {
        let mut s = KvsServer::new(3, "k".into());
        assert!(s.handle(2, &msg("cmd=barrier_in")).unwrap().is_empty());
        assert!(s.handle(0, &msg("cmd=barrier_in")).unwrap().is_empty());
        assert_eq!(s.barrier_waiters(), vec![0, 2]);
        assert!(s.handle(0, &msg("cmd=get_maxes")).is_err());
        let out = s.handle(1, &msg("cmd=barrier_in")).unwrap();
        let targets: Vec<u32> = out
            .iter()
            .map(|a| match a {
                Action::Reply(r, m) if m.cmd() == "barrier_out" => *r,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(targets, vec![0, 1, 2]);
        assert!(s.barrier_waiters().is_empty());
        // A second barrier works the same way.
        assert!(s.handle(1, &msg("cmd=barrier_in")).unwrap().is_empty());
    }

    #[test]
    fn reports_who_is_missing_from_the_first_barrier_and_what_each_rank_did() {
        let mut s = KvsServer::new(3, "k".into());
        assert_eq!(s.missing_from_first_barrier(), vec![0, 1, 2]);
        s.handle(0, &msg("cmd=put kvsname=k key=a value=b"))
            .unwrap();
        s.handle(0, &msg("cmd=barrier_in")).unwrap();
        s.handle(1, &msg("cmd=get_maxes")).unwrap();
        assert_eq!(s.missing_from_first_barrier(), vec![1, 2]);
        assert_eq!(s.activity(0), "waits in PMI barrier 1");
        assert_eq!(
            s.activity(1),
            "last sent cmd=get_maxes (before PMI barrier 1)"
        );
        assert_eq!(s.activity(2), "sent no PMI message");
        s.handle(1, &msg("cmd=barrier_in")).unwrap();
        s.handle(2, &msg("cmd=barrier_in")).unwrap();
        // Past the first barrier nobody is missing from it, whatever comes next.
        assert!(s.missing_from_first_barrier().is_empty());
        s.handle(2, &msg("cmd=barrier_in")).unwrap();
        assert!(s.missing_from_first_barrier().is_empty());
        assert_eq!(s.activity(2), "waits in PMI barrier 2");
        assert_eq!(
            s.activity(0),
            "last sent cmd=barrier_in (before PMI barrier 2)"
        );
        s.handle(0, &msg("cmd=finalize")).unwrap();
        assert_eq!(s.activity(0), "called PMI finalize");
    }

    #[test]
    fn finalize_abort_and_unknown_commands() {
        let mut s = KvsServer::new(2, "k".into());
        let ack = only_reply(s.handle(0, &msg("cmd=finalize")).unwrap());
        assert_eq!(ack.cmd(), "finalize_ack");
        assert!(s.is_finalized(0));
        assert!(!s.is_finalized(1));
        assert!(s.handle(0, &msg("cmd=get_maxes")).is_err());
        assert_eq!(
            s.handle(1, &msg("cmd=abort exitcode=7")).unwrap(),
            vec![Action::Abort(7)]
        );
        assert!(s.handle(1, &msg("cmd=spawn")).is_err());
    }

    #[test]
    fn init_accepts_only_version_1() {
        let mut s = KvsServer::new(1, "k".into());
        let ok = only_reply(
            s.handle(0, &msg("cmd=init pmi_version=1 pmi_subversion=1"))
                .unwrap(),
        );
        assert_eq!(ok.get("rc"), Some("0"));
        let v2 = only_reply(
            s.handle(0, &msg("cmd=init pmi_version=2 pmi_subversion=0"))
                .unwrap(),
        );
        assert_eq!(v2.get("rc"), Some("-1"));
    }
}
