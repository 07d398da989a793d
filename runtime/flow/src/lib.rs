//! FastFlow's building blocks on a converse job: stream-parallel programs — pipelines, farms,
//! all-to-all — written once and run on one process or split into groups over many.
//!
//! A program composes [`Block`]s (a [`source`], [`stage`]s or [`map`]s, [`pipeline`]s,
//! [`Farm`]s, [`AllToAll`]s; they nest), hands them to a [`Flow`], and starts it on every PE.
//! The flow compiles the blocks into sequential *stage instances*, places them on PEs (in turn,
//! or by a [`Groups`] file that splits the program into groups), and runs them from the PEs'
//! schedulers: a large item is one runtime message, moved between PEs of one process by
//! pointer, small ones travel batched per channel; each channel holds a bounded number of
//! items and bytes, so a slow stage holds its producers back; end
//! of stream travels through every stage, and the job ends when the last stage has seen it.
//!
//! ```no_run
//! use converse_flow::{map, pipeline, source, Farm, Flow, Item};
//!
//! struct Count(u64, u64);
//! impl converse_flow::Source for Count {
//!     fn next(&mut self, ctx: &mut converse_flow::Ctx<'_>) -> bool {
//!         self.0 += 1;
//!         ctx.emit_u64(self.0);
//!         self.0 < self.1
//!     }
//! }
//!
//! converse::run(|pe| {
//!     let flow = pipeline([
//!         source("numbers", || Count(0, 1000)),
//!         Farm::new(4, |_| {
//!             map("square", |item: Item, ctx| {
//!                 let x = item.u64().unwrap_or(0);
//!                 ctx.emit_u64(x * x);
//!             })
//!         })
//!         .into(),
//!         converse_flow::stage("sum", || Sum(0)),
//!     ]);
//!     Flow::new(flow).start(pe).expect("a well-formed flow");
//! });
//!
//! struct Sum(u64);
//! impl converse_flow::Node for Sum {
//!     fn svc(&mut self, item: Item, _ctx: &mut converse_flow::Ctx<'_>) {
//!         self.0 += item.u64().unwrap_or(0);
//!     }
//!     fn end(&mut self, _ctx: &mut converse_flow::Ctx<'_>) {
//!         println!("sum of squares: {}", self.0);
//!     }
//! }
//! ```
//!
//! **From FastFlow.**
//!
//! | FastFlow | here |
//! |---|---|
//! | `ff_node_t<In, Out>`, `svc`, `svc_init`, `svc_end` | [`Node`]: [`svc`](Node::svc), [`start`](Node::start), [`end`](Node::end); items are bytes ([`Item`]) |
//! | first node, `svc(nullptr)` until `EOS` | [`Source::next`] until it returns `false` |
//! | `return task` / `ff_send_out(task)` | [`Ctx::emit_item`] (moves the buffer), [`Ctx::emit`] (copies bytes) |
//! | `return GO_ON` | emit nothing |
//! | `EOS`, `eosnotify` | end of stream: [`Node::end`] runs once every input has ended |
//! | `ff_Pipe` | [`pipeline`] |
//! | `ff_Farm`, `add_emitter`, `add_collector`, `remove_collector` | [`Farm::new`], [`Farm::emitter`], [`Farm::collector`] (none: the workers feed the next block) |
//! | `set_scheduling_ondemand` | [`Farm::on_demand`] |
//! | `ff_OFarm` | [`Farm::ordered`] |
//! | `ff_a2a`, `add_firstset`, `add_secondset`, `ff_send_out_to` | [`AllToAll::new`], [`AllToAll::route`] |
//! | queue bounds (`bounded` queues) | [`Flow::window`] |
//! | `createGroup("G1") << stage`, the JSON group file | a [`Groups`] file (`place G1 stage`) |
//! | `ff_dsender`, `ff_dreceiver`, `ff_rpc`, `ff_rpc_shutdown` | inserted where a split cuts a channel: inside one job, none (a channel between groups is a channel over the job's layer); between group jobs, each job's PE 0 sends and receives over an endpoint connection, and end of stream is an acknowledged call |
//! | the transport string (`ofi+tcp`, `na+sm`) | the layer (`+machine`) inside a job; the group's address scheme (`tcp://`, `si://`) between group jobs |
//! | `run_and_wait_end` | [`Flow::start`], then [`Flow::on_done`] on PE 0 |
//!
//! **Groups.** Splitting a program into groups is a placement: the same blocks, each stage
//! on its group's PEs. Two forms, by the [`Groups`] file:
//! - *PEs of one job*: a channel between groups crosses whatever the job's layer puts between
//!   those PEs (SI inside a host, TCP or UDP between hosts, the composites, MPI): the
//!   transport follows the layer choice (`+machine`).
//! - *jobs of their own*, started apart (each `group ... at ADDRESS`, each job told its group
//!   with [`Flow::as_group`] and given the flow's [`Secret`]): a channel between groups goes
//!   through the sending job's PE 0, an endpoint connection to the receiving job's address
//!   (`converse-endpoint`), and its PE 0; the address's scheme (`tcp://`, `si://`) is the
//!   transport, switched by a string. The jobs may start in any order, each within
//!   [`Flow::connect_timeout`] of the others; one that dies or never comes ends the others
//!   with [`FlowError::GroupLost`] or [`FlowError::Connect`]. The jobs check at connection
//!   that they run the same flow (its stages, channels and windows).
//!
//! [`Plan::describe`] and [`Plan::group_links`] say which channels are *internal* and which
//! *external* in the thesis's taxonomy; [`Plan::to_svg`] draws them.
//!
//! **Failures** (report mode): a node that dies holding unfinished stages, or holding the
//! producer of an input that had not ended, ends the flow with [`FlowError::Lost`] on PE 0
//! ([`Flow::on_error`]; by default printed and the job ends with code 1) instead of a hang.

