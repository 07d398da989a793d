//! Running a placed flow on each PE: the channels' credits, end of stream, the ordered farm's
//! numbering and reordering, and the coordinator on PE 0 that sees the flow finish.
//!
//! **Bounded channels.** Each channel (one instance to another) holds at most its window of
//! items and its window of bytes (or half of it and one larger item): a producer spends a
//! credit per item and the consumer gives credits and bytes back, in batches of half a
//! window, as it *takes* the items (hands them to `svc`). What a stage
//! emits beyond its credits waits in its own queue, and while anything waits there the stage
//! takes no new input: its inputs' credits stop coming back, so its producers stop too, up to
//! the source. A stage's memory is thus its input windows plus what one `svc` call emits; a
//! slow stage holds the whole line back instead of letting it grow.
//!
//! **End of stream** travels as a control message on each channel after its last item (FIFO
//! per PE pair, both at priority 0). A stage ends when every input has ended and everything it
//! holds is taken: it runs `end`, flushes, sends end of stream on every output and tells PE 0.
//! PE 0 runs the flow's `on_done` once every stage has told it.
//!
//! **Ordered farms.** The stage before the farm numbers each item it sends in; a worker's
//! items carry the number of the input they come from, the last one flagged (or, when an
//! input gives nothing, a *skip* marker flagged last); the collector takes numbers in order,
//! holding early ones. Credits for held items come back only when they are taken, which bounds
//! the hold and cannot deadlock: the worker owing the lowest missing number has nothing held.

use crate::error::FlowError;
use crate::node::{Ctx, Item, Node, Payload, Source};
pub(crate) use crate::output::{Dest, Handlers, Output};
use crate::plan::{Factory, Plan};
use crate::wire;
use converse::{Message, Pe};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

/// Calls of a source's `next` per `produce` message before it yields to other messages.
const BURST: usize = 16;
/// The `arg0` destination of a message for PE 0's coordinator rather than a stage.
const COORDINATOR: u16 = u16::MAX;

enum Arrival {
    Item(u32, Payload),
    End,
}

/// A stage's inputs.
struct Input {
    /// Per slot: source instance, where it is, the channel's window; sorted by instance.
    from: Vec<(u16, Dest, u32)>,
    taken: Vec<u32>,
    taken_bytes: Vec<u64>,
    byte_window: u64,
    ended: Vec<bool>,
    open: usize,
    /// What arrived and was not taken yet: at most the windows' worth.
    pending: VecDeque<Arrival>,
    reorder: Option<Reorder>,
}

impl Input {
    fn slot(&self, src: u16) -> Option<u32> {
        self.from
            .binary_search_by_key(&src, |f| f.0)
            .ok()
            .map(|i| i as u32)
    }

    /// One item of `slot` taken: give credits back in batches of half the window.
    fn took(&mut self, pe: &mut Pe, me: u16, h: Handlers, slot: u32, len: usize) {
        let s = slot as usize;
        self.taken[s] += 1;
        self.taken_bytes[s] += len as u64;
        let (src, to, w) = self.from[s];
        if self.taken[s] >= (w / 2).max(1) || self.taken_bytes[s] >= self.byte_window / 2 {
            // One small message per half window: the price of a bounded channel.
            let mut m = Message::from_payload(&self.taken_bytes[s].to_le_bytes()).with_priority(-1);
            m.set_arg0(wire::addr(src, me));
            m.set_arg1(wire::ctl(wire::CREDIT, self.taken[s]));
            self.taken[s] = 0;
            self.taken_bytes[s] = 0;
            h.send(pe, to, true, m);
        }
    }
}

/// An ordered farm collector's hold of early items.
struct Reorder {
    next: u32,
    early: HashMap<u32, VecDeque<(u32, Payload)>>,
}

impl Reorder {
    fn pop_ready(&mut self) -> Option<(u32, Payload)> {
        let q = self.early.get_mut(&self.next)?;
        let (slot, msg) = q.pop_front()?;
        if q.is_empty() {
            self.early.remove(&self.next);
        }
        if wire::stamp_of(msg.word()).is_some_and(|s| s.last) {
            self.next = (self.next + 1) & wire::SEQ_MASK;
        }
        Some((slot, msg))
    }
}

