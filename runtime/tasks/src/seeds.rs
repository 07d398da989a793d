//! Seeds: messages that may run on any PE, placed and moved by a balancer (Converse's
//! `CldEnqueue(CLD_ANYWHERE, ..)` and its seed balancers, Argobots' pools with stealing).
//!
//! A *seed* is a message for a program's handler that does not care where it runs: a piece of
//! a parallel search, a chunk of a loop. [`Seeds::enqueue`] gives it to the balancer the job
//! chose ([`Balancer`]); the balancer keeps it in this PE's *pool* or sends it to another
//! PE's, and may move pooled seeds later. A PE runs its pool's seeds one at a time, between its
//! other messages, in the order they reached the pool: one message to itself per seed (the
//! `run` row below) lets the scheduler interleave them with everything else, by priority.
//!
//! | balancer | where a seed goes when enqueued | what moves seeds later |
//! |---|---|---|
//! | [`Keep`](Balancer::Keep) | this PE's pool | nothing: static placement |
//! | [`Random`](Balancer::Random) | a PE drawn at random, this one included (`cldb.rand`; the generator is seeded from the PE's number, so a PE draws the same sequence each run) | nothing |
//! | [`Neighbor`](Balancer::Neighbor) | this PE's pool, or the least loaded hypercube neighbour's if that has at least 2 fewer (`cldb.neighbor`) | a PE told of a neighbour's load 3 or more below its own sends it half the difference |
//! | [`Steal`](Balancer::Steal) | this PE's pool | an idle PE asks its node's other PEs, then PEs drawn at random, for work (`cldb.workstealing`) |
//!
//! **Stealing.** A PE whose pool is empty, when its scheduler goes idle, asks one PE at a time
//! (its node's other PEs first, then others at random) until one gives it seeds or
//! [`ASK_AT_MOST`] have said no; then it *parks* — it asks no more, so an idle job stays idle
//! and quiescence can be detected. A PE that said no remembers who asked, and tells them
//! (`offer`) once its pool has seeds again; an idle PE that is offered asks the one that
//! offered, at once if parked, next if it waits for another's answer. A PE asked gives half its
//! pool, rounded down, from the back (the seeds it would run last), keeping the one it runs
//! next, so a lone seed is never passed back and forth; the asker runs them first to last. At
//! hundreds of PEs an idle PE thus sends at most [`ASK_AT_MOST`] requests before it parks, and
//! one more per offer it gets; a victim's list of askers is one bit per PE.
//!
//! **Neighbours** are the hypercube's: PE `p`'s are `p ^ 2^k` that exist, so every PE is
//! reached for any number of PEs. A PE tells its neighbours its pool's length when it changed
//! by at least 2 + a quarter of the larger value since it last told them: a steady pool sends
//! nothing, and the messages per seed stay bounded.
//!
//! **Every PE attaches with the same balancer** ([`Seeds::attach`] registers handlers, so
//! every PE calls it, at the same point of its registrations). A seed carries its payload and
//! priority; its `arg0`/`arg1` are not kept when it moves. Quiescence detection sees seeds:
//! a pool with seeds always has its `run` message in flight, and the balancers' own messages
//! end (a parked PE sends nothing).
//!
//! **Failures** (report mode): an asked PE that dies counts as a no; seeds given to a PE that
//! dies are lost with it, as messages to it are. A seed never runs twice.
//!
//! Messages (all `converse-tasks.seed-*`; payload little-endian):
//!
//! | message | handler | payload |
//! |---|---|---|
//! | run the next pooled seed | `seed-run` (to itself) | none |
//! | seeds given | `seed-give` | count u32, then per seed: handler u32, priority i32, source PE u32, length u32, payload |
//! | may I have work? | `seed-ask` | none |
//! | no | `seed-none` | none |
//! | I have work again | `seed-offer` | none |
//! | my pool's length | `seed-load` | u64 |
//!
//! A `seed-give` that does not parse is dropped whole with one line: it can only come from a
//! PE of this job, so it means a bug, and no part of it is run. A seed that names a handler
//! not the program's is dropped with one line when its turn comes ([`Pe::deliver`]).

