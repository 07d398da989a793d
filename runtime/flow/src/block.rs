//! The building blocks: what a program composes, on every PE alike, before the flow is
//! compiled into stage instances and placed (`plan.rs`).
//!
//! A block is a source, a stage, a pipeline of blocks, a farm (emitter, workers, collector)
//! or an all-to-all (left and right workers, a routing function). Blocks nest: a farm's worker
//! may be a pipeline, a pipeline's stage may be a farm. Every PE builds the same blocks; only
//! the PE a stage is placed on calls its factory, so a stage's state need not be `Send`.

use crate::node::{Ctx, Item, Node, Source};
use std::rc::Rc;

pub(crate) type MakeNode = Box<dyn FnOnce() -> Box<dyn Node>>;
pub(crate) type MakeSource = Box<dyn FnOnce() -> Box<dyn Source>>;
/// An all-to-all's routing function: the item's bytes and the number of right workers in, a
/// right worker's index out (taken modulo their number).
pub type Route = Rc<dyn Fn(&[u8], usize) -> usize>;

/// How a farm (or an all-to-all's left side) hands items to its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// Worker after worker, in turn (FastFlow's default); an item waits for its worker's room.
    #[default]
    RoundRobin,
    /// To the worker with the most room, each channel holding at most two items (FastFlow's
    /// `set_scheduling_ondemand`): a slow worker gets fewer.
    OnDemand,
}

/// One building block; see the module.
pub struct Block {
    pub(crate) kind: Kind,
}

pub(crate) enum Kind {
    Source {
        name: String,
        make: MakeSource,
    },
    Stage {
        name: String,
        make: MakeNode,
    },
    Pipe(Vec<Block>),
    Farm {
        emitter: Option<Box<Block>>,
        workers: Vec<Block>,
        collector: Option<Box<Block>>,
        policy: Policy,
        ordered: bool,
    },
    A2a {
        left: Vec<Block>,
        right: Vec<Block>,
        route: Route,
        policy: Policy,
    },
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Source { name, .. } => write!(f, "source({name})"),
            Kind::Stage { name, .. } => write!(f, "stage({name})"),
            Kind::Pipe(v) => f.debug_list().entries(v).finish(),
            Kind::Farm {
                emitter,
                workers,
                collector,
                policy,
                ordered,
            } => f
                .debug_struct("Farm")
                .field("emitter", emitter)
                .field("workers", workers)
                .field("collector", collector)
                .field("policy", policy)
                .field("ordered", ordered)
                .finish(),
            Kind::A2a {
                left,
                right,
                policy,
                ..
            } => f
                .debug_struct("AllToAll")
                .field("left", left)
                .field("right", right)
                .field("policy", policy)
                .finish_non_exhaustive(),
        }
    }
}

/// The first stage of a flow: it makes the stream (FastFlow's first node, whose `svc` gets no
/// task). `make` runs once, on the PE the source is placed on.
pub fn source<S: Source + 'static>(name: &str, make: impl FnOnce() -> S + 'static) -> Block {
    Block {
        kind: Kind::Source {
            name: name.to_owned(),
            make: Box::new(move || Box::new(make())),
        },
    }
}

/// A stage (FastFlow's `ff_node_t`): takes items, emits zero or more for each. `make` runs
/// once, on the PE the stage is placed on.
pub fn stage<N: Node + 'static>(name: &str, make: impl FnOnce() -> N + 'static) -> Block {
    Block {
        kind: Kind::Stage {
            name: name.to_owned(),
            make: Box::new(move || Box::new(make())),
        },
    }
}

