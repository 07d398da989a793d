//! A Jacobi step on a periodic 2-D domain, over a 2-D torus of processes: each process holds
//! a B×B block, exchanges its edges with its four torus neighbours (halo exchange by
//! `shift`), updates, and the all-reduce of the largest change shows convergence. At the end
//! process 0 gathers the blocks and checks them against the same computation done serially.
//!
//! `jacobi_torus [ROWS COLS [B [STEPS]]]`: arguments count from the left, so two are ROWS and
//! COLS, never B and STEPS. ROWS×COLS = PEs (default: as square as the PEs allow); B from 1,
//! with PEs × B² at most 4194304 cells (default 8); STEPS from 1 to 1000000 (default 20).

use converse::input::number;
use converse::{ops, Pe};
use converse_topo::{attach, Topo, Topology};

const USAGE: &str = "jacobi_torus [ROWS COLS [B [STEPS]]] +pN";

/// Most cells of the whole domain: 32 MiB of them, which process 0 holds a few times over
/// (the gathered blocks, the global grid, the serial computation's two), so the job's memory
/// is bounded.
const MAX_CELLS: usize = 1 << 22;

/// Most steps: bounds the run's length.
const MAX_STEPS: usize = 1_000_000;

/// Initial value of global cell (i, j).
fn initial(i: usize, j: usize) -> f64 {
    ((i * 7 + j * 13) % 17) as f64
}

/// One Jacobi update of a cell from its four neighbours (the serial and the distributed
/// versions add in the same order, so they agree to the bit).
fn update(up: f64, down: f64, left: f64, right: f64) -> f64 {
    0.25 * (up + down + left + right)
}

fn serial(h: usize, w: usize, steps: usize) -> Vec<f64> {
    let mut u: Vec<f64> = (0..h * w).map(|k| initial(k / w, k % w)).collect();
    for _ in 0..steps {
        u = (0..h * w)
            .map(|k| {
                let (i, j) = (k / w, k % w);
                update(
                    u[(i + h - 1) % h * w + j],
                    u[(i + 1) % h * w + j],
                    u[i * w + (j + w - 1) % w],
                    u[i * w + (j + 1) % w],
                )
            })
            .collect();
    }
    u
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

fn bytes(v: impl Iterator<Item = f64>) -> Vec<u8> {
    v.flat_map(f64::to_le_bytes).collect()
}

/// Send my four edges, tagged with the halo they fill at the receiver, and receive mine.
/// Returns halos (up, down, left, right).
fn exchange(pe: &mut Pe, t: &Topo, u: &[f64], b: usize) -> [Vec<f64>; 4] {
    let nb =
        [t.shift(0, -1), t.shift(0, 1), t.shift(1, -1), t.shift(1, 1)].map(|x| x.unwrap_or(t.id()));
    // My top row fills the up neighbour's bottom halo (tag 1), and so on.
    let edges = [
        (1u8, bytes(u[..b].iter().copied())),
        (0, bytes(u[(b - 1) * b..].iter().copied())),
        (3, bytes((0..b).map(|i| u[i * b]))),
        (2, bytes((0..b).map(|i| u[i * b + b - 1]))),
    ];
    for (k, (tag, e)) in edges.iter().enumerate() {
        let mut m = vec![*tag];
        m.extend_from_slice(e);
        if let Err(e) = t.send(pe, nb[k], &m) {
            pe.abort(&e.to_string());
        }
    }
    let mut halos: [Vec<f64>; 4] = Default::default();
    for src in nb {
        match t.recv(pe, src) {
            Ok(r) if !r.data().is_empty() => {
                let tag = usize::from(r.data()[0]).min(3);
                halos[tag] = f64s(&r.data()[1..]);
            }
            _ => pe.abort("halo exchange failed"),
        }
    }
    halos
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let n = pe.num_pes();
        let (rows, cols, b, steps) = match parse(pe.args(), n) {
            Ok(parsed) => parsed,
            Err(why) => {
                return pe.refuse_arguments(&format!("jacobi_torus: {why} (usage: {USAGE})"))
            }
        };
        let t = match Topology::torus2(rows, cols).and_then(|g| attach(pe, g)) {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => pe.abort(&e.to_string()),
        };
        let c = t.coords().unwrap_or_default();
        let (r0, c0) = (c[0] * b, c[1] * b);
        let mut u: Vec<f64> = (0..b * b)
            .map(|k| initial(r0 + k / b, c0 + k % b))
            .collect();
        let mut change = 0.0;
        for _ in 0..steps {
            let [up, down, left, right] = exchange(pe, &t, &u, b);
            let at = |i: isize, j: isize| -> f64 {
                match (i, j) {
                    (-1, j) => up[j as usize],
                    (i, _) if i == b as isize => down[0..b][j as usize],
                    (i, -1) => left[i as usize],
                    (i, j) if j == b as isize => right[i as usize],
                    (i, j) => u[i as usize * b + j as usize],
                }
            };
            let new: Vec<f64> = (0..b * b)
                .map(|k| {
                    let (i, j) = ((k / b) as isize, (k % b) as isize);
                    update(at(i - 1, j), at(i + 1, j), at(i, j - 1), at(i, j + 1))
                })
                .collect();
            let local = new
                .iter()
                .zip(&u)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            u = new;
            change = t
                .all_reduce(pe, &local.to_le_bytes(), ops::max_f64)
                .map(|v| f64s(&v).first().copied().unwrap_or(0.0))
                .unwrap_or_else(|e| pe.abort(&e.to_string()));
        }
        match t.gather(pe, 0, &bytes(u.iter().copied())) {
            Ok(Some(blocks)) => {
                let (h, w) = (rows * b, cols * b);
                let mut global = vec![0.0; h * w];
                for (p, blk) in blocks.iter().enumerate() {
                    let (pr, pc) = (p / cols, p % cols);
                    for (k, v) in f64s(blk).into_iter().enumerate() {
                        global[(pr * b + k / b) * w + pc * b + k % b] = v;
                    }
                }
                let ok = global == serial(h, w, steps);
                converse::input::out_line(&format!("jacobi on a {rows}x{cols} torus, {h}x{w} cells, {steps} steps: last change {change:.3e}, {}",
                    if ok { "matches the serial computation" } else { "DIFFERS from the serial computation" }));
                pe.exit(i32::from(!ok));
            }
            Ok(None) => {}
            Err(e) => pe.abort(&e.to_string()),
        }
    })
}