mod block;
pub mod draw;
mod error;
mod exec;
mod gateway;
mod groups;
mod node;
mod output;
mod placement;
mod plan;
mod wire;

pub use block::{map, pipeline, source, stage, AllToAll, Block, Farm, Policy, Route};
pub use error::FlowError;
pub use groups::Groups;
pub use node::{Ctx, Item, Node, Source};
pub use output::BATCH_ITEM;
pub use plan::{
    Connection, GroupLink, Plan, StageInfo, DEFAULT_WINDOW, DEFAULT_WINDOW_BYTES, ON_DEMAND_WINDOW,
};

use converse::Pe;
pub use converse_endpoint::Secret;
use std::rc::Rc;
use std::time::Duration;

/// Handler names, registered by [`Flow::start`] on every PE.
const H_ITEM: &str = "converse-flow.item";
const H_CTL: &str = "converse-flow.ctl";
const H_BATCH: &str = "converse-flow.batch";
const H_GW_ITEM: &str = "converse-flow.gw-item";
const H_GW_CTL: &str = "converse-flow.gw-ctl";

/// A flow to start: the blocks, where they run, and what happens at the end.
pub struct Flow {
    block: Block,
    groups: Option<Groups>,
    window: u32,
    window_bytes: u64,
    on_done: Option<exec::Then>,
    on_error: Option<exec::OnError>,
    me: Option<String>,
    secret: Option<Secret>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("block", &self.block)
            .field("groups", &self.groups)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// A flow of these blocks (a pipeline whose first stage is a [`source`]).
    pub fn new(block: impl Into<Block>) -> Flow {
        Flow {
            block: block.into(),
            groups: None,
            window: DEFAULT_WINDOW,
            window_bytes: DEFAULT_WINDOW_BYTES,
            on_done: None,
            on_error: None,
            me: None,
            secret: None,
            connect_timeout: Duration::from_secs(30),
        }
    }

    /// This job is group `name` of a groups file whose groups are jobs of their own (every
    /// group has an address, `at`): it runs that group's stages and reaches the others by
    /// their addresses.
    pub fn as_group(mut self, name: &str) -> Flow {
        self.me = Some(name.to_owned());
        self
    }

    /// The secret the group jobs prove to each other (the same for every group: a file
    /// written once with [`Secret::write_file`] and read by each job). Needed when the groups
    /// are jobs of their own.
    pub fn secret(mut self, secret: Secret) -> Flow {
        self.secret = Some(secret);
        self
    }

    /// How long a group job waits for the groups it sends to to be listening (default 30 s:
    /// the jobs start in any order).
    pub fn connect_timeout(mut self, d: Duration) -> Flow {
        self.connect_timeout = d;
        self
    }

    /// Split into groups: each stage runs on its group's PEs.
    pub fn groups(mut self, g: Groups) -> Flow {
        self.groups = Some(g);
        self
    }

    /// Items a channel holds at most (default [`DEFAULT_WINDOW`]; on-demand channels hold at
    /// most [`ON_DEMAND_WINDOW`]).
    pub fn window(mut self, items: u32) -> Flow {
        self.window = items.max(1);
        self
    }

    /// Bytes a channel holds at most (default [`DEFAULT_WINDOW_BYTES`]; an item larger than
    /// half of it goes only while less than half is in flight). With
    /// [`window`](Self::window), what bounds a stage's memory.
    pub fn window_bytes(mut self, bytes: u64) -> Flow {
        self.window_bytes = bytes.max(1);
        self
    }