/// A stage from a closure: `f(item, ctx)` for every item (no start or end hooks).
///
/// ```
/// use converse_flow::map;
/// // Squares each number, in place: the item's buffer goes on.
/// let square = map("square", |mut item, ctx| {
///     let x = item.u64().unwrap_or(0);
///     item.bytes_mut().copy_from_slice(&(x * x).to_le_bytes());
///     ctx.emit_item(item);
/// });
/// # let _ = square;
/// ```
pub fn map(name: &str, f: impl FnMut(Item, &mut Ctx<'_>) + 'static) -> Block {
    struct MapNode<F>(F);
    impl<F: FnMut(Item, &mut Ctx<'_>)> Node for MapNode<F> {
        fn svc(&mut self, item: Item, ctx: &mut Ctx<'_>) {
            (self.0)(item, ctx)
        }
    }
    stage(name, move || MapNode(f))
}

/// A pipeline (FastFlow's `ff_Pipe`): each block's output is the next one's input.
pub fn pipeline(blocks: impl IntoIterator<Item = Block>) -> Block {
    Block {
        kind: Kind::Pipe(blocks.into_iter().collect()),
    }
}

/// A farm (FastFlow's `ff_Farm`): an optional emitter, `n` workers, an optional collector.
///
/// Without an emitter the block before the farm hands items to the workers itself; without a
/// collector the workers' items go straight to the block after the farm. An ordered farm
/// (FastFlow's `ff_OFarm`) delivers its items in the order they entered, and has a collector
/// (a pass-through one if none is given).
///
/// ```
/// use converse_flow::{map, Farm};
/// let farm = Farm::new(4, |_| map("work", |item, ctx| ctx.emit_item(item)))
///     .on_demand()
///     .ordered();
/// # let _ = converse_flow::Block::from(farm);
/// ```
#[derive(Debug)]
pub struct Farm {
    emitter: Option<Block>,
    workers: Vec<Block>,
    collector: Option<Block>,
    policy: Policy,
    ordered: bool,
}

impl Farm {
    /// A farm of `n` workers, worker `i` being `worker(i)`. The stages of worker `i` are named
    /// with `[i]` after their own names (`square` becomes `square[0]`, `square[1]`, ...).
    pub fn new(n: usize, worker: impl FnMut(usize) -> Block) -> Farm {
        Farm {
            emitter: None,
            workers: (0..n).map(worker).collect(),
            collector: None,
            policy: Policy::RoundRobin,
            ordered: false,
        }
    }

    /// The stage that takes the farm's input and hands items to workers.
    pub fn emitter(mut self, b: Block) -> Farm {
        self.emitter = Some(b);
        self
    }

    /// The stage that takes every worker's items.
    pub fn collector(mut self, b: Block) -> Farm {
        self.collector = Some(b);
        self
    }

    /// Workers in turn (the default).
    pub fn round_robin(mut self) -> Farm {
        self.policy = Policy::RoundRobin;
        self
    }

    /// To the worker with the most room.
    pub fn on_demand(mut self) -> Farm {
        self.policy = Policy::OnDemand;
        self
    }

    /// Items leave in the order they entered. Workers must then be stages or pipelines of
    /// stages (an item's descendants stay together, in order).
    pub fn ordered(mut self) -> Farm {
        self.ordered = true;
        self
    }
}

impl From<Farm> for Block {
    fn from(f: Farm) -> Block {
        Block {
            kind: Kind::Farm {
                emitter: f.emitter.map(Box::new),
                workers: f.workers,
                collector: f.collector.map(Box::new),
                policy: f.policy,
                ordered: f.ordered,
            },
        }
    }
}

/// An all-to-all (FastFlow's `ff_a2a`): items entering go to the left workers (in turn, or on
/// demand), every left worker's items go to the right worker the routing function names.
///
/// ```
/// use converse_flow::{map, AllToAll};
/// let a2a = AllToAll::new(
///     2, |_| map("L", |item, ctx| ctx.emit_item(item)),
///     3, |_| map("R", |item, ctx| ctx.emit_item(item)),
/// )
/// .route(|bytes, n| bytes.first().copied().unwrap_or(0) as usize % n);
/// # let _ = converse_flow::Block::from(a2a);
/// ```
pub struct AllToAll {
    left: Vec<Block>,
    right: Vec<Block>,
    route: Route,
    policy: Policy,
}

impl std::fmt::Debug for AllToAll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllToAll")
            .field("left", &self.left)
            .field("right", &self.right)
            .finish_non_exhaustive()
    }
}

impl AllToAll {
    /// `nl` left workers and `nr` right workers; items go right by a hash of their bytes until
    /// [`route`](Self::route) says otherwise. Stages of left worker `i` and right worker `j`
    /// are named with `[i]` and `[j]` after their own names.
    pub fn new(
        nl: usize,
        left: impl FnMut(usize) -> Block,
        nr: usize,
        right: impl FnMut(usize) -> Block,
    ) -> AllToAll {
        AllToAll {
            left: (0..nl).map(left).collect(),
            right: (0..nr).map(right).collect(),
            route: Rc::new(|bytes, n| {
                // FNV-1a: every PE computes the same index for the same bytes.
                let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                (h % n as u64) as usize
            }),
            policy: Policy::RoundRobin,
        }
    }

    /// The routing function: `f(bytes, right_workers)` names the right worker.
    pub fn route(mut self, f: impl Fn(&[u8], usize) -> usize + 'static) -> AllToAll {
        self.route = Rc::new(f);
        self
    }

    /// Items entering go to the left worker with the most room.
    pub fn on_demand(mut self) -> AllToAll {
        self.policy = Policy::OnDemand;
        self
    }
}

impl From<AllToAll> for Block {
    fn from(a: AllToAll) -> Block {
        Block {
            kind: Kind::A2a {
                left: a.left,
                right: a.right,
                route: a.route,
                policy: a.policy,
            },
        }
    }
}
