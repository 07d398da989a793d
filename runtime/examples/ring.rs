//! A token goes around the ring of PEs a number of times, each PE adding its number to it.
//! PE 0 checks the sum at the end.
//!
//! `cargo run --release --example ring -- +p4 [LAPS]`: LAPS from 1 to 1000000 (default 10),
//! two PEs or more.

use converse::input::number;
use std::process::ExitCode;

const USAGE: &str = "ring [LAPS] +pN";

/// Most laps: LAPS × N × (N-1), the expected sum before halving, then stays below 2^60 even
/// with the most PEs a job can have (2^20), so neither it nor the token's sum can overflow.
const MAX_LAPS: u64 = 1_000_000;

fn main() -> ExitCode {
    converse::run(|pe| {
        let laps = match parse(pe.args(), pe.num_pes()) {
            Ok(laps) => laps,
            Err(why) => return pe.refuse_arguments(&format!("ring: {why} (usage: {USAGE})")),
        };
        let token = pe.register("token", move |pe, mut msg| {
            let word = |m: &converse::Message, i: usize| {
                m.payload()[i * 8..i * 8 + 8]
                    .try_into()
                    .map_or(0, u64::from_le_bytes)
            };
            let (mut lap, mut sum) = (word(&msg, 0), word(&msg, 1));
            let me = pe.my_pe() as u64;
            sum += me;
            if me == 0 {
                lap += 1;
                if lap == laps {
                    let n = pe.num_pes() as u64;
                    let expect = laps * n * (n - 1) / 2;
                    converse::input::out_line(&format!(
                        "token made {laps} laps of {n} PEs: sum {sum} (expected {expect})"
                    ));
                    return pe.exit(if sum == expect { 0 } else { 1 });
                }
            }
            msg.payload_mut()[..8].copy_from_slice(&lap.to_le_bytes());
            msg.payload_mut()[8..16].copy_from_slice(&sum.to_le_bytes());
            let next = (pe.my_pe() + 1) % pe.num_pes();
            pe.forward(next, msg);
        });
        if pe.my_pe() == 0 {
            // Lap and sum start at 0 (the zeroed payload); PE 0 counts a lap each time the
            // token comes back.
            pe.send_msg(1, token, converse::Message::new(16));
        }
    })
}

/// LAPS, from the program's arguments on a job of `pes` PEs; why not, when they do not fit.
fn parse(args: &[String], pes: usize) -> Result<u64, String> {
    if let Some(extra) = args.get(2) {
        return Err(format!("unexpected argument {extra:?}"));
    }
    if pes < 2 {
        return Err("the ring needs +p2 or more".into());
    }
    number(args.get(1).map(String::as_str), "LAPS", 10, 1..=MAX_LAPS)
}
