//! The node socket's kernel-side filter: a classic BPF program that lets in only datagrams of
//! this job's protocol addressed to this node (magic, job tag, destination: what
//! `wire::decode_header` checks first), so a flood of strangers' datagrams never takes room in
//! the socket's receive buffer, where it would crowd out the peers' (which the protocol would
//! then have to retransmit, and a peer heard from too long ago is taken for dead).
//!
//! | step | loads (big-endian, as BPF does; offsets in the payload, which the filter sees 8 bytes in, after the UDP header) | passes when |
//! |---|---|---|
//! | 0–1 | byte 0 | it is `wire::MAGIC` |
//! | 2–5 | words at 8 and 12 | they are the job tag's 8 little-endian bytes |
//! | 6–7 | half-word at 4 | it is this node's number, little-endian |
//!
//! A datagram shorter than a load drops (BPF returns 0 past the end). What passes is checked
//! again, whole, by `decode_header`; the filter only moves the cheap part of that check into
//! the kernel.

use super::wire::MAGIC;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

// Classic BPF opcodes (linux/filter.h), spelled out: the libc crate's set varies by target.
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

/// A UDP socket's filter sees the datagram from its UDP header on: the payload is 8 bytes in.
const UDP_HEADER: u32 = 8;

/// The program for node `me` of the job tagged `tag`.
fn program(tag: u64, me: u16) -> [libc::sock_filter; 10] {
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let t = tag.to_le_bytes();
    let w0 = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
    let w1 = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
    let dst = u32::from(u16::from_be_bytes(me.to_le_bytes()));
    // Every failed test jumps to the last instruction (9): jf counts from the next one.
    [
        op(LD_B_ABS, 0, 0, UDP_HEADER),
        op(JEQ_K, 0, 7, u32::from(MAGIC)),
        op(LD_W_ABS, 0, 0, UDP_HEADER + 8),
        op(JEQ_K, 0, 5, w0),
        op(LD_W_ABS, 0, 0, UDP_HEADER + 12),
        op(JEQ_K, 0, 3, w1),
        op(LD_H_ABS, 0, 0, UDP_HEADER + 4),
        op(JEQ_K, 0, 1, dst),
        op(RET_K, 0, 0, u32::MAX),
        op(RET_K, 0, 0, 0),
    ]
}

/// Attach the filter of node `me`, job `tag`, to `sock`.
///
/// # Errors
/// The kernel's (a kernel without socket filters: the caller goes on without).
pub(super) fn admit_only(sock: BorrowedFd<'_>, tag: u64, me: u16) -> io::Result<()> {
    let mut prog = program(tag, me);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: a valid socket; the program outlives the call (the kernel copies it); the
    // length matches the array.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            std::ptr::from_ref(&fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::Duration;

    /// Only a datagram with the magic, the tag and this node as its destination reaches the
    /// socket; strangers' (no magic, another job's tag, another node, too short) do not.
    #[test]
    fn only_this_jobs_datagrams_to_this_node_get_in() {
        let tag = 0x0123_4567_89AB_CDEFu64;
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        admit_only(rx.as_fd(), tag, 3).expect("attach");
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let to = rx.local_addr().expect("addr");
        let good = |dst: u16, tag: u64, magic: u8| {
            let mut d = vec![0u8; 28];
            d[0] = magic;
            d[1] = 2;
            d[2..4].copy_from_slice(&1u16.to_le_bytes());
            d[4..6].copy_from_slice(&dst.to_le_bytes());
            d[8..16].copy_from_slice(&tag.to_le_bytes());
            d
        };
        for junk in [
            b"GET / HTTP/1.0".to_vec(),
            good(3, tag ^ 1, MAGIC),
            good(4, tag, MAGIC),
            good(3, tag, MAGIC ^ 1),
            vec![MAGIC; 6],
        ] {
            tx.send_to(&junk, to).expect("send");
        }
        let want = good(3, tag, MAGIC);
        tx.send_to(&want, to).expect("send");
        let mut buf = [0u8; 64];
        let (n, _) = rx.recv_from(&mut buf).expect("the good one");
        assert_eq!(&buf[..n], &want[..], "the first to arrive is the good one");
        assert!(rx.recv_from(&mut buf).is_err(), "nothing else got in");
    }
}
