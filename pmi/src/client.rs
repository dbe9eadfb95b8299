//! The rank side of PMI-1: finding the process manager from the environment, the init
//! handshake, and put / barrier / get / finalize with per-reply timeouts and transparent
//! splitting of long values.

use std::fs::File;
use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{send, MsgFlags};
use nix::sys::stat::{fstat, SFlag};

use crate::split::{self, Stored};
use crate::wire::{LineReader, Message, ReadError, MAX_LINE};
use crate::{Error, Result};

/// Environment variable overriding how long a rank waits for any reply of the process manager.
const TIMEOUT_ENV: &str = "GASPI_BOOTSTRAP_TIMEOUT";
/// Default of [`TIMEOUT_ENV`], in seconds: generous, because a barrier waits for the slowest
/// rank to start, yet finite, so a dead launcher never hangs a rank forever.
const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Replies may exceed [`MAX_LINE`] on lenient servers; accept them as long as memory is bounded.
const READ_LIMIT: usize = 4 * MAX_LINE;
/// Bytes of a `put` line besides the kvsname, key and value.
const PUT_OVERHEAD: usize = "cmd=put kvsname= key= value=\n".len();
/// Room for the `#<index>` suffix of chunk keys (up to ten million chunks).
const CHUNK_SUFFIX_MAX: usize = 8;
/// Slack below every limit the server advertises: servers differ in how they count NULs and in
/// what they add to `get_result` lines (hydra adds `msg=success`).
const SAFETY_MARGIN: usize = 64;
/// Below this much room per stored value, splitting would need absurdly many round trips.
const MIN_VALUE_ROOM: usize = 16;

/// Only one client may own the process's PMI connection: two would interleave requests on one
/// socket, and a second adoption of `PMI_FD` would close the descriptor twice.
static CONNECTION_CLAIMED: AtomicBool = AtomicBool::new(false);

/// How the client learns its rank and the job size.
#[derive(Debug)]
pub(crate) enum Identity {
    /// From `PMI_RANK` / `PMI_SIZE` (the `PMI_FD` case).
    Known {
        /// This rank.
        rank: u32,
        /// Ranks in the job.
        size: u32,
    },
    /// From the `initack` handshake of the `PMI_PORT` case, which starts with this `PMI_ID`.
    Handshake(String),
}

/// A connection to the process manager (`gaspirun`, `mpiexec.hydra` or Slurm's PMI-1 support)
/// speaking the PMI-1 simple wire protocol.
///
/// Every call that waits for the process manager gives up after `GASPI_BOOTSTRAP_TIMEOUT`
/// seconds (default 120) with [`Error::Bootstrap`]. After any failure the connection is out
/// of step with the server, so later calls fail immediately.
#[derive(Debug)]
pub struct PmiClient {
    conn: LineReader<File>,
    rank: u32,
    size: u32,
    kvsname: String,
    /// Longest key the server accepts (its `keylen_max` minus the C NUL).
    key_max: usize,
    /// The server's `vallen_max`.
    vallen_max: usize,
    timeout: Duration,
    broken: bool,
}

impl PmiClient {
    /// Connects to the process manager named by the environment and performs the PMI-1
    /// handshake.
    ///
    /// `PMI_FD` (an inherited socket, with `PMI_RANK` and `PMI_SIZE`) is preferred; otherwise
    /// `PMI_PORT` (`host:port`, with `PMI_ID` or `PMI_RANK`/`PMI_SIZE`). Returns `Ok(None)` when
    /// neither is set: the process was started without a launcher and runs as a single rank.
    /// Only one client per process can exist; a second call fails with [`Error::Bootstrap`].
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the variables are malformed, the connection or the init
    /// handshake fails, or a client exists already; [`Error::Config`] for a malformed
    /// `GASPI_BOOTSTRAP_TIMEOUT`; [`Error::Io`] when the inherited socket cannot be set up.
    pub fn from_env() -> Result<Option<PmiClient>> {
        let timeout = timeout_from_env()?;
        let (file, identity) = if let Some(fd) = env_var("PMI_FD") {
            claim_connection()?;
            let identity = identity_from_env()?;
            (adopt_fd(&fd)?, identity)
        } else if let Some(port) = env_var("PMI_PORT") {
            claim_connection()?;
            let identity = match env_var("PMI_ID") {
                Some(id) => Identity::Handshake(id),
                None => identity_from_env()?,
            };
            (connect_tcp(&port, timeout)?, identity)
        } else {
            return Ok(None);
        };
        PmiClient::connect(file, identity, timeout).map(Some)
    }

