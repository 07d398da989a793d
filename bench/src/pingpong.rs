//! Ping-pong between PE 0 and PE 1 on a layer, driven by handlers as an application would be:
//! PE 1 forwards the message back as it came, PE 0 times each round trip and sends the same
//! buffer again. The raw baseline for the layer runs first, in the same process.

use crate::raw;
use crate::report::{self, histogram, Row};
use converse::{Message, Runtime};
use hdrhistogram::Histogram;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

struct State {
    sizes: Vec<usize>,
    iters: u64,
    warmup: u64,
    size_idx: usize,
    done: u64,
    sent_at: Instant,
    hist: Histogram<u64>,
    rows: Vec<Row>,
    finished: bool,
}

pub fn run(layer: &str, sizes: &[usize], iters: u64, csv: Option<&Path>) -> anyhow::Result<()> {
    let warmup = (iters / 10).max(10);
    let raw_rows: Vec<Row> = match layer {
        "local" => sizes
            .iter()
            .map(|&s| raw::crossbeam_pingpong(s, iters, warmup))
            .collect::<anyhow::Result<_>>()?,
        other => anyhow::bail!("no raw baseline for layer '{other}' yet"),
    };
    let rt = Runtime::from_args(["bench", "+p2", "+quiet", "+machine", layer])?;
    let sizes = sizes.to_vec();
    let layer_name = layer.to_owned();
    let raw_rows = &raw_rows;
    let code = rt.run(move |pe| {
        let state = Rc::new(RefCell::new(State {
            sizes: sizes.clone(),
            iters,
            warmup,
            size_idx: 0,
            done: 0,
            sent_at: Instant::now(),
            hist: histogram().unwrap_or_else(|e| pe.abort(&e.to_string())),
            rows: Vec::new(),
            finished: false,
        }));
        let st = state.clone();
        let layer_name = layer_name.clone();
        let ball = pe.register("ball", move |pe, msg| {
            if pe.my_pe() == 1 {
                return pe.forward(0, msg);
            }
            let now = Instant::now();
            let mut s = st.borrow_mut();
            if s.done >= s.warmup {
                let ns = (now - s.sent_at).as_nanos() as u64 / 2;
                // Values beyond the histogram's minute are clamped, not refused.
                s.hist.saturating_record(ns.max(1));
            }
            s.done += 1;
            let msg = if s.done < s.iters + s.warmup {
                msg
            } else {
                let size = s.sizes[s.size_idx];
                let row = Row::from_hist(&layer_name, size, &s.hist);
                s.rows.push(row);
                s.hist.reset();
                s.done = 0;
                s.size_idx += 1;
                match s.sizes.get(s.size_idx) {
                    Some(&next) => {
                        let mut m = Message::new(next);
                        m.set_handler(msg.handler());
                        m
                    }
                    None => {
                        s.finished = true;
                        return;
                    }
                }
            };
            s.sent_at = Instant::now();
            drop(s);
            pe.forward(1, msg);
        });
        if pe.my_pe() == 0 {
            let first = state.borrow().sizes.first().copied();
            if let Some(size) = first {
                state.borrow_mut().sent_at = Instant::now();
                pe.send_msg(1, ball, Message::new(size));
            }
            let st = state.clone();
            pe.run_until(|_| st.borrow().finished);
            let s = state.borrow();
            report::print_pingpong(&s.rows, raw_rows);
            if let Some(path) = csv {
                let all: Vec<&Row> = s.rows.iter().chain(raw_rows.iter()).collect();
                if let Err(e) = report::write_csv(path, &all) {
                    eprintln!("bench: {e:#}");
                }
            }
            drop(s);
            pe.exit(0);
        }
    })?;
    println!(
        "(one-way = round trip / 2; {iters} timed round trips per size after {warmup} warm-up)"
    );
    anyhow::ensure!(code == 0, "the ping-pong job exited with {code}");
    Ok(())
}
