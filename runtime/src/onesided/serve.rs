//! The region's PE's side of one-sided transfers: answering a get (with its bytes, or by
//! copying them straight into the getter's buffer) and taking a put (from its message, from
//! the putter's memory, or from a buffer lent in this process), between two of its handlers.

use super::{
    direct, status_message, system, PutNotice, RegionHandle, Slot, DONE, GET, GOT, HEAD,
    OUT_OF_RANGE, PUT, PUT_DONE, STALE,
};
use crate::pe::{HandlerId, Pe};
use converse_machine::bytes::{ByteReader, ByteWriter};
use converse_machine::Message;
use std::ops::Range;

impl Pe {
    /// A get request (`kind`: [`GET`] or a direct one) from PE `from`: answer it.
    pub(super) fn serve_get(
        &mut self,
        kind: u32,
        from: usize,
        id: u64,
        r: &mut ByteReader<'_>,
        msg: &Message,
    ) {
        let (Ok(region), Ok(gen), Ok(off), Ok(len)) = (r.u32(), r.u32(), r.u64(), r.u64()) else {
            return self.drop_message(msg, "a malformed get request");
        };
        let into = match (kind, r.u64()) {
            (GET, _) => None,
            (_, Ok(addr)) => Some(addr),
            (_, Err(_)) => return self.drop_message(msg, "a malformed direct get"),
        };
        let mut out = self.answer_get(from, id, region, gen, off..off.saturating_add(len), into);
        out.set_arg0(GOT);
        self.send_msg(from, system(), out);
    }

    /// A put (`kind`: [`PUT`], a direct or a shared one) from PE `from`: write its bytes into
    /// the region, run its notification, answer.
    pub(super) fn serve_put(
        &mut self,
        kind: u32,
        from: usize,
        id: u64,
        r: &mut ByteReader<'_>,
        msg: &Message,
    ) {
        let (Ok(region), Ok(gen), Ok(off), Ok(notify)) = (r.u32(), r.u32(), r.u64(), r.u64())
        else {
            return self.drop_message(msg, "a malformed put");
        };
        let data = msg.payload().get(HEAD..).unwrap_or_default();
        let mut len = data.len() as u64;
        let status = if kind == PUT {
            self.write_region(region, gen, off, len, |parts| {
                scatter(parts, data);
                DONE
            })
        } else if kind == direct::PUT_SHARED {
            let (Ok(key), Ok(n)) = (r.u64(), r.u64()) else {
                return self.drop_message(msg, "a malformed shared put");
            };
            // Keys name buffers of this process: only its own PEs may use one.
            if !self.onesided.direct.in_process(self.node_of(from)) {
                return self.drop_message(msg, "a shared put from another process");
            }
            len = n;
            match direct::borrow(key) {
                Some(data) if data.len() as u64 == n => {
                    let status = self.write_region(region, gen, off, n, |parts| {
                        // The one copy: from the putter's buffer into the region.
                        scatter(parts, &data);
                        DONE
                    });
                    direct::give_back(key, data);
                    status
                }
                Some(data) => {
                    direct::give_back(key, data);
                    direct::FAULTED
                }
                None => direct::FAULTED,
            }
        } else {
            let (Ok(addr), Ok(n)) = (r.u64(), r.u64()) else {
                return self.drop_message(msg, "a malformed direct put");
            };
            len = n;
            let node = self.node_of(from);
            // The region's parts and the way to the initiator's memory are two
            // fields of the table: borrowed apart.
            let os = &mut self.onesided;
            let (slots, route) = (&mut os.slots, os.direct.route(node));
            write_slot(slots, region, gen, off, len, |parts| match route {
                Some(rma) => direct::status_of(rma.read(node, addr, parts), DONE),
                None => direct::REFUSED_COPY,
            })
        };
        if status == DONE {
            self.notify_put(from, region, gen, off..off + len, notify);
        }
        let mut out = status_message(id, status);
        out.set_arg0(PUT_DONE);
        self.send_msg(from, system(), out);
    }

