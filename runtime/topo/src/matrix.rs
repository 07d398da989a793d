//! Adjacency matrix files for [`Topology::from_matrix_file`](crate::Topology::from_matrix_file).
//!
//! One row per line, entries separated by spaces, tabs or commas; an entry is the channel's
//! weight (0: no channel). Blank lines and everything after `#` are ignored.
//!
//! ```text
//! # a triangle with a heavy side
//! 0 1 5
//! 1 0 1
//! 5 1 0
//! ```

use crate::error::TopoError;

/// The rows of a matrix file's text; `file` names it in errors. Squareness, symmetry and
/// connectivity are checked by [`Topology::from_matrix`](crate::Topology::from_matrix).
///
/// # Errors
/// [`TopoError::Parse`] naming the line of the first entry that is not a weight, or saying
/// the file holds no row.
pub fn parse(text: &str, file: &str) -> Result<Vec<Vec<u32>>, TopoError> {
    let err = |line: usize, reason: String| TopoError::Parse {
        file: file.to_owned(),
        line,
        reason,
    };
    let mut rows = Vec::new();
    let mut width = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let entries: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .collect();
        if entries.is_empty() {
            continue;
        }
        let row = entries
            .iter()
            .map(|e| {
                e.parse::<u32>().map_err(|_| {
                    err(
                        i + 1,
                        format!("'{e}' is not a weight (a whole number, 0 for no channel)"),
                    )
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        match width {
            None => width = Some(row.len()),
            Some(w) if w != row.len() => {
                return Err(err(
                    i + 1,
                    format!(
                        "the matrix is not square: this row has {} entries, the first has {w}",
                        row.len()
                    ),
                ))
            }
            Some(_) => {}
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(err(1, "no matrix rows in the file".into()));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Topology;

    #[test]
    fn rows_comments_commas() {
        let m = parse("# tri\n0 1 5\n\n1,0,1 # mid\n5\t1 0\n", "f").unwrap();
        assert_eq!(m, [[0, 1, 5], [1, 0, 1], [5, 1, 0]]);
    }

    #[test]
    fn errors_are_one_line_naming_the_line() {
        let e = parse("0 1\n1 x\n", "m.txt").unwrap_err().to_string();
        assert_eq!(
            e,
            "m.txt:2: 'x' is not a weight (a whole number, 0 for no channel)"
        );
        let e = parse("0 1 1\n1 0\n", "m.txt").unwrap_err().to_string();
        assert!(e.starts_with("m.txt:2: the matrix is not square"), "{e}");
        assert!(!e.contains('\n'));
        let e = parse("# nothing\n", "m.txt").unwrap_err().to_string();
        assert_eq!(e, "m.txt:1: no matrix rows in the file");
        assert!(parse("0 -1\n-1 0\n", "m").is_err());
    }

    #[test]
    fn files_from_disk() {
        let dir = std::env::temp_dir().join(format!("topo-matrix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            ("ok", "0 1 0\n1 0 1\n0 1 0\n", None),
            ("tall", "0 1\n1 0\n1 1\n", Some("not square")),
            (
                "cut",
                "0 1 0\n1 0 0\n0 0 0\n",
                Some("process 2 cannot be reached"),
            ),
            ("junk", "\u{1}\u{2}garbage\n", Some(":1: ")),
            // A channel from a process to itself was dropped without a word.
            (
                "diagonal",
                "0 1 0\n1 0 1\n0 1 7\n",
                Some("diagonal is not 0: entry (2,2) is 7"),
            ),
        ];
        for (name, text, want) in cases {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            match (Topology::from_matrix_file(&p), want) {
                (Ok(t), None) => assert_eq!(t.len(), 3),
                (Err(e), Some(w)) => {
                    let s = e.to_string();
                    assert!(s.contains(w) && !s.contains('\n'), "{name}: {s}");
                }
                (r, w) => panic!("{name}: {r:?}, wanted {w:?}"),
            }
        }
        let missing = Topology::from_matrix_file(dir.join("none")).unwrap_err();
        assert!(matches!(missing, TopoError::Io { .. }));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_endless_matrix_file_is_refused_not_read_into_memory() {
        let e = Topology::from_matrix_file("/dev/zero")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero: it is larger than 131072 KiB");
    }
}
