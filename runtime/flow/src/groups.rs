//! The groups file: which stages form which group, and which PEs each group runs on
//! (FastFlow's distributed groups, `createGroup`, in a file so a split changes without a
//! rebuild).
//!
//! ```text
//! # the seed's sample application, one group per node
//! group G1 nodes 0
//! group G2 nodes 1
//! group G3 pes 4-5
//! place G1 generate
//! place G2 square* collector
//! place G3 check
//! ```
//!
//! | line | meaning |
//! |---|---|
//! | `group NAME pes LIST` | group `NAME` runs on these PEs (`LIST`: `N` or `N-M`, comma separated) |
//! | `group NAME nodes LIST` | group `NAME` runs on every PE of these nodes (processes) |
//! | `group NAME pes LIST at ADDRESS` | group `NAME` is a job of its own (started apart, told its name with [`Flow::as_group`](crate::Flow::as_group)), on these PEs *of its job*, listening at `ADDRESS` (`tcp://HOST:PORT`, `si://NAME`: the transport between groups, by string) |
//! | `place NAME PATTERN...` | the stages a pattern matches belong to group `NAME`; a pattern is a stage's name, or a prefix ending in `*` |
//!
//! Either every group has an address or none has. With addresses, a channel that crosses
//! from one group to another goes through the sending job's PE 0 (FastFlow's sender stage),
//! an endpoint connection (`converse-endpoint`, with the flow's secret) to the receiving
//! job's PE 0 (the receiver stage) and on to its stage; its credits come back the same way,
//! and its end of stream is acknowledged before the sending job ends.
//!
//! `#` starts a comment; blank lines are ignored. Names are letters, digits, `_`, `-`, `.`.
//! Refused, with the line: an unknown word, a group named twice, a malformed list, a `place`
//! naming a group not (yet) defined. Refused when the flow is placed: a stage that no pattern
//! places, a stage two lines place in different groups, a pattern that matches no stage, a
//! PE or node the job does not have. Within a group, stages take the group's PEs in turn.

use crate::error::FlowError;
use std::path::Path;

/// Where a group runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Where {
    Pes(Vec<usize>),
    Nodes(Vec<usize>),
}

/// One group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) name: String,
    pub(crate) at: Where,
    /// Where the group's job listens, when each group is a job of its own.
    pub(crate) addr: Option<String>,
    pub(crate) line: usize,
}

/// One `place` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) group: usize,
    pub(crate) pattern: String,
    pub(crate) line: usize,
}

/// A parsed groups file; see the module for the grammar.
///
/// ```
/// let g = converse_flow::Groups::parse("group A pes 0-1\nplace A src work*\n")?;
/// assert_eq!(g.names(), vec!["A"]);
/// assert!(converse_flow::Groups::parse("group A cores 0").is_err());
/// # Ok::<(), converse_flow::FlowError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    pub(crate) file: String,
    pub(crate) groups: Vec<Group>,
    pub(crate) rules: Vec<Rule>,
}