use converse::{HandlerId, Message, NodeFailure, Pe};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// How many PEs an idle PE asks for work, one after another, before it parks.
pub const ASK_AT_MOST: usize = 8;

/// Where seeds go (see the [module docs](self) for each one's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Balancer {
    /// Every seed runs where it was enqueued: static placement.
    Keep,
    /// Every seed goes to a PE drawn at random.
    Random,
    /// Seeds diffuse to less loaded hypercube neighbours.
    Neighbor,
    /// Idle PEs steal from busy ones.
    Steal,
}

impl Balancer {
    /// Every balancer, in the order of [`name`](Self::name)'s list.
    pub const ALL: [Balancer; 4] = [
        Balancer::Keep,
        Balancer::Random,
        Balancer::Neighbor,
        Balancer::Steal,
    ];

    /// `keep`, `random`, `neighbor`, `steal`.
    pub fn name(self) -> &'static str {
        match self {
            Balancer::Keep => "keep",
            Balancer::Random => "random",
            Balancer::Neighbor => "neighbor",
            Balancer::Steal => "steal",
        }
    }
}

impl std::str::FromStr for Balancer {
    type Err = String;

    /// One of [`name`](Balancer::name)'s words.
    fn from_str(s: &str) -> Result<Balancer, String> {
        Balancer::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown balancer {s:?}: keep, random, neighbor or steal"))
    }
}

/// One PE's seed counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeedStats {
    /// Seeds enqueued on this PE.
    pub enqueued: u64,
    /// Seeds this PE ran.
    pub ran: u64,
    /// Seeds this PE sent to another PE's pool.
    pub given: u64,
    /// Seeds other PEs sent to this PE's pool.
    pub received: u64,
    /// Requests for work this PE sent ([`Balancer::Steal`]).
    pub asked: u64,
    /// Of those, the ones answered no.
    pub refused: u64,
}

#[derive(Clone, Copy)]
struct Handlers {
    run: HandlerId,
    give: HandlerId,
    ask: HandlerId,
    none: HandlerId,
    offer: HandlerId,
    load: HandlerId,
}

struct State {
    balancer: Balancer,
    h: Handlers,
    pool: VecDeque<Message>,
    /// Whether this PE's `seed-run` message is in flight (at most one at a time).
    run_queued: bool,
    rng: u64,
    stats: SeedStats,
    /// Steal: the PE asked and not answered yet.
    asking: Option<usize>,
    /// Steal: the PEs asked since this PE last got seeds.
    tried: Vec<usize>,
    /// Steal: enough said no; ask nobody until offered or given seeds.
    parked: bool,
    /// Steal: PEs that offered work while this one was waiting for another's answer; asked
    /// first.
    offered: Vec<usize>,
    /// Steal: who was told no and waits for an offer, one bit per PE.
    waiters: Vec<u64>,
    /// Neighbor: the neighbours, and their pools' lengths as last told (plus what was sent
    /// them since).
    nbrs: Vec<usize>,
    nbr_load: Vec<u64>,
    told_load: u64,
}

/// One PE's seeds: enqueue them, see their counters. A cheap handle (clone it into handlers).
#[derive(Clone)]
pub struct Seeds {
    st: Rc<RefCell<State>>,
}

impl std::fmt::Debug for Seeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.st.borrow();
        f.debug_struct("Seeds")
            .field("balancer", &st.balancer)
            .field("pooled", &st.pool.len())
            .finish_non_exhaustive()
    }
}

