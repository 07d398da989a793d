//! From building blocks to stage instances, channels and PEs.
//!
//! Compiling a [`Block`] gives every sequential stage (source, stage, emitter, worker,
//! collector) an *instance* with an id, its input channels (the instances that send to it) and
//! its output *router*: a small tree saying how an item it emits picks the next instance —
//! one successor, a farm's workers in turn or on demand, an all-to-all's right workers by the
//! routing function. A farm without an emitter or an all-to-all's left side therefore costs
//! no extra hop: the instance before it does the choosing.
//!
//! Placement puts each instance on a PE: in turn over all PEs, or by a [`Groups`] file. A
//! channel between two groups is *internal* when both ends are at one level of the outermost
//! pipeline (a building block split horizontally, such as an all-to-all whose workers are in
//! two groups) and *external* otherwise (a vertical split), as the FastFlow thesis names them.

use crate::block::{Block, Kind, MakeNode, MakeSource, Policy, Route};
use crate::error::FlowError;
use crate::groups::Groups;
use crate::wire::{MAX_COUNT, MAX_INSTANCES};
use std::collections::BTreeMap;

/// Items a channel holds at most when the flow says nothing ([`Flow::window`](crate::Flow::window)).
pub const DEFAULT_WINDOW: u32 = 512;
/// Bytes a channel holds at most when the flow says nothing
/// ([`Flow::window_bytes`](crate::Flow::window_bytes)); an item larger than half of this
/// goes only while less than half is in flight.
pub const DEFAULT_WINDOW_BYTES: u64 = 1 << 20;
/// Items an on-demand channel holds at most (so a slow worker is given little).
pub const ON_DEMAND_WINDOW: u32 = 2;

pub(crate) enum Factory {
    Source(MakeSource),
    Node(MakeNode),
}

/// Where an item entering a block goes, in instance ids.
#[derive(Clone)]
enum Entry {
    One(u16),
    Choose {
        kids: Vec<Entry>,
        policy: Policy,
        ordered: bool,
    },
    Route {
        kids: Vec<Entry>,
        f: Route,
    },
}

impl Entry {
    fn leaves(&self, on_demand: bool, out: &mut Vec<(u16, bool)>) {
        match self {
            Entry::One(id) => out.push((*id, on_demand)),
            Entry::Choose { kids, policy, .. } => {
                for k in kids {
                    k.leaves(on_demand || *policy == Policy::OnDemand, out)
                }
            }
            Entry::Route { kids, .. } => {
                for k in kids {
                    k.leaves(on_demand, out)
                }
            }
        }
    }

    /// Whether an ordered farm's choice sits below the top of this tree (nothing would number
    /// its items).
    fn nested_ordered(&self, top: bool) -> bool {
        match self {
            Entry::One(_) => false,
            Entry::Choose { kids, ordered, .. } => {
                (*ordered && !top) || kids.iter().any(|k| k.nested_ordered(false))
            }
            Entry::Route { kids, .. } => kids.iter().any(|k| k.nested_ordered(false)),
        }
    }

    /// The same tree over output slots (`slot_of` maps an instance to its slot).
    fn to_router(&self, slot_of: &dyn Fn(u16) -> u32) -> Router {
        match self {
            Entry::One(id) => Router::One(slot_of(*id)),
            Entry::Choose { kids, policy, .. } => Router::Choose {
                kids: kids.iter().map(|k| k.to_router(slot_of)).collect(),
                policy: *policy,
                next: 0,
            },
            Entry::Route { kids, f } => Router::Route {
                kids: kids.iter().map(|k| k.to_router(slot_of)).collect(),
                f: f.clone(),
            },
        }
    }
}

/// An instance's choice of output slot for each item it emits.
pub(crate) enum Router {
    One(u32),
    Choose {
        kids: Vec<Router>,
        policy: Policy,
        next: usize,
    },
    Route {
        kids: Vec<Router>,
        f: Route,
    },
}

impl Router {
    /// Room below this router: the most any one path can take now.
    fn room(&self, credit: &[u32]) -> u32 {
        match self {
            Router::One(s) => credit[*s as usize],
            Router::Choose { kids, .. } | Router::Route { kids, .. } => {
                kids.iter().map(|k| k.room(credit)).max().unwrap_or(0)
            }
        }
    }