    /// The answer to a get of `range` of region `region` from PE `from`: its bytes, or, for a
    /// direct get (`into`: the address of the initiator's buffer), the bytes copied there.
    fn answer_get(
        &self,
        from: usize,
        id: u64,
        region: u32,
        gen: u32,
        range: Range<u64>,
        into: Option<u64>,
    ) -> Message {
        let s = match self.slot(region, gen) {
            None => return status_message(id, STALE),
            Some(s) if range.end > s.len || range.start > range.end => {
                return status_message(id, OUT_OF_RANGE)
            }
            Some(s) => s,
        };
        if let Some(addr) = into {
            let node = self.node_of(from);
            if let Some(rma) = self.onesided.direct.route(node) {
                let parts: Vec<&[u8]> = s
                    .pieces(range.clone())
                    .map(|(i, at, n)| &s.parts[i][at..at + n])
                    .collect();
                // The one copy: from the region into the initiator's buffer, by the kernel.
                let status = direct::status_of(rma.write(node, &parts, addr), direct::COPIED);
                if status != direct::REFUSED_COPY {
                    return status_message(id, status);
                }
            }
            // Not permitted after all: the bytes go in the answer, as over messages.
        }
        // Sized only now that the range is known to be the region's.
        let len = (range.end - range.start) as usize;
        let mut out = Message::with_capacity(9 + len);
        out.extend_payload(&id.to_le_bytes());
        out.extend_payload(&[DONE]);
        // The one copy on this side: out of the region into the answer.
        for (i, at, n) in s.pieces(range) {
            out.extend_payload(&s.parts[i][at..at + n]);
        }
        out
    }

    /// Run `write` over the parts of `len` bytes from `off` of region `region`, if it is
    /// registered and they are inside it; the status to answer with.
    fn write_region(
        &mut self,
        region: u32,
        gen: u32,
        off: u64,
        len: u64,
        write: impl FnOnce(&mut [&mut [u8]]) -> u8,
    ) -> u8 {
        write_slot(&mut self.onesided.slots, region, gen, off, len, write)
    }

    /// A put's bytes are in the region: run its notification handler, if it named one.
    fn notify_put(&mut self, from: usize, region: u32, gen: u32, range: Range<u64>, notify: u64) {
        // Only a program's own handler may be named (a system one would act on a notice as
        // on its own message).
        let Some(notify) = u32::try_from(notify)
            .ok()
            .filter(|&h| h >= crate::lifecycle::USER_BASE)
        else {
            return;
        };
        let Some(len) = self.slot(region, gen).map(|s| s.len) else {
            return;
        };
        let handle = RegionHandle {
            pe: self.my_pe as u32,
            id: region,
            gen,
            len,
        };
        let mut n = Message::with_capacity(PutNotice::LEN);
        let mut b = Vec::with_capacity(PutNotice::LEN);
        b.put_u32(from as u32);
        b.extend_from_slice(&handle.to_bytes());
        b.put_u64(range.start);
        b.put_u64(range.end);
        n.extend_payload(&b);
        self.send_msg(self.my_pe, HandlerId(notify), n);
    }
}

/// [`Pe::write_region`] on the table's slots (borrowed apart from the rest of the table).
fn write_slot(
    slots: &mut [Option<Slot>],
    region: u32,
    gen: u32,
    off: u64,
    len: u64,
    write: impl FnOnce(&mut [&mut [u8]]) -> u8,
) -> u8 {
    let Some(Some(s)) = slots
        .get_mut(region as usize)
        .filter(|s| s.as_ref().is_some_and(|s| s.gen == gen))
    else {
        return STALE;
    };
    let end = match off.checked_add(len) {
        Some(end) if end <= s.len => end,
        _ => return OUT_OF_RANGE,
    };
    let pieces: Vec<(usize, usize, usize)> = s.pieces(off..end).collect();
    let mut want = pieces.iter().peekable();
    let mut parts: Vec<&mut [u8]> = Vec::with_capacity(pieces.len());
    for (i, p) in s.parts.iter_mut().enumerate() {
        if let Some(&&(j, at, n)) = want.peek() {
            if i == j {
                parts.push(&mut p[at..at + n]);
                want.next();
            }
        }
    }
    write(&mut parts)
}

/// Copy `data` into `parts` in order (their lengths add up to its length).
fn scatter(parts: &mut [&mut [u8]], data: &[u8]) {
    let mut taken = 0;
    for p in parts {
        p.copy_from_slice(&data[taken..taken + p.len()]);
        taken += p.len();
    }
}
