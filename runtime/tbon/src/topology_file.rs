//! MRNet topology files (the guide's Appendix C):
//!
//! ```text
//! # comments run to the end of the line
//! nutmeg:0 => c01:0 c02:0 c03:0 c04:0 ;
//! c03:0 => c05:0 ;
//! c04:0 =>
//!     c06:0 c07:0
//!     c08:0 c09:0 ;     # a statement may span lines
//! ```
//!
//! Each statement names a process `host:instance`, `=>`, its children, and ends with `;`. A
//! statement without children (`host:0 ;` or `host:0 => ;`) defines a one-process tree.
//! Parsing checks the grammar, then [`Topology::from_entries`] checks that the statements make
//! one tree; every error names the line.

use crate::topology::{Entry, ProcName, Topology, TopologyError};
use winnow::ascii::{dec_uint, multispace1};
use winnow::combinator::{alt, cut_err, eof, opt, preceded, repeat, terminated};
use winnow::error::{ContextError, StrContext, StrContextValue};
use winnow::prelude::*;
use winnow::token::{take_till, take_while};
use winnow::LocatingSlice;

type In<'a> = LocatingSlice<&'a str>;

fn expected(what: &'static str) -> StrContext {
    StrContext::Expected(StrContextValue::Description(what))
}

/// White space and comments.
fn gap(i: &mut In<'_>) -> ModalResult<()> {
    repeat(
        0..,
        alt((multispace1.void(), ('#', take_till(0.., '\n')).void())),
    )
    .parse_next(i)
}

fn host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')
}

/// `host:instance`; once a host name is read, the rest is required.
fn proc_name(i: &mut In<'_>) -> ModalResult<ProcName> {
    let host = take_while(1.., host_char).parse_next(i)?;
    cut_err(':')
        .context(expected("':' and an instance number after the host name"))
        .parse_next(i)?;
    let instance: u32 = cut_err(dec_uint)
        .context(expected("an instance number (0, 1, ...) after ':'"))
        .parse_next(i)?;
    Ok(ProcName::new(host, instance))
}

/// `parent => children ;` with the offset it starts at.
fn statement(i: &mut In<'_>) -> ModalResult<(ProcName, Vec<ProcName>, usize)> {
    let (parent, span) = proc_name.with_span().parse_next(i)?;
    gap(i)?;
    let children: Option<Vec<ProcName>> = opt(preceded(
        ("=>", gap),
        repeat(0.., terminated(proc_name, gap)),
    ))
    .parse_next(i)?;
    cut_err(';')
        .context(expected(
            "';' to end the statement, or a child 'host:instance' (does the line before lack its ';'?)",
        ))
        .parse_next(i)?;
    Ok((parent, children.unwrap_or_default(), span.start))
}

fn file(i: &mut In<'_>) -> ModalResult<Vec<(ProcName, Vec<ProcName>, usize)>> {
    gap(i)?;
    let statements = repeat(0.., terminated(statement, gap)).parse_next(i)?;
    cut_err(eof)
        .context(expected("a process 'host:instance' to start a statement"))
        .parse_next(i)?;
    Ok(statements)
}

/// 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    Lines::new(text).line_at(offset)
}

/// Where the lines of a text start, so that the line of each of many offsets costs a binary
/// search, not a scan from the start of the text (a file of many statements would take
/// quadratic time).
struct Lines {
    /// Byte offset of every `\n`.
    newlines: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Lines {
        Lines {
            newlines: text
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// 1-based line of byte `offset`.
    fn line_at(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < offset) + 1
    }
}

/// What starts at `offset`, for error messages: the rest of its word, or "end of file".
fn found_at(text: &str, offset: usize) -> String {
    let rest = text.get(offset..).unwrap_or("");
    let word: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace())
        .take(24)
        .collect();
    if word.is_empty() {
        if rest.is_empty() {
            "end of file".into()
        } else {
            "end of line".into()
        }
    } else {
        format!("'{word}'")
    }
}