    /// The slot for an item of these bytes; `None` when an on-demand choice finds no room
    /// anywhere (the item waits and chooses again).
    pub(crate) fn pick(&mut self, bytes: &[u8], credit: &[u32]) -> Option<u32> {
        match self {
            Router::One(s) => Some(*s),
            Router::Choose { kids, policy, next } => match policy {
                Policy::OnDemand => {
                    let (best, room) = kids
                        .iter()
                        .enumerate()
                        .map(|(i, k)| (i, k.room(credit)))
                        // Ties go to the first after the last chosen, so equal workers share.
                        .max_by_key(|&(i, r)| {
                            (r, usize::MAX - (i + kids.len() - *next) % kids.len())
                        })?;
                    if room == 0 {
                        return None;
                    }
                    *next = (best + 1) % kids.len();
                    kids[best].pick(bytes, credit)
                }
                _ => {
                    let k = *next;
                    *next = (k + 1) % kids.len();
                    kids[k].pick(bytes, credit)
                }
            },
            Router::Route { kids, f } => {
                let n = kids.len();
                let k = f(bytes, n) % n;
                kids[k].pick(bytes, credit)
            }
        }
    }
}

/// Whether a stage makes the stream or takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Source,
    Stage,
}

/// One stage instance, as every PE knows it.
pub(crate) struct Inst {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// Position in the outermost pipeline.
    pub(crate) level: usize,
    pub(crate) pe: usize,
    pub(crate) group: Option<usize>,
    /// Input channels: `(source instance, window)`, sorted by instance.
    pub(crate) ins: Vec<(u16, u32)>,
    /// Output channels: `(destination instance, window)`, in slot order.
    pub(crate) outs: Vec<(u16, u32)>,
    entry_out: Option<Entry>,
    /// It numbers the items it sends into an ordered farm.
    pub(crate) stamps: bool,
    /// It is an ordered farm's collector: it takes items in their numbers' order.
    pub(crate) reorders: bool,
}

impl Inst {
    pub(crate) fn router(&self) -> Option<Router> {
        let outs = &self.outs;
        self.entry_out
            .as_ref()
            .map(|e| e.to_router(&|id| outs.iter().position(|&(d, _)| d == id).unwrap_or(0) as u32))
    }
}

/// A compiled, placed flow: the same on every PE.
pub struct Plan {
    pub(crate) insts: Vec<Inst>,
    pub(crate) group_names: Vec<String>,
    pub(crate) num_pes: usize,
    /// Each group's address, when each group is a job of its own.
    pub(crate) group_addrs: Vec<Option<String>>,
    /// This job's group, when each group is a job of its own.
    pub(crate) my_group: Option<usize>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("stages", &self.insts.len())
            .field("groups", &self.group_names)
            .finish_non_exhaustive()
    }
}

/// Whether a channel between groups stays at one pipeline level or crosses levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Connection {
    /// Both ends at one level of the outermost pipeline: a block split horizontally.
    Internal,
    /// Ends at different levels: a vertical split.
    External,
}

/// Channels between one group and another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLink {
    /// The sending group.
    pub from: String,
    /// The receiving group.
    pub to: String,
    /// Internal or external.
    pub kind: Connection,
    /// Stage-to-stage channels of this kind between them.
    pub channels: usize,
}

/// A stage as placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageInfo {
    /// Its name (a replicated worker's with its index, as `square[2]`).
    pub name: String,
    /// The PE it runs on.
    pub pe: usize,
    /// Its group, when the flow was split.
    pub group: Option<String>,
    /// Its position in the outermost pipeline.
    pub level: usize,
    /// The stages it sends to.
    pub to: Vec<String>,
    /// It is the flow's source.
    pub source: bool,
}

