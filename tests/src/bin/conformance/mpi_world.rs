//! `mpi-world` (MPI layer only, 2 ranks or more): the program itself sends on
//! `MPI_COMM_WORLD` while the runtime's messages flow. PE 0 sends PE 1 an 8-byte MPI message
//! of its own on the world communicator (tag 7), then numbered runtime messages; PE 1
//! receives the MPI message with a blocking `MPI_Recv` from its start function before it
//! schedules. The program's message arrives while the layer's receives are all free: posted
//! for any source and any tag on the world communicator, they would take it (PE 1 would then
//! block for ever), so they are posted on communicators of the layer's own. The runtime's
//! messages must all arrive, in order.

use super::{complain, report, verdict, word};
use converse::{Message, Pe};
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::cell::Cell;
use std::rc::Rc;

/// Runtime messages after the program's own MPI message.
const COUNT: u64 = 1000;
/// The program's tag on `MPI_COMM_WORLD`.
const TAG: i32 = 7;
/// What the program sends.
const WORD: u64 = 0x5eed_f00d_0000_0007;

pub(crate) fn mpi_world(pe: &mut Pe) {
    let v = verdict(pe, "mpi-world", |_| format!("({COUNT} messages)"));
    let next = Rc::new(Cell::new(0u64));
    let errors = Rc::new(Cell::new(0u64));
    let (nx, er) = (next.clone(), errors.clone());
    let h = pe.register("numbered", move |pe, msg| {
        let seq = word(msg.payload(), 0);
        if seq != nx.get() {
            er.set(er.get() + 1);
            complain(pe, format!("got #{seq}, expected #{}", nx.get()));
        }
        nx.set(seq + 1);
    });
    // The layer initialized MPI; rsmpi's world handle is valid until the layer finalizes it.
    let world = SimpleCommunicator::world();
    let me = pe.my_pe();
    let send = |pe: &mut Pe, range: std::ops::Range<u64>| {
        for s in range {
            let mut m = Message::new(8 + (s as usize % 700));
            m.payload_mut()[..8].copy_from_slice(&s.to_le_bytes());
            pe.send_msg(1, h, m);
        }
    };
    pe.barrier();
    if me == 0 {
        world
            .process_at_rank(1)
            .send_with_tag(&WORD.to_le_bytes()[..], TAG);
        send(pe, 0..COUNT);
    } else if me == 1 {
        let (got, _status) = world.process_at_rank(0).receive_vec_with_tag::<u8>(TAG);
        if got != WORD.to_le_bytes() {
            errors.set(errors.get() + 1);
            complain(pe, format!("the program's own MPI message was {got:?}"));
        }
        let nx = next.clone();
        pe.run_until(|_| nx.get() >= COUNT);
    }
    pe.barrier();
    report(pe, errors.get(), v);
}
