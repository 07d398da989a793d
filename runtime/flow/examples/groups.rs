//! The FastFlow thesis's sample application (seed 002, section 7.1): three groups in a
//! pipeline. G1 generates a stream of numbers, G2 squares them in a farm, G3 checks the sum.
//! Run as one group (no `--groups`), or split by a groups file; the transport between groups
//! is the job's layer, chosen by `+machine` only.
//!
//! ```text
//! groups [--items N] [--workers K] [--work-us U] [--groups FILE] [--plan] [--svg FILE] [--die-after M]
//!        [--group NAME --secret-file FILE [--wait-s S]]
//! ```
//!
//! With a groups file whose groups have addresses, each group is a job of its own: start one
//! job per group, each with `--group NAME`, and the same secret file (written once, e.g. by
//! `converse_flow::Secret::generate()?.write_file(path)`). The transport between the group
//! jobs is the address's scheme, a string: `tcp://HOST:PORT` or `si://NAME` (same host).
//!
//! ```text
//! group G1 pes 0 at tcp://10.0.0.1:7101
//! group G2 pes 0-1 at tcp://10.0.0.2:7102
//! group G3 pes 0 at tcp://10.0.0.3:7103
//! place G1 generate
//! place G2 square*
//! place G3 check
//! ```
//!
//! `--work-us` makes each square take that long (a stream that lasts), `--plan` prints where
//! each stage runs, `--die-after M` makes the process of `square[0]` exit after M items (to
//! see report mode end the flow with an error instead of a hang).
//!
//! ```text
//! # three groups, one per node: charmrun +p3 groups --groups three.txt +machine tcp
//! group G1 nodes 0
//! group G2 nodes 1
//! group G3 nodes 2
//! place G1 generate
//! place G2 square*
//! place G3 check
//! ```

use converse_flow::{pipeline, source, stage, Ctx, Farm, Flow, Groups, Item, Node, Source};
use std::path::Path;
use std::time::{Duration, Instant};

const USAGE: &str =
    "usage: groups [--items N] [--workers K] [--work-us U] [--groups FILE] [--plan] \
                     [--svg FILE] [--die-after M] [--group NAME --secret-file FILE [--wait-s S]]";

struct Generate {
    next: u64,
    n: u64,
}

impl Source for Generate {
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

struct Square {
    work: Duration,
    seen: u64,
    die_after: Option<u64>,
}

impl Node for Square {
    fn svc(&mut self, mut item: Item, ctx: &mut Ctx<'_>) {
        self.seen += 1;
        if self.die_after == Some(self.seen) {
            // A node of group G2 dies mid-stream (report mode ends the flow with an error).
            std::process::exit(3);
        }
        let t = Instant::now();
        while t.elapsed() < self.work {
            std::hint::spin_loop();
        }
        let x = item.u64().unwrap_or(0);
        item.bytes_mut().copy_from_slice(&(x * x).to_le_bytes());
        ctx.emit_item(item);
    }
}

struct Check {
    n: u64,
    count: u64,
    sum: u128,
}

impl Node for Check {
    fn svc(&mut self, item: Item, _ctx: &mut Ctx<'_>) {
        self.count += 1;
        self.sum += u128::from(item.u64().unwrap_or(0));
    }