impl Plan {
    /// The stages, in instance order.
    pub fn stages(&self) -> Vec<StageInfo> {
        self.insts
            .iter()
            .map(|i| StageInfo {
                name: i.name.clone(),
                pe: i.pe,
                group: i.group.map(|g| self.group_names[g].clone()),
                level: i.level,
                to: i
                    .outs
                    .iter()
                    .map(|&(d, _)| self.insts[d as usize].name.clone())
                    .collect(),
                source: i.role == Role::Source,
            })
            .collect()
    }

    /// The channels that cross from one group to another, by kind.
    pub fn group_links(&self) -> Vec<GroupLink> {
        let mut m: BTreeMap<(usize, usize, Connection), usize> = BTreeMap::new();
        for a in &self.insts {
            for &(d, _) in &a.outs {
                let b = &self.insts[d as usize];
                if let (Some(ga), Some(gb)) = (a.group, b.group) {
                    if ga != gb {
                        let kind = if a.level == b.level {
                            Connection::Internal
                        } else {
                            Connection::External
                        };
                        *m.entry((ga, gb, kind)).or_default() += 1;
                    }
                }
            }
        }
        m.into_iter()
            .map(|((a, b, kind), channels)| GroupLink {
                from: self.group_names[a].clone(),
                to: self.group_names[b].clone(),
                kind,
                channels,
            })
            .collect()
    }

    /// A number that differs between plans of other stages, channels, windows or groups
    /// (FNV-1a over them): group jobs compare theirs when they connect.
    pub fn fingerprint(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        };
        for i in &self.insts {
            eat(i.name.as_bytes());
            eat(&[0xff, i.stamps as u8, i.reorders as u8]);
            eat(&(i.group.map_or(u64::MAX, |g| g as u64)).to_le_bytes());
            for &(d, w) in &i.outs {
                eat(&d.to_le_bytes());
                eat(&w.to_le_bytes());
            }
        }
        for n in &self.group_names {
            eat(n.as_bytes());
            eat(&[0xfe]);
        }
        h
    }

    /// A few lines a person reads: every stage with its PE and group, then the group links.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for i in self.stages() {
            s.push_str(&format!(
                "stage {} on PE {}{} -> {}\n",
                i.name,
                i.pe,
                i.group.map(|g| format!(" (group {g})")).unwrap_or_default(),
                if i.to.is_empty() {
                    "(end)".to_owned()
                } else {
                    i.to.join(", ")
                }
            ));
        }
        for l in self.group_links() {
            s.push_str(&format!(
                "{} -> {}: {} {} channel{}\n",
                l.from,
                l.to,
                l.channels,
                match l.kind {
                    Connection::Internal => "internal",
                    Connection::External => "external",
                },
                if l.channels == 1 { "" } else { "s" }
            ));
        }
        s
    }
}

struct Compiler {
    insts: Vec<Inst>,
    factories: Vec<Option<Factory>>,
    window: u32,
    auto: usize,
}

/// What a compiled block looks like from outside.
struct Part {
    /// Where items entering it go (`None`: it begins with a source and takes no input).
    entry: Option<Entry>,
    /// The instances whose items leave it.
    exits: Vec<u16>,
    /// Only stages in a line (what an ordered farm's worker may be).
    sequential: bool,
}

/// Compile `block` and place it on `num_pes` PEs (in turn, or by `groups`; `node_pes(n)` gives
/// node `n`'s PEs, `None` for a node the job does not have).
pub(crate) fn compile(
    block: Block,
    window: u32,
    num_pes: usize,
    groups: Option<&Groups>,
    me: Option<&str>,
    node_pes: &dyn Fn(usize) -> Option<std::ops::Range<usize>>,
) -> Result<(Plan, Vec<Option<Factory>>), FlowError> {
    let mut c = Compiler {
        insts: Vec::new(),
        factories: Vec::new(),
        window: window.clamp(1, MAX_COUNT),
        auto: 0,
    };
    let top = match block.kind {
        Kind::Pipe(v) => v,
        other => vec![Block { kind: other }],
    };
    let mut prev: Option<Part> = None;
    for (level, b) in top.into_iter().enumerate() {
        let part = c.block(b, "", level)?;
        match prev {
            None => {
                if part.entry.is_some() {
                    return Err(shape("a flow begins with a source (converse_flow::source)"));
                }
            }
            Some(p) => c.connect(&p.exits, part.entry.as_ref())?,
        }
        prev = Some(part);
    }
    if prev.is_none() {
        return Err(shape("the flow has no stages"));
    }
    let mut seen = BTreeMap::new();
    for (i, inst) in c.insts.iter().enumerate() {
        if let Some(j) = seen.insert(inst.name.clone(), i) {
            let _ = j;
            return Err(shape(&format!(
                "two stages are named '{}' (names place stages in groups: make them differ)",
                inst.name
            )));
        }
    }
    let mut plan = Plan {
        insts: c.insts,
        group_names: Vec::new(),
        num_pes,
        group_addrs: Vec::new(),
        my_group: None,
    };
    crate::placement::place(&mut plan, groups, me, node_pes)?;
    Ok((plan, c.factories))
}

