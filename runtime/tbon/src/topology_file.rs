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
use std::collections::HashSet;
use winnow::ascii::{dec_uint, multispace1};
use winnow::combinator::{alt, cut_err, eof, opt, repeat};
use winnow::error::{ContextError, ErrMode, StrContext, StrContextValue};
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

/// The distinct processes a file names, counted while it is parsed so that a file naming
/// more than a limit is refused at the first process past it, before the rest is held in
/// memory (a 121 MB file of 12 million children took 4 GB to parse whole).
struct Budget {
    /// The most processes accepted; `None`: no limit, nothing counted.
    max: Option<usize>,
    seen: HashSet<ProcName>,
    /// The first process past the limit, and the offset it starts at.
    over: Option<(ProcName, usize)>,
}

impl Budget {
    fn new(max: Option<usize>) -> Budget {
        Budget {
            max,
            seen: HashSet::new(),
            over: None,
        }
    }

    /// Count `name`, read at `offset`; a cut (which ends the parse) when it is one too many.
    fn admit(&mut self, name: &ProcName, offset: usize) -> ModalResult<()> {
        let Some(max) = self.max else {
            return Ok(());
        };
        if self.seen.len() < max || self.seen.contains(name) {
            if self.seen.len() < max {
                self.seen.insert(name.clone());
            }
            return Ok(());
        }
        self.over = Some((name.clone(), offset));
        Err(ErrMode::Cut(ContextError::new()))
    }
}

/// `parent => children ;` with the offset it starts at.
fn statement(i: &mut In<'_>, budget: &mut Budget) -> ModalResult<(ProcName, Vec<ProcName>, usize)> {
    let (parent, span) = proc_name.with_span().parse_next(i)?;
    budget.admit(&parent, span.start)?;
    gap(i)?;
    let mut children = Vec::new();
    if opt("=>").parse_next(i)?.is_some() {
        gap(i)?;
        while let Some((child, at)) = opt(proc_name.with_span()).parse_next(i)? {
            budget.admit(&child, at.start)?;
            children.push(child);
            gap(i)?;
        }
    }
    cut_err(';')
        .context(expected(
            "';' to end the statement, or a child 'host:instance' (does the line before lack its ';'?)",
        ))
        .parse_next(i)?;
    Ok((parent, children, span.start))
}

fn file(i: &mut In<'_>, budget: &mut Budget) -> ModalResult<Vec<(ProcName, Vec<ProcName>, usize)>> {
    gap(i)?;
    let mut statements = Vec::new();
    while let Some(st) = opt(|i: &mut In<'_>| statement(i, budget)).parse_next(i)? {
        statements.push(st);
        gap(i)?;
    }
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

/// What starts at `offset`, for error messages: the rest of its word, or "end of file". The
/// word is escaped as Rust writes a string: it may hold any byte but white space (an ESC, a
/// NUL), and an error stays one line of text.
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
        format!("'{}'", word.escape_debug())
    }
}

/// Parse a topology file's text into its statements.
///
/// # Errors
/// [`TopologyError`] naming the line and what was expected there.
pub fn parse_entries(text: &str) -> Result<Vec<Entry>, TopologyError> {
    parse_entries_within(text, None)
}