/// Parse a topology file's text into its statements.
///
/// # Errors
/// [`TopologyError`] naming the line and what was expected there.
pub fn parse_entries(text: &str) -> Result<Vec<Entry>, TopologyError> {
    let parsed = file.parse(LocatingSlice::new(text));
    match parsed {
        Ok(st) => {
            let lines = Lines::new(text);
            Ok(st
                .into_iter()
                .map(|(parent, children, at)| Entry {
                    parent,
                    children,
                    line: Some(lines.line_at(at)),
                })
                .collect())
        }
        Err(e) => {
            let offset = e.offset();
            let inner: &ContextError = e.inner();
            let what = inner
                .context()
                .find_map(|c| match c {
                    StrContext::Expected(v) => Some(v.to_string()),
                    _ => None,
                })
                .unwrap_or_else(|| "a statement 'host:instance => children ;'".into());
            Err(TopologyError::at(
                Some(line_at(text, offset)),
                format!("expected {what}, found {}", found_at(text, offset)),
            ))
        }
    }
}

/// Parse and validate a topology file's text.
///
/// ```
/// let t = converse_tbon::topology_file::parse("fe:0 => be:0 be:1 ;").unwrap();
/// assert_eq!(t.num_backends(), 2);
/// let e = converse_tbon::topology_file::parse("fe:0 => be:0\n be:1 => fe:0 ;").unwrap_err();
/// assert!(e.to_string().starts_with("line 2:"), "{e}");
/// ```
///
/// # Errors
/// [`TopologyError`] naming the line: a syntax error, or statements that are not one tree.
pub fn parse(text: &str) -> Result<Topology, TopologyError> {
    Topology::from_entries(&parse_entries(text)?)
}

/// The most bytes [`read_text`] reads: more than a topology of the most processes a job may
/// have takes (a million-process chain on `localhost` is 30 MiB), far less than what would
/// exhaust memory.
pub const MAX_FILE_BYTES: u64 = 128 << 20;

/// Read a text file of at most [`MAX_FILE_BYTES`] (a topology or a host list; `what` says which,
/// for the error), so that a path such as `/dev/zero` is refused instead of filling memory.
///
/// # Errors
/// [`TopologyError`] naming the file: it cannot be read, is larger, or is not UTF-8.
pub fn read_text(path: &std::path::Path, what: &str) -> Result<String, TopologyError> {
    read_at_most(path, what, MAX_FILE_BYTES)
}