enum Body {
    Node(Box<dyn Node>),
    Source(Box<dyn Source>),
}

/// A stage instance placed on this PE.
pub(crate) struct Local {
    id: u16,
    name: String,
    body: Body,
    out: Output,
    input: Input,
    h: Handlers,
    ended: bool,
    finished: bool,
    produce_pending: bool,
}

impl Local {
    fn ctl(&self, pe: &mut Pe, to: Dest, dst: u16, kind: u32, count: u32) {
        let mut m = Message::new(0);
        m.set_arg0(wire::addr(dst, self.id));
        m.set_arg1(wire::ctl(kind, count));
        self.h.send(pe, to, true, m);
    }

    fn svc(&mut self, pe: &mut Pe, item: Item) {
        if let Body::Node(n) = &mut self.body {
            let mut ctx = Ctx {
                pe,
                out: &mut self.out,
                name: &self.name,
            };
            n.svc(item, &mut ctx);
        }
    }

    fn deliver(&mut self, pe: &mut Pe, slot: u32, p: Payload) {
        self.input.took(pe, self.id, self.h, slot, p.bytes().len());
        let st = wire::stamp_of(p.word());
        let skip = st.is_some_and(|s| s.skip);
        if self.input.reorder.is_some() {
            if !skip {
                self.svc(pe, Item { p });
            }
            return;
        }
        self.out.cur = st;
        if !skip {
            self.svc(pe, Item { p });
        }
        self.out.close_input(pe);
    }

    fn pump(&mut self, pe: &mut Pe) {
        loop {
            if self.out.blocked() {
                break;
            }
            if let Some((slot, msg)) = self.input.reorder.as_mut().and_then(Reorder::pop_ready) {
                self.deliver(pe, slot, msg);
                continue;
            }
            match self.input.pending.pop_front() {
                None => break,
                Some(Arrival::End) => self.input.open = self.input.open.saturating_sub(1),
                Some(Arrival::Item(slot, msg)) => {
                    if let (Some(r), Some(st)) =
                        (self.input.reorder.as_mut(), wire::stamp_of(msg.word()))
                    {
                        if st.seq != r.next {
                            r.early.entry(st.seq).or_default().push_back((slot, msg));
                            continue;
                        }
                        if st.last {
                            r.next = (r.next + 1) & wire::SEQ_MASK;
                        }
                    }
                    self.deliver(pe, slot, msg);
                }
            }
        }
        if !self.ended
            && self.input.open == 0
            && self.input.pending.is_empty()
            && self
                .input
                .reorder
                .as_ref()
                .is_none_or(|r| r.early.is_empty())
            && !self.out.blocked()
        {
            self.ended = true;
            if let Body::Node(n) = &mut self.body {
                let mut ctx = Ctx {
                    pe,
                    out: &mut self.out,
                    name: &self.name,
                };
                n.end(&mut ctx);
            }
        }
        self.try_finish(pe);
    }

    fn produce(&mut self, pe: &mut Pe) {
        if let Body::Source(src) = &mut self.body {
            let mut n = 0;
            while !self.ended && !self.out.blocked() && n < BURST {
                let mut ctx = Ctx {
                    pe,
                    out: &mut self.out,
                    name: &self.name,
                };
                if !src.next(&mut ctx) {
                    self.ended = true;
                }
                n += 1;
            }
        }
        if self.ended {
            self.try_finish(pe);
        } else {
            self.out.flush_batches(pe);
            if !self.out.blocked() {
                self.schedule_produce(pe);
            }
        }
    }

    fn schedule_produce(&mut self, pe: &mut Pe) {
        if !self.produce_pending {
            self.produce_pending = true;
            let me = pe.my_pe();
            self.ctl(pe, Dest::Pe(me), self.id, wire::PRODUCE, 0);
        }
    }