/// [`parse_entries`], refusing at the first process past `max` distinct ones, if given.
fn parse_entries_within(text: &str, max: Option<usize>) -> Result<Vec<Entry>, TopologyError> {
    let mut budget = Budget::new(max);
    let parsed = (|i: &mut In<'_>| file(i, &mut budget)).parse(LocatingSlice::new(text));
    if let Some((name, offset)) = budget.over.take() {
        return Err(TopologyError::at(
            Some(line_at(text, offset)),
            format!(
                "the tree has more than {} processes, the most allowed: {name} is one more",
                budget.seen.len()
            ),
        ));
    }
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

/// [`parse`] a text that may name at most `max_nodes` processes: the parse stops at the first
/// process past them, naming its line, so that memory stays in proportion to `max_nodes`
/// rather than to the text.
///
/// ```
/// use converse_tbon::topology_file::parse_at_most;
/// assert!(parse_at_most("fe:0 => be:0 be:1 ;", 3).is_ok());
/// let e = parse_at_most("fe:0 => be:0\n be:1 ;", 2).unwrap_err();
/// assert!(e.to_string().starts_with("line 2: the tree has more than 2 processes"), "{e}");
/// ```
///
/// # Errors
/// Those of [`parse`], and one for a process past `max_nodes`.
pub fn parse_at_most(text: &str, max_nodes: usize) -> Result<Topology, TopologyError> {
    Topology::from_entries(&parse_entries_within(text, Some(max_nodes))?)
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
    converse::input::read_text_at_most(path, limit)
        .map_err(|e| TopologyError::at(None, format!("cannot read {what} {}: {e}", path.display())))
}

/// Read, parse and validate a topology file.
///
/// # Errors
/// [`TopologyError`] naming the file and line.
pub fn load(path: &std::path::Path) -> Result<Topology, TopologyError> {
    load_within(path, None)
}

/// [`load`] a file that may name at most `max_nodes` processes (see [`parse_at_most`]).
///
/// # Errors
/// [`TopologyError`] naming the file and line.
pub fn load_at_most(path: &std::path::Path, max_nodes: usize) -> Result<Topology, TopologyError> {
    load_within(path, Some(max_nodes))
}

fn load_within(path: &std::path::Path, max: Option<usize>) -> Result<Topology, TopologyError> {
    let text = read_text(path, "topology file")?;
    parse_entries_within(&text, max)
        .and_then(|entries| Topology::from_entries(&entries))
        .map_err(|e| TopologyError {
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

    #[test]
    fn what_was_found_is_quoted_escaped_in_one_line() {
        // The raw ESC and NUL of the file went into the error.
        for (text, want) in [
            (
                "a:0 => \u{1b}[31mb:0 ;\n",
                "line 1: expected ';' to end the statement, or a child 'host:instance' (does the \
                 line before lack its ';'?), found '\\u{1b}[31mb:0'",
            ),
            (
                "a:0 => b:0 ;\n\0\0x ;\n",
                "line 2: expected a process 'host:instance' to start a statement, found '\\0\\0x'",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert_eq!(e, want);
            assert!(!e.chars().any(char::is_control), "{e:?}");
        }
    }

    #[test]
    fn a_limit_stops_the_parse_at_the_first_process_past_it() {
        let text = "fe:0 => a:0 a:1 ;\na:0 => b:0 ;\na:1 => b:1\n b:2 ;\n";
        assert_eq!(parse_at_most(text, 6).map(|t| t.num_nodes()), Ok(6));
        let e = parse_at_most(text, 5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: the tree has more than 5 processes, the most allowed: b:2 is one more"
        );
        // Names seen before count once; the statements' parents are processes too.
        assert!(parse_at_most("fe:0 => a:0 ;\na:0 => b:0 ;\n", 3).is_ok());
        let e = parse_at_most("x:0 ;\ny:0 ;\nz:0 ;\n", 2).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        // Without a limit, as before.
        assert!(parse(text).is_ok());
    }

    #[test]
    fn a_flat_tree_past_the_limit_stops_early_and_names_its_line() {
        // One statement of 12 million children was held whole (4 GB) before its size was
        // checked; now the parse stops at the first child past the limit.
        let children: String = (1..=300_000).map(|i| format!(" b:{i}")).collect();
        let text = format!("# a flat tree\nfe:0 =>{children} ;\n");
        let e = parse_at_most(&text, 1000).unwrap_err().to_string();
        assert_eq!(
            e,
            "line 2: the tree has more than 1000 processes, the most allowed: b:1000 is one more"
        );
        let dir = std::env::temp_dir().join(format!("tbon-flat-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let p = dir.join("flat.top");
        let _ = std::fs::write(&p, &text);
        let e = load_at_most(&p, 1000).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}:2: the tree has more", p.display())),
            "{e}"
        );
        assert_eq!(load(&p).map(|t| t.num_nodes()), Ok(300_001));
        let _ = std::fs::remove_dir_all(&dir);
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
