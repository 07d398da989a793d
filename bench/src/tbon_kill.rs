//! `bench tbon --kill N`: the tree overlay's failure recovery timed. A front-end makes a 4x8
//! network (failure recovery on), runs a stream of waves (a request down, one integer per
//! back-end summed up, 8 waves in flight), kills an internal process (SIGKILL, from outside)
//! and measures the time from the kill to the first wave sent after it that comes back whole
//! over the survivors, and the steady waves/s before and after. N networks per layer;
//! medians and extremes reported.

use anyhow::Context;
use converse_tbon::{
    self as tbon, topgen, Network, Rank, SyncMode, TbonError, FIRST_INTERNAL_RANK, TFILTER_NULL,
    TFILTER_SUM,
};
use std::path::Path;
use std::time::{Duration, Instant};

const ASK: i32 = 100;
const IN_FLIGHT: u32 = 8;

/// One network's figures.
#[derive(Clone, Copy)]
struct Kill {
    before_per_s: f64,
    recovery_ms: f64,
    after_per_s: f64,
}

pub(crate) fn run(layers: &[String], kills: usize, waves: usize) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the bench executable")?;
    let me = me.to_string_lossy().into_owned();
    let topo = topgen::TreeSpec::parse("g:4x8")
        .and_then(|s| topgen::generate(&s, &topgen::Placement::default()))?;
    converse::input::out_line(&format!(
        "{:>5} | {:>12} {:>12} {:>12} | {:>10} {:>10}",
        "layer", "kill->ok ms", "min ms", "max ms", "before/s", "after/s"
    ));
    for layer in layers {
        let mut runs = Vec::with_capacity(kills);
        for i in 0..kills {
            let dir =
                std::env::temp_dir().join(format!("bench_tbon_kill.{}.{i}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let dir_s = dir.to_string_lossy().into_owned();
            let mut settings = tbon::create::Settings::new(&me, &["tbon-kill-be", &dir_s]);
            settings.layer = layer.clone();
            settings.failure_recovery = Some(true);
            let victim = FIRST_INTERNAL_RANK + 1 + (i % 4) as Rank;
            let r = tbon::create_network_fe_with(&topo, &settings, tbon::Options::default, |net| {
                one(net, &dir, topo.num_nodes() - 1, victim, waves)
            });
            let _ = std::fs::remove_dir_all(&dir);
            runs.push(r.and_then(|r| r)?);
        }
        let mut ms: Vec<f64> = runs.iter().map(|k| k.recovery_ms).collect();
        ms.sort_by(f64::total_cmp);
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let before = median(&mut runs.iter().map(|k| k.before_per_s).collect());
        let after = median(&mut runs.iter().map(|k| k.after_per_s).collect());
        converse::input::out_line(&format!(
            "{:>5} | {:>12.1} {:>12.1} {:>12.1} | {:>10.0} {:>10.0}",
            layer,
            ms[ms.len() / 2],
            ms[0],
            ms[ms.len() - 1],
            before,
            after
        ));
    }
    converse::input::out_line(&format!("(4x8 tree, failure recovery on; {kills} kills of an internal process per layer; kill->ok: \
         from SIGKILL to the first wave sent after it answered whole, median and extremes; \
         waves/s: {waves} waves, {IN_FLIGHT} in flight, before the kill and once recovered, \
         medians)"));
    Ok(())
}

/// Waves `IN_FLIGHT` at a time on stream `s`; each answer is checked whole.
struct Pipe {
    s: tbon::Stream,
    sent: u32,
    got: u32,
    want: i32,
}

impl Pipe {
    /// One answer (keeping waves in flight): whether it was whole.
    fn step(&mut self, net: &mut Network<'_>) -> Result<bool, TbonError> {
        while self.sent < self.got + IN_FLIGHT {
            self.sent += 1;
            net.send(&self.s, ASK, "", ())?;
        }
        self.got += 1;
        match net.recv_on(&self.s) {
            Ok(p) => Ok(p.unpack::<i32>("%d")? == self.want),
            Err(TbonError::WaveLost { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `n` whole waves, timed: waves per second.
    fn rate(&mut self, net: &mut Network<'_>, n: usize) -> Result<f64, TbonError> {
        let t = Instant::now();
        for _ in 0..n {
            if !self.step(net)? {
                return Err(TbonError::Usage(format!("wave {} not whole", self.got)));
            }
        }
        Ok(n as f64 / t.elapsed().as_secs_f64())
    }
}

fn one(
    net: &mut Network<'_>,
    dir: &Path,
    others: usize,
    victim: Rank,
    waves: usize,
) -> Result<Kill, TbonError> {
    let until = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(dir).map_or(0, |d| d.count()) < others {
        if Instant::now() > until {
            return Err(TbonError::Usage(
                "processes did not leave their pids".into(),
            ));
        }
        net.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let comm = net.broadcast_communicator();
    let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)?;
    let mut pipe = Pipe {
        s,
        sent: 0,
        got: 0,
        want: comm.size() as i32,
    };
    pipe.rate(net, waves / 10)?;
    let before_per_s = pipe.rate(net, waves)?;
    let pid: i32 = std::fs::read_to_string(dir.join(victim.to_string()))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| TbonError::Usage(format!("no pid for rank {victim}")))?;
    let t = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .map_err(|e| TbonError::Usage(format!("kill: {e}")))?;
    let first_after = pipe.sent + 1;
    loop {
        if t.elapsed() > Duration::from_secs(30) {
            return Err(TbonError::Usage("no whole wave 30 s after the kill".into()));
        }
        if pipe.step(net)? && pipe.got >= first_after {
            break;
        }
    }
    let recovery_ms = t.elapsed().as_secs_f64() * 1e3;
    // Once the orphans are back, the steady rate again.
    while !net.orphan_nodes().is_empty() {
        if t.elapsed() > Duration::from_secs(30) {
            return Err(TbonError::Usage("orphans not re-connected in 30 s".into()));
        }
        pipe.step(net)?;
    }
    pipe.rate(net, waves / 10)?;
    let after_per_s = pipe.rate(net, waves)?;
    Ok(Kill {
        before_per_s,
        recovery_ms,
        after_per_s,
    })
}

/// `bench tbon-kill-be DIR`: every process but the front-end. It leaves its pid under its
/// rank; back-ends answer each request with 1.
pub(crate) fn backend(dir: &str) -> std::process::ExitCode {
    let dir = Path::new(dir).to_path_buf();
    converse::run(|pe| {
        let failed = match tbon::attach(pe, tbon::Options::default(), |_| {
            Err(TbonError::Create("started alone".into()))
        }) {
            Ok(net) => {
                serve(net, &dir);
                None
            }
            Err(e) => Some(e),
        };
        // Not started by a front-end: nobody would ever end this job. (After the match: the
        // attempt borrows the PE until then.)
        if let Some(e) = failed {
            converse::input::error_line(&format!(
                "bench: error: this process is one of a network's: {e}"
            ));
            pe.exit(2);
        }
    })
}

/// Leave this process's pid under its rank in `dir`; a back-end answers each request with 1.
fn serve(mut net: tbon::Network<'_>, dir: &Path) {
    let rank = net.rank().unwrap_or(Rank::MAX);
    let _ = std::fs::write(dir.join(rank.to_string()), std::process::id().to_string());
    if net.is_back_end() {
        while let Ok((s, p)) = net.recv() {
            if p.tag() == ASK && net.send(&s, ASK, "%d", 1).is_err() {
                break;
            }
        }
    }
    let _ = net.wait_for_shutdown();
}
