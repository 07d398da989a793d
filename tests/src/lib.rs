//! Running whole jobs from tests: a [`Launcher`] per way of starting a job, every run bounded
//! in time, and everything a run started killed when it ends.
//!
//! The conformance suite ([`conformance_suite!`]) is the same list of tests for every layer;
//! a layer's test file instantiates it with the launcher that starts jobs on that layer.

pub mod hosts;
pub mod netns;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a job is started.
#[derive(Debug, Clone)]
pub enum Launcher {
    /// The program itself with `+p N +machine NAME`: layers that need no launcher (`local`).
    Direct {
        /// The layer's `+machine` name.
        machine: &'static str,
    },
    /// `charmrun +p N PROGRAM ARGS +machine NAME`, with charmrun's own options.
    Charmrun {
        /// The layer's `+machine` name.
        machine: &'static str,
        /// Extra charmrun options (`++verbose`, `++nodelist FILE`, ...).
        opts: Vec<String>,
    },
    /// `mpirun -n N PROGRAM ARGS +machine NAME` (the MPI layer, or `si+mpi`), with the MPI
    /// launcher's own options.
    Mpirun {
        /// The layer's `+machine` name.
        machine: &'static str,
        /// Extra mpirun options.
        opts: Vec<String>,
        /// Two hosts as the composites see them: the second half of the ranks runs in a pid
        /// namespace of its own (`unshare -p -f`, needs root), so `si+mpi` reaches it over
        /// MPI and its own half through shared memory; MPI itself then goes over TCP
        /// (`--mca btl tcp,self`: Open MPI's shared memory does not cross pid namespaces).
        split: bool,
    },
    /// Another launcher's job in SMP mode: `ppn` PEs per process (`+ppn`, `++ppn`, or
    /// `mpirun -n N/ppn PROGRAM +ppn K`). The PE count given to [`command`](Self::command)
    /// stays the job's total.
    Smp {
        /// How the processes are started.
        inner: Box<Launcher>,
        /// PEs per process.
        ppn: usize,
    },
}

/// What a finished (or killed) job left.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code, `None` if killed by a signal.
    pub code: Option<i32>,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// Whether the time bound ended it.
    pub timed_out: bool,
}

impl Outcome {
    /// Lines of stdout that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> usize {
        self.stdout.lines().filter(|l| l.contains(needle)).count()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}{}\n--- stdout\n{}--- stderr\n{}",
            self.code,
            if self.timed_out {
                " (timed out, killed)"
            } else {
                ""
            },
            self.stdout,
            self.stderr
        )
    }
}

