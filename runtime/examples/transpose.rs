//! A distributed matrix transpose that moves its blocks one-sided, checked against the serial
//! transpose.
//!
//! The N×N matrix A (f64, `A[i][j] = i·N + j`) is distributed by block rows: PE p holds rows
//! `p·b .. (p+1)·b` (b = N / P) as P tiles of b×b, tile q holding columns `q·b .. (q+1)·b`,
//! each tile a part of one registered region (a non-contiguous region). The transpose's block
//! row p is made of the transposed tiles p of every PE:
//! - `get` (the default): PE p gets tile p from every PE and transposes it into place;
//! - `put`: every PE puts its tile q into PE q's receive region, slot p, with a notification;
//!   PE q transposes each tile when its notice comes.
//!
//! Every PE then checks its block row of the result against `B[i][j] = A[j][i]` and prints
//! `transpose: PE p ok`.
//!
//! ```text
//! cargo build --release -p converse --examples
//! target/release/examples/transpose 512 get +p4
//! target/release/charmrun +p4 target/release/examples/transpose 1024 put +machine tcp
//! ```

use converse::{PutNotice, RegionHandle};
use std::cell::RefCell;
use std::rc::Rc;

/// A PE's two regions: its tiles, and its receive slots.
type Pair = (RegionHandle, RegionHandle);

fn as_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn as_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// Tile `q` of PE `p`'s block row of A, row-major.
fn tile(n: usize, b: usize, p: usize, q: usize) -> Vec<f64> {
    let mut t = Vec::with_capacity(b * b);
    for r in 0..b {
        for c in 0..b {
            t.push(((p * b + r) * n + q * b + c) as f64);
        }
    }
    t
}

/// Write tile `t` (rows of PE `from`'s block row, columns of this PE's) transposed into the
/// result block row `out` (b rows of n).
fn place(out: &mut [f64], t: &[f64], n: usize, b: usize, from: usize) {
    for r in 0..b {
        for c in 0..b {
            // A[from·b + r][me·b + c] goes to B[me·b + c][from·b + r].
            out[c * n + from * b + r] = t[r * b + c];
        }
    }
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let usage = "usage: transpose N [get|put] (N a multiple of the PEs, up to 8192)";
        let n: usize = match args.get(1).map(|a| a.parse()) {
            None => 512,
            Some(Ok(n)) if n > 0 && n <= 8192 && n % pe.num_pes() == 0 => n,
            Some(_) => return pe.refuse_arguments(usage),
        };
        let mode = args.get(2).map_or("get", String::as_str).to_string();
        if mode != "get" && mode != "put" {
            return pe.refuse_arguments(usage);
        }
        let (me, np) = (pe.my_pe(), pe.num_pes());
        let b = n / np;
        let out = Rc::new(RefCell::new(vec![f64::NAN; b * n]));
        let placed = Rc::new(RefCell::new(0usize));

        // My block row as P tiles, one region; and, for `put`, a receive region of P slots.
        let mine = pe.register_region((0..np).map(|q| as_bytes(&tile(n, b, me, q))).collect());
        let inbox = Rc::new(pe.register_region(vec![vec![0u8; b * b * 8]; np]));
        let tile_bytes = (b * b * 8) as u64;

        // Everyone's handles, by message.
        let handles: Rc<RefCell<Vec<Option<Pair>>>> = Rc::new(RefCell::new(vec![None; np]));
        let h = handles.clone();
        let got = pe.register("transpose.handles", move |_pe, m| {
            let p = m.payload();
            let (Ok(a), Ok(i)) = (
                RegionHandle::from_bytes(p),
                RegionHandle::from_bytes(&p[RegionHandle::LEN..]),
            ) else {
                return;
            };
            h.borrow_mut()[m.src_pe() as usize] = Some((a, i));
        });
        let (o, pl, ib) = (out.clone(), placed.clone(), inbox.clone());
        let noticed = pe.register("transpose.noticed", move |pe, m| {
            let Ok(notice) = PutNotice::parse(&m) else {
                return;
            };
            let slot = notice.from;
            let t = as_f64(&pe.region(&ib)[slot]);
            place(&mut o.borrow_mut(), &t, n, b, slot);
            *pl.borrow_mut() += 1;
        });
        let mut hs = pe.region_handle(&mine).to_bytes().to_vec();
        hs.extend_from_slice(&pe.region_handle(&inbox).to_bytes());
        for q in 0..np {
            pe.send(q, got, &hs);
        }
        let h = handles.clone();
        pe.run_until(|_| h.borrow().iter().all(Option::is_some));
        let all: Vec<Pair> = handles.borrow().iter().flatten().copied().collect();

        for (q, (their_tiles, their_inbox)) in all.into_iter().enumerate() {
            if mode == "get" {
                let (o, pl) = (out.clone(), placed.clone());
                let range = me as u64 * tile_bytes..(me as u64 + 1) * tile_bytes;
                pe.get(&their_tiles, range, move |pe, r| match r {
                    Ok(bytes) => {
                        place(&mut o.borrow_mut(), &as_f64(&bytes), n, b, q);
                        *pl.borrow_mut() += 1;
                    }
                    Err(e) => pe.abort(&format!("transpose: get from PE {q}: {e}")),
                });
            } else {
                let t = as_bytes(&tile(n, b, me, q));
                pe.put(
                    &their_inbox,
                    me as u64 * tile_bytes,
                    t,
                    Some(noticed),
                    move |pe, r| {
                        if let Err(e) = r {
                            pe.abort(&format!("transpose: put to PE {q}: {e}"));
                        }
                    },
                );
            }
        }
        let pl = placed.clone();
        pe.run_until(|_| *pl.borrow() == np);

        // Checked against the serial transpose: B[i][j] = A[j][i] = j·N + i.
        let bad = out
            .borrow()
            .iter()
            .enumerate()
            .filter(|&(k, &v)| {
                let (i, j) = (me * b + k / n, k % n);
                v != (j * n + i) as f64
            })
            .count();
        if bad > 0 {
            pe.abort(&format!("transpose: PE {me}: {bad} elements wrong"));
        }
        converse::input::out_line(&format!("transpose: PE {me} ok"));
        pe.barrier();
        if me == 0 {
            converse::input::out_line(&format!(
                "transpose of {n}x{n} over {np} PEs by {mode}: matches the serial transpose"
            ));
            pe.exit(0);
        }
    })
}