    fn credit(&mut self, pe: &mut Pe, from: u16, n: u32, bytes: u64) {
        if let Some(s) = self.out.dst.iter().position(|d| d.0 == from) {
            self.out.credit[s] = self.out.credit[s].saturating_add(n);
            self.out.bytes_out[s] = self.out.bytes_out[s].saturating_sub(bytes);
        }
        if self.out.flush(pe) {
            match self.body {
                Body::Source(_) if !self.ended => self.schedule_produce(pe),
                Body::Source(_) => self.try_finish(pe),
                Body::Node(_) => self.pump(pe),
            }
        }
        self.out.flush_batches(pe);
    }

    fn try_finish(&mut self, pe: &mut Pe) {
        // Every handler of a stage ends here or flushes itself: batches go when it returns.
        self.out.flush_batches(pe);
        if self.ended && !self.finished && !self.out.blocked() {
            self.finished = true;
            if self.out.dropped > 0 {
                converse::input::error_line(&format!(
                    "converse-flow: stage {} is the last; the {} item(s) it emitted went nowhere",
                    self.name, self.out.dropped
                ));
            }
            for i in 0..self.out.dst.len() {
                let (d, to) = self.out.dst[i];
                self.ctl(pe, to, d, wire::END, 0);
            }
            self.ctl(pe, Dest::Pe(0), COORDINATOR, wire::FINISHED, 0);
        }
    }
}

/// A PE's part of the flow.
pub(crate) struct Shared {
    pub(crate) plan: Rc<Plan>,
    local: Vec<Option<Local>>,
    /// PE 0: which stages have finished, and how many have not.
    finished: Vec<bool>,
    left: usize,
    failed: bool,
    completed: bool,
    reasons: HashMap<usize, String>,
    /// PE 0, each group a job of its own: the sender and receiver stages.
    pub(crate) gw: Option<crate::gateway::Gateway>,
    /// PE 0: stages whose input from a node had not ended, told before the node's death.
    reports: HashMap<usize, Vec<usize>>,
    pe_nodes: Vec<usize>,
    on_done: Option<Then>,
    on_error: Option<OnError>,
}

/// What runs on PE 0 at the end: `on_done`.
pub(crate) type Then = Box<dyn FnOnce(&mut Pe)>;
/// What runs on PE 0 when the flow cannot complete.
pub(crate) type OnError = Box<dyn FnOnce(&mut Pe, FlowError)>;
pub(crate) type Callbacks = (Option<Then>, Option<OnError>);

/// Build this PE's stages (started by [`begin`]).
pub(crate) fn start(
    pe: &mut Pe,
    plan: Rc<Plan>,
    factories: Vec<Option<Factory>>,
    h: Handlers,
    byte_window: u64,
    (on_done, on_error): Callbacks,
) -> Rc<RefCell<Shared>> {
    let me = pe.my_pe();
    let mine = |g: Option<usize>| plan.my_group.is_none() || g == plan.my_group;
    let dest = |i: u16| {
        let inst = &plan.insts[i as usize];
        match inst.group {
            Some(g) if !mine(Some(g)) => Dest::Group(g),
            _ => Dest::Pe(inst.pe),
        }
    };
    let mut local: Vec<Option<Local>> = Vec::with_capacity(plan.insts.len());
    for (id, (inst, f)) in plan.insts.iter().zip(factories).enumerate() {
        if inst.pe != me || !mine(inst.group) {
            local.push(None);
            continue;
        }
        let body = match f {
            Some(Factory::Node(make)) => Body::Node(make()),
            Some(Factory::Source(make)) => Body::Source(make()),
            None => {
                local.push(None);
                continue;
            }
        };
        let from: Vec<(u16, Dest, u32)> = inst.ins.iter().map(|&(s, w)| (s, dest(s), w)).collect();
        let n_in = from.len();
        local.push(Some(Local {
            id: id as u16,
            name: inst.name.clone(),
            body,
            out: Output {
                me: id as u16,
                h,
                dst: inst.outs.iter().map(|&(d, _)| (d, dest(d))).collect(),
                credit: inst.outs.iter().map(|&(_, w)| w).collect(),
                bytes_out: vec![0; inst.outs.len()],
                byte_window,
                router: inst.router(),
                queue: VecDeque::new(),
                stamps: inst.stamps,
                next_seq: 0,
                cur: None,
                held: None,
                dropped: 0,
                batch: inst.outs.iter().map(|_| None).collect(),
                dirty: Vec::new(),
            },
            input: Input {
                from,
                taken: vec![0; n_in],
                taken_bytes: vec![0; n_in],
                byte_window,
                ended: vec![false; n_in],
                open: n_in,
                pending: VecDeque::new(),
                reorder: inst.reorders.then(|| Reorder {
                    next: 0,
                    early: HashMap::new(),
                }),
            },
            h,
            ended: false,
            finished: false,
            produce_pending: false,
        }));
    }
    let n = plan.insts.len();
    let left = plan.insts.iter().filter(|i| mine(i.group)).count();
    Rc::new(RefCell::new(Shared {
        plan,
        local,
        finished: vec![false; if me == 0 { n } else { 0 }],
        left,
        completed: false,
        gw: None,
        failed: false,
        reasons: HashMap::new(),
        reports: HashMap::new(),
        pe_nodes: (0..pe.num_pes()).map(|p| pe.node_of(p)).collect(),
        on_done,
        on_error,
    }))
}