    /// Run `f` on PE 0 once every stage has finished (default: end the job with code 0).
    pub fn on_done(mut self, f: impl FnOnce(&mut Pe) + 'static) -> Flow {
        self.on_done = Some(Box::new(f));
        self
    }

    /// Run `f` on PE 0 if the flow cannot complete (report mode: a node with stages died).
    /// Default: print the error and end the job with code 1.
    pub fn on_error(mut self, f: impl FnOnce(&mut Pe, FlowError) + 'static) -> Flow {
        self.on_error = Some(Box::new(f));
        self
    }

    /// Compile, place and start the flow on this PE. Every PE calls it, with the same blocks
    /// and groups, in its start function (it registers handlers). One flow per job.
    ///
    /// # Errors
    /// [`FlowError::Shape`] for blocks that make no flow, [`FlowError::Placement`] for groups
    /// that do not fit them or the job: every PE gets the same error. Groups that are jobs of
    /// their own: [`FlowError::Connect`] on PE 0 when it cannot listen at its group's address
    /// or reach a group it sends to within [`connect_timeout`](Self::connect_timeout) (PE 0
    /// waits for them here).
    pub fn start(self, pe: &mut Pe) -> Result<Rc<Plan>, FlowError> {
        if pe.handler(H_ITEM).is_some() {
            return Err(FlowError::Shape("one flow per job".to_owned()));
        }
        // Registered before anything can fail, so every PE registers the same handlers.
        let cell: Rc<std::cell::RefCell<Option<Rc<std::cell::RefCell<exec::Shared>>>>> =
            Rc::default();
        let c = cell.clone();
        let item = pe.register(H_ITEM, move |pe, msg| {
            if let Some(sh) = c.borrow().as_ref() {
                exec::on_item(sh, pe, msg)
            }
        });
        let c = cell.clone();
        let ctl = pe.register(H_CTL, move |pe, msg| {
            if let Some(sh) = c.borrow().as_ref() {
                exec::on_ctl(sh, pe, msg)
            }
        });
        let c = cell.clone();
        let batch = pe.register(H_BATCH, move |pe, msg| {
            if let Some(sh) = c.borrow().as_ref() {
                exec::on_batch(sh, pe, msg)
            }
        });
        let c = cell.clone();
        let gw_item = pe.register(H_GW_ITEM, move |pe, msg| {
            if let Some(sh) = c.borrow().as_ref() {
                gateway::on_out(sh, pe, msg, false)
            }
        });
        let c = cell.clone();
        let gw_ctl = pe.register(H_GW_CTL, move |pe, msg| {
            if let Some(sh) = c.borrow().as_ref() {
                gateway::on_out(sh, pe, msg, true)
            }
        });
        let h = exec::Handlers {
            item,
            batch,
            ctl,
            gw_item,
            gw_ctl,
        };
        let c = cell.clone();
        pe.on_node_failure(move |pe, f| {
            if let Some(sh) = c.borrow().as_ref() {
                exec::on_failure(sh, pe, f)
            }
        });
        let jobs = self.groups.as_ref().is_some_and(Groups::separate_jobs);
        // Every PE of a group job attaches (a handler), though only PE 0 connects.
        let ep = jobs.then(|| converse_endpoint::Endpoints::attach(pe));
        if jobs && self.secret.is_none() {
            return Err(FlowError::Shape(
                "groups that are jobs of their own need a secret (Flow::secret)".to_owned(),
            ));
        }
        let nodes = pe.num_nodes();
        let firsts: Vec<(usize, usize)> = (0..nodes)
            .map(|n| {
                let end = if n + 1 < nodes {
                    pe.node_first_pe(n + 1)
                } else {
                    pe.num_pes()
                };
                (pe.node_first_pe(n), end)
            })
            .collect();
        let (plan, factories) = plan::compile(
            self.block,
            self.window,
            pe.num_pes(),
            self.groups.as_ref(),
            self.me.as_deref(),
            &|n| firsts.get(n).map(|&(a, b)| a..b),
        )?;
        let plan = Rc::new(plan);
        let shared = exec::start(
            pe,
            plan.clone(),
            factories,
            h,
            self.window_bytes,
            (self.on_done, self.on_error),
        );
        if let (Some(ep), Some(secret), 0) = (ep, &self.secret, pe.my_pe()) {
            gateway::open(
                pe,
                ep,
                h,
                &shared,
                secret,
                self.connect_timeout,
                self.window_bytes,
            )?;
        }
        *cell.borrow_mut() = Some(shared.clone());
        exec::begin(pe, &shared);
        Ok(plan)
    }
}