    fn end(&mut self, ctx: &mut Ctx<'_>) {
        let n = u128::from(self.n);
        let want = n * (n + 1) * (2 * n + 1) / 6;
        if self.count == self.n && self.sum == want {
            converse::input::out_line(&format!(
                "flow groups: {} items, sum of squares {}: ok",
                self.count, self.sum
            ));
        } else {
            ctx.pe().abort(&format!(
                "flow groups: {} items, sum of squares {}: WRONG (expected {} items, {want})",
                self.count, self.sum, self.n
            ));
        }
    }
}

fn main() -> std::process::ExitCode {
    converse::run(|pe| {
        let args: Vec<String> = pe.args().to_vec();
        let (mut items, mut workers, mut work_us) = (Some(100_000u64), Some(4usize), Some(0u64));
        let (mut groups, mut plan, mut die_after) = (None, false, None);
        let mut svg: Option<String> = None;
        let (mut me, mut secret_file): (Option<String>, Option<String>) = (None, None);
        let mut wait_s = Some(30u64);
        let mut it = args.iter().skip(1);
        while let Some(a) = it.next() {
            let num = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
            match a.as_str() {
                "--items" => items = num(it.next()).filter(|&n| n >= 1),
                "--workers" => {
                    workers = num(it.next())
                        .filter(|n| (1..=4096).contains(n))
                        .map(|n| n as usize)
                }
                "--work-us" => work_us = num(it.next()).filter(|&u| u <= 10_000_000),
                "--die-after" => {
                    die_after = num(it.next())
                        .filter(|&m| m >= 1)
                        .map(Some)
                        .unwrap_or(Some(0))
                }
                "--groups" => match it.next() {
                    Some(f) => groups = Some(f.clone()),
                    None => {
                        return pe
                            .refuse_arguments(&format!("groups: --groups needs a file ({USAGE})"))
                    }
                },
                "--plan" => plan = true,
                "--wait-s" => wait_s = num(it.next()).filter(|s| (1..=3600).contains(s)),
                "--group" => match it.next() {
                    Some(g) => me = Some(g.clone()),
                    None => {
                        return pe
                            .refuse_arguments(&format!("groups: --group needs a name ({USAGE})"))
                    }
                },
                "--secret-file" => match it.next() {
                    Some(f) => secret_file = Some(f.clone()),
                    None => {
                        return pe.refuse_arguments(&format!(
                            "groups: --secret-file needs a file ({USAGE})"
                        ))
                    }
                },
                "--svg" => match it.next() {
                    Some(f) => svg = Some(f.clone()),
                    None => {
                        return pe
                            .refuse_arguments(&format!("groups: --svg needs a file ({USAGE})"))
                    }
                },
                other => {
                    return pe.refuse_arguments(&format!("groups: bad argument {other} ({USAGE})"))
                }
            }
        }
        let (Some(n), Some(k), Some(us)) = (items, workers, work_us) else {
            return pe.refuse_arguments(&format!(
                "groups: --items at least 1, --workers 1 to 4096, --work-us at most 10000000 ({USAGE})"
            ));
        };
        let Some(wait_s) = wait_s else {
            return pe.refuse_arguments(&format!("groups: --wait-s is 1 to 3600 ({USAGE})"));
        };
        if die_after == Some(0) {
            return pe.refuse_arguments(&format!("groups: --die-after at least 1 ({USAGE})"));
        }
        let mut flow = Flow::new(pipeline([
            source("generate", move || Generate { next: 1, n }),
            Farm::new(k, |i| {
                stage("square", move || Square {
                    work: Duration::from_micros(us),
                    seen: 0,
                    die_after: die_after.filter(|_| i == 0),
                })
            })
            .into(),
            stage("check", move || Check {
                n,
                count: 0,
                sum: 0,
            }),
        ]));
        if let Some(f) = &groups {
            match Groups::from_file(Path::new(f)) {
                Ok(g) => flow = flow.groups(g),
                Err(e) => return pe.refuse_arguments(&e.to_string()),
            }
        }
        if let Some(g) = &me {
            flow = flow
                .as_group(g)
                .connect_timeout(Duration::from_secs(wait_s));
        }
        if let Some(f) = &secret_file {
            match converse_flow::Secret::read_file(Path::new(f)) {
                Ok(s) => flow = flow.secret(s),
                Err(e) => return pe.refuse_arguments(&format!("groups: {e}")),
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
                        pe.abort(&format!("groups: writing {f}: {e}"));
                    }
                }
            }
            Ok(_) => {}
            // Another group's job not there: a failure of the run, not of the arguments.
            Err(e @ converse_flow::FlowError::Connect { .. }) => {
                converse::input::error_line(&e.to_string());
                pe.exit(1);
            }
            Err(e) => pe.refuse_arguments(&e.to_string()),
        }
    })
}
