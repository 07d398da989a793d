//! Transformation filters (the guide's section 2.4 and Appendix D): what a process does with a
//! wave of packets before passing the result on.
//!
//! A filter has the guide's shape: packets in; packets out (on in the stream's direction);
//! packets out in reverse (back the way they came); per-stream state it keeps between waves;
//! configuration parameters the front-end sets ([`Network::set_filter_params`]); and the local
//! process's place in the tree. The guide passes these as six arguments; here they are the
//! fields of one [`FilterContext`], so every filter, built in, compiled in or loaded, has the
//! same one-argument shape. See [`Filter`].
//!
//! Built in: [`TFILTER_NULL`] (pass everything on), [`TFILTER_SUM`], [`TFILTER_MIN`],
//! [`TFILTER_MAX`] (element-wise over every number of packets of one numeric format),
//! [`TFILTER_AVG`] (the same, divided by the number of back-ends contributing, at the root;
//! below the root the packet carries the sum and its weight, so an average of averages of
//! unequal subtrees is still exact), and [`TFILTER_ARRAY_CONCAT`] (`n` scalars or arrays of one
//! type in, one array out). They are written in `builtin.rs`.
//!
//! [`Network::set_filter_params`]: crate::Network::set_filter_params

use crate::format::Format;
use crate::packet::Packet;
use crate::topology::Rank;
use std::any::Any;

/// A filter's number, as streams name it.
pub type FilterId = u32;

/// Passes every packet on unchanged.
pub const TFILTER_NULL: FilterId = 0;
/// Element-wise sum.
pub const TFILTER_SUM: FilterId = 1;
/// Element-wise minimum.
pub const TFILTER_MIN: FilterId = 2;
/// Element-wise maximum.
pub const TFILTER_MAX: FilterId = 3;
/// Element-wise average over the back-ends that contributed.
pub const TFILTER_AVG: FilterId = 4;
/// Scalars (or arrays) of one type in, one array out.
pub const TFILTER_ARRAY_CONCAT: FilterId = 5;
/// The first id given to filters a program registers or loads.
pub const FIRST_USER_FILTER: FilterId = 100;

/// The built-in filters' names, by id.
pub const BUILTIN_NAMES: [&str; 6] = ["null", "sum", "min", "max", "avg", "concat"];

/// A filter's failure: the wave is dropped and the front-end learns why (an error event, and
/// an error from the stream's next receive).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

impl From<crate::packet::PacketError> for FilterError {
    fn from(e: crate::packet::PacketError) -> FilterError {
        FilterError(e.to_string())
    }
}

/// A filter's state for one stream on one process (the guide's `void **filter_state`): empty
/// until the filter puts something there.
pub type FilterState = Option<Box<dyn Any>>;

/// Where the process running a filter sits in the tree (the guide's `TopologyLocalInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyLocalInfo {
    /// This process's rank.
    pub rank: Rank,
    /// Its parent's rank (`None` at the front-end).
    pub parent: Option<Rank>,
    /// Ranks of its children.
    pub children: Vec<Rank>,
    /// Back-ends below it (on every stream, not only this one).
    pub num_backends_below: usize,
    /// Processes in the whole tree.
    pub num_nodes: usize,
    /// Back-ends in the whole tree.
    pub num_backends: usize,
    /// Its distance from the root.
    pub depth: u32,
}

impl Default for TopologyLocalInfo {
    /// A process outside the tree (a spare PE).
    fn default() -> TopologyLocalInfo {
        TopologyLocalInfo {
            rank: Rank::MAX,
            parent: None,
            children: Vec::new(),
            num_backends_below: 0,
            num_nodes: 0,
            num_backends: 0,
            depth: 0,
        }
    }
}

impl TopologyLocalInfo {
    /// Whether this process is the front-end.
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }
}

/// One run of a filter on one wave: what it reads, where its output goes, and what it may keep.
#[derive(Debug)]
pub struct FilterContext<'a> {
    /// The wave (never empty). The filter may take packets out of it.
    pub packets_in: &'a mut Vec<Packet>,
    /// What goes on in the stream's direction.
    pub packets_out: &'a mut Vec<Packet>,
    /// What goes back the way the wave came.
    pub packets_out_reverse: &'a mut Vec<Packet>,
    /// The filter's state for this stream on this process, kept between waves.
    pub state: &'a mut FilterState,
    /// The configuration parameters the front-end set, if any.
    pub params: Option<&'a Packet>,
    /// This process's place in the tree.
    pub info: &'a TopologyLocalInfo,
}

/// A transformation filter.
///
/// ```
/// use converse_tbon::{Filter, FilterContext, FilterError, Packet};
/// // Keeps a running count of packets seen on the stream, and sends the count on.
/// struct Count;
/// impl Filter for Count {
///     fn run(&self, cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
///         let seen = cx.state.get_or_insert_with(|| Box::new(0u64));
///         let seen = seen.downcast_mut::<u64>().ok_or(FilterError("state".into()))?;
///         *seen += cx.packets_in.len() as u64;
///         let first = &cx.packets_in[0];
///         let count = Packet::new(first.stream_id(), first.tag(), "%uld", *seen)?;
///         cx.packets_out.push(count);
///         Ok(())
///     }
/// }
/// ```
pub trait Filter {
    /// The format the filter takes (the guide's `<name>_format_string`); `None` for any
    /// format. Packets of another format are refused before the filter runs.
    fn format(&self) -> Option<&Format> {
        None
    }