/// A fresh directory for one test's files (`charmrun-NAME-PID` in the temporary directory).
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("charmrun-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

/// Write an executable shell script `name` in `dir`; its path.
pub fn script(dir: &std::path::Path, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p.display().to_string()
}

/// charmrun, built next to the test programs (`cargo test --workspace` builds it), or one
/// directory up from an example.
pub fn charmrun_path(program: &str) -> std::path::PathBuf {
    let mut p = std::path::Path::new(program).with_file_name("charmrun");
    // An example lives in `examples/` beside the binaries.
    if !p.is_file() {
        if let Some(up) = p.parent().and_then(|d| d.parent()) {
            p = up.join("charmrun");
        }
    }
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --release -p charmrun` (or test the whole workspace)",
        p.display()
    );
    p
}

impl Launcher {
    /// The command that runs `program ARGS` on `pes` PEs.
    pub fn command(&self, program: &str, pes: usize, args: &[&str]) -> Command {
        match self {
            Launcher::Direct { machine } => {
                let mut c = Command::new(program);
                c.args(args)
                    .arg(format!("+p{pes}"))
                    .args(["+machine", machine]);
                c
            }
            Launcher::Charmrun { machine, opts } => {
                let mut c = Command::new(charmrun_path(program));
                c.arg(format!("+p{pes}"))
                    .args(opts)
                    .arg(program)
                    .args(args)
                    .args(["+machine", machine]);
                c
            }
            Launcher::Mpirun {
                machine,
                opts,
                split,
            } => {
                let mut c = Command::new("mpirun");
                c.envs(mpirun_env()).args(mpirun_options());
                let first = if *split && pes > 1 {
                    c.args(["--mca", "btl", "tcp,self"]);
                    pes / 2
                } else {
                    pes
                };
                c.args(["-n", &first.to_string()])
                    .args(opts)
                    .arg(program)
                    .args(args)
                    .args(["+machine", machine]);
                if first < pes {
                    c.args([":", "-n", &(pes - first).to_string()])
                        .args(opts)
                        .args(["unshare", "-p", "-f", program])
                        .args(args)
                        .args(["+machine", machine]);
                }
                c
            }
            Launcher::Smp { inner, ppn } => {
                let ppn_arg = ppn.to_string();
                match &**inner {
                    Launcher::Direct { .. } => {
                        let mut c = inner.command(program, pes, args);
                        c.args(["+ppn", &ppn_arg]);
                        c
                    }
                    Launcher::Charmrun { machine, opts } => {
                        let mut opts = opts.clone();
                        opts.extend(["++ppn".to_string(), ppn_arg]);
                        Launcher::Charmrun { machine, opts }.command(program, pes, args)
                    }
                    // Every program's arguments (an MPMD job's are given once per part).
                    Launcher::Mpirun { .. } | Launcher::Smp { .. } => {
                        let mut a = args.to_vec();
                        a.extend(["+ppn", ppn_arg.as_str()]);
                        inner.command(program, pes / ppn, &a)
                    }
                }
            }
        }
    }

    /// This launcher, in SMP mode with `ppn` PEs per process (itself when `ppn` is 1).
    pub fn with_ppn(self, ppn: usize) -> Launcher {
        if ppn == 1 {
            self
        } else {
            Launcher::Smp {
                inner: Box::new(self),
                ppn,
            }
        }
    }

    /// Run `program SCENARIO` on `pes` PEs (two minutes at most) and check that it exits 0
    /// and that every PE printed `PREFIX SCENARIO: PE N ok` once.
    pub fn expect_every_pe_ok(
        &self,
        program: &str,
        prefix: &str,
        scenario: &str,
        pes: usize,
    ) -> Outcome {
        let o = self.run(program, pes, &[scenario], Duration::from_secs(120));
        let oks = (0..pes)
            .filter(|p| o.lines_with(&format!("{prefix} {scenario}: PE {p} ok")) == 1)
            .count();
        assert!(
            o.code == Some(0) && oks == pes,
            "{scenario} on {pes} PEs via {self:?}: {oks} PEs ok\n{o}"
        );
        o
    }

    /// Run the `onesided` test program (`program`)'s `big` scenario on `pes` PEs — PE 0 gets
    /// and puts the last PE's region of `bytes`, whole and in ranges down to one byte, and
    /// checks every byte (two minutes at most) — and check that it exits 0 having said so.
    pub fn expect_big_transfers(&self, program: &str, pes: usize, bytes: usize) -> Outcome {
        let size = bytes.to_string();
        let o = self.run(program, pes, &["big", &size], Duration::from_secs(120));
        assert!(
            o.code == Some(0) && o.lines_with("onesided big: PE 0 ok") == 1,
            "{bytes} B on {pes} PEs via {self:?}:\n{o}"
        );
        o
    }

    /// The one-sided suite of a layer started by charmrun, for each `(machine, ppn, pes)`:
    /// the `onesided` program (`program`)'s `basics` on `pes` PEs when `big` is false, else its
    /// `big` scenario of 256 MiB (the issue's largest) on `2 * ppn` PEs, PE 0's and the last PE's
    /// processes apart.
    pub fn onesided_suite(program: &str, cases: &[(&'static str, usize, usize)], big: bool) {
        for &(machine, ppn, pes) in cases {
            let l = Launcher::Charmrun {
                machine,
                opts: vec![],
            }
            .with_ppn(ppn);
            if big {
                l.expect_big_transfers(program, 2 * ppn, 256 << 20);
            } else {
                l.expect_every_pe_ok(program, "onesided", "basics", pes);
            }
        }
    }

    /// PEs per process of this launcher's jobs.
    pub fn ppn(&self) -> usize {
        match self {
            Launcher::Smp { ppn, .. } => *ppn,
            _ => 1,
        }
    }

    /// Run `program ARGS` on `pes` PEs, killed after `limit`.
    pub fn run(&self, program: &str, pes: usize, args: &[&str], limit: Duration) -> Outcome {
        run_bounded(&mut self.command(program, pes, args), limit)
    }
}

/// Options every test passes to `mpirun`: Open MPI must be told to place more ranks than
/// cores (tests run 8 ranks on 2 cores); other MPIs need nothing.
pub fn mpirun_options() -> Vec<String> {
    let version = Command::new("mpirun")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if version.contains("Open MPI") || version.contains("OpenRTE") {
        vec!["--oversubscribe".into()]
    } else {
        Vec::new()
    }
}

/// What Open MPI's `mpirun` needs in its environment to start jobs as root (tests run as root
/// in CI); other MPIs ignore it.
pub fn mpirun_env() -> [(&'static str, &'static str); 2] {
    [
        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
    ]
}

/// Whether an `mpirun` is on the PATH.
pub fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A job running in the background, its output collected as it comes.
pub struct Running {
    child: std::process::Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    deadline: Instant,
    /// `finish` reaped the job; otherwise dropping the `Running` kills it (a test that fails
    /// between `start` and `finish` must not leave a job behind).
    reaped: bool,
}

// By hand: it holds sockets, threads and handles, which have no useful text form.
impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            kill_tree(self.child.id());
            let _ = self.child.wait();
        }
    }
}

/// SIGKILL `root`, everything below it, and their process groups. Launchers put each node in
/// a group of its own, so killing the launcher's group alone would leave the nodes to their
/// watchdogs; the tree is walked while `root` is still alive to hold it together.
pub fn kill_tree(root: u32) {
    use nix::sys::signal::{kill, killpg, Signal::SIGKILL};
    use nix::unistd::{getpgid, Pid};
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let kids = children_of(tree[i]);
        tree.extend(kids);
        i += 1;
    }
    for pid in tree {
        let pid = Pid::from_raw(pid as i32);
        if let Ok(group) = getpgid(Some(pid)) {
            let _ = killpg(group, SIGKILL);
        }
        let _ = kill(pid, SIGKILL);
    }
}

impl Running {
    /// Start `cmd` in a process group of its own; it will be killed at `limit` from now.
    pub fn start(cmd: &mut Command, limit: Duration) -> std::io::Result<Running> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn()?;
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let collect = |r: Option<Box<dyn Read + Send>>, into: Arc<Mutex<String>>| {
            std::thread::spawn(move || {
                let Some(mut r) = r else { return };
                let mut buf = [0u8; 8192];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut s) = into.lock() {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            })
        };
        let readers = vec![
            collect(
                child
                    .stdout
                    .take()
                    .map(|r| Box::new(r) as Box<dyn Read + Send>),
                out.clone(),
            ),
            collect(
                child
                    .stderr
                    .take()
                    .map(|r| Box::new(r) as Box<dyn Read + Send>),
                err.clone(),
            ),
        ];
        Ok(Running {
            child,
            out,
            err,
            readers,
            deadline: Instant::now() + limit,
            reaped: false,
        })
    }

    /// The process id of what was started (charmrun, or the program).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.err.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stdout so far.
    pub fn stdout_so_far(&self) -> String {
        self.out.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Wait until stdout has `count` lines containing `needle` (true), or the job ends or
    /// `limit` passes (false).
    pub fn wait_for_stdout_lines(&mut self, needle: &str, count: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            if self
                .stdout_so_far()
                .lines()
                .filter(|l| l.contains(needle))
                .count()
                >= count
            {
                return true;
            }
            if Instant::now() >= end || matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until stderr contains `needle` (true) or the job ends or `limit` passes (false).
    pub fn wait_for_stderr(&mut self, needle: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.stderr_so_far().contains(needle) {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return self.stderr_so_far().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Wait for the end (killing the whole process group at the deadline), reap, collect.
    pub fn finish(mut self) -> Outcome {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= self.deadline => {
                    timed_out = true;
                    kill_tree(self.child.id());
                    break self.child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        self.reaped = true;
        // Whatever the job left in its group (a stray grandchild) goes too.
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let take = |m: &Arc<Mutex<String>>| m.lock().map(|s| s.clone()).unwrap_or_default();
        Outcome {
            code: status.and_then(|s| s.code()),
            stdout: take(&self.out),
            stderr: take(&self.err),
            timed_out,
        }
    }
}

/// Run `cmd` in a process group of its own; after `limit`, kill the whole group. Always reaps.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Outcome {
    match Running::start(cmd, limit) {
        Ok(r) => r.finish(),
        Err(e) => Outcome {
            code: None,
            stdout: String::new(),
            stderr: format!("cannot start {cmd:?}: {e}"),
            timed_out: false,
        },
    }
}

/// Process ids whose parent is `parent` (from /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    // Field 4 (ppid) follows the ")" that ends the command name.
                    let rest = &s[s.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Wait until `parent` has `n` child processes (a launcher's nodes), up to `limit`; returns
/// them (fewer if the time ran out).
pub fn wait_for_children(parent: u32, n: usize, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let kids = children_of(parent);
        if kids.len() >= n || Instant::now() >= deadline {
            return kids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The node number charmrun gave process `pid` (its `CONVERSE_NODE`), once it has exec'd.
pub fn node_of(pid: u32) -> Option<usize> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"CONVERSE_NODE="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
}

/// Wait until `parent` (charmrun) has started nodes `0..n`; returns their pids indexed by node
/// number (if the time ran out, those of the nodes before the first missing one). Not [`wait_for_children`]'s order: that is the order of
/// pids, which wrap (a CI run starts tens of thousands of processes and pid_max may be 32768),
/// so the fourth child started may have the lowest pid.
pub fn wait_for_nodes(parent: u32, n: usize, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let mut nodes: Vec<(usize, u32)> = children_of(parent)
            .into_iter()
            .filter_map(|pid| Some((node_of(pid)?, pid)))
            .collect();
        nodes.sort_unstable();
        // Nodes 0, 1, … without a gap: a pid's place in the result is its node number, also
        // when the time runs out with a node missing (then only those before it).
        let known = nodes
            .iter()
            .take(n)
            .enumerate()
            .take_while(|&(i, &(k, _))| i == k)
            .count();
        if known == n || Instant::now() >= deadline {
            return nodes.into_iter().take(known).map(|(_, pid)| pid).collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.get(s.rfind(')')? + 2..).map(|r| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Run `ip ARGS` (iproute2); whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The sum over the nodes' `+stats` lines (in `stderr`) of the layer's counter `name`.
pub fn stats_field(stderr: &str, name: &str) -> u64 {
    let key = format!(" {name}=");
    stderr
        .lines()
        .filter(|l| l.starts_with("converse stats: node "))
        .filter_map(|l| {
            let (_, after) = l.split_once(&key)?;
            after.split(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Run a conformance scenario and require success with PE 0's "ok" line.
pub fn expect_ok(launcher: &Launcher, program: &str, pes: usize, args: &[&str]) -> Outcome {
    let o = launcher.run(program, pes, args, Duration::from_secs(120));
    let scenario = args.first().copied().unwrap_or("");
    assert!(
        o.code == Some(0) && o.lines_with(&format!("conformance {scenario}: ok")) == 1,
        "{scenario} on {pes} PEs via {launcher:?}:\n{o}"
    );
    o
}

/// Run the `flood` scenario (PE 1 stalls for 2 s while PE 0 sends it 512 MiB) with what a
/// node may hold for one peer set to 8 MiB, and check that PE 0's peak resident memory stayed
/// near that bound rather than near the 512 MiB it sent: within 88 MiB of the same job
/// flooding only 8 MiB (a layer's own fixed memory is not the sender's growth: rxm, under
/// `ofi+tcp`, keeps ~70 MiB of bounce buffers whatever is sent).
pub fn expect_bounded_flood(launcher: &Launcher, program: &str) {
    let flood = |mib: &str| {
        let o = launcher.run(
            program,
            2,
            &["flood", mib, "+set", "peer.max_queued_mib=8"],
            Duration::from_secs(120),
        );
        (peak_rss(&o), o)
    };
    let (base, _) = flood("8");
    let (peak, o) = flood("512");
    // 8 MiB held for the peer, the allocator's slack: far below 512.
    assert!(
        peak < base + 88,
        "PE 0 peaked at {peak} MiB (at {base} MiB flooding 8 MiB):\n{o}"
    );
}

/// Run the `backlog` scenario on two nodes (PE 0 sends 256 MiB to the last PE in 4 KiB
/// messages, and its handler works 20 µs on each, slower than they come) with what a PE may
/// hold waiting to run set to 8 MiB, and check that the last PE's peak resident memory stayed
/// near that bound rather than growing with what PE 0 sent (on TCP it reached 244 MiB without
/// the bound, with one PE per process or two). With several PEs per process, the inboxes its
/// communication thread fills are bounded too.
///
/// Measured against the same job sending only 8 MiB: a layer's own fixed memory (rxm's ~70 MiB
/// of bounce buffers under `ofi+tcp`) is not growth.
pub fn expect_bounded_backlog(launcher: &Launcher, program: &str) {
    let backlog = |mib: &str| {
        let o = launcher.run(
            program,
            2 * launcher.ppn(),
            &[
                "backlog",
                mib,
                "20",
                "4096",
                "+set",
                "sched.max_queued_mib=8",
            ],
            Duration::from_secs(120),
        );
        (peak_rss(&o), o)
    };
    let (base, _) = backlog("8");
    let (peak, o) = backlog("256");
    // 8 MiB queued, what the layer buffers (socket buffers, a ring, a window): far below 256.
    assert!(
        peak < base + 88,
        "the last PE peaked at {peak} MiB (at {base} MiB receiving 8 MiB):\n{o}"
    );
}

/// The peak resident memory, MiB, a scenario that ended well printed (`peak RSS N MiB`).
pub fn peak_rss(o: &Outcome) -> u64 {
    assert_eq!(o.code, Some(0), "{o}");
    o.stdout
        .split("peak RSS ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in the output:\n{o}"))
}

/// The one-sided suite of a layer started by charmrun, as tests (`onesided_suite!(&[("ucx", 1,
/// 3), ("ucx", 2, 4)])`): for each `(machine, ppn, pes)`, the `onesided` program's checks of
/// ranges, ordering and errors on `pes` PEs, and transfers of 256 MiB arriving whole
/// ([`Launcher::onesided_suite`]).
#[macro_export]
macro_rules! onesided_suite {
    ($cases:expr) => {
        #[test]
        fn gets_puts_ranges_ordering_and_errors() {
            $crate::Launcher::onesided_suite(env!("CARGO_BIN_EXE_onesided"), $cases, false);
        }

        #[test]
        fn transfers_of_256_mib_arrive_whole() {
            $crate::Launcher::onesided_suite(env!("CARGO_BIN_EXE_onesided"), $cases, true);
        }
    };
}

/// The limits every layer started by charmrun must hold at scale and toward a stalled peer,
/// as tests for the layer named (`launched_layer_limits!("tcp")`):
/// - 128 nodes, every pair talking, complete (TCP once closed peers' connections as strangers'
///   beyond 64 pending);
/// - a receiver that stops polling does not make its sender grow without limit
///   ([`expect_bounded_flood`]);
/// - a receiver slower than its sender does not grow without limit ([`expect_bounded_backlog`]).
#[macro_export]
macro_rules! launched_layer_limits {
    ($machine:literal) => {
        fn limits_launcher() -> $crate::Launcher {
            $crate::Launcher::Charmrun {
                machine: $machine,
                opts: vec![],
            }
        }

        #[test]
        fn a_128_node_all_to_all_completes() {
            $crate::expect_ok(
                &limits_launcher(),
                env!("CARGO_BIN_EXE_conformance"),
                128,
                &["alltoall", "200000"],
            );
        }

        #[test]
        fn memory_toward_a_stalled_peer_is_bounded() {
            $crate::expect_bounded_flood(&limits_launcher(), env!("CARGO_BIN_EXE_conformance"));
        }

        #[test]
        fn memory_of_a_receiver_slower_than_its_sender_is_bounded() {
            $crate::expect_bounded_backlog(&limits_launcher(), env!("CARGO_BIN_EXE_conformance"));
        }
    };
}

/// The conformance suite for one launcher: every layer must pass these unchanged.
///
/// ```ignore
/// converse_tests::conformance_suite!(converse_tests::Launcher::Direct { machine: "local" });
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($launcher:expr) => {
        $crate::conformance_suite!($launcher, ppn = 1);
    };
    ($launcher:expr, ppn = $ppn:literal) => {
        const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

        fn launcher() -> $crate::Launcher {
            match $ppn {
                1 => $launcher,
                ppn => $crate::Launcher::Smp {
                    inner: Box::new($launcher),
                    ppn,
                },
            }
        }

        /// A job of `n` processes: `n` times the PEs per process.
        fn pes(n: usize) -> usize {
            n * $ppn
        }

        #[test]
        fn hello_prints_one_line_per_pe() {
            for pes in [1, 2, 4, 8].map(pes) {
                let o = $crate::expect_ok(&launcher(), PROGRAM, pes, &["hello"]);
                for pe in 0..pes {
                    let line = format!("hello from PE {pe} of {pes}");
                    assert_eq!(o.lines_with(&line), 1, "{line}\n{o}");
                }
            }
        }

        #[test]
        fn fifo_per_pair() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(4), &["fifo"]);
        }

        #[test]
        fn broadcast_reaches_every_pe_exactly_once() {
            for pes in [1, 3, 7].map(pes) {
                $crate::expect_ok(&launcher(), PROGRAM, pes, &["broadcast"]);
            }
        }

        #[test]
        fn reduction_results() {
            for pes in [1, 2, 6].map(pes) {
                $crate::expect_ok(&launcher(), PROGRAM, pes, &["reduce"]);
            }
        }

        #[test]
        fn priority_order() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(2), &["priority"]);
        }

        #[test]
        fn exit_code_propagates() {
            for (n, code) in [(1, "3"), (4, "3"), (4, "42")] {
                let o = launcher().run(
                    PROGRAM,
                    pes(n),
                    &["exit-code", code],
                    std::time::Duration::from_secs(60),
                );
                assert_eq!(o.code, code.parse().ok(), "{o}");
            }
        }

        #[test]
        fn handler_mismatch_is_a_clear_error() {
            // 3 PEs: the last is PE 0's child; 9 PEs: PE 8 is a grandchild, reported via PE 1.
            for n in [3, 9] {
                let last = pes(n) - 1;
                let o = launcher().run(
                    PROGRAM,
                    pes(n),
                    &["mismatch"],
                    std::time::Duration::from_secs(60),
                );
                assert_ne!(o.code, Some(0), "{o}");
                assert!(!o.timed_out, "{o}");
                let want = format!("'only-on-the-last-pe' on PE {last}");
                assert!(
                    o.stderr.contains("handler tables differ between PEs")
                        && o.stderr.contains(&want),
                    "{want}\n{o}"
                );
                assert_eq!(o.lines_with("conformance mismatch: ok"), 0, "{o}");
            }
        }

        #[test]
        fn one_million_messages_all_to_all() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(4), &["alltoall", "1000000"]);
        }

        #[test]
        fn messages_from_0_bytes_to_64_mib() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(2), &["sizes", "67108864"]);
        }

        #[test]
        fn a_panicking_pe_ends_the_whole_job() {
            let last = pes(3) - 1;
            let o = launcher().run(
                PROGRAM,
                pes(3),
                &["panic"],
                std::time::Duration::from_secs(60),
            );
            assert!(!o.timed_out, "{o}");
            assert!(o.code.is_some_and(|c| c != 0), "{o}");
            assert!(
                o.stderr.contains(&format!("deliberate panic on PE {last}")),
                "{o}"
            );
            // "PE 2: panicked", or "PE 5 (node 2): panicked" with several PEs per node.
            let named = match $ppn {
                1 => format!("PE {last}: panicked; ending the job"),
                ppn => format!("PE {last} (node {}): panicked; ending the job", last / ppn),
            };
            assert!(o.stderr.contains(&named), "{named}\n{o}");
            assert_eq!(o.lines_with("passed the barrier"), 0, "{o}");
        }

        #[test]
        fn nested_scheduling_timers_and_barrier_then() {
            for pes in [1, 2, 5].map(pes) {
                $crate::expect_ok(&launcher(), PROGRAM, pes, &["scheduling"]);
            }
        }

        #[test]
        fn exit_right_after_a_large_send_does_not_hang() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(3), &["exit-after-send"]);
        }

        #[test]
        fn exit_during_start_up_ends_the_job() {
            let o = launcher().run(
                PROGRAM,
                pes(4),
                &["exit-early"],
                std::time::Duration::from_secs(60),
            );
            assert_eq!(o.code, Some(5), "{o}");
        }

        #[test]
        fn idle_pes_block_and_callbacks_fire() {
            $crate::expect_ok(&launcher(), PROGRAM, pes(4), &["idle"]);
        }
    };
}

/// The ports of process `pid`'s sockets of protocol `proto` (`"tcp"` or `"udp"`, IPv4): for a
/// TCP socket only those listening. Read from /proc (the socket inodes among its descriptors,
/// then the kernel's table of the process's network namespace).
pub fn socket_ports(pid: u32, proto: &str) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/{proto}")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            // TCP's state 0A: listening.
            let listening = proto != "tcp" || f.get(3) == Some(&"0A");
            (listening && inodes.contains(&(*f.get(9)?).to_owned())).then_some(port)
        })
        .collect()
}