/// Start this PE's stages: their `start` hooks, and the sources' first call. After the
/// gateway (if any) is open, so nothing they send finds PE 0 without one.
pub(crate) fn begin(pe: &mut Pe, shared: &Rc<RefCell<Shared>>) {
    {
        let mut s = shared.borrow_mut();
        for l in s.local.iter_mut().flatten() {
            let mut ctx = Ctx {
                pe,
                out: &mut l.out,
                name: &l.name,
            };
            match &mut l.body {
                Body::Node(n) => n.start(&mut ctx),
                Body::Source(src) => src.start(&mut ctx),
            }
            l.out.flush_batches(pe);
            if matches!(l.body, Body::Source(_)) {
                l.schedule_produce(pe);
            }
        }
    }
}

/// Report mode: a node died. Every PE tells PE 0 of its stages whose input from that node
/// had not ended; PE 0 also looks for unfinished stages the node held. Either is the end of
/// the flow, reported once.
pub(crate) fn on_failure(sh: &RefCell<Shared>, pe: &mut Pe, f: &converse::NodeFailure) {
    let Ok(mut s) = sh.try_borrow_mut() else {
        reentered(pe)
    };
    s.reasons.insert(f.node, f.reason.clone());
    let mut reports = Vec::new();
    for l in s.local.iter().flatten() {
        if l.finished {
            continue;
        }
        for (slot, &(_, from, _)) in l.input.from.iter().enumerate() {
            if matches!(from, Dest::Pe(p) if f.pes.contains(&p)) && !l.input.ended[slot] {
                reports.push((l.id, l.h.ctl));
                break;
            }
        }
    }
    for (id, h_ctl) in reports {
        let mut m = Message::new(0);
        m.set_arg0(wire::addr(COORDINATOR, id));
        m.set_arg1(wire::ctl(wire::FAILED, f.node as u32));
        pe.send_msg(0, h_ctl, m);
    }
    if pe.my_pe() != 0 {
        return;
    }
    let plan = s.plan.clone();
    let mine = |i: usize| plan.my_group.is_none() || plan.insts[i].group == plan.my_group;
    let lost: Vec<usize> = (0..plan.insts.len())
        .filter(|&i| mine(i) && f.pes.contains(&plan.insts[i].pe) && !s.finished[i])
        .collect();
    let reported = s.reports.remove(&f.node).unwrap_or_default();
    if lost.is_empty() && reported.is_empty() {
        return;
    }
    let mut dependents: Vec<usize> = (0..plan.insts.len())
        .filter(|&i| {
            let inst = &plan.insts[i];
            mine(i)
                && !f.pes.contains(&inst.pe)
                && !s.finished[i]
                && inst
                    .ins
                    .iter()
                    .chain(inst.outs.iter())
                    .any(|&(o, _)| lost.contains(&(o as usize)))
        })
        .collect();
    for r in reported {
        if !dependents.contains(&r) {
            dependents.push(r);
        }
    }
    dependents.sort_unstable();
    let then = s.fail(pe, f.node, lost, dependents);
    drop(s);
    if let Some(then) = then {
        then(pe);
    }
}

