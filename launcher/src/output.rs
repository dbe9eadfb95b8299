//! Forwarding a rank's stdout or stderr to gaspirun's own, one whole line at a time, optionally
//! prefixed with `[rank] `.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use nix::sys::stat::fstat;

/// A line longer than this is forwarded in pieces, so a rank printing without newlines cannot
/// make the launcher buffer without bound; another rank's lines may come between the pieces
/// (holding the output for the rest of the line could wait for ever on a rank that waits for
/// the others). Large enough for any line a program prints to be read, a JSON line of
/// results say: 64 KiB lines of one rank were interleaved with another's.
const MAX_PENDING: usize = 1 << 20;

/// Bytes read from a rank's pipe at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Which of gaspirun's streams receives the lines.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// gaspirun's stdout.
    Stdout,
    /// gaspirun's stderr.
    Stderr,
}

impl Target {
    /// The stream's name, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Stdout => "stdout",
            Target::Stderr => "stderr",
        }
    }
}

/// Copies `source` to `target` until end of file. With `prefix`, every line starts with it and
/// ends with a newline; without, bytes pass unchanged but for a newline after a last line that
/// has none, which would otherwise run into another rank's. When `target` is a pipe whose
/// reader is gone (`gaspirun ... | head`), `on_broken` is called, once: the job is to end as a
/// program killed by SIGPIPE would (Rust ignores the signal, so the write only fails with
/// EPIPE). Reading goes on, discarding what follows, so that a rank never blocks on a full
/// pipe before the teardown reaches it; other write errors (a full disk) lose only the line.
pub(crate) fn forward(
    source: impl Read,
    target: Target,
    prefix: Option<String>,
    on_broken: impl FnOnce(),
) {
    let mut on_broken = Some(on_broken);
    split_lines(source, prefix.as_deref(), |line| {
        if on_broken.is_none() {
            return;
        }
        if let Err(e) = write_to(target, line) {
            if e.kind() == io::ErrorKind::BrokenPipe {
                if let Some(on_broken) = on_broken.take() {
                    on_broken();
                }
            }
        }
    });
}

/// Calls `sink` with every line of `source` (prefixed when `prefix` is given), and with pieces
/// of [`MAX_PENDING`] bytes of longer lines; a line that ends the source ends with a newline.
fn split_lines(source: impl Read, prefix: Option<&str>, mut sink: impl FnMut(&[u8])) {
    let mut reader = BufReader::with_capacity(READ_CHUNK, source);
    let mut line = Vec::new();
    // Whether the last bytes handed on end in the middle of a line (a long one cut in pieces).
    let mut open = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // Never past the bound: a piece is at most `MAX_PENDING` bytes.
        let window = &chunk[..chunk.len().min(MAX_PENDING - line.len())];
        let (taken, complete) = match window.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (window.len(), false),
        };
        line.extend_from_slice(&chunk[..taken]);
        reader.consume(taken);
        if complete || line.len() >= MAX_PENDING {
            sink(&framed(&line, prefix));
            open = !complete && prefix.is_none();
            line.clear();
        }
    }
    if !line.is_empty() {
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        sink(&framed(&line, prefix));
    } else if open {
        sink(b"\n");
    }
}

fn framed(line: &[u8], prefix: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 16);
    if let Some(prefix) = prefix {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
    } else {
        out.extend_from_slice(line);
    }
    out
}

/// Writes one line with a single locked write, so lines of different ranks never mix.
fn write_to(target: Target, out: &[u8]) -> io::Result<()> {
    let _combined = combined_lock();
    match target {
        Target::Stdout => {
            let mut stdout = io::stdout().lock();
            stdout.write_all(out).and_then(|()| stdout.flush())
        }
        Target::Stderr => io::stderr().lock().write_all(out),
    }
}

/// Taken around every write while gaspirun's stdout and stderr are one file (`2>&1 | tee`):
/// the two streams' own locks do not exclude each other, and the kernel cuts a write to a
/// pipe that is longer than `PIPE_BUF` and waits for room, so a stderr line landed inside a
/// long stdout line. Separate files keep separate locks: a stalled stdout must not stop
/// gaspirun's reports on stderr.
pub(crate) fn combined_lock() -> Option<MutexGuard<'static, ()>> {
    static COMBINED: Mutex<()> = Mutex::new(());
    static ONE_FILE: OnceLock<bool> = OnceLock::new();
    let one_file = *ONE_FILE.get_or_init(|| {
        match (fstat(io::stdout().as_fd()), fstat(io::stderr().as_fd())) {
            (Ok(out), Ok(err)) => out.st_dev == err.st_dev && out.st_ino == err.st_ino,
            // A closed stream is written to by nobody.
            _ => false,
        }
    });
    // The lock guards no data, so a writer that panicked left nothing inconsistent.
    one_file.then(|| COMBINED.lock().unwrap_or_else(PoisonError::into_inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], prefix: Option<&str>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        split_lines(input, prefix, |line| out.push(line.to_vec()));
        out
    }

    #[test]
    fn prefixes_every_line_and_terminates_the_last() {
        let out = lines(b"a\nbc\n\nlast", Some("[2] "));
        let expected: Vec<&[u8]> = vec![b"[2] a\n", b"[2] bc\n", b"[2] \n", b"[2] last\n"];
        assert_eq!(out, expected);
    }

    #[test]
    fn without_prefix_bytes_pass_unchanged_but_the_last_line_ends() {
        let out = lines(b"{\"x\":1}\npartial", None);
        let expected: Vec<&[u8]> = vec![b"{\"x\":1}\n", b"partial\n"];
        assert_eq!(out, expected);
        assert_eq!(lines(b"whole\n", None), vec![b"whole\n".to_vec()]);
    }

    #[test]
    fn endless_lines_are_cut_into_bounded_pieces() {
        let input = vec![b'x'; 3 * MAX_PENDING];
        let out = lines(&input, None);
        assert!(out.len() >= 3);
        assert!(out.iter().all(|piece| piece.len() <= MAX_PENDING + 1));
        let all = out.concat();
        // Every byte, in order, and a newline that ends the line.
        assert_eq!(all.len(), input.len() + 1);
        assert!(all[..input.len()] == input[..] && all.ends_with(b"\n"));
    }
}