    /// Runs the PMI-1 handshake over an already connected socket.
    pub(crate) fn connect(file: File, identity: Identity, timeout: Duration) -> Result<Self> {
        let mut client = PmiClient {
            conn: LineReader::new(file, READ_LIMIT),
            rank: 0,
            size: 1,
            kvsname: String::new(),
            key_max: 0,
            vallen_max: 0,
            timeout,
            broken: false,
        };
        let (rank, size) = match identity {
            Identity::Known { rank, size } => (rank, size),
            Identity::Handshake(id) => client.initack(&id)?,
        };
        if size == 0 || rank >= size {
            return Err(Error::bootstrap(
                "init",
                format!("rank {rank} is not within a job of {size} ranks"),
            ));
        }
        (client.rank, client.size) = (rank, size);

        client.request(
            Message::new("init")
                .arg("pmi_version", 1)
                .arg("pmi_subversion", 1),
            "response_to_init",
            "",
        )?;
        let maxes = client.request(Message::new("get_maxes"), "maxes", "")?;
        client.key_max =
            required_number::<usize>(&maxes, "get_maxes", "keylen_max")?.saturating_sub(1);
        client.vallen_max = required_number(&maxes, "get_maxes", "vallen_max")?;
        let reply = client.request(Message::new("get_my_kvsname"), "my_kvsname", "")?;
        client.kvsname = reply
            .get("kvsname")
            .filter(|name| !name.is_empty())
            .ok_or_else(|| Error::bootstrap("get_my_kvsname", "the reply names no kvsname"))?
            .to_owned();
        Ok(client)
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Publishes `value` under `key`; other ranks can [`get`](Self::get) it after the next
    /// [`barrier`](Self::barrier).
    ///
    /// Keys are non-empty printable ASCII without `=` or `#`, at most the server's key length
    /// minus a few bytes; values are printable ASCII without `=` (e.g. hex), of any length:
    /// values longer than the server accepts are stored under several keys.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] for a key or value outside those rules, or when the process
    /// manager refuses or does not answer in time.
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        self.check_key("put", key)?;
        if !value.bytes().all(is_token_byte) {
            return Err(Error::bootstrap(
                "put",
                format!("the value of key {key:?} must be printable ASCII without '='"),
            ));
        }
        let room = self.value_room(key)?;
        let chunks = split::chunk_count(value.len(), room);
        if chunks > 0 && split::chunk_key(key, chunks - 1).len() > self.key_max {
            return Err(Error::bootstrap(
                "put",
                format!(
                    "key {key:?} is too long to split a {}-byte value into {chunks} keys of at most {} bytes",
                    value.len(),
                    self.key_max
                ),
            ));
        }
        for (k, v) in split::split(key, value, room) {
            let what = format!("key {k:?}: ");
            let msg = Message::new("put")
                .arg("kvsname", &self.kvsname)
                .arg("key", &k)
                .arg("value", v);
            self.request(msg, "put_result", &what)?;
        }
        Ok(())
    }

    /// Waits until every rank of the job entered the barrier. Values put before it are visible
    /// to all ranks after it.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the process manager fails or does not answer in time (a rank
    /// that never arrives makes the barrier time out).
    pub fn barrier(&mut self) -> Result<()> {
        self.request(Message::new("barrier_in"), "barrier_out", "")
            .map(drop)
    }

