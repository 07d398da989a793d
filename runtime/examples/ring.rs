//! A token goes around the ring of PEs a number of times, each PE adding its number to it.
//! PE 0 checks the sum at the end.
//!
//! `cargo run --release --example ring -- +p4 [LAPS]`

use std::process::ExitCode;

fn main() -> ExitCode {
    converse::run(|pe| {
        let laps: u64 = pe.args().get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
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
                    println!("token made {laps} laps of {n} PEs: sum {sum} (expected {expect})");
                    return pe.exit(if sum == expect { 0 } else { 1 });
                }
            }
            msg.payload_mut()[..8].copy_from_slice(&lap.to_le_bytes());
            msg.payload_mut()[8..16].copy_from_slice(&sum.to_le_bytes());
            let next = (pe.my_pe() + 1) % pe.num_pes();
            pe.forward(next, msg);
        });
        if pe.my_pe() == 0 {
            let m = converse::Message::new(16);
            // Lap and sum start at 0 (the zeroed payload); PE 0 counts a lap each time the
            // token comes back.
            let next = 1 % pe.num_pes();
            if next == 0 {
                println!("ring needs +p2 or more");
                return pe.exit(1);
            }
            pe.send_msg(next, token, m);
        }
    })
}
