//! An all-to-all split over two groups (the FastFlow thesis's figures 6.1 and 6.2): numbers
//! go to two left workers, which key each by its value modulo 7 and send it to the right
//! worker its key names; each right worker sums per key and, at end of stream, hands its sums
//! to a report stage that prints them. The printed lines are the same whether the all-to-all
//! runs in one group or is cut horizontally into two (each with one left and one right
//! worker: the channels across the cut are *internal*, the one into the second group's left
//! worker *external*).
//!
//! ```text
//! a2a [--items N] [--groups FILE] [--plan] [--svg FILE] [--group NAME --secret-file FILE]
//! ```
//!
//! With addresses in the groups file (`group G1 pes 0 at si://a2a-1`), each group is a job of
//! its own, started with `--group NAME`: the all-to-all's internal channels then cross
//! between the jobs both ways.
//!
//! ```text
//! group G1 pes 0
//! group G2 pes 1
//! place G1 numbers L[0] R[0]
//! place G2 L[1] R[1] report
//! ```

use converse_flow::{pipeline, source, stage, AllToAll, Ctx, Flow, Groups, Item, Node, Source};
use std::collections::BTreeMap;
use std::path::Path;

const USAGE: &str =
    "usage: a2a [--items N] [--groups FILE] [--plan] [--svg FILE] [--group NAME --secret-file FILE]";
const KEYS: u64 = 7;

struct Numbers {
    next: u64,
    n: u64,
}

impl Source for Numbers {
    fn next(&mut self, ctx: &mut Ctx<'_>) -> bool {
        for _ in 0..8 {
            if self.next > self.n {
                break;
            }
            ctx.emit_u64(self.next);
            self.next += 1;
        }
        self.next <= self.n
    }
}

/// `(key, value)` as 16 bytes.
fn pair(k: u64, v: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&k.to_le_bytes());
    b[8..].copy_from_slice(&v.to_le_bytes());
    b
}

fn unpair(b: &[u8]) -> (u64, u64) {
    let k = b
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    let v = b
        .get(8..16)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    (k, v)
}

struct Key;

impl Node for Key {
    fn svc(&mut self, item: Item, ctx: &mut Ctx<'_>) {
        let x = item.u64().unwrap_or(0);
        ctx.emit(&pair(x % KEYS, x));
    }
}

#[derive(Default)]
struct Sums(BTreeMap<u64, (u64, u64)>);

impl Node for Sums {
    fn svc(&mut self, item: Item, _ctx: &mut Ctx<'_>) {
        let (k, v) = unpair(item.bytes());
        let e = self.0.entry(k).or_default();
        e.0 += 1;
        e.1 += v;
    }

    fn end(&mut self, ctx: &mut Ctx<'_>) {
        // Each sum as (key, count << 40 | sum): small enough for this example's numbers.
        for (&k, &(count, sum)) in &self.0 {
            let mut b = [0u8; 24];
            b[..16].copy_from_slice(&pair(k, sum));
            b[16..].copy_from_slice(&count.to_le_bytes());
            ctx.emit(&b);
        }
    }
}

#[derive(Default)]
struct Report(BTreeMap<u64, (u64, u64)>);

impl Node for Report {
    fn svc(&mut self, item: Item, _ctx: &mut Ctx<'_>) {
        let b = item.bytes();
        let (k, sum) = unpair(b);
        let count = b
            .get(16..24)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        let e = self.0.entry(k).or_default();
        e.0 += count;
        e.1 += sum;
    }

    fn end(&mut self, _ctx: &mut Ctx<'_>) {
        let mut total = 0u64;
        for (k, (count, sum)) in &self.0 {
            converse::input::out_line(&format!("a2a: key {k}: {count} items, sum {sum}"));
            total += sum;
        }
        converse::input::out_line(&format!("a2a: total {total}"));
    }
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let (mut items, mut groups, mut plan) = (Some(10_000u64), None, false);
        let mut svg: Option<String> = None;
        let (mut me, mut secret_file): (Option<String>, Option<String>) = (None, None);
        let mut it = args.iter().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--items" => {
                    items = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .filter(|&n: &u64| n >= 1)
                }
                "--groups" => match it.next() {
                    Some(f) => groups = Some(f.clone()),
                    None => {
                        return pe
                            .refuse_arguments(&format!("a2a: --groups needs a file ({USAGE})"))
                    }
                },
                "--plan" => plan = true,
                "--group" => match it.next() {
                    Some(g) => me = Some(g.clone()),
                    None => {
                        return pe.refuse_arguments(&format!("a2a: --group needs a name ({USAGE})"))
                    }
                },
                "--secret-file" => match it.next() {
                    Some(f) => secret_file = Some(f.clone()),
                    None => {
                        return pe.refuse_arguments(&format!(
                            "a2a: --secret-file needs a file ({USAGE})"
                        ))
                    }
                },
                "--svg" => match it.next() {
                    Some(f) => svg = Some(f.clone()),
                    None => {
                        return pe.refuse_arguments(&format!("a2a: --svg needs a file ({USAGE})"))
                    }
                },
                other => {
                    return pe.refuse_arguments(&format!("a2a: bad argument {other} ({USAGE})"))
                }
            }
        }
        let Some(n) = items else {
            return pe.refuse_arguments(&format!("a2a: --items at least 1 ({USAGE})"));
        };
        let a2a = AllToAll::new(2, |_| stage("L", || Key), 2, |_| stage("R", Sums::default))
            .route(|b, nr| (unpair(b).0 % nr as u64) as usize);
        let mut flow = Flow::new(pipeline([
            source("numbers", move || Numbers { next: 1, n }),
            a2a.into(),
            stage("report", Report::default),
        ]));
        if let Some(f) = &groups {
            match Groups::from_file(Path::new(f)) {
                Ok(g) => flow = flow.groups(g),
                Err(e) => return pe.refuse_arguments(&e.to_string()),
            }
        }
        if let Some(g) = &me {
            flow = flow.as_group(g);
        }
        if let Some(f) = &secret_file {
            match converse_flow::Secret::read_file(Path::new(f)) {
                Ok(s) => flow = flow.secret(s),
                Err(e) => return pe.refuse_arguments(&format!("a2a: {e}")),
            }
        }
        match flow.start(pe) {
            Ok(p) if pe.my_pe() == 0 => {
                if plan {
                    for line in p.describe().lines() {
                        converse::input::out_line(line);
                    }
                }
                if let Some(f) = &svg {
                    if let Err(e) = std::fs::write(f, p.to_svg()) {
                        pe.abort(&format!("a2a: writing {f}: {e}"));
                    }
                }
            }
            Ok(_) => {}
            Err(e) => pe.refuse_arguments(&e.to_string()),
        }
    })
}
