//! `bench tbon-attach`: back-ends in C (MRNet's lightweight API,
//! `runtime/tbon/lightweight/examples/c_backend.c`) beside back-ends in Rust
//! (`converse_tbon::BackEnd`), attached to the leaves of the same tree: the round trip of a
//! one-integer wave (the front-end broadcasts, the back-ends answer, the tree sums), in
//! rounds that alternate which kind goes first.
//!
//! Each measurement is a job of its own: `charmrun +pP ++local bench tbon-attach-net TREE
//! FILE N ITERS +machine tcp` makes the network and times the waves, and N back-ends of one
//! kind attach to it.

use converse_tbon::{self as tbon, topgen, AttachFile, BackEnd, Options, SyncMode, TFILTER_SUM};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUM: i32 = 100;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Rust,
    C,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rust => "Rust",
            Kind::C => "C",
        }
    }
}

/// Kills and reaps the processes of one measurement however it ends.
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn run(backends: usize, rounds: usize, iters: usize, tree: &str) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let charmrun = crate::pingpong::charmrun_beside(&me)?;
    let spec = topgen::TreeSpec::parse(tree).map_err(|e| anyhow::anyhow!("--tree: {e}"))?;
    let pes = topgen::generate(&spec, &topgen::Placement::default())?.num_nodes();
    let dir = std::env::temp_dir().join(format!("bench-tbon-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cbe = c_backend(&me, &dir)?;
    converse::input::out_line(&format!(
        "tbon attach: {backends} back-ends on the leaves of {tree} ({pes} processes, tcp), \
         one-int wave round trip p50 (us), {iters} waves a run"
    ));
    converse::input::out_line("round  Rust      C         C/Rust");
    let mut rust = Vec::new();
    let mut c = Vec::new();
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [Kind::Rust, Kind::C]
        } else {
            [Kind::C, Kind::Rust]
        };
        let mut got = [0.0; 2];
        for k in order {
            let x = one(k, &me, &charmrun, &cbe, &dir, tree, pes, backends, iters)?;
            got[usize::from(k == Kind::C)] = x;
        }
        converse::input::out_line(&format!(
            "{:<6} {:<9.1} {:<9.1} {:.2}",
            r + 1,
            got[0],
            got[1],
            got[1] / got[0]
        ));
        rust.push(got[0]);
        c.push(got[1]);
    }
    let ratios: Vec<f64> = rust.iter().zip(&c).map(|(a, b)| b / a).collect();
    let (m, lo, hi) = (median(&rust), min(&rust), max(&rust));
    converse::input::out_line(&format!("Rust back-ends: {m:.1} us ({lo:.1}-{hi:.1})"));
    let (m, lo, hi) = (median(&c), min(&c), max(&c));
    converse::input::out_line(&format!("C back-ends:    {m:.1} us ({lo:.1}-{hi:.1})"));
    let (m, lo, hi) = (median(&ratios), min(&ratios), max(&ratios));
    converse::input::out_line(&format!(
        "C / Rust:       {m:.2} ({lo:.2}-{hi:.2}) median of {rounds} rounds"
    ));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// The C back-end, compiled with the system C compiler against the library beside `bench`.