fn reentered(pe: &mut Pe) -> ! {
    pe.abort(
        "converse-flow: a stage ran the scheduler from inside svc (a barrier?); \
         stages must return to it",
    )
}

/// The stage an item or a batch is for, and its input slot for the sender. Within a job these
/// come only from this flow's own stages: anything else is a defect, and ends the job.
fn receiver<'s>(s: &'s mut Shared, pe: &mut Pe, a: u32, what: &str) -> (&'s mut Local, u32) {
    let (dst, src) = (wire::dst_of(a), wire::src_of(a));
    let Some(Some(l)) = s.local.get_mut(dst as usize) else {
        let me = pe.my_pe();
        pe.abort(&format!(
            "converse-flow: {what} for stage {dst}, which is not on PE {me}"
        ))
    };
    let Some(slot) = l.input.slot(src) else {
        let name = l.name.clone();
        pe.abort(&format!(
            "converse-flow: stage {name} got {what} from stage {src}, which does not send to it"
        ))
    };
    (l, slot)
}

pub(crate) fn on_item(sh: &RefCell<Shared>, pe: &mut Pe, msg: Message) {
    let Ok(mut s) = sh.try_borrow_mut() else {
        reentered(pe)
    };
    let (l, slot) = receiver(&mut s, pe, msg.arg0(), "an item");
    l.input
        .pending
        .push_back(Arrival::Item(slot, Payload::Whole(msg)));
    l.pump(pe);
}

/// A batch of small items for one stage: `[arg1 u32][length u32][bytes]` each; every item
/// keeps the batch alive until taken (no copy on the way in).
pub(crate) fn on_batch(sh: &RefCell<Shared>, pe: &mut Pe, msg: Message) {
    let Ok(mut s) = sh.try_borrow_mut() else {
        reentered(pe)
    };
    let (l, slot) = receiver(&mut s, pe, msg.arg0(), "a batch");
    let b = Rc::new(msg);
    let bytes = b.payload();
    let mut off = 0usize;
    while off < bytes.len() {
        let word = bytes
            .get(off..off + 4)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_le_bytes);
        let len = bytes
            .get(off + 4..off + 8)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_le_bytes);
        let (Some(word), Some(len)) = (word, len) else {
            pe.abort("converse-flow: a batch cut short")
        };
        let start = off + 8;
        if start + len as usize > bytes.len() {
            pe.abort("converse-flow: a batch cut short");
        }
        l.input.pending.push_back(Arrival::Item(
            slot,
            Payload::Part(b.clone(), start as u32, len, word),
        ));
        off = start + len as usize;
    }
    l.pump(pe);
}

