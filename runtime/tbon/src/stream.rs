//! Streams: logical channels between the front-end and the back-ends of a communicator, each
//! with an id and its filters — the same on every process (homogeneous) or placed per rank
//! (heterogeneous, MRNet's `"filter => rank; ..."` strings).
//!
//! Ids: a back-end's rank is the id of its *singlecast* stream (unfiltered, to and from that
//! back-end only, there without being created); streams a front-end creates are numbered from
//! [`FIRST_USER_STREAM`].

use crate::error::TbonError;
use crate::filter::{FilterId, BUILTIN_NAMES, TFILTER_NULL};
use crate::sync::SyncMode;
use crate::topology::Rank;

/// The id of the first stream a front-end creates; lower ids are back-ends' singlecast streams.
pub const FIRST_USER_STREAM: u32 = 1 << 24;

/// A stream, as a handle: use it with the [`Network`](crate::Network) that made or received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stream {
    pub(crate) id: u32,
}

impl Stream {
    /// A handle for stream `id`; calls with it fail with [`TbonError::NoStream`] where no
    /// such stream is known ([`Network::stream`](crate::Network::stream) checks first).
    pub fn from_id(id: u32) -> Stream {
        Stream { id }
    }

    /// Its id.
    pub fn id(self) -> u32 {
        self.id
    }

    /// Whether it is a back-end's singlecast stream.
    pub fn is_singlecast(self) -> bool {
        self.id < FIRST_USER_STREAM
    }
}

/// Which of a stream's filters a call means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterType {
    /// The upstream synchronization filter (`FILTER_UPSTREAM_SYNC`).
    UpstreamSync,
    /// The upstream transformation filter (`FILTER_UPSTREAM_TRANS`).
    UpstreamTrans,
    /// The downstream transformation filter (`FILTER_DOWNSTREAM_TRANS`).
    DownstreamTrans,
}

impl FilterType {
    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Option<FilterType> {
        Some(match v {
            0 => FilterType::UpstreamSync,
            1 => FilterType::UpstreamTrans,
            2 => FilterType::DownstreamTrans,
            _ => return None,
        })
    }
}

/// Which filter (or sync mode, by its id) each rank uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assign {
    /// What ranks not named use.
    pub default: u32,
    /// Ranks named one by one.
    pub ranks: Vec<(Rank, u32)>,
}

impl Assign {
    /// The same `id` everywhere.
    pub fn all(id: u32) -> Assign {
        Assign {
            default: id,
            ranks: Vec::new(),
        }
    }

    /// What rank `r` uses.
    pub fn get(&self, r: Rank) -> u32 {
        self.ranks
            .iter()
            .find(|x| x.0 == r)
            .map_or(self.default, |x| x.1)
    }

    /// Parse `"id => rank; id => rank; id => *;"`: `*` means every rank not named; ranks not
    /// named use `default`. An id is a number or a name `lookup` knows.
    ///
    /// # Errors
    /// [`TbonError::Placement`] naming the part that does not parse, a name not known, or a
    /// rank given two filters.
    pub fn parse(
        text: &str,
        default: u32,
        lookup: &dyn Fn(&str) -> Option<u32>,
    ) -> Result<Assign, TbonError> {
        let err = |reason: String| TbonError::Placement {
            text: text.to_owned(),
            reason,
        };
        let mut a = Assign::all(default);
        let mut star = false;
        // Ranks named so far: a long string is checked in linear time.
        let mut named = std::collections::HashSet::new();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (f, r) = part
                .split_once("=>")
                .ok_or_else(|| err(format!("'{part}' is not 'filter => rank'")))?;
            let (f, r) = (f.trim(), r.trim());
            let id =
                f.parse::<u32>().ok().or_else(|| lookup(f)).ok_or_else(|| {
                    err(format!("'{f}' is not a filter id or a known filter name"))
                })?;
            if r == "*" {
                if star {
                    return Err(err("'*' is given twice".into()));
                }
                star = true;
                a.default = id;
                continue;
            }
            let rank = r
                .parse::<Rank>()
                .map_err(|_| err(format!("'{r}' is not a rank or '*'")))?;
            if !named.insert(rank) {
                return Err(err(format!("rank {rank} is given two filters")));
            }
            a.ranks.push((rank, id));
        }
        Ok(a)
    }
}

/// A stream's filters: upstream transformation, upstream synchronization, downstream
/// transformation, each for every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Upstream transformation filter ids.
    pub up: Assign,
    /// Upstream synchronization modes ([`SyncMode::id`]).
    pub sync: Assign,
    /// Downstream transformation filter ids.
    pub down: Assign,
}