fn c_backend(me: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let lib_dir = me.with_file_name("");
    anyhow::ensure!(
        lib_dir.join("libmrnet_lightweight.so").is_file(),
        "{} not found: build it (cargo build --release -p converse-tbon-lightweight)",
        lib_dir.join("libmrnet_lightweight.so").display()
    );
    let lw = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/tbon/lightweight");
    let exe = dir.join("c_backend");
    let o = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(lw.join("examples/c_backend.c"))
        .arg("-I")
        .arg(lw.join("include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lmrnet_lightweight")
        .output()?;
    anyhow::ensure!(
        o.status.success(),
        "cc c_backend.c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(exe)
}

/// One measurement: a network, `n` back-ends of `kind`, the front-end's p50.
#[allow(clippy::too_many_arguments)]
fn one(
    kind: Kind,
    me: &Path,
    charmrun: &Path,
    cbe: &Path,
    dir: &Path,
    tree: &str,
    pes: usize,
    n: usize,
    iters: usize,
) -> anyhow::Result<f64> {
    let file = dir.join(format!("attach-{}.txt", kind.name()));
    let _ = std::fs::remove_file(&file);
    let mut fe = Command::new(charmrun)
        .arg(format!("+p{pes}"))
        .arg("++local")
        .arg(me)
        .args(["tbon-attach-net", tree])
        .arg(&file)
        .args([n.to_string(), iters.to_string()])
        .args(["+machine", "tcp", "+quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = fe.stdout.take();
    let mut procs = Reap(vec![fe]);
    let f = AttachFile::read_waiting(&file, Duration::from_secs(60))?;
    for i in 0..n {
        let rank = i as u32;
        let leaf = &f.points[i % f.points.len()];
        let child = match kind {
            Kind::Rust => Command::new(me)
                .arg("tbon-attach-be")
                .arg(&file)
                .arg(rank.to_string())
                .stdout(Stdio::null())
                .spawn()?,
            Kind::C => Command::new(cbe)
                .args([
                    leaf.host.clone(),
                    leaf.port.to_string(),
                    leaf.rank.to_string(),
                    "localhost".into(),
                    rank.to_string(),
                ])
                .env("CONVERSE_TBON_SECRET_FILE", &file)
                .stdout(Stdio::null())
                .spawn()?,
        };
        procs.0.push(child);
    }
    let Some(out) = out else {
        anyhow::bail!("no output from the front-end");
    };
    let mut p50 = None;
    for line in BufReader::new(out).lines() {
        let line = line?;
        if let Some(v) = line.strip_prefix("tbon-attach p50_us ") {
            p50 = v.trim().parse().ok();
        }
    }
    for c in &mut procs.0 {
        c.wait()?;
    }
    p50.ok_or_else(|| anyhow::anyhow!("the front-end gave no figure ({} back-ends)", kind.name()))
}

/// `bench tbon-attach-net TREE FILE N ITERS` (every PE): the network; the front-end waits for
/// N back-ends, then times ITERS waves and prints `tbon-attach p50_us X`.
pub(crate) fn net(args: &[String]) -> std::process::ExitCode {
    let args = args.to_vec();
    converse::run(move |pe| {
        let tree = args.first().cloned().unwrap_or_else(|| "g:2".into());
        let file = args.get(1).cloned().unwrap_or_default();
        let n: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(1);
        let iters: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(1000);
        let topology = |_: &converse::Pe| {
            let spec = topgen::TreeSpec::parse(&tree)
                .map_err(|e| converse_tbon::TbonError::Usage(e.to_string()))?;
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        };
        let mut net = match tbon::attach(pe, Options::default().attach_backends(true), topology) {
            Ok(net) => net,
            Err(e) => {
                converse::input::error_line(&format!("bench tbon-attach-net: {e}"));
                return;
            }
        };
        if !net.is_front_end() {
            let _ = net.wait_for_shutdown();
            return;
        }
        let r = (|| -> Result<f64, converse_tbon::TbonError> {
            net.write_attach_file(Path::new(&file))?;
            let have = net.wait_for_backends(n, Duration::from_secs(60))?;
            if have < n {
                return Err(converse_tbon::TbonError::Usage(format!(
                    "{have} of {n} back-ends attached"
                )));
            }
            let comm = net.broadcast_communicator();
            let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0)?;
            let want: i32 = (0..n as i32).map(|r| r + 1).sum();
            let mut times = Vec::with_capacity(iters);
            for i in 0..iters + iters / 10 {
                let t = Instant::now();
                net.send(&s, SUM, "%d", 1)?;
                let got: i32 = net.recv_on(&s)?.unpack("%d")?;
                if got != want {
                    return Err(converse_tbon::TbonError::Usage(format!(
                        "a wave summed to {got}, not {want}"
                    )));
                }
                if i >= iters / 10 {
                    times.push(t.elapsed());
                }
            }
            times.sort_unstable();
            Ok(times
                .get(times.len() / 2)
                .map_or(0.0, |d| d.as_secs_f64() * 1e6))
        })();
        match r {
            Ok(p50) => converse::input::out_line(&format!("tbon-attach p50_us {p50:.2}")),
            Err(e) => converse::input::error_line(&format!("bench tbon-attach-net: {e}")),
        }
        let _ = net.shutdown();
        net.exit(0);
    });
    std::process::ExitCode::SUCCESS
}

/// `bench tbon-attach-be FILE RANK`: a back-end in Rust answering as the C one does.
pub(crate) fn backend(file: &str, rank: u32) -> anyhow::Result<()> {
    let f = AttachFile::read(Path::new(file))?;
    let leaf = &f.points[rank as usize % f.points.len()];
    let mut be = BackEnd::attach(leaf, rank, &f.secret)?;
    loop {
        let (s, p) = match be.recv() {
            Ok(x) => x,
            Err(converse_tbon::TbonError::ShutDown) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if p.tag() == SUM {
            let v: i32 = p.unpack("%d")?;
            be.send(&s, SUM, "%d", rank as i32 + v)?;
        }
    }
}
