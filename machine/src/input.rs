//! What every tool does with input from outside before it parses it: read a file with a bound
//! on its size, so that a path such as `/dev/zero` or a runaway file is refused in one line
//! instead of filling memory; and quote a piece of it in an error so that the error stays one
//! line, with no raw control bytes.

use std::io::Read;
use std::path::Path;

/// Read the text file at `path`, refusing one of more than `limit` bytes.
///
/// ```
/// let e = converse_machine::input::read_text_at_most("/dev/zero".as_ref(), 1 << 20).unwrap_err();
/// assert_eq!(e.to_string(), "it is larger than 1024 KiB");
/// ```
///
/// # Errors
/// The file cannot be opened or read, is not UTF-8, or is larger than `limit` (an error of
/// kind [`std::io::ErrorKind::FileTooLarge`]); the caller names the file.
pub fn read_text_at_most(path: &Path, limit: u64) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    // One byte past the limit tells a file of exactly the limit from a larger one without
    // reading the larger one whole.
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is larger than {} KiB", limit >> 10),
        ));
    }
    Ok(text)
}

/// This process's arguments, `argv[0]` first, each as UTF-8 (where `std::env::args` panics on
/// one that is not).
///
/// # Errors
/// The first argument that is not UTF-8, shown with its bad bytes replaced (`U+FFFD`).
pub fn args() -> Result<Vec<String>, String> {
    std::env::args_os()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                format!(
                    "argument {i} is not UTF-8: {}",
                    quote(&a.to_string_lossy(), 80)
                )
            })
        })
        .collect()
}