fn read_at_most(path: &std::path::Path, what: &str, limit: u64) -> Result<String, TopologyError> {
    use std::io::Read;
    let fail = |why: String| {
        TopologyError::at(
            None,
            format!("cannot read {what} {}: {why}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > limit {
        return Err(fail(format!("it is larger than {} KiB", limit >> 10)));
    }
    Ok(text)
}

/// Read, parse and validate a topology file.
///
/// # Errors
/// [`TopologyError`] naming the file and line.
pub fn load(path: &std::path::Path) -> Result<Topology, TopologyError> {
    let text = read_text(path, "topology file")?;
    parse(&text).map_err(|e| TopologyError {
        file: Some(path.display().to_string()),
        ..e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUIDE: &str = "\
nutmeg:0 => c01:0 c02:0 c03:0 c04:0 ;
c03:0 => c05:0 ;
c04:0 => c06:0 c07:0 c08:0 c09:0 ;
#       nutmeg
#       |
#       -----
";

    #[test]
    fn the_guides_file_and_its_multiline_form() {
        let t = parse(GUIDE).expect("guide example");
        assert_eq!((t.num_nodes(), t.num_backends()), (10, 7));
        let multi = "hostname1:0 =>\n    hostname1:1\n    hostname1:2\n    ;\n";
        let t = parse(multi).expect("multi-line");
        assert_eq!(t.num_backends(), 2);
        let compact = "a-1.b_c:0=>a-1.b_c:1;#x\n";
        assert_eq!(parse(compact).map(|t| t.num_nodes()), Ok(2));
        let lone = parse("  # only the front-end\nfe:0 ;").expect("lone");
        assert_eq!(lone.num_nodes(), 1);
        assert_eq!(parse("fe:0 => ;").map(|t| t.num_nodes()), Ok(1));
    }

    #[test]
    fn statements_remember_their_lines() {
        let e = parse_entries(GUIDE).expect("entries");
        let lines: Vec<_> = e.iter().map(|e| e.line).collect();
        assert_eq!(lines, [Some(1), Some(2), Some(3)]);
    }

    #[test]
    fn syntax_errors_name_the_line_and_what_was_expected() {
        let cases = [
            ("a:0 => b:0 ;\nc:0 => d:0\n", "line 3: expected ';'"),
            (
                "a:0 => b ;\n",
                "line 1: expected ':' and an instance number",
            ),
            ("a:0 => b:x ;\n", "line 1: expected an instance number"),
            (
                "\n\n=> b:0 ;\n",
                "line 3: expected a process 'host:instance'",
            ),
            ("a:0 => b:0 ;\n!!\n", "line 2: expected a process"),
            ("a:0 -> b:0 ;\n", "line 1: expected ';'"),
            (
                "a:0 => b:0 ; c:99999999999 ;",
                "line 1: expected an instance number",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(
            parse("").unwrap_err().to_string(),
            "the topology defines no process"
        );
        assert!(parse("# nothing\n").is_err());
    }

    /// A chain `h:0 => h:1 ; h:1 => h:2 ; ...` of `levels` levels, one statement a line.
    fn chain(levels: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for i in 0..levels {
            let _ = writeln!(s, "h:{i} => h:{} ;", i + 1);
        }
        s
    }

    #[test]
    fn a_million_level_chain_is_checked_in_linear_time_and_stack() {
        // The old line numbering scanned the text from its start for every statement:
        // quadratic, hours for this chain; any recursion on depth would overflow the stack of
        // a test thread.
        let levels = 1_000_000;
        let t = parse(&chain(levels)).expect("a chain is a tree");
        assert_eq!((t.num_nodes(), t.num_backends()), (levels + 1, 1));
        assert_eq!(t.stats().depth as usize, levels);
        assert_eq!(t.subtree_height(0) as usize, levels);
        let be = t.backends()[0];
        assert_eq!(t.nodes()[be].name(), &ProcName::new("h", levels as u32));
        assert_eq!(t.root().backend_ranks(), 0..1);
    }

    #[test]
    fn statements_deep_in_a_long_file_keep_their_lines() {
        let mut text = chain(100_000);
        text.push_str("h:5 => z:0 ;\n");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, Some(100_001), "{e}");
        assert!(
            e.to_string()
                .starts_with("line 100001: h:5 already has its children listed at line 6"),
            "{e}"
        );
        let entries = parse_entries(&chain(3)).expect("entries");
        let lines: Vec<_> = entries.iter().map(|e| e.line).collect();
        assert_eq!(lines, [Some(1), Some(2), Some(3)]);
        assert_eq!(line_at("a\nb\nc", 0), 1);
        assert_eq!(line_at("a\nb\nc", 1), 1);
        assert_eq!(line_at("a\nb\nc", 2), 2);
        assert_eq!(line_at("a\nb\nc", 99), 3);
    }

    #[test]
    fn tree_errors_name_the_line() {
        let e = parse("a:0 => b:0 c:0 ;\n\nb:0 => c:0 ;\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        let e = parse("a:0 => b:0 ;\nb:0 => a:0 ;\n").unwrap_err();
        assert!(e.to_string().contains("no root"), "{e}");
        let e = parse("r:0 => s:0 ;\nx:0 => y:0 ;\ny:0 => x:0 ;\n").unwrap_err();
        assert!(e.to_string().contains("own descendant"), "{e}");
    }

    #[test]
    fn an_endless_file_is_refused_not_read_into_memory() {
        let zero = std::path::Path::new("/dev/zero");
        let e = read_at_most(zero, "topology file", 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read topology file /dev/zero: it is larger than 1024 KiB"
        );
        let e = load(std::path::Path::new("/nonexistent.top"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read topology file /nonexistent.top: "),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_names_a_line_without_a_panic(
            s in "([a-c]{1,2}:[0-9]{1,2}|=>|;|#|[ \n]|é|:|-|[0-9]{12}){0,60}|\\PC{0,80}"
        ) {
            match parse(&s) {
                Ok(t) => proptest::prop_assert_eq!(parse(&t.to_topology_file()), Ok(t)),
                Err(e) => proptest::prop_assert!(!e.to_string().contains('\n'), "{}", e),
            }
        }
    }
}