    /// Reads the value `rank_hint` put under `key` before the last barrier.
    ///
    /// PMI-1 has a single key-value space, so `rank_hint` only serves error messages; keys
    /// must be unique across ranks (e.g. contain the rank).
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the key was never put, or the process manager fails or does
    /// not answer in time.
    pub fn get(&mut self, rank_hint: u32, key: &str) -> Result<String> {
        self.check_key("get", key)?;
        let header = self.get_stored(rank_hint, key)?;
        match split::parse_header(&header).map_err(|why| Error::bootstrap("get", why))? {
            Stored::Inline(value) => Ok(value),
            Stored::Split(count) => {
                let mut value = String::new();
                for i in 0..count {
                    value.push_str(&self.get_stored(rank_hint, &split::chunk_key(key, i))?);
                }
                Ok(value)
            }
        }
    }

    /// Asks the process manager to kill the whole job with `exit_code`, after printing
    /// `message` to stderr (the PMI-1 wire cannot carry text with spaces).
    ///
    /// Does not exit the process; the caller should exit (with `exit_code`) right after. The
    /// client is unusable afterwards.
    pub fn abort(&mut self, exit_code: i32, message: &str) {
        // Ignored: a closed stderr must not turn an orderly abort into a panic.
        let _ = writeln!(
            io::stderr().lock(),
            "gaspi: rank {} aborts the job (exit code {exit_code}): {message}",
            self.rank
        );
        // The job is going down either way; a failed send leaves the launcher to notice the
        // caller's exit instead.
        let _ = self.send(&Message::new("abort").arg("exitcode", exit_code));
        self.broken = true;
    }

    /// Tells the process manager this rank is done with PMI and closes the connection.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] when the process manager does not acknowledge in time.
    pub fn finalize(mut self) -> Result<()> {
        self.request(Message::new("finalize"), "finalize_ack", "")
            .map(drop)
    }

    /// The `PMI_PORT` handshake: `initack`, then the server's `set size|rank|debug` lines.
    fn initack(&mut self, pmi_id: &str) -> Result<(u32, u32)> {
        if !pmi_id.bytes().all(is_token_byte) {
            return Err(Error::bootstrap(
                "initack",
                format!("PMI_ID={pmi_id:?} is not a PMI token"),
            ));
        }
        self.request(Message::new("initack").arg("pmiid", pmi_id), "initack", "")?;
        let mut read_set = |key: &str| -> Result<u32> {
            let msg = self.receive("initack")?;
            if msg.cmd() != "set" {
                return Err(self.unexpected("initack", "set", &msg));
            }
            required_number(&msg, "initack", key)
        };
        let size = read_set("size")?;
        let rank = read_set("rank")?;
        read_set("debug")?;
        Ok((rank, size))
    }

    /// Fetches the raw stored value of `key`.
    fn get_stored(&mut self, rank_hint: u32, key: &str) -> Result<String> {
        let what = format!("key {key:?} (published by rank {rank_hint}): ");
        let msg = Message::new("get")
            .arg("kvsname", &self.kvsname)
            .arg("key", key);
        let reply = self.request(msg, "get_result", &what)?;
        reply
            .get("value")
            .map(str::to_owned)
            .ok_or_else(|| Error::bootstrap("get", format!("{what}the reply carries no value")))
    }

    /// Longest value stored under one key derived from `key`: what the server's `vallen_max`
    /// and the line limit leave for it, less a safety margin.
    fn value_room(&self, key: &str) -> Result<usize> {
        let line_room = MAX_LINE
            .saturating_sub(PUT_OVERHEAD + self.kvsname.len() + key.len() + CHUNK_SUFFIX_MAX);
        let room = line_room.min(self.vallen_max).saturating_sub(SAFETY_MARGIN);
        if room < MIN_VALUE_ROOM {
            return Err(Error::bootstrap(
                "put",
                format!(
                    "no room for values under key {key:?} (server vallen_max {}, kvsname of {} bytes)",
                    self.vallen_max,
                    self.kvsname.len()
                ),
            ));
        }
        Ok(room)
    }

    fn check_key(&self, command: &str, key: &str) -> Result<()> {
        if key.is_empty() || !key.bytes().all(|b| is_token_byte(b) && b != b'#') {
            return Err(Error::bootstrap(
                command,
                format!("key {key:?} must be non-empty printable ASCII without '=' or '#'"),
            ));
        }
        if key.len() > self.key_max {
            return Err(Error::bootstrap(
                command,
                format!(
                    "key {key:?} is longer than the {} bytes the process manager accepts",
                    self.key_max
                ),
            ));
        }
        Ok(())
    }