/// A line on stderr in one `write` (as `eprintln!` does not: it writes the pieces of its
/// format one by one, so a process killed meanwhile, as a launcher kills a job's other
/// processes when one fails, leaves half a line), and no panic when stderr cannot be written.
pub fn error_line(line: &str) {
    use std::io::Write;
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// What a tool does with a lone `--help`/`-h` or `--version`/`-V` (its first argument, as
/// Unix tools take them): `help` or `TOOL VERSION` on stdout, exit code 0. `None`: the first
/// argument is something else, the tool goes on. A closed stdout is not an error (the reader
/// had what it wanted).
///
/// ```
/// let code = converse_machine::input::help_or_version(Some("--version"), "tool", "1.0", "usage: tool");
/// assert!(code.is_some());
/// assert!(converse_machine::input::help_or_version(Some("run"), "tool", "1.0", "usage").is_none());
/// ```
pub fn help_or_version(
    first: Option<&str>,
    tool: &str,
    version: &str,
    help: &str,
) -> Option<std::process::ExitCode> {
    use std::io::Write;
    let text = match first? {
        "--help" | "-h" => format!("{}\n", help.trim_end()),
        "--version" | "-V" => format!("{tool} {version}\n"),
        _ => return None,
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Some(std::process::ExitCode::SUCCESS)
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`): text from outside (a path, a
/// handler's name, a tool's message) must not break a line in two.
///
/// ```
/// assert_eq!(converse_machine::input::one_line("a\nb"), "a\\nb");
/// ```
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A usage error as a command-line parser renders it on several lines (clap: `error: ...`,
/// then tips such as "a similar argument exists", the usage and a pointer to `--help`) as the
/// one line a tool writes on stderr: `TOOL: ` and the lines joined by `; ` (a list by a space
/// to its heading), the `error: ` prefix and the pointer to `--help` left out, control
/// characters escaped (an argument quoted in the error must not break or colour the line).
///
/// ```
/// let rendered = "error: unexpected argument '--sec' found\n\n  \
///                 tip: a similar argument exists: '--secs'\n\n\
///                 Usage: tool live <DIR>\n\nFor more information, try '--help'.\n";
/// assert_eq!(
///     converse_machine::input::usage_line("tool", rendered),
///     "tool: unexpected argument '--sec' found; tip: a similar argument exists: '--secs'; \
///      usage: tool live <DIR>"
/// );
/// let rendered = "error: the following required arguments were not provided:\n  <DIR>\n\n\
///                 Usage: tool <DIR>\n\nFor more information, try '--help'.\n";
/// assert_eq!(
///     converse_machine::input::usage_line("tool", rendered),
///     "tool: the following required arguments were not provided: <DIR>; usage: tool <DIR>"
/// );
/// ```
pub fn usage_line(tool: &str, rendered: &str) -> String {
    let parts: Vec<String> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information, try"))
        .map(|l| {
            let l = l.strip_prefix("error: ").unwrap_or(l);
            let l = match l.strip_prefix("Usage: ") {
                Some(usage) => format!("usage: {usage}"),
                None => l.to_owned(),
            };
            one_line(&l)
        })
        .collect();
    let mut line = format!("{tool}:");
    for (i, part) in parts.iter().enumerate() {
        // A list follows its heading ("not provided:", "[possible values: ...]") on the line.
        let list = i > 0 && (parts[i - 1].ends_with(':') || part.starts_with('['));
        line.push_str(if i == 0 || list { " " } else { "; " });
        line.push_str(part);
    }
    line
}

/// `text` on stderr as it is (no newline added), in one `write`, never panicking.
pub fn error_text(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// A line on stdout in one `write`, and no panic when stdout cannot be written (a reader that
/// left, `PROGRAM | head -1`, or a full disk): what is lost is lost, the program goes on to
/// its end (`println!` would panic, and a panicking PE ends the whole job).
pub fn out_line(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    out_text(&buf);
}

/// `text` on stdout as it is (no newline added), as [`out_line`].
pub fn out_text(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// How a tool answers a command line clap refused: `rendered` is clap's text, `on_stdout`
/// whether clap meant it for stdout (`--help`, `--version`: what was asked for, printed,
/// exit 0); otherwise it is a usage error, said on one line of stderr ([`usage_line`]), exit
/// 2. Neither write panics when the reader is gone.
pub fn refused_cli(tool: &str, rendered: &str, on_stdout: bool) -> std::process::ExitCode {
    if on_stdout {
        out_text(rendered);
        return std::process::ExitCode::SUCCESS;
    }
    error_line(&usage_line(tool, rendered));
    std::process::ExitCode::from(2)
}

/// At most `max` characters of `s`, escaped (`\n`, `\u{1b}`, ...) so that an error quoting
/// it stays one line without raw control bytes; `…` marks a cut.
///
/// ```
/// assert_eq!(converse_machine::input::quote("a\nb\u{1b}", 80), "a\\nb\\u{1b}");
/// assert_eq!(converse_machine::input::quote("abcdef", 3), "abc…");
/// ```
pub fn quote(s: &str, max: usize) -> String {
    let mut q: String = s.chars().take(max).flat_map(char::escape_debug).collect();
    if s.chars().nth(max).is_some() {
        q.push('…');
    }
    q
}

/// Argument `arg` of a program as a whole number in `ok`, `default` when there is none.
/// Anything else is refused rather than run with the default: a typo must not pass for a
/// result. The error names the argument (`name`) and quotes what was given.
///
/// ```
/// use converse_machine::input::number;
/// assert_eq!(number::<u32>(None, "ROUNDS", 5, 1..=100), Ok(5));
/// assert_eq!(number::<u32>(Some("7"), "ROUNDS", 5, 1..=100), Ok(7));
/// assert_eq!(
///     number::<u32>(Some("0"), "ROUNDS", 5, 1..=100).unwrap_err(),
///     "ROUNDS must be a whole number from 1 to 100, got \"0\""
/// );
/// ```
///
/// # Errors
/// `arg` does not parse as a `T` or lies outside `ok`.
pub fn number<T>(
    arg: Option<&str>,
    name: &str,
    default: T,
    ok: std::ops::RangeInclusive<T>,
) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let Some(a) = arg else { return Ok(default) };
    a.parse().ok().filter(|v| ok.contains(v)).ok_or_else(|| {
        format!(
            "{name} must be a whole number from {} to {}, got \"{}\"",
            ok.start(),
            ok.end(),
            quote(a, 40)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_exactly_the_limit_is_read_and_a_larger_one_refused() {
        let dir = std::env::temp_dir().join(format!("converse-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exact = dir.join("exact");
        std::fs::write(&exact, [b'x'; 1024]).unwrap();
        assert_eq!(
            read_text_at_most(&exact, 1024).map(|s| s.len()).ok(),
            Some(1024)
        );
        let e = read_text_at_most(&exact, 1023).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        std::fs::remove_dir_all(&dir).ok();
        assert!(read_text_at_most(Path::new("/nonexistent/x"), 1024).is_err());
    }
}