/// The hypercube neighbours of `me` among `n` PEs.
fn hypercube(me: usize, n: usize) -> Vec<usize> {
    (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(|&b| b < n.next_power_of_two().max(2))
        .map(|b| me ^ b)
        .filter(|&p| p < n && p != me)
        .collect()
}

/// Whether a pool that went from `old` to `new` seeds is worth telling the neighbours.
fn worth_telling(old: u64, new: u64) -> bool {
    old.abs_diff(new) >= 2 + old.max(new) / 4
}

impl Seeds {
    /// Set up seeds on this PE with `balancer`: registers this module's handlers
    /// (`converse-tasks.seed-*`) and an idle callback. Every PE calls it with the same
    /// balancer, at the same point of its registrations.
    ///
    /// ```no_run
    /// use converse_tasks::seeds::{Balancer, Seeds};
    /// converse::run(|pe| {
    ///     let seeds = Seeds::attach(pe, Balancer::Steal);
    ///     let piece = pe.register("piece", |pe, msg| {
    ///         // ... compute the piece named by msg.payload(), wherever it landed ...
    ///         let _ = (pe.my_pe(), msg);
    ///     });
    ///     if pe.my_pe() == 0 {
    ///         for i in 0..1000u32 {
    ///             seeds.enqueue(pe, piece, &i.to_le_bytes());
    ///         }
    ///     }
    /// });
    /// ```
    pub fn attach(pe: &mut Pe, balancer: Balancer) -> Seeds {
        let slot: Rc<RefCell<Option<Seeds>>> = Rc::new(RefCell::new(None));
        let with = |slot: &Rc<RefCell<Option<Seeds>>>, f: fn(&Seeds, &mut Pe, Message)| {
            let s = slot.clone();
            move |pe: &mut Pe, msg: Message| {
                let seeds = s.borrow().clone();
                if let Some(seeds) = seeds {
                    f(&seeds, pe, msg)
                }
            }
        };
        let h = Handlers {
            run: pe.register(
                "converse-tasks.seed-run",
                with(&slot, |s, pe, _| s.run_one(pe)),
            ),
            give: pe.register("converse-tasks.seed-give", with(&slot, Seeds::on_give)),
            ask: pe.register(
                "converse-tasks.seed-ask",
                with(&slot, |s, pe, m| s.on_ask(pe, m.src_pe() as usize)),
            ),
            none: pe.register(
                "converse-tasks.seed-none",
                with(&slot, |s, pe, m| s.on_none(pe, m.src_pe() as usize)),
            ),
            offer: pe.register(
                "converse-tasks.seed-offer",
                with(&slot, |s, pe, m| s.on_offer(pe, m.src_pe() as usize)),
            ),
            load: pe.register("converse-tasks.seed-load", with(&slot, Seeds::on_load)),
        };
        let (me, n) = (pe.my_pe(), pe.num_pes());
        let nbrs = if balancer == Balancer::Neighbor {
            hypercube(me, n)
        } else {
            Vec::new()
        };
        let seeds = Seeds {
            st: Rc::new(RefCell::new(State {
                balancer,
                h,
                pool: VecDeque::new(),
                run_queued: false,
                // Any odd-ish start differing by PE; a seed's destination needs no better.
                rng: 0x9e37_79b9_7f4a_7c15 ^ ((me as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)),
                stats: SeedStats::default(),
                asking: None,
                tried: Vec::new(),
                parked: false,
                offered: Vec::new(),
                waiters: vec![0; n.div_ceil(64)],
                nbr_load: vec![0; nbrs.len()],
                nbrs,
                told_load: 0,
            })),
        };
        *slot.borrow_mut() = Some(seeds.clone());
        if balancer == Balancer::Steal {
            let s = seeds.clone();
            pe.on_idle(move |pe| s.on_idle(pe));
        }
        if pe.survives_node_failures() {
            let s = Rc::downgrade(&seeds.st);
            pe.on_node_failure(move |pe, f| {
                if let Some(st) = s.upgrade() {
                    Seeds { st }.on_failure(pe, f);
                }
            });
        }
        seeds
    }

    /// The balancer this PE attached with.
    pub fn balancer(&self) -> Balancer {
        self.st.borrow().balancer
    }

    /// Enqueue a copy of `payload` as a seed for handler `h` (registered on every PE), at
    /// priority 0: it runs once, on the PE the balancer chooses.
    pub fn enqueue(&self, pe: &mut Pe, h: HandlerId, payload: &[u8]) {
        self.enqueue_msg(pe, h, Message::from_payload(payload));
    }

    /// Enqueue `msg` as a seed for handler `h`, giving it away; its priority orders its `run`
    /// among this PE's messages.
    pub fn enqueue_msg(&self, pe: &mut Pe, h: HandlerId, mut msg: Message) {
        msg.set_handler(h.raw());
        msg.set_src_pe(pe.my_pe() as u32);
        let (me, n) = (pe.my_pe(), pe.num_pes());
        let dest = {
            let mut st = self.st.borrow_mut();
            st.stats.enqueued += 1;
            match st.balancer {
                Balancer::Keep | Balancer::Steal => None,
                Balancer::Random => Some(st.draw(n)).filter(|&d| d != me && pe.is_alive(d)),
                Balancer::Neighbor => {
                    let mine = st.pool.len() as u64 + 1;
                    let least = (0..st.nbrs.len()).min_by_key(|&i| st.nbr_load[i]);
                    match least {
                        // Saturating: a load is a neighbour's word from the wire.
                        Some(i)
                            if st.nbr_load[i].saturating_add(2) <= mine
                                && pe.is_alive(st.nbrs[i]) =>
                        {
                            st.nbr_load[i] = st.nbr_load[i].saturating_add(1);
                            Some(st.nbrs[i])
                        }
                        _ => None,
                    }
                }
            }
        };
        match dest {
            Some(d) => self.give(pe, d, vec![msg]),
            None => {
                self.st.borrow_mut().pool.push_back(msg);
                self.added(pe);
            }
        }
    }

    /// Seeds waiting in this PE's pool.
    pub fn pooled(&self) -> usize {
        self.st.borrow().pool.len()
    }

    /// This PE's counters.
    pub fn stats(&self) -> SeedStats {
        self.st.borrow().stats
    }

    /// After seeds reached the pool: make sure one will run, tell who waits for work.
    fn added(&self, pe: &mut Pe) {
        self.schedule_run(pe);
        let (offer, waiters) = {
            let mut st = self.st.borrow_mut();
            // Seeds again: the next idle spell is a new one, with everybody to ask.
            st.parked = false;
            st.tried.clear();
            st.offered.clear();
            if st.balancer != Balancer::Steal || st.waiters.iter().all(|&w| w == 0) {
                (st.h.offer, Vec::new())
            } else {
                let w = std::mem::replace(&mut st.waiters, vec![0; pe.num_pes().div_ceil(64)]);
                (st.h.offer, w)
            }
        };
        for (i, word) in waiters.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let p = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if pe.is_alive(p) {
                    pe.send(p, offer, b"");
                }
            }
        }
        self.tell_load(pe);
    }

    /// Send this PE its `seed-run` message if the pool has a seed and none is in flight.
    fn schedule_run(&self, pe: &mut Pe) {
        let (run, prio) = {
            let mut st = self.st.borrow_mut();
            if st.run_queued {
                return;
            }
            let Some(front) = st.pool.front() else {
                return;
            };
            let prio = front.priority();
            st.run_queued = true;
            (st.h.run, prio)
        };
        // One small message per seed: what lets other messages and priorities in between.
        pe.send_msg(
            pe.my_pe(),
            run,
            Message::from_payload(&[]).with_priority(prio),
        );
    }

    /// `seed-run`: run the pool's first seed (if a thief took it, nothing).
    fn run_one(&self, pe: &mut Pe) {
        let seed = {
            let mut st = self.st.borrow_mut();
            st.run_queued = false;
            st.pool.pop_front()
        };
        // The next one is scheduled before this one runs, so a seed that enqueues seeds finds
        // the run message already in flight.
        self.schedule_run(pe);
        if let Some(seed) = seed {
            self.st.borrow_mut().stats.ran += 1;
            pe.deliver(seed);
            // A PE running its pool would otherwise take a whole batch of seeds before it
            // looks at what arrived, and a thief's request would wait behind them.
            pe.poll_soon();
            self.tell_load(pe);
        }
    }

    /// Send `seeds` to PE `dest`'s pool, in one message.
    fn give(&self, pe: &mut Pe, dest: usize, seeds: Vec<Message>) {
        let len: usize = seeds.iter().map(|m| 16 + m.payload().len()).sum();
        let mut out = Vec::with_capacity(4 + len);
        out.extend_from_slice(&(seeds.len() as u32).to_le_bytes());
        for m in &seeds {
            out.extend_from_slice(&m.handler().to_le_bytes());
            out.extend_from_slice(&m.priority().to_le_bytes());
            out.extend_from_slice(&m.src_pe().to_le_bytes());
            out.extend_from_slice(&(m.payload().len() as u32).to_le_bytes());
            out.extend_from_slice(m.payload());
        }
        let give = {
            let mut st = self.st.borrow_mut();
            st.stats.given += seeds.len() as u64;
            st.h.give
        };
        pe.send(dest, give, &out);
    }

    /// `seed-give`: seeds for this PE's pool.
    fn on_give(&self, pe: &mut Pe, msg: Message) {
        let from = msg.src_pe() as usize;
        let Some(seeds) = parse_give(msg.payload()) else {
            converse::input::error_line(&format!(
                "converse-tasks: PE {} dropped a malformed batch of seeds from PE {from}",
                pe.my_pe()
            ));
            return;
        };
        {
            let mut st = self.st.borrow_mut();
            st.stats.received += seeds.len() as u64;
            if st.asking == Some(from) {
                st.asking = None;
            }
            st.pool.extend(seeds);
        }
        self.added(pe);
    }

    /// The idle callback (Steal): an idle PE with nothing pooled asks for work.
    fn on_idle(&self, pe: &mut Pe) {
        let ask = {
            let st = self.st.borrow();
            st.pool.is_empty() && st.asking.is_none() && !st.parked
        };
        if ask {
            self.ask_next(pe);
        }
    }

    /// Ask the next PE of this idle spell, or park if enough have said no.
    fn ask_next(&self, pe: &mut Pe) {
        let (me, n, node) = (pe.my_pe(), pe.num_pes(), pe.my_node());
        let first = pe.node_first_pe(node);
        let size = pe.node_size();
        let victim = {
            let mut st = self.st.borrow_mut();
            let offer = std::iter::from_fn(|| st.offered.pop()).find(|&p| pe.is_alive(p));
            if let Some(v) = offer {
                st.asking = Some(v);
                st.stats.asked += 1;
                let ask = st.h.ask;
                drop(st);
                return pe.send(v, ask, b"");
            }
            if st.tried.len() >= ASK_AT_MOST {
                st.parked = true;
                return;
            }
            let fresh = |st: &State, p: usize| p != me && !st.tried.contains(&p) && pe.is_alive(p);
            // The node's other PEs first, from the next rank on: the cheapest to move work from.
            let sibling = (1..size)
                .map(|k| first + (me - first + k) % size)
                .find(|&p| fresh(&st, p));
            let v = sibling.or_else(|| {
                let start = st.draw(n);
                (0..n).map(|k| (start + k) % n).find(|&p| fresh(&st, p))
            });
            let Some(v) = v else {
                st.parked = true;
                return;
            };
            st.tried.push(v);
            st.asking = Some(v);
            st.stats.asked += 1;
            (v, st.h.ask)
        };
        pe.send(victim.0, victim.1, b"");
    }

    /// `seed-ask`: give half the pool, or say no and remember the asker.
    fn on_ask(&self, pe: &mut Pe, from: usize) {
        let given = {
            let mut st = self.st.borrow_mut();
            let n = st.pool.len();
            if n < 2 {
                if let Some(w) = st.waiters.get_mut(from / 64) {
                    *w |= 1 << (from % 64);
                }
                None
            } else {
                Some(st.pool.split_off(n - n / 2))
            }
        };
        match given {
            Some(seeds) => {
                self.give(pe, from, seeds.into());
                self.tell_load(pe);
            }
            None => {
                let none = self.st.borrow().h.none;
                pe.send(from, none, b"");
            }
        }
    }

    /// `seed-none`: ask the next one (this PE is idle, or it would not have asked).
    fn on_none(&self, pe: &mut Pe, from: usize) {
        let next = {
            let mut st = self.st.borrow_mut();
            if st.asking != Some(from) {
                return;
            }
            st.asking = None;
            st.stats.refused += 1;
            st.pool.is_empty()
        };
        if next {
            self.ask_next(pe);
        }
    }

    /// `seed-offer`: a PE that said no has work now; ask it if still idle (next, if this PE
    /// waits for another's answer: that one may say no).
    fn on_offer(&self, pe: &mut Pe, from: usize) {
        let ask_now = {
            let mut st = self.st.borrow_mut();
            if !st.pool.is_empty() || from == pe.my_pe() || st.offered.contains(&from) {
                return;
            }
            st.offered.push(from);
            st.asking.is_none()
        };
        if ask_now {
            self.ask_next(pe);
        }
    }

    /// `seed-load` (Neighbor): a neighbour's pool length; send it seeds if it has far fewer.
    fn on_load(&self, pe: &mut Pe, msg: Message) {
        let from = msg.src_pe() as usize;
        let Ok(load) = <[u8; 8]>::try_from(msg.payload()).map(u64::from_le_bytes) else {
            return;
        };
        let seeds = {
            let mut st = self.st.borrow_mut();
            let Some(i) = st.nbrs.iter().position(|&p| p == from) else {
                return;
            };
            st.nbr_load[i] = load;
            let mine = st.pool.len() as u64;
            if mine < load.saturating_add(3) {
                return;
            }
            let k = ((mine - load) / 2) as usize;
            st.nbr_load[i] = st.nbr_load[i].saturating_add(k as u64);
            let keep = st.pool.len() - k;
            st.pool.split_off(keep)
        };
        self.give(pe, from, seeds.into());
        self.tell_load(pe);
    }

    /// Neighbor: tell the neighbours this pool's length if it changed enough.
    fn tell_load(&self, pe: &mut Pe) {
        let (nbrs, h, load) = {
            let mut st = self.st.borrow_mut();
            let load = st.pool.len() as u64;
            if st.balancer != Balancer::Neighbor || !worth_telling(st.told_load, load) {
                return;
            }
            st.told_load = load;
            (st.nbrs.clone(), st.h.load, load)
        };
        for p in nbrs {
            if pe.is_alive(p) {
                pe.send(p, h, &load.to_le_bytes());
            }
        }
    }

    /// Report mode: a dead PE asked counts as a no; it waits for no offer.
    fn on_failure(&self, pe: &mut Pe, f: &NodeFailure) {
        let asked_dead = {
            let mut st = self.st.borrow_mut();
            for p in f.pes.clone() {
                if let Some(w) = st.waiters.get_mut(p / 64) {
                    *w &= !(1 << (p % 64));
                }
            }
            match st.asking {
                Some(p) if f.pes.contains(&p) => {
                    st.asking = None;
                    st.stats.refused += 1;
                    st.pool.is_empty()
                }
                _ => false,
            }
        };
        if asked_dead {
            self.ask_next(pe);
        }
    }
}