    /// Sends `msg`, reads the reply, and checks that it is `expect` with `rc=0` (when the
    /// server sends an `rc` at all). `what` prefixes error reasons.
    fn request(&mut self, msg: Message, expect: &str, what: &str) -> Result<Message> {
        self.send(&msg)?;
        let reply = self.receive(msg.cmd())?;
        if reply.cmd() != expect {
            return Err(self.unexpected(msg.cmd(), expect, &reply));
        }
        match reply.get("rc") {
            None | Some("0") => Ok(reply),
            Some(rc) => Err(Error::bootstrap(
                msg.cmd(),
                format!(
                    "{what}the process manager answered rc={rc}{}",
                    reply
                        .get("msg")
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
            )),
        }
    }

    fn send(&mut self, msg: &Message) -> Result<()> {
        if self.broken {
            return Err(Error::bootstrap(
                msg.cmd(),
                "the PMI connection is unusable after an earlier failure",
            ));
        }
        let line = msg.encode();
        if line.len() > MAX_LINE {
            return Err(Error::bootstrap(
                msg.cmd(),
                format!(
                    "the request of {} bytes exceeds the PMI line limit of {MAX_LINE}",
                    line.len()
                ),
            ));
        }
        send_all(self.conn.get_ref().as_raw_fd(), line.as_bytes()).map_err(|e| {
            self.broken = true;
            Error::bootstrap(
                msg.cmd(),
                format!("cannot write to the process manager: {e}"),
            )
        })
    }

    fn receive(&mut self, command: &str) -> Result<Message> {
        if self.broken {
            return Err(Error::bootstrap(
                command,
                "the PMI connection is unusable after an earlier failure",
            ));
        }
        self.conn.read_message(Some(self.timeout)).map_err(|e| {
            self.broken = true;
            let reason = match e {
                ReadError::Timeout => format!(
                    "no reply from the process manager within {} s (set {TIMEOUT_ENV} to wait longer)",
                    self.timeout.as_secs_f64()
                ),
                ReadError::Closed => "the process manager closed the connection".to_owned(),
                ReadError::Malformed(why) => format!("bad reply from the process manager: {why}"),
                ReadError::Io(e) => format!("cannot read from the process manager: {e}"),
            };
            Error::bootstrap(command, reason)
        })
    }

    /// The error for a reply of the wrong kind; the conversation is out of step from here on.
    fn unexpected(&mut self, command: &str, expect: &str, reply: &Message) -> Error {
        self.broken = true;
        Error::bootstrap(
            command,
            format!(
                "expected cmd={expect}, the process manager sent {:?}",
                reply.encode().trim_end()
            ),
        )
    }
}

/// Bytes allowed in keys and values: anything that cannot end a token or a line.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_graphic() && b != b'='
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required_number<T: std::str::FromStr>(msg: &Message, command: &str, key: &str) -> Result<T> {
    msg.get(key).and_then(|v| v.parse().ok()).ok_or_else(|| {
        Error::bootstrap(
            command,
            format!(
                "the reply {:?} lacks a numeric {key}",
                msg.encode().trim_end()
            ),
        )
    })
}

fn timeout_from_env() -> Result<Duration> {
    match env_var(TIMEOUT_ENV) {
        None => Ok(Duration::from_secs(DEFAULT_TIMEOUT_SECS)),
        Some(text) => parse_timeout(&text),
    }
}

/// The value of [`TIMEOUT_ENV`], refused with the reason when it is no usable time: a value
/// that rounds to 0 would fail every bootstrap reply at once.
fn parse_timeout(text: &str) -> Result<Duration> {
    let refuse = |why: String| Error::Config(format!("{TIMEOUT_ENV}={text:?} {why}"));
    let seconds = text
        .trim()
        .parse::<f64>()
        .map_err(|_| refuse("is not a number of seconds".into()))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(refuse("is not a positive number of seconds".into()));
    }
    // A `Duration` holds less than 2^64 s; the bound is stated as the float the text is
    // compared as, since a text just below 2^64 parses to 2^64 itself.
    let timeout = Duration::try_from_secs_f64(seconds).map_err(|_| {
        refuse(format!(
            "is too large: it must be below {:e} seconds",
            2f64.powi(64)
        ))
    })?;
    if timeout.is_zero() {
        return Err(refuse(
            "is below the resolution of 1 ns: it would be no time at all".into(),
        ));
    }
    Ok(timeout)
}

