//! Nodelists: where charmrun places node processes.
//!
//! Two formats, told apart by their first keyword:
//!
//! - **Charm++'s**: `group NAME` starts a group, `host NAME [++cpus N] [++shell CMD]` adds a
//!   host to it; hosts before any `group` line are in group `main`, which is the one used
//!   unless `++nodegroup NAME` names another.
//! - **A plain machine file**: one host name per line.
//!
//! In both, `#` and `//` start comments and blank lines are ignored. Processes are placed on
//! the hosts round-robin in file order: node 0 on the first host, node 1 on the second, ...
//! wrapping around (as the topology library's `mturun` does). A host with `++cpus N` takes N
//! processes in a row per round (Charm++'s charmrun lists it N times).

use std::path::Path;

/// One host a nodelist names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Host name or address, as the remote shell and the resolver take it.
    pub name: String,
    /// `++cpus`: how many processors it has: it takes this many node processes in a row per
    /// round of the round-robin placement.
    pub cpus: usize,
    /// `++shell`: a remote shell for this host instead of the default.
    pub shell: Option<String>,
}

/// What is wrong with a nodelist, naming the line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodelistError {
    /// The file cannot be read.
    #[error("cannot read nodelist {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line that does not parse.
    #[error("{path}:{line}: {reason}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// No host in the group used.
    #[error("{path}: no hosts in group '{group}'{known}")]
    Empty {
        /// The file.
        path: String,
        /// The group.
        group: String,
        /// The groups the file has, as a phrase (empty when it has none).
        known: String,
    },
    /// A group asked of a plain machine file, which has none.
    #[error("{path} is a machine file (one host per line), which has no groups: ++nodegroup {group} needs a Charm++ nodelist ('group NAME' lines)")]
    NoGroups {
        /// The file.
        path: String,
        /// The group asked for.
        group: String,
    },
}

/// The largest nodelist read (16 MiB: a host per line for far more hosts than a job has), so
/// that a path such as `/dev/zero` is refused instead of filling memory.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Read and parse a nodelist file; the hosts of group `main` (or of the machine file).
///
/// # Errors
/// [`NodelistError`] saying which line is wrong and why.
pub fn load(path: &Path) -> Result<Vec<Host>, NodelistError> {
    load_group(path, MAIN)
}

/// The group used when none is named (Charm++'s).
pub const MAIN: &str = "main";

/// Read and parse a nodelist file; the hosts of `group` (`++nodegroup`).
///
/// # Errors
/// [`NodelistError`] saying which line is wrong and why, or that the group has no hosts.
pub fn load_group(path: &Path, group: &str) -> Result<Vec<Host>, NodelistError> {
    let text =
        converse_machine::input::read_text_at_most(path, MAX_FILE_BYTES).map_err(|source| {
            NodelistError::Read {
                path: path.display().to_string(),
                source,
            }
        })?;
    parse_group(&path.display().to_string(), &text, group)
}