pub(crate) fn shape(s: &str) -> FlowError {
    FlowError::Shape(s.to_owned())
}

impl Compiler {
    fn add(
        &mut self,
        name: String,
        role: Role,
        level: usize,
        f: Factory,
    ) -> Result<u16, FlowError> {
        if self.insts.len() >= MAX_INSTANCES {
            return Err(shape(&format!(
                "more than {MAX_INSTANCES} stages (instance ids are 16 bits)"
            )));
        }
        self.insts.push(Inst {
            name,
            role,
            level,
            pe: 0,
            group: None,
            ins: Vec::new(),
            outs: Vec::new(),
            entry_out: None,
            stamps: false,
            reorders: false,
        });
        self.factories.push(Some(f));
        Ok((self.insts.len() - 1) as u16)
    }

    fn block(&mut self, b: Block, suffix: &str, level: usize) -> Result<Part, FlowError> {
        match b.kind {
            Kind::Source { name, make } => {
                let id = self.add(
                    format!("{name}{suffix}"),
                    Role::Source,
                    level,
                    Factory::Source(make),
                )?;
                Ok(Part {
                    entry: None,
                    exits: vec![id],
                    sequential: false,
                })
            }
            Kind::Stage { name, make } => {
                let id = self.add(
                    format!("{name}{suffix}"),
                    Role::Stage,
                    level,
                    Factory::Node(make),
                )?;
                Ok(Part {
                    entry: Some(Entry::One(id)),
                    exits: vec![id],
                    sequential: true,
                })
            }
            Kind::Pipe(v) => {
                if v.is_empty() {
                    return Err(shape("an empty pipeline"));
                }
                let mut first: Option<Part> = None;
                let mut last: Option<Part> = None;
                for b in v {
                    let part = self.block(b, suffix, level)?;
                    if let Some(p) = &last {
                        self.connect(&p.exits, part.entry.as_ref())?;
                    }
                    match &mut first {
                        None => first = Some(part_head(&part)),
                        Some(f) => f.sequential &= part.sequential,
                    }
                    last = Some(part);
                }
                let (Some(first), Some(last)) = (first, last) else {
                    return Err(shape("an empty pipeline"));
                };
                Ok(Part {
                    entry: first.entry,
                    exits: last.exits,
                    sequential: first.sequential && last.sequential,
                })
            }
            Kind::Farm {
                emitter,
                workers,
                collector,
                policy,
                ordered,
            } => {
                if workers.is_empty() {
                    return Err(shape("a farm without workers"));
                }
                let emitter = match emitter {
                    Some(e) => Some(self.block(*e, suffix, level)?),
                    None => None,
                };
                let mut ws = Vec::new();
                for (i, w) in workers.into_iter().enumerate() {
                    let part = self.block(w, &format!("{suffix}[{i}]"), level)?;
                    if ordered && !part.sequential {
                        return Err(shape(
                            "an ordered farm's workers must be stages or pipelines of stages",
                        ));
                    }
                    ws.push(part);
                }
                let mut kids = Vec::new();
                for w in &ws {
                    kids.push(w.entry.clone().ok_or_else(|| {
                        shape("a source can only be the first stage of the flow")
                    })?);
                }
                let workers_entry = Entry::Choose {
                    kids,
                    policy,
                    ordered,
                };
                let entry = match &emitter {
                    Some(e) => {
                        self.connect(&e.exits, Some(&workers_entry))?;
                        e.entry.clone()
                    }
                    None => Some(workers_entry),
                };
                let collector = match collector {
                    Some(c) => Some(self.block(*c, suffix, level)?),
                    None if ordered => {
                        self.auto += 1;
                        let name = format!("collector{}", self.auto);
                        Some(self.block(
                            crate::block::map(&name, |item, ctx| ctx.emit_item(item)),
                            suffix,
                            level,
                        )?)
                    }
                    None => None,
                };
                let exits = match &collector {
                    Some(c) => {
                        let ce = c.entry.clone().ok_or_else(|| {
                            shape("a source can only be the first stage of the flow")
                        })?;
                        if ordered {
                            let Entry::One(cid) = ce else {
                                return Err(shape(
                                    "an ordered farm's collector must be a single stage",
                                ));
                            };
                            self.insts[cid as usize].reorders = true;
                        }
                        for w in &ws {
                            self.connect(&w.exits, Some(&ce))?;
                        }
                        c.exits.clone()
                    }
                    None => ws.iter().flat_map(|w| w.exits.iter().copied()).collect(),
                };
                Ok(Part {
                    entry,
                    exits,
                    sequential: false,
                })
            }
            Kind::A2a {
                left,
                right,
                route,
                policy,
            } => {
                if left.is_empty() || right.is_empty() {
                    return Err(shape("an all-to-all needs left and right workers"));
                }
                let mut ls = Vec::new();
                for (i, b) in left.into_iter().enumerate() {
                    ls.push(self.block(b, &format!("{suffix}[{i}]"), level)?);
                }
                let mut rs = Vec::new();
                for (j, b) in right.into_iter().enumerate() {
                    rs.push(self.block(b, &format!("{suffix}[{j}]"), level)?);
                }
                let src = || shape("a source can only be the first stage of the flow");
                let right_entry = Entry::Route {
                    kids: rs
                        .iter()
                        .map(|r| r.entry.clone().ok_or_else(src))
                        .collect::<Result<_, _>>()?,
                    f: route,
                };
                for l in &ls {
                    self.connect(&l.exits, Some(&right_entry))?;
                }
                Ok(Part {
                    entry: Some(Entry::Choose {
                        kids: ls
                            .iter()
                            .map(|l| l.entry.clone().ok_or_else(src))
                            .collect::<Result<_, _>>()?,
                        policy,
                        ordered: false,
                    }),
                    exits: rs.iter().flat_map(|r| r.exits.iter().copied()).collect(),
                    sequential: false,
                })
            }
        }
    }