fn identity_from_env() -> Result<Identity> {
    let number = |name: &str| -> Result<u32> {
        let text = env_var(name).ok_or_else(|| {
            Error::bootstrap("init", format!("{name} is not set next to PMI_FD/PMI_PORT"))
        })?;
        text.trim()
            .parse()
            .map_err(|_| Error::bootstrap("init", format!("{name}={text:?} is not a number")))
    };
    Ok(Identity::Known {
        rank: number("PMI_RANK")?,
        size: number("PMI_SIZE")?,
    })
}

fn claim_connection() -> Result<()> {
    if CONNECTION_CLAIMED.swap(true, Ordering::SeqCst) {
        return Err(Error::bootstrap(
            "init",
            "this process already created a PmiClient; PMI allows one connection per process",
        ));
    }
    Ok(())
}

/// Takes ownership of the inherited socket named by `PMI_FD`.
fn adopt_fd(text: &str) -> Result<File> {
    let fd: RawFd = text
        .trim()
        .parse()
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| Error::bootstrap("init", format!("PMI_FD={text:?} is not a descriptor")))?;
    // SAFETY: `fd` is not -1 (checked above), and the borrow serves only the fstat and fcntl
    // below, while nothing in this process closes descriptors it does not own. A number that is
    // not open merely makes fstat fail with EBADF.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let st = fstat(borrowed).map_err(|errno| {
        Error::bootstrap(
            "init",
            format!(
                "PMI_FD={fd} is not an open descriptor: {}",
                io::Error::from(errno)
            ),
        )
    })?;
    // Every process manager hands out a socket; anything else means a stale PMI_FD whose number
    // now belongs to some unrelated file we must not take over.
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(Error::bootstrap(
            "init",
            format!("PMI_FD={fd} is not a socket"),
        ));
    }
    // Programs the rank starts must not inherit the connection: it would keep the launcher
    // from seeing this rank's end of the connection when the rank exits.
    fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|errno| {
        Error::io(
            format!("setting close-on-exec on PMI_FD={fd}"),
            io::Error::from(errno),
        )
    })?;
    // SAFETY: the descriptor is open, is the PMI socket the launcher gave this process, and
    // `claim_connection` guarantees no other owner is created in this process.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Connects to the `PMI_PORT` address, trying every address the host name resolves to.
fn connect_tcp(port: &str, timeout: Duration) -> Result<File> {
    let failed = |why: String| Error::bootstrap("connect", format!("PMI_PORT={port:?}: {why}"));
    let (host, number) = port
        .rsplit_once(':')
        .ok_or_else(|| failed("expected host:port".to_owned()))?;
    let number: u16 = number
        .parse()
        .map_err(|_| failed("the port is not a number".to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = (host, number)
        .to_socket_addrs()
        .map_err(|e| failed(e.to_string()))?;
    let mut last = failed("the host name resolves to no address".to_owned());
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(File::from(OwnedFd::from(stream))),
            Err(e) => last = failed(format!("{addr}: {e}")),
        }
    }
    Err(last)
}

