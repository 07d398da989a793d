//! Performance data: enabling and disabling its collection on the processes of the tree, and
//! collecting it at the front-end.

use super::Network;
use crate::error::TbonError;
use crate::perf::{check_pair, Aggregate, Context, Metric, RankPerfData};
use crate::protocol::Req;
use crate::stream::Stream;

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
