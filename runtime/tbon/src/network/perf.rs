//! Performance data: enabling and disabling its collection on the processes of the tree, and
//! collecting it at the front-end.

use super::Network;
use crate::error::TbonError;
use crate::perf::{check_pair, Aggregate, Context, Metric, RankPerfData};
use crate::protocol::Req;
use crate::stream::Stream;
use std::collections::BTreeMap;

impl<'p> Network<'p> {
    fn perf_scope(&self, s: Option<&Stream>) -> Result<Option<u32>, TbonError> {
        self.front_end("performance data")?;
        match s {
            Some(s) if !self.node.borrow().streams.contains_key(&s.id) => {
                Err(TbonError::NoStream(s.id))
            }
            Some(s) => Ok(Some(s.id)),
            None => Ok(None),
        }
    }

    /// Start recording `metric` in `context` on a stream (`None`: every stream), everywhere.
    ///
    /// # Errors
    /// [`TbonError::PerfContext`] for a pair the guide's Table 2 does not allow.
    pub fn enable_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        self.set_perf(s, metric, context, true)
    }

    /// Stop recording (what was recorded stays, to be collected).
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn disable_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        self.set_perf(s, metric, context, false)
    }

    fn set_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        ctx: Context,
        on: bool,
    ) -> Result<(), TbonError> {
        check_pair(metric, ctx)?;
        let scope = self.perf_scope(s)?;
        self.request(scope, Req::PerfSet { metric, ctx, on })
            .map(|_| ())
    }

    /// Collect what a stream's processes recorded of `metric` in `context` (and reset it):
    /// each rank's value ([`Aggregate::Concat`]) or one aggregated value under the key
    /// `-(number of ranks)`.
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn collect_perf(
        &mut self,
        s: &Stream,
        metric: Metric,
        context: Context,
        how: Aggregate,
    ) -> Result<RankPerfData, TbonError> {
        check_pair(metric, context)?;
        let scope = self.perf_scope(Some(s))?;
        let out = self.request(
            scope,
            Req::PerfCollect {
                metric,
                ctx: context,
                how,
            },
        )?;
        Ok(out.report.finish(out.how))
    }

    /// Collect what every stream's processes recorded of `metric` in `context` (and reset
    /// it), keyed by stream id (MRNet's `Network::collect_PerformanceData`): for each stream
    /// the front-end has open, what [`collect_perf`](Network::collect_perf) gives. Back-ends'
    /// singlecast streams are included once used.
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf); the first stream whose collection fails
    /// (a stream that failed, [`TbonError::StreamFailed`]) ends the call.
    pub fn collect_perf_all(
        &mut self,
        metric: Metric,
        context: Context,
        how: Aggregate,
    ) -> Result<BTreeMap<u32, RankPerfData>, TbonError> {
        check_pair(metric, context)?;
        self.front_end("performance data")?;
        // Sorted, so that the requests (one per stream) go out in a fixed order.
        let mut ids: Vec<u32> = self.node.borrow().streams.keys().copied().collect();
        ids.sort_unstable();
        let mut out = BTreeMap::new();
        for id in ids {
            let s = Stream::from_id(id);
            match self.collect_perf(&s, metric, context, how) {
                Ok(data) => {
                    out.insert(id, data);
                }
                // Closed by a failure handled while an earlier stream's request waited.
                Err(TbonError::NoStream(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Have every process of a stream (`None`: of every stream) print what it recorded of
    /// `metric` in `context` to its standard error, and reset it.
    ///
    /// # Errors
    /// As [`enable_perf`](Network::enable_perf).
    pub fn print_perf(
        &mut self,
        s: Option<&Stream>,
        metric: Metric,
        context: Context,
    ) -> Result<(), TbonError> {
        check_pair(metric, context)?;
        let scope = self.perf_scope(s)?;
        self.request(
            scope,
            Req::PerfPrint {
                metric,
                ctx: context,
            },
        )
        .map(|_| ())
    }
}