    /// Transform one wave: read `cx.packets_in` (a wave is never empty), put what goes on in
    /// `cx.packets_out` and what goes back in `cx.packets_out_reverse`.
    ///
    /// # Errors
    /// [`FilterError`]: the wave is dropped and the front-end told why.
    fn run(&self, cx: &mut FilterContext<'_>) -> Result<(), FilterError>;

    /// Release `state` when its stream closes (for filters whose state is not Rust-owned).
    fn drop_state(&self, state: &mut FilterState) {
        *state = None;
    }

    /// Export `state` (of stream `stream_id`) for failure recovery: the guide's
    /// `<name>_get_state`. `None` (the default): nothing to hand on.
    ///
    /// When an internal process dies, each of its children (its orphans) where this filter
    /// has run on the stream calls this (again after every later re-parenting), and sends
    /// what it returns to its new parent. There the filter runs on it as a wave of its own —
    /// outside the stream's synchronization, so the waves stay aligned, and after every batch
    /// that child sent before it, so nothing older overwrites it — and what that gives goes
    /// on up the same way; at the front-end it is received like any packet. The packet must
    /// therefore be one the filter takes as input. A filter whose state sums up the stream's
    /// history (a running total, a histogram, a minimum) makes the front-end's aggregate
    /// whole again: what the dead process had taken in and not passed on is in its orphans'
    /// states. Such a filter keeps what it owes each child apart (its latest total, say),
    /// keyed by [`Packet::src_rank`], and forgets children no longer in
    /// [`TopologyLocalInfo::children`]: the dead one's part is then replaced, not counted
    /// twice. See `RunningSum` in the overlay's `examples/tbon_filters.rs`.
    fn get_state(&self, state: &FilterState, stream_id: u32) -> Option<Packet> {
        let _ = (state, stream_id);
        None
    }

    /// Whether this filter exports its state ([`get_state`](Filter::get_state)); `false` by
    /// default. Such a filter also takes in what arrives of a wave lost in a failure, or
    /// failed below: the wave's marker goes on in its place, then what the filter gives for
    /// it, as exported state does. Its state so holds everything that reached this process,
    /// not only the whole waves, and the front-end receives what came of it.
    fn exports_state(&self) -> bool {
        false
    }
}

/// The signature of a filter written as a plain function or closure.
pub type FilterFn = dyn Fn(&mut FilterContext<'_>) -> Result<(), FilterError>;

/// A filter made of a function and the format it takes.
pub struct FnFilter {
    pub(crate) format: Option<Format>,
    pub(crate) f: Box<FilterFn>,
    pub(crate) get_state: Option<Box<GetStateFn>>,
}

/// The signature of [`Filter::get_state`] written as a function or closure.
pub type GetStateFn = dyn Fn(&FilterState, u32) -> Option<Packet>;

// By hand: it holds closures and the overlay's state, which have no useful text form.
impl std::fmt::Debug for FnFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnFilter")
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl FnFilter {
    /// A filter running `f` on packets of `format` (`""`: any format).
    ///
    /// # Errors
    /// [`FilterError`] when `format` does not parse.
    pub fn new(
        format: &str,
        f: impl Fn(&mut FilterContext<'_>) -> Result<(), FilterError> + 'static,
    ) -> Result<FnFilter, FilterError> {
        let format = if format.trim().is_empty() {
            None
        } else {
            Some(Format::parse(format).map_err(|e| FilterError(e.to_string()))?)
        };
        Ok(FnFilter {
            format,
            f: Box::new(f),
            get_state: None,
        })
    }

    /// The same filter, exporting its state with `get_state` (see [`Filter::get_state`]).
    pub fn with_get_state(
        mut self,
        get_state: impl Fn(&FilterState, u32) -> Option<Packet> + 'static,
    ) -> FnFilter {
        self.get_state = Some(Box::new(get_state));
        self
    }
}

impl Filter for FnFilter {
    fn format(&self) -> Option<&Format> {
        self.format.as_ref()
    }

    fn run(&self, cx: &mut FilterContext<'_>) -> Result<(), FilterError> {
        (self.f)(cx)
    }

    fn get_state(&self, state: &FilterState, stream_id: u32) -> Option<Packet> {
        self.get_state.as_ref().and_then(|g| g(state, stream_id))
    }

    fn exports_state(&self) -> bool {
        self.get_state.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_filter_exports_its_state_only_when_given_a_way_to() {
        let count = |cx: &mut FilterContext<'_>| -> Result<(), FilterError> {
            *cx.state = Some(Box::new(cx.packets_in.len() as u64));
            Ok(())
        };
        let plain = FnFilter::new("", count).map_err(|e| e.0);
        let plain = plain.unwrap_or_else(|e| panic!("{e}"));
        assert!(!plain.exports_state());
        let state: FilterState = Some(Box::new(7u64));
        assert!(plain.get_state(&state, 9).is_none());
        let exporting = plain.with_get_state(|state, stream| {
            let n = state.as_ref()?.downcast_ref::<u64>()?;
            Packet::new(stream, 100, "%uld", *n).ok()
        });
        assert!(exporting.exports_state());
        let p = exporting.get_state(&state, 9);
        let p = p.unwrap_or_else(|| panic!("no state exported"));
        assert_eq!((p.stream_id(), p.unpack::<u64>("%uld").ok()), (9, Some(7)));
        assert!(exporting.get_state(&None, 9).is_none());
    }
}
