//! Scatter an array from process 0 over a 2-D grid, let every process work on its piece
//! (square each number), gather the pieces back in process order and check the result.
//!
//! `scatter_gather [PER_PROCESS]`.

use converse_topo::{attach, Topology};

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let per: usize = pe
            .args()
            .get(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1000);
        let n = pe.num_pes();
        let rows = (1..=n)
            .filter(|&r| n.is_multiple_of(r) && r * r <= n)
            .max()
            .unwrap_or(1);
        let t = match Topology::grid2(rows, n / rows).and_then(|g| attach(pe, g)) {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => pe.abort(&e.to_string()),
        };
        let array: Vec<u8> = if t.id() == 0 {
            (0..(n * per) as u64).flat_map(u64::to_le_bytes).collect()
        } else {
            Vec::new()
        };
        let piece = match t.scatter(pe, 0, &array, per * 8) {
            Ok(p) => p,
            Err(e) => pe.abort(&e.to_string()),
        };
        let worked: Vec<u8> = piece
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .flat_map(|x| (x * x).to_le_bytes())
            .collect();
        match t.gather(pe, 0, &worked) {
            Ok(Some(pieces)) => {
                let all: Vec<u64> = pieces
                    .concat()
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                let ok = all.len() == n * per
                    && all.iter().enumerate().all(|(i, &v)| v == (i * i) as u64);
                println!(
                    "scattered {} numbers over a {rows}x{} grid, squared, gathered: {}",
                    n * per,
                    n / rows,
                    if ok { "ok" } else { "WRONG" }
                );
                pe.exit(i32::from(!ok));
            }
            Ok(None) => {}
            Err(e) => pe.abort(&e.to_string()),
        }
    })
}
