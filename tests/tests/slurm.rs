//! charmrun under a real Slurm: the test starts munged, slurmctld and slurmd (Debian's
//! slurm-wlm and munge) on this machine with a generated one-host configuration in a temporary
//! directory, then runs jobs inside allocations (`salloc`). Where Slurm cannot start here
//! (no packages, not root, daemons that do not come up), the test says why and is skipped.

use converse_tests::{run_bounded, Outcome};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");

/// Slots the one host offers (more than it has cores: the jobs are tiny).
const CPUS: usize = 8;

/// A one-host Slurm cluster, ended (daemons killed, files removed) when dropped.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
}

fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .ok()
}

fn have(program: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(program).is_file())
}

impl Slurm {
    /// Start it, or `None` after saying why it cannot start here.
    fn start(tag: &str) -> Option<Slurm> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: running slurmd and slurmctld here needs root");
            return None;
        }
        for p in [
            "munged",
            "mungekey",
            "slurmctld",
            "slurmd",
            "salloc",
            "srun",
            "sinfo",
        ] {
            if !have(p) {
                eprintln!(
                    "skipped: {p} is not installed (Debian: apt-get install slurm-wlm munge)"
                );
                return None;
            }
        }
        let dir = std::env::temp_dir().join(format!("cv-slurm-{}{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["state", "spool", "munge"] {
            if std::fs::create_dir_all(dir.join(d)).is_err() {
                eprintln!("skipped: cannot make {}", dir.display());
                return None;
            }
        }
        let mut s = Slurm {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        let d = s.dir.clone();
        let chmod = |p: &Path, mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        };
        chmod(&d.join("munge"), 0o700);
        let key = d.join("munge/munge.key");
        let made = Command::new("mungekey")
            .args(["-c", "-b", "1024", "-k"])
            .arg(&key)
            .status()
            .is_ok_and(|st| st.success());
        if !made {
            eprintln!("skipped: mungekey could not make a key");
            return None;
        }
        chmod(&key, 0o600);
        let sock = d.join("munge/sock");
        let munged = Command::new("munged")
            .args(["-F", "-f"])
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", d.join("munge/log").display()))
            .arg(format!("--pid-file={}", d.join("munge/pid").display()))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match munged {
            Ok(c) => s.daemons.push(c),
            Err(e) => {
                eprintln!("skipped: munged does not start: {e}");
                return None;
            }
        }
        if !wait_for(Duration::from_secs(5), || sock.exists()) {
            eprintln!("skipped: munged did not open its socket:\n{}", s.logs());
            return None;
        }
        let (Some(ctld_port), Some(d_port)) = (free_port(), free_port()) else {
            eprintln!("skipped: no free port");
            return None;
        };
        let host = converse_tests_hostname();
        let conf = format!(
            "ClusterName=cvtest\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
             AuthInfo=socket={sock}\nCryptoType=crypto/munge\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\nProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             SlurmdParameters=config_overrides\nMpiDefault=none\nReturnToService=2\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            sock = sock.display(),
            d = d.display(),
        );
        if std::fs::write(&s.conf, conf).is_err() {
            eprintln!("skipped: cannot write {}", s.conf.display());
            return None;
        }
        for daemon in ["slurmctld", "slurmd"] {
            let c = Command::new(daemon)
                .arg("-D")
                .arg("-f")
                .arg(&s.conf)
                .env("SLURM_CONF", &s.conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match c {
                Ok(c) => s.daemons.push(c),
                Err(e) => {
                    eprintln!("skipped: {daemon} does not start: {e}");
                    return None;
                }
            }
        }
        let idle = wait_for(Duration::from_secs(20), || {
            Command::new("sinfo")
                .args(["-h", "-o", "%t"])
                .env("SLURM_CONF", &s.conf)
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        if !idle {
            eprintln!("skipped: the Slurm node did not become idle:\n{}", s.logs());
            return None;
        }
        Some(s)
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for f in ["munge/log", "slurmctld.log", "slurmd.log"] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            out.push_str(&format!("--- {f}\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// `salloc -N1 -n TASKS charmrun ARGS` (charmrun inside a one-host allocation).
    fn salloc(&self, tasks: usize, args: &[&str]) -> Outcome {
        let mut cmd = Command::new("salloc");
        cmd.args(["-N1", &format!("-n{tasks}"), "--time=2"])
            .arg(converse_tests::charmrun_path(PROGRAM))
            .args(args)
            .env("SLURM_CONF", &self.conf);
        run_bounded(&mut cmd, Duration::from_secs(60))
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Jobs end first (a step's slurmstepd waits for the daemons to hear of its end).
        let _ = Command::new("scancel")
            .args(["--full", "--user=root"])
            .env("SLURM_CONF", &self.conf)
            .output();
        wait_for(Duration::from_secs(10), || {
            Command::new("squeue")
                .arg("-h")
                .env("SLURM_CONF", &self.conf)
                .output()
                .is_ok_and(|o| o.stdout.is_empty())
        });
        // slurmd first, so no job step outlives it; then the controller, then munge.
        for c in self.daemons.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Whatever this cluster's slurmd started and is still there (a step daemon that
        // lost its slurmd) carries its configuration in its environment.
        let mark = format!("SLURM_CONF={}", self.conf.display());
        for p in std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        {
            let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
            if String::from_utf8_lossy(&env).split('\0').any(|v| v == mark) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_for(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

fn converse_tests_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

#[test]
fn inside_an_allocation_charmrun_places_nodes_on_its_hosts_and_mpiexec_goes_through_srun() {
    let Some(slurm) = Slurm::start("a") else {
        return;
    };
    // No nodelist: the allocation's one host, one agent there started with srun.
    let o = slurm.salloc(
        1,
        &["+p4", "++verbose", PROGRAM, "broadcast", "+machine", "tcp"],
    );
    assert_eq!(o.code, Some(0), "{o}\n{}", slurm.logs());
    assert_eq!(o.lines_with("conformance broadcast: ok"), 1, "{o}");
    assert!(
        o.stderr.contains("in a Slurm allocation of 1 host(s)"),
        "{o}"
    );
    assert!(o.stderr.contains("4 of 4 in all"), "{o}");
    // The job's exit code comes through srun and the agent.
    let o = slurm.salloc(1, &["+p2", PROGRAM, "exit-code", "7", "+machine", "tcp"]);
    assert_eq!(o.code, Some(7), "{o}");
    // ++mpiexec with srun as the launcher: one agent per node, every layer charmrun starts
    // (the composites too: they were once handed to srun as if they were MPI's).
    for layer in ["tcp", "udp", "si", "si+tcp", "si+udp"] {
        let o = slurm.salloc(
            4,
            &[
                "+p4",
                "++mpiexec",
                "++remote-shell",
                "srun",
                PROGRAM,
                "reduce",
                "+machine",
                layer,
            ],
        );
        assert_eq!(o.code, Some(0), "{layer}: {o}\n{}", slurm.logs());
        assert_eq!(o.lines_with("conformance reduce: ok"), 1, "{layer}: {o}");
    }
}

/// Processes running `PROGRAM` with `arg` among their arguments.
fn programs_with(arg: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let c = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let c = String::from_utf8_lossy(&c);
            c.starts_with(PROGRAM) && c.split('\0').any(|a| a == arg)
        })
        .collect()
}

#[test]
fn killing_charmrun_in_an_allocation_leaves_no_node_behind() {
    let Some(slurm) = Slurm::start("b") else {
        return;
    };
    let mut cmd = Command::new("salloc");
    cmd.args(["-N1", "-n1", "--time=2"])
        .arg(converse_tests::charmrun_path(PROGRAM))
        .args(["+p3", PROGRAM, "wait", "61", "+machine", "tcp"])
        .env("SLURM_CONF", &slurm.conf);
    let mut job =
        converse_tests::Running::start(&mut cmd, Duration::from_secs(60)).expect("salloc");
    assert!(
        job.wait_for_stdout_lines("waits 61 s", 3, Duration::from_secs(30)),
        "{}\n{}",
        job.stderr_so_far(),
        slurm.logs()
    );
    let nodes = programs_with("61");
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    let charmrun = converse_tests::children_of(job.pid())
        .into_iter()
        .find(|&p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("charmrun"))
        })
        .expect("charmrun runs under salloc");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(charmrun as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        wait_for(Duration::from_secs(10), || programs_with("61").is_empty()),
        "left: {:?}",
        programs_with("61")
    );
    drop(job);
}