fn strip_comment(line: &str) -> &str {
    let cut = [line.find('#'), line.find("//")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(line.len());
    line[..cut].trim()
}

/// Parse nodelist text; `path` is used in messages only.
///
/// ```
/// let hosts = charmrun::nodelist::parse("n", "group main\n host a ++cpus 2\n host b\n").unwrap();
/// assert_eq!(hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
/// let hosts = charmrun::nodelist::parse("m", "a\nb # second\n\nc\n").unwrap();
/// assert_eq!(hosts.len(), 3);
/// ```
///
/// # Errors
/// [`NodelistError`] saying which line is wrong and why.
pub fn parse(path: &str, text: &str) -> Result<Vec<Host>, NodelistError> {
    parse_group(path, text, MAIN)
}

/// Parse nodelist text, taking the hosts of group `wanted`.
///
/// ```
/// let text = "group main\n host a\ngroup gpu\n host g1\n host g2\n";
/// let hosts = charmrun::nodelist::parse_group("n", text, "gpu").unwrap();
/// assert_eq!(hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["g1", "g2"]);
/// let e = charmrun::nodelist::parse_group("n", text, "fpga").unwrap_err();
/// assert_eq!(e.to_string(), "n: no hosts in group 'fpga' (its groups: main, gpu)");
/// ```
///
/// # Errors
/// [`NodelistError`] saying which line is wrong and why, or that the group has no hosts.
pub fn parse_group(path: &str, text: &str, wanted: &str) -> Result<Vec<Host>, NodelistError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, strip_comment(l)))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let charm = lines
        .iter()
        .any(|(_, l)| matches!(l.split_whitespace().next(), Some("group" | "host")));
    let err = |line: usize, reason: String| NodelistError::Line {
        path: path.into(),
        line,
        reason,
    };
    let mut hosts = Vec::new();
    // Groups with hosts, in file order, for the message when the one wanted has none.
    let mut groups: Vec<String> = Vec::new();
    if !charm && wanted != MAIN {
        return Err(NodelistError::NoGroups {
            path: path.into(),
            group: wanted.into(),
        });
    }
    if !charm {
        for (n, l) in lines {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap_or_default();
            if let Some(extra) = words.next() {
                return Err(err(
                    n,
                    format!("a machine file has one host per line; '{extra}' follows '{name}'"),
                ));
            }
            hosts.push(Host {
                name: name.into(),
                cpus: 1,
                shell: None,
            });
        }
    } else {
        let mut group = MAIN.to_owned();
        let mut group_shell: Option<String> = None;
        for (n, l) in lines {
            let mut words = l.split_whitespace();
            match words.next() {
                Some("group") => {
                    group = words
                        .next()
                        .ok_or_else(|| err(n, "'group' needs a name".into()))?
                        .into();
                    // Group options apply to the group's hosts unless a host sets its own.
                    group_shell = None;
                    while let Some(opt) = words.next() {
                        match opt {
                            "++shell" => {
                                let v = words
                                    .next()
                                    .ok_or_else(|| err(n, "++shell needs a value".into()))?;
                                group_shell = Some(v.into());
                            }
                            other => return Err(err(n, format!("unknown group option '{other}'"))),
                        }
                    }
                }
                Some("host") => {
                    let name = words
                        .next()
                        .ok_or_else(|| err(n, "'host' needs a name".into()))?;
                    let mut h = Host {
                        name: name.into(),
                        cpus: 1,
                        shell: group_shell.clone(),
                    };
                    while let Some(opt) = words.next() {
                        let mut value = |o: &str| {
                            words
                                .next()
                                .ok_or_else(|| err(n, format!("{o} needs a value")))
                        };
                        match opt {
                            "++cpus" => {
                                let v = value(opt)?;
                                h.cpus = v.parse().ok().filter(|&c| c > 0).ok_or_else(|| {
                                    err(n, format!("++cpus wants a positive number, got '{v}'"))
                                })?;
                            }
                            "++shell" => h.shell = Some(value(opt)?.into()),
                            other => return Err(err(n, format!("unknown host option '{other}'"))),
                        }
                    }
                    if !groups.contains(&group) {
                        groups.push(group.clone());
                    }
                    if group == wanted {
                        hosts.push(h);
                    }
                }
                Some(other) => {
                    return Err(err(
                        n,
                        format!("expected 'group NAME' or 'host NAME ...', found '{other}'"),
                    ))
                }
                None => {}
            }
        }
    }
    if hosts.is_empty() {
        return Err(NodelistError::Empty {
            path: path.into(),
            group: wanted.into(),
            known: if groups.is_empty() {
                String::new()
            } else {
                format!(" (its groups: {})", groups.join(", "))
            },
        });
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_nodelist_is_refused_in_one_line() {
        let e = load(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot read nodelist /dev/zero: it is larger than 16384 KiB"
        );
    }

    fn names(h: &[Host]) -> Vec<&str> {
        h.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn charm_format_with_groups_comments_and_options() {
        let text = "# cluster\ngroup main ++shell ssh\n  host a ++cpus 4 // big\n  host b ++shell rsh\ngroup other\n  host c\n";
        let h = parse("n", text).expect("parses");
        assert_eq!(names(&h), ["a", "b"]);
        assert_eq!(h[0].cpus, 4);
        assert_eq!(h[0].shell.as_deref(), Some("ssh"));
        assert_eq!(h[1].shell.as_deref(), Some("rsh"));
        assert!(parse("n", "group main ++bogus x\nhost a\n").is_err());
    }

    #[test]
    fn hosts_before_any_group_are_in_main() {
        assert_eq!(
            names(&parse("n", "host x\nhost y\n").expect("parses")),
            ["x", "y"]
        );
    }

    #[test]
    fn machine_file() {
        let h = parse("m", "n1\n\n  n2  \n# n3\nn1\n").expect("parses");
        assert_eq!(names(&h), ["n1", "n2", "n1"]);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("group main\nhost a\nhots b\n", ":3:"),
            ("host a ++cpus zero\n", ":1:"),
            ("host a ++cpus\n", ":1:"),
            ("host\n", ":1:"),
            ("host a ++bogus 1\n", ":1:"),
            ("a b\n", ":1:"),
        ];
        for (text, want) in cases {
            let e = parse("f", text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert!(matches!(
            parse("f", "# nothing\n"),
            Err(NodelistError::Empty { .. })
        ));
        assert!(matches!(
            parse("f", "group other\nhost a\n"),
            Err(NodelistError::Empty { .. })
        ));
    }
}