impl Groups {
    /// Read and parse a groups file.
    ///
    /// # Errors
    /// [`FlowError::Read`] when it cannot be read, [`FlowError::Config`] for a line outside the
    /// grammar.
    pub fn from_file(path: &Path) -> Result<Groups, FlowError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| FlowError::Read {
            file: file.clone(),
            msg: e.to_string(),
        })?;
        Groups::parse_named(&text, &file)
    }

    /// Parse groups given as text (named `groups` in errors).
    ///
    /// # Errors
    /// [`FlowError::Config`] for a line outside the grammar.
    pub fn parse(text: &str) -> Result<Groups, FlowError> {
        Groups::parse_named(text, "groups")
    }

    /// The group names, in the order defined.
    pub fn names(&self) -> Vec<&str> {
        self.groups.iter().map(|g| g.name.as_str()).collect()
    }

    /// Whether each group is a job of its own, reached at its address (`at`).
    pub fn separate_jobs(&self) -> bool {
        self.groups.iter().any(|g| g.addr.is_some())
    }

    fn parse_named(text: &str, file: &str) -> Result<Groups, FlowError> {
        let mut g = Groups {
            file: file.to_owned(),
            groups: Vec::new(),
            rules: Vec::new(),
        };
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |msg: String| FlowError::Config {
                file: file.to_owned(),
                line,
                msg,
            };
            let words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            match words.as_slice() {
                [] => {}
                ["group", name, kind, list, rest @ ..] if rest.is_empty() || rest.len() == 2 => {
                    let at = match rest {
                        ["at", addr] => Some((*addr).to_owned()),
                        [] => None,
                        [w, _] => {
                            return Err(err(format!(
                                "'{w}' after the list (expected 'at ADDRESS' or nothing)"
                            )))
                        }
                        _ => None,
                    };
                    check_name(name).map_err(err)?;
                    if g.groups.iter().any(|x| x.name == *name) {
                        return Err(err(format!("group '{name}' is defined twice")));
                    }
                    let ids = parse_list(list).map_err(err)?;
                    let place = match *kind {
                        "pes" => Where::Pes(ids),
                        "nodes" => Where::Nodes(ids),
                        other => {
                            return Err(err(format!(
                                "'{other}' is not where a group runs (expected pes or nodes)"
                            )))
                        }
                    };
                    if let Some(prev) = g.groups.first() {
                        if prev.addr.is_some() != at.is_some() {
                            return Err(err(
                                "either every group has an address ('at', a job of its own) or none has (PEs of one job)"
                                    .to_owned(),
                            ));
                        }
                    }
                    g.groups.push(Group {
                        name: (*name).to_owned(),
                        at: place,
                        addr: at,
                        line,
                    });
                }
                ["group", ..] => {
                    return Err(err(
                        "expected 'group NAME pes|nodes LIST [at ADDRESS]'".to_owned()
                    ))
                }
                ["place", name, patterns @ ..] if !patterns.is_empty() => {
                    let Some(group) = g.groups.iter().position(|x| x.name == *name) else {
                        return Err(err(format!(
                            "group '{name}' is not defined (a 'group' line must come first)"
                        )));
                    };
                    for p in patterns {
                        let stem = p.strip_suffix('*').unwrap_or(p);
                        if stem.contains('*') || p.is_empty() {
                            return Err(err(format!(
                                "'{p}' is not a pattern (a stage name, or a prefix ending in *)"
                            )));
                        }
                        g.rules.push(Rule {
                            group,
                            pattern: (*p).to_owned(),
                            line,
                        });
                    }
                }
                ["place", ..] => return Err(err("expected 'place GROUP PATTERN...'".to_owned())),
                [other, ..] => {
                    return Err(err(format!(
                        "unknown word '{other}' (expected group or place)"
                    )))
                }
            }
        }
        if g.groups.is_empty() {
            return Err(FlowError::Config {
                file: file.to_owned(),
                line: text.lines().count().max(1),
                msg: "no group is defined".to_owned(),
            });
        }
        Ok(g)
    }
}

impl Rule {
    pub(crate) fn matches(&self, name: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == self.pattern,
        }
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        Ok(())
    } else {
        Err(format!(
            "'{name}' is not a group name (letters, digits, _, -, .)"
        ))
    }
}

/// `0,2-3` → `[0, 2, 3]`.
fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("'{s}' is not a list like 0,2-5");
    let mut out = Vec::new();
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a.parse().map_err(|_| bad())?;
        let b: usize = b.parse().map_err(|_| bad())?;
        if b < a || b - a > 1 << 20 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_in_the_grammar_is_read() {
        let g = Groups::parse(
            "# c\n\ngroup G1 nodes 0\ngroup G2 pes 1,3-4 # two\nplace G1 gen\nplace G2 w* sink\n",
        )
        .expect("parses");
        assert_eq!(g.groups[1].at, Where::Pes(vec![1, 3, 4]));
        assert_eq!(g.rules.len(), 3);
        assert!(g.rules[1].matches("w[3]"));
        assert!(!g.rules[0].matches("gen2"));
        assert!(!g.separate_jobs());
        let j = Groups::parse("group A pes 0 at tcp://10.0.0.1:7000\ngroup B nodes 0 at si://b\n")
            .expect("parses");
        assert!(j.separate_jobs());
        assert_eq!(j.groups[1].addr.as_deref(), Some("si://b"));
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, line, says) in [
            ("group A cores 0", 1, "not where a group runs"),
            ("group A pes 0\ngroup A pes 1", 2, "defined twice"),
            ("group A pes 3-1", 1, "not a list"),
            ("group A pes x", 1, "not a list"),
            ("place A gen", 1, "not defined"),
            ("group A pes 0\nplace A", 2, "expected 'place"),
            ("group A pes 0\nplace A a*b", 2, "not a pattern"),
            ("group A/B pes 0", 1, "not a group name"),
            ("grup A pes 0", 1, "unknown word 'grup'"),
            ("group A pes", 1, "expected 'group"),
            ("group A pes 0 on tcp://x:1", 1, "'on' after the list"),
            (
                "group A pes 0 at tcp://h:1\ngroup B pes 0",
                2,
                "either every group",
            ),
            ("# nothing\n", 1, "no group"),
        ] {
            match Groups::parse(text) {
                Err(FlowError::Config { line: l, msg, .. }) => {
                    assert_eq!(l, line, "{text}: {msg}");
                    assert!(msg.contains(says), "{text}: {msg}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