impl StreamSpec {
    /// The same filters on every process (MRNet's homogeneous `new_Stream`).
    pub fn homogeneous(up: FilterId, sync: SyncMode, down: FilterId) -> StreamSpec {
        StreamSpec {
            up: Assign::all(up),
            sync: Assign::all(sync.id()),
            down: Assign::all(down),
        }
    }

    /// Filters placed per rank (MRNet's heterogeneous `new_Stream`): each string is
    /// `"filter => rank; ..."`, with `*` for all ranks not named; unnamed ranks get the
    /// defaults (the null filter, wait-for-all). Filters are ids or names (`sum`, a loaded
    /// filter's name); sync modes are `waitforall`, `dontwait`, `timeout` or their ids, or a
    /// synchronization filter of the program's, by name (see
    /// [`Network::new_stream_sync`](crate::Network::new_stream_sync)).
    ///
    /// # Errors
    /// [`TbonError::Placement`] for a string that does not parse.
    pub fn heterogeneous(
        up: &str,
        sync: &str,
        down: &str,
        filter_named: &dyn Fn(&str) -> Option<FilterId>,
    ) -> Result<StreamSpec, TbonError> {
        // A built-in mode, or a synchronization filter of the program's, by name.
        let sync_named = |n: &str| {
            SyncMode::from_name(n)
                .map(SyncMode::id)
                .or_else(|| filter_named(n).filter(|&id| id >= crate::filter::FIRST_USER_FILTER))
        };
        Ok(StreamSpec {
            up: Assign::parse(up, TFILTER_NULL, filter_named)?,
            sync: Assign::parse(sync, SyncMode::WaitForAll.id(), &sync_named)?,
            down: Assign::parse(down, TFILTER_NULL, filter_named)?,
        })
    }
}

/// The id of a built-in filter named `name` (`null`, `sum`, `min`, `max`, `avg`, `concat`,
/// with or without MRNet's `TFILTER_` prefix, any case).
pub fn builtin_named(name: &str) -> Option<FilterId> {
    let n = name.to_ascii_lowercase();
    let n = n.strip_prefix("tfilter_").unwrap_or(&n);
    let n = if n == "array_concat" { "concat" } else { n };
    BUILTIN_NAMES
        .iter()
        .position(|b| *b == n)
        .map(|i| i as FilterId)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{TFILTER_ARRAY_CONCAT, TFILTER_SUM};

    #[test]
    fn placement_strings() {
        let s = StreamSpec::heterogeneous(
            "sum => 16777217; concat => *;",
            "dontwait => 3",
            "",
            &builtin_named,
        )
        .expect("spec");
        assert_eq!(s.up.get(16777217), TFILTER_SUM);
        assert_eq!(s.up.get(0), TFILTER_ARRAY_CONCAT);
        assert_eq!(s.sync.get(3), SyncMode::DontWait.id());
        assert_eq!(s.sync.get(4), SyncMode::WaitForAll.id());
        assert_eq!(s.down.get(9), TFILTER_NULL);
        for bad in [
            "sum",
            "sum => x",
            "nope => 1",
            "1 => 2; 3 => 2",
            "1 => *; 2 => *",
        ] {
            let e = Assign::parse(bad, 0, &builtin_named)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("bad filter placement \"{bad}\"")),
                "{e}"
            );
        }
        assert_eq!(
            builtin_named("TFILTER_ARRAY_CONCAT"),
            Some(TFILTER_ARRAY_CONCAT)
        );
        assert_eq!(builtin_named("Sum"), Some(TFILTER_SUM));
    }

    #[test]
    fn a_long_placement_string_is_checked_in_linear_time() {
        // 200,000 ranks, the last named twice: the old search of every rank so far for each
        // one was quadratic (minutes here).
        let n = 200_000;
        let mut text: String = (0..n).map(|r| format!("sum => {r};")).collect();
        let a = Assign::parse(&text, 0, &builtin_named).expect("placement");
        assert_eq!(a.ranks.len(), n);
        assert_eq!(a.ranks[n - 1], ((n - 1) as Rank, TFILTER_SUM));
        text.push_str("min => 199999;");
        let e = Assign::parse(&text, 0, &builtin_named).unwrap_err();
        assert!(
            e.to_string().ends_with("rank 199999 is given two filters"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_placement_string_parses_or_is_refused_without_a_panic(
            s in "(sum|min|[0-9]{1,11}|=>|\\*|;| |é){0,20}|\\PC{0,40}"
        ) {
            let _ = Assign::parse(&s, 0, &builtin_named);
        }
    }
}
