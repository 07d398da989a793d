//! The collective calls a program makes: each message-driven (`…_then`, a callback gets the
//! result) and blocking (runs the scheduler until the result is there).

use super::{Combine, Input, Op, Outcome, Then};
use crate::error::TopoError;
use crate::process::{block, Later, Payload, Topo};
use converse::Pe;
use std::rc::Rc;

impl Topo {
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        pe: &mut Pe,
        op: Op,
        root: usize,
        aux: u64,
        input: Input<'_>,
        combine: Option<Rc<Combine>>,
        then: Then,
    ) {
        let mut later: Later = Vec::new();
        self.st
            .borrow_mut()
            .start(pe, op, root, aux, input, combine, then, &mut later);
        for f in later {
            f(pe);
        }
    }

    /// Broadcast `data` from `root` to every process (message-driven): `then` gets the bytes
    /// on every process, the root included. Only the root's `data` is used.
    pub fn broadcast_then(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        then: impl FnOnce(&mut Pe, Result<Payload, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.and_then(bytes)));
        self.call(pe, Op::Broadcast, root, 0, Input::Bytes(data), None, then);
    }

    /// Broadcast `data` from `root` to every process (blocking: returns the bytes, on the root
    /// too). Only the root's `data` is used.
    ///
    /// # Errors
    /// [`TopoError::Mismatch`] when processes disagree on the call,
    /// [`TopoError::ProcessDead`] (report mode: a process of the topology died),
    /// [`TopoError::JobEnded`].
    pub fn broadcast(&self, pe: &mut Pe, root: usize, data: &[u8]) -> Result<Payload, TopoError> {
        block(pe, |pe, then| self.broadcast_then(pe, root, data, then))
    }

    /// Scatter (message-driven): the root's `data` is split into one segment of `each` bytes
    /// per process, the i-th to process i. Every process passes the same `each` (the size it
    /// expects); only the root's `data` is used.
    pub fn scatter_then(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        each: usize,
        then: impl FnOnce(&mut Pe, Result<Payload, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.and_then(bytes)));
        let input = Input::Equal(data, each);
        self.call(pe, Op::Scatter, root, each as u64, input, None, then);
    }

    /// Scatter equal segments (blocking): returns this process's segment.
    ///
    /// # Errors
    /// [`TopoError::Mismatch`] when processes disagree (roots, `each`) or the root's data is
    /// not `each` × processes bytes; [`TopoError::ProcessDead`] (report mode: a process of
    /// the topology died), [`TopoError::JobEnded`].
    pub fn scatter(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        each: usize,
    ) -> Result<Payload, TopoError> {
        block(pe, |pe, then| self.scatter_then(pe, root, data, each, then))
    }

    /// Scatter segments of any sizes (message-driven): process i gets `segments[i]` of the
    /// root's list; the others pass an empty list.
    pub fn scatter_uneven_then(
        &self,
        pe: &mut Pe,
        root: usize,
        segments: &[&[u8]],
        then: impl FnOnce(&mut Pe, Result<Payload, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.and_then(bytes)));
        let input = Input::Segments(segments);
        self.call(pe, Op::ScatterUneven, root, 0, input, None, then);
    }

    /// Scatter segments of any sizes (blocking): returns this process's segment.
    ///
    /// # Errors
    /// As [`scatter`](Self::scatter); the root must give one segment per process.
    pub fn scatter_uneven(
        &self,
        pe: &mut Pe,
        root: usize,
        segments: &[&[u8]],
    ) -> Result<Payload, TopoError> {
        block(pe, |pe, then| {
            self.scatter_uneven_then(pe, root, segments, then)
        })
    }

    /// Gather every process's `data` at `root` (message-driven): the root's `then` gets
    /// `Some` of every process's bytes, in process-id order; the others' get `None`.
    pub fn gather_then(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        then: impl FnOnce(&mut Pe, Result<Option<Vec<Vec<u8>>>, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| {
            then(
                pe,
                r.map(|o| match o {
                    Outcome::Gathered(g) => g,
                    _ => None,
                }),
            )
        });
        self.call(
            pe,
            Op::Gather,
            root,
            0,
            Input::Up(data.to_vec()),
            None,
            then,
        );
    }

    /// Gather (blocking): `Some(segments by process id)` at the root, `None` elsewhere.
    ///
    /// # Errors
    /// [`TopoError::Mismatch`], [`TopoError::ProcessDead`] (report mode: a process of the
    /// topology died), [`TopoError::JobEnded`].
    pub fn gather(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
    ) -> Result<Option<Vec<Vec<u8>>>, TopoError> {
        block(pe, |pe, then| self.gather_then(pe, root, data, then))
    }

    /// Reduce every process's `data` with `combine` to `root` (message-driven): the root's
    /// `then` gets `Some(result)`, the others' `None`. Every process gives the same number of
    /// bytes.
    pub fn reduce_then(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        combine: impl Fn(&mut Vec<u8>, &[u8]) + 'static,
        then: impl FnOnce(&mut Pe, Result<Option<Vec<u8>>, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.map(value)));
        let aux = data.len() as u64;
        let c: Rc<Combine> = Rc::new(combine);
        self.call(
            pe,
            Op::Reduce,
            root,
            aux,
            Input::Up(data.to_vec()),
            Some(c),
            then,
        );
    }

    /// Reduce (blocking): `Some(result)` at the root, `None` elsewhere.
    ///
    /// ```no_run
    /// # use converse_topo::{attach, Topology};
    /// converse::run(|pe| {
    ///     let n = pe.num_pes();
    ///     let t = attach(pe, Topology::torus2(2, n / 2).unwrap()).unwrap().unwrap();
    ///     let mine = (t.id() as u64).to_le_bytes();
    ///     if let Some(sum) = t.reduce(pe, 0, &mine, converse::ops::sum_u64).unwrap() {
    ///         println!("sum of ids: {}", u64::from_le_bytes(sum.try_into().unwrap()));
    ///     }
    ///     t.barrier(pe).unwrap();
    ///     pe.exit(0);
    /// });
    /// ```
    ///
    /// # Errors
    /// [`TopoError::Mismatch`] (different roots, or sizes), [`TopoError::ProcessDead`]
    /// (report mode: a process of the topology died), [`TopoError::JobEnded`].
    pub fn reduce(
        &self,
        pe: &mut Pe,
        root: usize,
        data: &[u8],
        combine: impl Fn(&mut Vec<u8>, &[u8]) + 'static,
    ) -> Result<Option<Vec<u8>>, TopoError> {
        block(pe, |pe, then| {
            self.reduce_then(pe, root, data, combine, then)
        })
    }

    /// Reduce and hand the result to every process (message-driven).
    pub fn all_reduce_then(
        &self,
        pe: &mut Pe,
        data: &[u8],
        combine: impl Fn(&mut Vec<u8>, &[u8]) + 'static,
        then: impl FnOnce(&mut Pe, Result<Vec<u8>, TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.map(|o| value(o).unwrap_or_default())));
        let aux = data.len() as u64;
        let c: Rc<Combine> = Rc::new(combine);
        self.call(
            pe,
            Op::AllReduce,
            0,
            aux,
            Input::Up(data.to_vec()),
            Some(c),
            then,
        );
    }

    /// Reduce and hand the result to every process (blocking).
    ///
    /// # Errors
    /// [`TopoError::Mismatch`], [`TopoError::ProcessDead`] (report mode: a process of the
    /// topology died), [`TopoError::JobEnded`].
    pub fn all_reduce(
        &self,
        pe: &mut Pe,
        data: &[u8],
        combine: impl Fn(&mut Vec<u8>, &[u8]) + 'static,
    ) -> Result<Vec<u8>, TopoError> {
        block(pe, |pe, then| self.all_reduce_then(pe, data, combine, then))
    }

    /// A barrier across the topology (message-driven): `then` runs once every process has
    /// called it.
    pub fn barrier_then(
        &self,
        pe: &mut Pe,
        then: impl FnOnce(&mut Pe, Result<(), TopoError>) + 'static,
    ) {
        let then: Then = Box::new(move |pe, r| then(pe, r.map(|_| ())));
        let c: Rc<Combine> = Rc::new(|_: &mut Vec<u8>, _: &[u8]| {});
        self.call(pe, Op::Barrier, 0, 0, Input::Up(Vec::new()), Some(c), then);
    }

    /// A barrier across the topology (blocking, running handlers meanwhile).
    ///
    /// # Errors
    /// [`TopoError::Mismatch`], [`TopoError::ProcessDead`] (report mode: a process of the
    /// topology died), [`TopoError::JobEnded`].
    pub fn barrier(&self, pe: &mut Pe) -> Result<(), TopoError> {
        block(pe, |pe, then| self.barrier_then(pe, then))
    }
}

fn bytes(o: Outcome) -> Result<Payload, TopoError> {
    match o {
        Outcome::Bytes(p) => Ok(p),
        _ => Err(TopoError::Corrupt("a collective gave no bytes".into())),
    }
}

fn value(o: Outcome) -> Option<Vec<u8>> {
    match o {
        Outcome::Value(v) => v,
        _ => None,
    }
}