    /// Every instance of `exits` sends into `entry`.
    fn connect(&mut self, exits: &[u16], entry: Option<&Entry>) -> Result<(), FlowError> {
        let Some(entry) = entry else {
            return Err(shape("a source can only be the first stage of the flow"));
        };
        let ordered = matches!(entry, Entry::Choose { ordered: true, .. });
        if entry.nested_ordered(true) {
            return Err(shape(
                "an ordered farm inside another farm or all-to-all needs an emitter",
            ));
        }
        if ordered && exits.len() != 1 {
            return Err(shape(
                "an ordered farm must follow a single stage (give it an emitter)",
            ));
        }
        let mut leaves = Vec::new();
        entry.leaves(false, &mut leaves);
        for &e in exits {
            let inst = &mut self.insts[e as usize];
            inst.entry_out = Some(entry.clone());
            inst.stamps = ordered;
            for &(d, on_demand) in &leaves {
                let w = if on_demand {
                    ON_DEMAND_WINDOW.min(self.window)
                } else {
                    self.window
                };
                self.insts[e as usize].outs.push((d, w));
                let ins = &mut self.insts[d as usize].ins;
                let at = ins.partition_point(|&(s, _)| s < e);
                ins.insert(at, (e, w));
            }
        }
        Ok(())
    }
}

fn part_head(p: &Part) -> Part {
    Part {
        entry: p.entry.clone(),
        exits: Vec::new(),
        sequential: p.sequential,
    }
}
