//! A front-end that makes its network itself, and its back-end, in one program:
//!
//! ```text
//! tbon_create teardown TREE TIMES [LAYER [REMOTE_SHELL]]
//!                                    make and tear down the network TIMES times; TREE is a
//!                                    spec (`g:4x8`) or `file:PATH`
//! tbon_create be                     (the back-end; the front-end starts it)
//! ```
//!
//! Each network does one broadcast and one sum and checks it. The front-end prints
//! `tbon_create: ok` when every round passed and nothing it started is left: no process, no
//! descriptor, no thread more than before the first round.

use converse_tbon::{self as tbon, topgen, SyncMode, TbonError, TFILTER_NULL, TFILTER_SUM};
use std::process::ExitCode;

const ASK: i32 = 100;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    match argv.get(1).map(String::as_str) {
        Some("be") => tbon::run_backend(|net| loop {
            let (s, p) = net.recv()?;
            if p.tag() == ASK {
                let rank = net.rank().unwrap_or(0) as i32;
                net.send(&s, ASK, "%d", rank + 1)?;
            }
        }),
        Some("teardown") => match teardown(&argv) {
            Ok(()) => {
                converse::input::out_line("tbon_create: ok");
                ExitCode::SUCCESS
            }
            Err(e) => {
                converse::input::out_line(&format!("tbon_create: FAILED: {e}"));
                ExitCode::from(1)
            }
        },
        _ => {
            converse::input::error_line(&format!("usage: {} teardown SPEC TIMES | be", argv[0]));
            ExitCode::from(2)
        }
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn teardown(argv: &[String]) -> Result<(), String> {
    let spec = argv.get(2).ok_or("no tree spec")?;
    let times: usize = argv.get(3).and_then(|t| t.parse().ok()).ok_or("no count")?;
    let topo = match spec.strip_prefix("file:") {
        Some(path) => tbon::topology_file::load(std::path::Path::new(path)),
        None => topgen::TreeSpec::parse(spec)
            .and_then(|s| topgen::generate(&s, &topgen::Placement::default())),
    }
    .map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = me.to_string_lossy().into_owned();
    let b = topo.num_backends() as i32;
    let mut settings = tbon::create::Settings::new(&me, &["be"]);
    if let Some(layer) = argv.get(4) {
        settings.layer = layer.clone();
    }
    if let Some(shell) = argv.get(5) {
        settings.remote_shell = shell.clone();
    }
    let mut baseline = None;
    for round in 0..times {
        let sum = tbon::create_network_fe_with(
            &topo,
            &settings,
            tbon::Options::default,
            |net| -> Result<i32, TbonError> {
                let comm = net.broadcast_communicator();
                let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, TFILTER_NULL)?;
                net.send(&s, ASK, "", ())?;
                Ok(net.recv_on(&s)?.unpack("%d")?)
            },
        )
        .and_then(|r| r)
        .map_err(|e| format!("round {round}: {e}"))?;
        if sum != b * (b + 1) / 2 {
            return Err(format!("round {round}: sum {sum}"));
        }
        let kids = converse_tests::children_of(std::process::id());
        if !kids.is_empty() {
            return Err(format!("round {round}: processes left: {kids:?}"));
        }
        // Threads and descriptors settle after the first round (the runtime's and the
        // standard library's own); after that, none may accumulate. The launcher's threads
        // end just after the job (its control connections close as it returns): give them a
        // moment.
        let settle = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut now = (count("/proc/self/fd"), count("/proc/self/task"));
        while let Some((fds, threads)) = baseline {
            if (now.0 <= fds && now.1 <= threads) || std::time::Instant::now() > settle {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            now = (count("/proc/self/fd"), count("/proc/self/task"));
        }
        if std::env::var_os("TBON_CREATE_DEBUG").is_some() {
            for t in std::fs::read_dir("/proc/self/task")
                .into_iter()
                .flatten()
                .flatten()
            {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                converse::input::error_line(&format!("round {round} thread {}", comm.trim()));
            }
            for f in std::fs::read_dir("/proc/self/fd")
                .into_iter()
                .flatten()
                .flatten()
            {
                converse::input::error_line(&format!(
                    "round {round} fd {:?}",
                    std::fs::read_link(f.path())
                ));
            }
        }
        match baseline {
            None => baseline = Some(now),
            Some((fds, threads)) if now.0 > fds || now.1 > threads => {
                return Err(format!(
                    "round {round}: {} descriptors and {} threads, {fds} and {threads} after the \
                     first round",
                    now.0, now.1
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}
