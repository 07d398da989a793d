//! Forwarding a node's stdout and stderr to charmrun's own, whole lines at a time.
//!
//! Each pipe has a thread that reads complete lines and writes each with one call under the
//! stream's lock, so lines from different nodes never splice. A pipe is read until its end,
//! so what a node printed just before it exited is never lost.

use std::io::{BufRead, BufReader, Read, Write};
use std::thread::JoinHandle;

/// A line longer than this is passed on in pieces rather than held in memory.
const MAX_LINE: usize = 1 << 20;

/// Which of charmrun's streams to write to.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    /// stdout.
    Out,
    /// stderr.
    Err,
}

/// Start forwarding `pipe` to `stream`, each line prefixed with `prefix`.
pub fn forward(pipe: impl Read + Send + 'static, stream: Stream, prefix: String) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 << 10, pipe);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            line.extend_from_slice(prefix.as_bytes());
            let start = line.len();
            let n = match read_line(&mut r, &mut line) {
                Ok(n) => n,
                Err(_) => break,
            };
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') && line.len() - start < MAX_LINE {
                // The node's last line had no newline: end it so the next output starts clean.
                line.push(b'\n');
            }
            let ok = match stream {
                Stream::Out => {
                    let mut o = std::io::stdout().lock();
                    o.write_all(&line).and_then(|()| o.flush())
                }
                Stream::Err => std::io::stderr().lock().write_all(&line),
            };
            if ok.is_err() {
                // Our own terminal is gone; keep draining so the node never blocks on a full pipe.
                continue;
            }
        }
    })
}

/// Read up to and including a newline, or up to `MAX_LINE` bytes, or to the end.
fn read_line(r: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(total);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let take = take.min(MAX_LINE - total.min(MAX_LINE));
        out.extend_from_slice(&buf[..take]);
        r.consume(take);
        total += take;
        if done || total >= MAX_LINE {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_whole_and_long_ones_split() {
        let text = b"one\ntwo\nlast-no-newline";
        let mut r = BufReader::new(&text[..]);
        let mut l = Vec::new();
        assert_eq!(read_line(&mut r, &mut l).ok(), Some(4));
        assert_eq!(l, b"one\n");
        l.clear();
        read_line(&mut r, &mut l).ok();
        assert_eq!(l, b"two\n");
        l.clear();
        read_line(&mut r, &mut l).ok();
        assert_eq!(l, b"last-no-newline");
        let long = vec![b'x'; MAX_LINE + 10];
        let mut r = BufReader::new(&long[..]);
        let mut l = Vec::new();
        assert_eq!(read_line(&mut r, &mut l).ok(), Some(MAX_LINE));
    }
}
