//! "Did you mean": the known word closest to a mistyped one, for the errors that refuse an
//! unknown layer, setting, runtime argument or launcher option.

/// The candidate closest to `word` by edit distance (insertions, deletions, substitutions and
/// swaps of two neighbours), if one is close enough to be what was meant: at most one edit
/// for a word of up to four characters, two up to eight, three beyond. Ties go to the first.
///
/// ```
/// use converse_machine::suggest::closest;
/// assert_eq!(closest("tpc", ["local", "tcp", "udp"]), Some("tcp"));
/// assert_eq!(closest("sched.spinus", ["sched.spin_us", "sched.batch"]), Some("sched.spin_us"));
/// assert_eq!(closest("banana", ["tcp", "udp"]), None);
/// ```
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = match word.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = distance(word, c);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// " (did you mean X?)" for [`closest`], or nothing.
pub fn hint<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates).map_or_else(String::new, |c| format!(" (did you mean {c}?)"))
}

/// Optimal string alignment distance between `a` and `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for swaps), one back, this one.
    let mut two = vec![0; b.len() + 1];
    let mut one: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (one[j] + 1).min(cur[j - 1] + 1).min(one[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(two[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut two, &mut one);
        std::mem::swap(&mut one, &mut cur);
    }
    one[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_and_swaps_count_one_each() {
        assert_eq!(distance("tcp", "tcp"), 0);
        assert_eq!(distance("tpc", "tcp"), 1);
        assert_eq!(distance("++pnn", "++ppn"), 1);
        assert_eq!(distance("udp", "tcp"), 2);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(closest("udpp", ["udp", "tcp"]), Some("udp"));
        assert_eq!(closest("x", ["tcp"]), None);
        assert_eq!(hint("tcpp", ["tcp"]), " (did you mean tcp?)");
        assert_eq!(hint("zzzz", ["tcp"]), "");
    }
}
