//! Scatter an array from process 0 over a 2-D grid, let every process work on its piece
//! (square each number), gather the pieces back in process order and check the result.
//!
//! `scatter_gather [PER_PROCESS]`: PER_PROCESS from 1, with PER_PROCESS × processes at most
//! 4194304 numbers (default 1000, or fewer when the processes are too many for that).

use converse::input::number;
use converse_topo::{attach, Topology};

const USAGE: &str = "scatter_gather [PER_PROCESS] +pN";

/// Most numbers in all: 32 MiB of them, held a few times over (the array, the pieces, the
/// squares, the gathered result), so the job's memory is bounded; and the largest square,
/// below 2^44, cannot overflow.
const MAX_NUMBERS: usize = 1 << 22;

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let n = pe.num_pes();
        let per = match parse(pe.args(), n) {
            Ok(per) => per,
            Err(why) => {
                return pe.refuse_arguments(&format!("scatter_gather: {why} (usage: {USAGE})"))
            }
        };
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
                converse::input::out_line(&format!(
                    "scattered {} numbers over a {rows}x{} grid, squared, gathered: {}",
                    n * per,
                    n / rows,
                    if ok { "ok" } else { "WRONG" }
                ));
                pe.exit(i32::from(!ok));
            }
            Ok(None) => {}
            Err(e) => pe.abort(&e.to_string()),
        }
    })
}

/// PER_PROCESS, from the program's arguments on `n` processes; why not, when they do not fit.
fn parse(args: &[String], n: usize) -> Result<usize, String> {
    if let Some(extra) = args.get(2) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    // n ≤ 2^20 PEs, so at least 4 numbers a process fit.
    let most = MAX_NUMBERS / n;
    number(
        args.get(1).map(String::as_str),
        "PER_PROCESS",
        most.min(1000),
        1..=most,
    )
    .map_err(|e| format!("{e}: at most {MAX_NUMBERS} numbers in all, over {n} processes"))
}