/// ROWS, COLS, B and STEPS, from the program's arguments on `n` PEs; why not, when they do
/// not fit.
fn parse(args: &[String], n: usize) -> Result<(usize, usize, usize, usize), String> {
    // argv may be empty (execve allows it): no indexing.
    let a = args.get(1..).unwrap_or(&[]);
    if let Some(extra) = a.get(4) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    let (rows, cols) = match a {
        [] => {
            let r = (1..=n)
                .filter(|&r| n.is_multiple_of(r) && r * r <= n)
                .max()
                .unwrap_or(1);
            (r, n / r)
        }
        [lone] => {
            return Err(format!(
                "ROWS and COLS go together, got only {lone:?} (B and STEPS come after them)"
            ))
        }
        [r, c, ..] => {
            let rows = number(Some(r.as_str()), "ROWS", 1, 1..=n)?;
            let cols = number(Some(c.as_str()), "COLS", 1, 1..=n)?;
            // Both at most n ≤ 2^20: the product does not overflow.
            if rows * cols != n {
                return Err(format!(
                    "ROWS × COLS must be the number of PEs, {n}, got {rows} × {cols}"
                ));
            }
            (rows, cols)
        }
    };
    // n ≤ 2^20 PEs, so B can be at least 2.
    let most_b = (MAX_CELLS / n).isqrt();
    let b = number(a.get(2).map(String::as_str), "B", most_b.min(8), 1..=most_b)
        .map_err(|e| format!("{e}: at most {MAX_CELLS} cells in all, over {n} PEs"))?;
    let steps = number(a.get(3).map(String::as_str), "STEPS", 20, 1..=MAX_STEPS)?;
    Ok((rows, cols, b, steps))
}
