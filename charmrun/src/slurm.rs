//! Slurm: noticing that charmrun runs inside an allocation (`salloc`, `sbatch`), and where.
//!
//! Inside one, a job without a nodelist goes on the allocation's hosts: one agent per host,
//! all started by one `srun` (see [`srun_words`]), node `i` on host `i % hosts`.

/// The allocation's hosts: where Slurm says the job may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Its hosts, in Slurm's order (the order `srun` gives its tasks, one per host).
    pub hosts: Vec<String>,
}

/// The allocation charmrun runs in, from `SLURM_JOB_NODELIST` (or the older
/// `SLURM_NODELIST`); `None` outside Slurm.
///
/// # Errors
/// A sentence when the variable is set but is not a host list.
pub fn allocation() -> Option<Result<Allocation, String>> {
    let (var, list) = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .iter()
        .find_map(|v| std::env::var(v).ok().map(|l| (*v, l)))?;
    Some(
        expand(&list)
            .filter(|h| !h.is_empty())
            .map(|hosts| Allocation { hosts })
            .ok_or_else(|| format!("{var}='{list}' is not a Slurm host list")),
    )
}

/// `srun` starting one task on each of `hosts` hosts of the allocation.
pub fn srun_words(launcher: &[String], hosts: usize) -> Vec<String> {
    let mut w = launcher.to_vec();
    w.extend([
        format!("--nodes={hosts}"),
        format!("--ntasks={hosts}"),
        "--ntasks-per-node=1".into(),
        // Every task ends when one fails: an agent that dies takes its step with it.
        "--kill-on-bad-exit=1".into(),
    ]);
    w
}

/// A Slurm host list expanded: `n[1-3,07],login` is n1, n2, n3, n07, login; several bracket
/// groups in one name multiply (`r[1-2]n[1-2]`). `None` when it does not parse.
///
/// ```
/// let h = charmrun::slurm::expand("n[1-3,07],login").unwrap();
/// assert_eq!(h, ["n1", "n2", "n3", "n07", "login"]);
/// ```
pub fn expand(list: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.extend(expand_one(&list[start..i])?);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
    }
    if depth != 0 {
        return None;
    }
    out.extend(expand_one(&list[start..])?);
    Some(out)
}

/// One name, with any bracket groups expanded.
fn expand_one(name: &str) -> Option<Vec<String>> {
    let name = name.trim();
    if name.is_empty() {
        return Some(Vec::new());
    }
    let Some(open) = name.find('[') else {
        return (!name.contains(']')).then(|| vec![name.to_string()]);
    };
    let close = open + name[open..].find(']')?;
    let (head, ranges, rest) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let tails = expand_one(rest)?;
    let tails = if tails.is_empty() {
        vec![String::new()]
    } else {
        tails
    };
    let mut out = Vec::new();
    for r in ranges.split(',') {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let width = lo.len();
        let (a, b): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
        if b < a || b - a > 1 << 20 {
            return None;
        }
        for n in a..=b {
            for t in &tails {
                out.push(format!("{head}{n:0width$}{t}"));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_as_slurm_writes_them() {
        assert_eq!(expand("a").unwrap(), ["a"]);
        assert_eq!(expand("a,b").unwrap(), ["a", "b"]);
        assert_eq!(expand("n[01-03]").unwrap(), ["n01", "n02", "n03"]);
        assert_eq!(
            expand("r[1-2]n[1-2],x").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2", "x"]
        );
        assert_eq!(expand("n[9-10]").unwrap(), ["n9", "n10"]);
    }

    #[test]
    fn malformed_host_lists_are_refused() {
        for bad in ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]"] {
            assert_eq!(expand(bad), None, "{bad}");
        }
    }

    #[test]
    fn srun_starts_one_task_per_host() {
        let w = srun_words(&["srun".into()], 3);
        assert_eq!(
            w,
            [
                "srun",
                "--nodes=3",
                "--ntasks=3",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1"
            ]
        );
    }
}