/// Writes all of `buf` to the socket `fd`.
fn send_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // MSG_NOSIGNAL: a vanished launcher must surface as an error, not kill the rank with
        // SIGPIPE (the host program may not ignore it).
        match send(fd, buf, MsgFlags::MSG_NOSIGNAL) {
            Ok(sent) => buf = &buf[sent..],
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Action, KvsServer};
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc;
    use std::thread;

    const T: Duration = Duration::from_secs(10);

    /// An in-process PMI server for `size` ranks over socketpairs: the client ends to hand to
    /// `PmiClient::connect`, and the server thread, which ends when every client hung up.
    fn serve(size: u32) -> (Vec<File>, thread::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let mut clients = Vec::new();
        let mut writers = Vec::new();
        for rank in 0..size {
            let (client, server) = UnixStream::pair().unwrap();
            clients.push(File::from(OwnedFd::from(client)));
            writers.push(server.try_clone().unwrap());
            let tx = tx.clone();
            thread::spawn(move || {
                let mut reader = LineReader::new(server, MAX_LINE);
                while let Ok(msg) = reader.read_message(None) {
                    tx.send((rank, msg)).unwrap();
                }
            });
        }
        drop(tx);
        let hub = thread::spawn(move || {
            let mut kvs = KvsServer::new(size, "kvs_test_0".into());
            for (rank, msg) in rx {
                for action in kvs.handle(rank, &msg).unwrap() {
                    if let Action::Reply(to, reply) = action {
                        writers[to as usize]
                            .write_all(reply.encode().as_bytes())
                            .unwrap();
                    }
                }
            }
        });
        (clients, hub)
    }

    fn known(rank: u32, size: u32) -> Identity {
        Identity::Known { rank, size }
    }

    fn long_value(rank: u32) -> String {
        (0..5000)
            .map(|i| char::from(b"0123456789abcdef"[(i + rank as usize) % 16]))
            .collect()
    }

    #[test]
    fn bad_bootstrap_timeouts_say_what_is_wrong() {
        for (text, why) in [
            ("18446744073709551615", "is too large"),
            ("inf", "is too large"),
            ("1e-12", "is below the resolution"),
            ("4e-10", "is below the resolution"),
            ("soon", "is not a number of seconds"),
            ("0", "is not a positive number of seconds"),
            ("-3", "is not a positive number of seconds"),
            ("NaN", "is not a positive number of seconds"),
        ] {
            match parse_timeout(text) {
                Err(Error::Config(message)) => assert!(
                    message.contains(TIMEOUT_ENV) && message.contains(why),
                    "{text:?}: {message}"
                ),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        for (text, expected) in [
            (" 2.5 ", Duration::from_millis(2500)),
            ("1e-9", Duration::from_nanos(1)),
            ("18446744073", Duration::from_secs(18_446_744_073)),
        ] {
            assert_eq!(parse_timeout(text).ok(), Some(expected), "{text:?}");
        }
    }

    #[test]
    fn client_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<PmiClient>();
    }

    #[test]
    fn full_session_with_split_values_across_ranks() {
        let size = 3;
        let (clients, hub) = serve(size);
        let ranks: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(rank, file)| {
                let rank = rank as u32;
                thread::spawn(move || {
                    let mut c = PmiClient::connect(file, known(rank, size), T).unwrap();
                    assert_eq!((c.rank(), c.size()), (rank, size));
                    c.put(&format!("short-{rank}"), &format!("r{rank}"))
                        .unwrap();
                    c.put(&format!("long-{rank}"), &long_value(rank)).unwrap();
                    c.put(&format!("empty-{rank}"), "").unwrap();
                    c.barrier().unwrap();
                    for peer in 0..size {
                        assert_eq!(
                            c.get(peer, &format!("short-{peer}")).unwrap(),
                            format!("r{peer}")
                        );
                        assert_eq!(
                            c.get(peer, &format!("long-{peer}")).unwrap(),
                            long_value(peer)
                        );
                        assert_eq!(c.get(peer, &format!("empty-{peer}")).unwrap(), "");
                    }
                    c.barrier().unwrap();
                    c.finalize().unwrap();
                })
            })
            .collect();
        for r in ranks {
            r.join().unwrap();
        }
        hub.join().unwrap();
    }

    #[test]
    fn missing_key_is_a_bootstrap_error_naming_get() {
        let (mut clients, _hub) = serve(1);
        let mut c = PmiClient::connect(clients.remove(0), known(0, 1), T).unwrap();
        match c.get(0, "nothere") {
            Err(Error::Bootstrap { command, reason }) => {
                assert_eq!(command, "get");
                assert!(reason.contains("nothere"), "{reason}");
                assert!(reason.contains("rc=-1"), "{reason}");
                assert!(reason.contains("not_found"), "{reason}");
            }
            other => panic!("expected a bootstrap error, got {other:?}"),
        }
    }

    #[test]
    fn bad_keys_and_values_are_rejected_before_sending() {
        let (mut clients, _hub) = serve(1);
        let mut c = PmiClient::connect(clients.remove(0), known(0, 1), T).unwrap();
        for key in ["", "a b", "a=b", "a#1", &"k".repeat(64)] {
            assert!(
                matches!(c.put(key, "v"), Err(Error::Bootstrap { .. })),
                "{key:?}"
            );
        }
        assert!(c.put("k", "has space").is_err());
        assert!(c.put("k", "a=b").is_err());
        // Rejected input leaves the connection usable.
        c.put("k", "fine").unwrap();
        assert_eq!(c.get(0, "k").unwrap(), "fine");
    }

    #[test]
    fn silent_server_times_out_naming_the_command() {
        let (client, _server) = UnixStream::pair().unwrap();
        let file = File::from(OwnedFd::from(client));
        let start = std::time::Instant::now();
        let err = PmiClient::connect(file, known(0, 1), Duration::from_millis(200)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        match err {
            Error::Bootstrap { command, reason } => {
                assert_eq!(command, "init");
                assert!(reason.contains(TIMEOUT_ENV), "{reason}");
            }
            other => panic!("expected a bootstrap error, got {other:?}"),
        }
    }

    /// Plays a scripted server: answers each request line with the next canned reply lines.
    fn scripted(script: Vec<(&'static str, &'static str)>) -> (File, thread::JoinHandle<()>) {
        let (client, server) = UnixStream::pair().unwrap();
        let handle = thread::spawn(move || {
            let mut writer = server.try_clone().unwrap();
            let mut reader = LineReader::new(server, MAX_LINE);
            for (expect, reply) in script {
                let msg = reader.read_message(Some(T)).unwrap();
                assert_eq!(msg.cmd(), expect);
                writer.write_all(reply.as_bytes()).unwrap();
            }
        });
        (File::from(OwnedFd::from(client)), handle)
    }

    const HANDSHAKE: [(&str, &str); 3] = [
        (
            "init",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        ),
        (
            "get_maxes",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        ("get_my_kvsname", "cmd=my_kvsname kvsname=kvs_9_0\n"),
    ];

    #[test]
    fn port_handshake_takes_rank_and_size_from_set_lines() {
        let mut script = vec![(
            "initack",
            "cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n",
        )];
        script.extend(HANDSHAKE);
        script.push(("finalize", "cmd=finalize_ack\n"));
        let (file, server) = scripted(script);
        let c = PmiClient::connect(file, Identity::Handshake("2".into()), T).unwrap();
        assert_eq!((c.rank(), c.size()), (2, 4));
        c.finalize().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn failing_rc_carries_the_server_message() {
        let mut script = HANDSHAKE.to_vec();
        script.push(("put", "cmd=put_result rc=-1 msg=kvs_full\n"));
        let (file, server) = scripted(script);
        let mut c = PmiClient::connect(file, known(0, 1), T).unwrap();
        match c.put("k", "v") {
            Err(Error::Bootstrap { command, reason }) => {
                assert_eq!(command, "put");
                assert!(reason.contains("rc=-1: kvs_full"), "{reason}");
            }
            other => panic!("expected a bootstrap error, got {other:?}"),
        }
        server.join().unwrap();
    }

    #[test]
    fn wrong_reply_kind_is_reported() {
        let mut script = HANDSHAKE.to_vec();
        script.push(("barrier_in", "cmd=put_result rc=0\n"));
        let (file, _server) = scripted(script);
        let mut c = PmiClient::connect(file, known(0, 1), T).unwrap();
        let err = c.barrier().unwrap_err().to_string();
        assert!(
            err.contains("barrier_in") && err.contains("barrier_out"),
            "{err}"
        );
        // Out of step with the server: later calls fail without touching the socket.
        let again = c.barrier().unwrap_err().to_string();
        assert!(again.contains("unusable"), "{again}");
    }

    #[test]
    fn rank_outside_size_is_rejected() {
        let (file, _server) = scripted(Vec::new());
        assert!(matches!(
            PmiClient::connect(file, known(3, 3), T),
            Err(Error::Bootstrap { .. })
        ));
    }
}