pub(crate) fn on_ctl(sh: &RefCell<Shared>, pe: &mut Pe, msg: Message) {
    let Ok(mut s) = sh.try_borrow_mut() else {
        reentered(pe)
    };
    let (a, w) = (msg.arg0(), msg.arg1());
    let (dst, src) = (wire::dst_of(a), wire::src_of(a));
    let kind = wire::ctl_kind(w);
    if dst == COORDINATOR {
        let done = match kind {
            wire::FINISHED => s.stage_finished(src as usize),
            wire::FAILED => {
                // Told before PE 0 heard of the death itself: kept for then, so the error
                // names the node's stages and its reason.
                let node = wire::ctl_count(w) as usize;
                if s.reasons.contains_key(&node) {
                    s.fail(pe, node, Vec::new(), vec![src as usize])
                } else {
                    s.reports.entry(node).or_default().push(src as usize);
                    None
                }
            }
            _ => None,
        };
        drop(s);
        if let Some(f) = done {
            f(pe);
        }
        return;
    }
    let Some(Some(l)) = s.local.get_mut(dst as usize) else {
        let me = pe.my_pe();
        pe.abort(&format!(
            "converse-flow: a control word for stage {dst}, which is not on PE {me}"
        ))
    };
    match kind {
        wire::CREDIT => {
            let bytes = msg
                .payload()
                .try_into()
                .map(u64::from_le_bytes)
                .unwrap_or(0);
            l.credit(pe, src, wire::ctl_count(w), bytes)
        }
        wire::END => {
            // An end from no input, or a second one, is no channel's end: ignored, so it
            // cannot end the stage early.
            match l.input.slot(src) {
                Some(slot) if !l.input.ended[slot as usize] => {
                    l.input.ended[slot as usize] = true;
                    l.input.pending.push_back(Arrival::End);
                    l.pump(pe);
                }
                _ => {}
            }
        }
        wire::PRODUCE => {
            l.produce_pending = false;
            l.produce(pe);
        }
        _ => {}
    }
}

impl Shared {
    /// PE 0: a stage has finished; the flow's `on_done` when it was the last.
    fn stage_finished(&mut self, id: usize) -> Option<Then> {
        if id >= self.finished.len() || self.finished[id] {
            return None;
        }
        self.finished[id] = true;
        self.left = self.left.saturating_sub(1);
        self.done_if_complete()
    }

    /// PE 0: `on_done` once every stage of this job has finished and (each group a job of
    /// its own) every end of stream sent to another group has been acknowledged.
    pub(crate) fn done_if_complete(&mut self) -> Option<Then> {
        if self.left == 0
            && !self.failed
            && !self.completed
            && self.gw.as_ref().is_none_or(|g| g.all_acked())
        {
            self.completed = true;
            return Some(
                self.on_done
                    .take()
                    .unwrap_or_else(|| Box::new(|pe: &mut Pe| pe.exit(0))),
            );
        }
        None
    }

    /// PE 0: the flow cannot complete; what to run (once).
    pub(crate) fn fail(
        &mut self,
        _pe: &mut Pe,
        node: usize,
        mut lost: Vec<usize>,
        dependents: Vec<usize>,
    ) -> Option<Then> {
        if self.failed || self.completed {
            return None;
        }
        let names = |v: &[usize]| -> Vec<String> {
            v.iter()
                .filter_map(|&i| self.plan.insts.get(i).map(|x| x.name.clone()))
                .collect()
        };
        if lost.is_empty() {
            // A stage elsewhere lost its input from this node: name what was there.
            lost = (0..self.plan.insts.len())
                .filter(|&i| {
                    let p = self.plan.insts[i].pe;
                    let mine = self.plan.my_group.is_none()
                        || self.plan.insts[i].group == self.plan.my_group;
                    mine && dependents
                        .iter()
                        .any(|&d| self.plan.insts[d].ins.iter().any(|&(s, _)| s as usize == i))
                        && self.node_of_pe(p) == Some(node)
                })
                .collect();
        }
        let err = FlowError::Lost {
            node,
            reason: self
                .reasons
                .get(&node)
                .cloned()
                .unwrap_or_else(|| "out of the job".to_owned()),
            lost: names(&lost),
            dependents: names(&dependents),
        };
        self.fail_with(err)
    }

    /// PE 0: the flow cannot complete, for `err`; what to run (once).
    pub(crate) fn fail_with(&mut self, err: FlowError) -> Option<Then> {
        if self.failed || self.completed {
            return None;
        }
        self.failed = true;
        let cb = self.on_error.take();
        Some(Box::new(move |pe: &mut Pe| match cb {
            Some(cb) => cb(pe, err),
            None => {
                converse::input::error_line(&err.to_string());
                pe.exit(1)
            }
        }))
    }

    fn node_of_pe(&self, pe: usize) -> Option<usize> {
        self.pe_nodes.get(pe).copied()
    }
}
