//! The PMI-1 "simple" wire format: messages as `cmd=<name> key=value ...` lines, and a line
//! reader whose every wait is bounded by poll(2), so a silent peer costs a timeout, not a hang.
//!
//! Shared by the client ([`PmiClient`](crate::PmiClient)) and the server side in `gaspirun`.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Longest line (newline included) a PMI-1 peer has to accept; MPICH's `PMIU_MAXLINE`.
pub const MAX_LINE: usize = 1024;

/// One PMI-1 message: the command name and its `key=value` arguments, in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    cmd: String,
    args: Vec<(String, String)>,
}

impl Message {
    /// A message without arguments.
    pub fn new(cmd: &str) -> Self {
        Message {
            cmd: cmd.to_owned(),
            args: Vec::new(),
        }
    }

    /// Appends `key=value`. Neither may contain spaces, `=` or newlines; callers validate user
    /// input before it gets here.
    pub fn arg(mut self, key: &str, value: impl ToString) -> Self {
        self.args.push((key.to_owned(), value.to_string()));
        self
    }

    /// The command name (`init`, `get_result`, ...).
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    /// The value of the first argument called `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Parses one line (without or with its trailing newline).
    ///
    /// # Errors
    /// A description of what is malformed: no `cmd=`, a word without `=`, a line too long.
    pub fn parse(line: &str) -> Result<Message, String> {
        let mut tokens = line.split_ascii_whitespace();
        let first = tokens.next().ok_or_else(|| "empty PMI line".to_owned())?;
        let cmd = match first.split_once('=') {
            Some(("cmd", name)) if !name.is_empty() => name.to_owned(),
            // `mcmd=` introduces the multi-line spawn protocol, which nothing here speaks.
            _ => return Err(format!("PMI line does not start with cmd=<name>: {line:?}")),
        };
        let args = tokens
            .map(|token| {
                token
                    .split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| format!("PMI argument {token:?} is not key=value"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Message { cmd, args })
    }

    /// The wire form, newline included.
    pub fn encode(&self) -> String {
        let mut line = format!("cmd={}", self.cmd);
        for (k, v) in &self.args {
            line.push(' ');
            line.push_str(k);
            line.push('=');
            line.push_str(v);
        }
        line.push('\n');
        line
    }
}

/// Why [`LineReader::read_message`] returned no message.
#[derive(Debug)]
pub enum ReadError {
    /// Nothing complete arrived before the deadline.
    Timeout,
    /// The peer closed the connection (possibly in the middle of a line).
    Closed,
    /// The line is longer than the reader's limit, or is not a PMI message.
    Malformed(String),
    /// The read itself failed.
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Timeout => write!(f, "no reply in time"),
            ReadError::Closed => write!(f, "the peer closed the connection"),
            ReadError::Malformed(why) => write!(f, "{why}"),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Buffered reader of PMI lines from a socket-like file descriptor.
#[derive(Debug)]
pub struct LineReader<S> {
    stream: S,
    buf: Vec<u8>,
    limit: usize,
}

impl<S: Read + AsFd> LineReader<S> {
    /// Reads from `stream`, rejecting lines longer than `limit` bytes.
    pub fn new(stream: S, limit: usize) -> Self {
        LineReader {
            stream,
            buf: Vec::new(),
            limit,
        }
    }

    /// The underlying stream, e.g. to write requests on it.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The next message; waits at most `timeout` for it (`None`: no limit).
    ///
    /// # Errors
    /// [`ReadError::Timeout`], [`ReadError::Closed`] when the peer closed the connection,
    /// [`ReadError::Malformed`] for a line that does not parse or is too long,
    /// [`ReadError::Io`].
    pub fn read_message(&mut self, timeout: Option<Duration>) -> Result<Message, ReadError> {
        // A timeout too large to represent is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                if line.len() > self.limit {
                    return Err(ReadError::Malformed(format!(
                        "PMI line of {} bytes exceeds the limit of {}",
                        line.len(),
                        self.limit
                    )));
                }
                let text = std::str::from_utf8(&line)
                    .map_err(|_| ReadError::Malformed("PMI line is not UTF-8".to_owned()))?;
                return Message::parse(text).map_err(ReadError::Malformed);
            }
            if self.buf.len() >= self.limit {
                return Err(ReadError::Malformed(format!(
                    "PMI line exceeds the limit of {} bytes",
                    self.limit
                )));
            }
            wait_readable(self.stream.as_fd(), deadline)?;
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(ReadError::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // Spurious wake-ups and non-blocking descriptors land here; poll again.
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }
}

/// Blocks until `fd` is readable (or hung up), or `deadline` passes.
fn wait_readable(fd: BorrowedFd<'_>, deadline: Option<Instant>) -> Result<(), ReadError> {
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ReadError::Timeout);
                }
                // Round up so a sub-millisecond remainder still waits instead of spinning.
                PollTimeout::try_from(left.as_micros().div_ceil(1000)).unwrap_or(PollTimeout::MAX)
            }
        };
        match poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], timeout) {
            // Timed out; the loop re-checks the deadline so rounding never ends a wait early.
            Ok(0) => {}
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(ReadError::Io(errno.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn parse_and_encode_round_trip() {
        let msg = Message::parse("cmd=get_result rc=0 msg=success value=abc\n").unwrap();
        assert_eq!(msg.cmd(), "get_result");
        assert_eq!(msg.get("rc"), Some("0"));
        assert_eq!(msg.get("value"), Some("abc"));
        assert_eq!(msg.get("missing"), None);
        assert_eq!(msg.encode(), "cmd=get_result rc=0 msg=success value=abc\n");
    }

    #[test]
    fn parse_keeps_empty_values_and_splits_at_first_equals() {
        let msg = Message::parse("cmd=put key= value=a=b").unwrap();
        assert_eq!(msg.get("key"), Some(""));
        assert_eq!(msg.get("value"), Some("a=b"));
    }

    #[test]
    fn parse_rejects_non_messages() {
        assert!(Message::parse("").is_err());
        assert!(Message::parse("init pmi_version=1").is_err());
        assert!(Message::parse("mcmd=spawn").is_err());
        assert!(Message::parse("cmd= x=1").is_err());
        assert!(Message::parse("cmd=put novalue").is_err());
    }

    #[test]
    fn builder_encodes_in_order() {
        let msg = Message::new("put").arg("kvsname", "k").arg("key", 7);
        assert_eq!(msg.encode(), "cmd=put kvsname=k key=7\n");
    }

    #[test]
    fn reader_splits_lines_across_and_within_reads() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut reader = LineReader::new(b, MAX_LINE);
        a.write_all(b"cmd=one\ncmd=tw").unwrap();
        let t = Some(Duration::from_secs(5));
        assert_eq!(reader.read_message(t).unwrap().cmd(), "one");
        a.write_all(b"o x=1\n").unwrap();
        let two = reader.read_message(t).unwrap();
        assert_eq!((two.cmd(), two.get("x")), ("two", Some("1")));
        drop(a);
        assert!(matches!(reader.read_message(t), Err(ReadError::Closed)));
    }

    #[test]
    fn reader_times_out_on_silence() {
        let (_a, b) = UnixStream::pair().unwrap();
        let mut reader = LineReader::new(b, MAX_LINE);
        let start = Instant::now();
        let err = reader.read_message(Some(Duration::from_millis(100)));
        assert!(matches!(err, Err(ReadError::Timeout)));
        assert!(start.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn reader_rejects_overlong_lines() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut reader = LineReader::new(b, 16);
        a.write_all(b"cmd=x value=0123456789abcdef\n").unwrap();
        let err = reader.read_message(Some(Duration::from_secs(5)));
        assert!(matches!(err, Err(ReadError::Malformed(_))));
    }
}