impl State {
    /// A number in `0..n` (xorshift; placement needs spread, not secrecy).
    fn draw(&mut self, n: usize) -> usize {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x % n.max(1) as u64) as usize
    }
}

/// The seeds of a `seed-give` payload, or `None` if it does not parse. (A seed naming a
/// system handler is refused when run, by [`Pe::deliver`].)
fn parse_give(mut p: &[u8]) -> Option<Vec<Message>> {
    fn take<'a>(p: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (a, b) = p.split_at_checked(n)?;
        *p = b;
        Some(a)
    }
    fn word(p: &mut &[u8]) -> Option<u32> {
        take(p, 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    }
    let count = word(&mut p)? as usize;
    // Each seed takes at least 16 bytes: a count the payload cannot hold is refused before any
    // allocation sized by it.
    if count > p.len() / 16 {
        return None;
    }
    let mut seeds = Vec::with_capacity(count);
    for _ in 0..count {
        let h = word(&mut p)?;
        let prio = word(&mut p)? as i32;
        let src = word(&mut p)?;
        let len = word(&mut p)? as usize;
        let body = take(&mut p, len)?;
        let mut m = Message::from_payload(body).with_priority(prio);
        m.set_handler(h);
        m.set_src_pe(src);
        seeds.push(m);
    }
    p.is_empty().then_some(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypercube_neighbours_connect_every_pe_count() {
        assert_eq!(hypercube(0, 1), Vec::<usize>::new());
        assert_eq!(hypercube(0, 2), vec![1]);
        assert_eq!(hypercube(2, 3), vec![0]);
        assert_eq!(hypercube(5, 8), vec![4, 7, 1]);
        for n in 1..40 {
            // Reachable from 0 by neighbour steps.
            let mut seen = vec![false; n];
            let mut todo = vec![0];
            seen[0] = true;
            while let Some(p) = todo.pop() {
                for q in hypercube(p, n) {
                    assert!(hypercube(q, n).contains(&p), "{p}-{q} of {n} one way");
                    if !seen[q] {
                        seen[q] = true;
                        todo.push(q);
                    }
                }
            }
            assert!(seen.iter().all(|&s| s), "{n} PEs not connected");
        }
    }

    #[test]
    fn a_steady_pool_tells_nobody() {
        assert!(!worth_telling(0, 1));
        assert!(worth_telling(0, 2));
        assert!(worth_telling(2, 0));
        assert!(!worth_telling(100, 120));
        assert!(worth_telling(100, 140));
    }

    fn batch(seeds: &[(u32, i32, u32, &[u8])]) -> Vec<u8> {
        let mut out = (seeds.len() as u32).to_le_bytes().to_vec();
        for (h, prio, src, body) in seeds {
            out.extend_from_slice(&h.to_le_bytes());
            out.extend_from_slice(&prio.to_le_bytes());
            out.extend_from_slice(&src.to_le_bytes());
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    #[test]
    fn a_batch_round_trips_and_a_bad_one_is_refused_whole() {
        let base = 16;
        let b = batch(&[(base, -3, 7, b"abc"), (base + 2, 0, 1, b"")]);
        let seeds = parse_give(&b).expect("parses");
        assert_eq!(seeds.len(), 2);
        assert_eq!(
            (seeds[0].handler(), seeds[0].priority(), seeds[0].src_pe()),
            (base, -3, 7)
        );
        assert_eq!(seeds[0].payload(), b"abc");
        assert_eq!(seeds[1].payload(), b"");
        // Cut short, one byte too many, a count past the payload.
        assert!(parse_give(&b[..b.len() - 1]).is_none());
        let mut long = b.clone();
        long.push(0);
        assert!(parse_give(&long).is_none());
        let mut big = b.clone();
        big[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_give(&big).is_none());
        assert!(parse_give(&[]).is_none());
    }

    #[test]
    fn balancers_parse_by_name_and_refuse_others() {
        for b in Balancer::ALL {
            assert_eq!(b.name().parse::<Balancer>(), Ok(b));
        }
        let e = "stealing".parse::<Balancer>().unwrap_err();
        assert!(e.contains("keep, random, neighbor or steal"), "{e}");
    }
}
