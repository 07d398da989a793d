//! FastFlow's building blocks (converse-flow) in whole jobs: the thesis's sample application
//! as one group and as three groups on each layer and on three namespace hosts (the transport
//! switched by `+machine` only), an all-to-all split horizontally giving the same result as
//! unsplit, a group's death in report mode ending the flow with an error instead of a hang,
//! and a bad groups file refused with its line.

use converse_tests::netns::Hosts;
use converse_tests::{run_bounded, Launcher, Outcome};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PROGRAM: &str = env!("CARGO_BIN_EXE_conformance");
const LIMIT: Duration = Duration::from_secs(90);

/// An example of converse-flow (built by `cargo test --workspace`, or
/// `cargo build --release -p converse-flow --examples`).
fn example(name: &str) -> String {
    let p = Path::new(PROGRAM).with_file_name("examples").join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --release -p converse-flow --examples`",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

fn file(tag: &str, text: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cvflow-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    let p = d.join(tag);
    std::fs::write(&p, text).expect("write");
    p
}

const THREE: &str = "# the sample application: one group per node\n\
                     group G1 nodes 0\ngroup G2 nodes 1\ngroup G3 nodes 2\n\
                     place G1 generate\nplace G2 square*\nplace G3 check\n";

fn charmrun(machine: &'static str, ppn: usize) -> Launcher {
    Launcher::Charmrun {
        machine,
        opts: vec![],
    }
    .with_ppn(ppn)
}

fn ok_line(o: &Outcome, items: u64) {
    let n = u128::from(items);
    let sum = n * (n + 1) * (2 * n + 1) / 6;
    assert_eq!(o.code, Some(0), "{o}");
    assert_eq!(
        o.lines_with(&format!(
            "flow groups: {items} items, sum of squares {sum}: ok"
        )),
        1,
        "{o}"
    );
}

#[test]
fn the_sample_application_runs_as_one_group_and_as_three_on_every_layer() {
    let three = file("three", THREE);
    for (l, pes) in [
        (Launcher::Direct { machine: "local" }, 3),
        (charmrun("tcp", 1), 3),
        (charmrun("udp", 1), 3),
        (charmrun("si", 1), 3),
        (charmrun("si+tcp", 2), 6),
    ] {
        let o = l.run(&example("groups"), pes, &["--items", "20000"], LIMIT);
        ok_line(&o, 20000);
        let three = three.to_string_lossy();
        let o = l.run(
            &example("groups"),
            pes,
            &["--items", "20000", "--groups", &three, "--plan"],
            LIMIT,
        );
        ok_line(&o, 20000);
        // Each group on its own node's PEs.
        let ppn = l.ppn();
        assert_eq!(o.lines_with("stage generate on PE 0 (group G1)"), 1, "{o}");
        assert_eq!(
            o.lines_with(&format!("stage check on PE {} (group G3)", 2 * ppn)),
            1,
            "{o}"
        );
        assert_eq!(o.lines_with("G1 -> G2: 4 external channels"), 1, "{o}");
    }
}

#[test]
fn the_sample_application_spans_three_hosts_and_its_transport_is_a_string() {
    let Some(hosts) = Hosts::new("fl", 3) else {
        return;
    };
    let machines = hosts.machines("machines", 0..3);
    let groups = hosts.file("three", THREE);
    for machine in ["tcp", "udp"] {
        let mut a: Vec<String> = ["+p3", "++verbose", "++nodelist"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(machines.display().to_string());
        a.push("++remote-shell".into());
        a.push(hosts.shell().display().to_string());
        a.push(example("groups"));
        a.extend(["--items", "50000", "--groups"].map(String::from));
        a.push(groups.display().to_string());
        a.extend(["+machine", machine].map(String::from));
        let o = hosts.charmrun(PROGRAM, &a, LIMIT);
        ok_line(&o, 50000);
        for (pe, host) in [(0, 0), (1, 1), (2, 2)] {
            assert!(
                o.stderr
                    .contains(&format!("PE {pe} connected from {}", Hosts::addr(host))),
                "{machine}: PE {pe} on host {host}\n{o}"
            );
        }
    }
}

fn a2a_lines(o: &Outcome) -> Vec<String> {
    o.stdout
        .lines()
        .filter(|l| l.starts_with("a2a: "))
        .map(String::from)
        .collect()
}

#[test]
fn an_all_to_all_split_over_two_groups_gives_the_unsplit_result() {
    let split = file(
        "a2a",
        "group G1 nodes 0\ngroup G2 nodes 1\nplace G1 numbers L[0] R[0]\nplace G2 L[1] R[1] report\n",
    );
    let split = split.to_string_lossy();
    let l = charmrun("tcp", 2);
    let whole = l.run(&example("a2a"), 4, &["--items", "30000"], LIMIT);
    assert_eq!(whole.code, Some(0), "{whole}");
    let cut = l.run(
        &example("a2a"),
        4,
        &["--items", "30000", "--groups", &split, "--plan"],
        LIMIT,
    );
    assert_eq!(cut.code, Some(0), "{cut}");
    let lines = a2a_lines(&whole);
    assert_eq!(lines.len(), 8, "{whole}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("a2a: total 450015000")
    );
    assert_eq!(a2a_lines(&cut), lines, "split\n{cut}\nunsplit\n{whole}");
    // The cut's connections as the thesis names them.
    assert_eq!(cut.lines_with("G1 -> G2: 1 internal channel"), 1, "{cut}");
    assert_eq!(cut.lines_with("G2 -> G1: 1 internal channel"), 1, "{cut}");
    assert_eq!(cut.lines_with("G1 -> G2: 2 external channels"), 1, "{cut}");
}

#[test]
fn a_group_that_dies_in_report_mode_ends_the_flow_with_an_error_not_a_hang() {
    let three = file("three-die", THREE);
    let three = three.to_string_lossy();
    for machine in ["tcp", "si"] {
        let o = charmrun(machine, 1).run(
            &example("groups"),
            3,
            &[
                "--items",
                "100000",
                "--work-us",
                "20",
                "--die-after",
                "300",
                "--groups",
                &three,
                "+set",
                "faults=report",
            ],
            LIMIT,
        );
        assert!(!o.timed_out, "{machine}: {o}");
        assert_eq!(o.code, Some(1), "{machine}: {o}");
        let lost = o
            .stderr
            .lines()
            .filter(|l| {
                l.starts_with(
                    "flow: stages square[0], square[1], square[2], square[3] lost with node 1",
                )
            })
            .count();
        assert_eq!(lost, 1, "{machine}: {o}");
        assert!(o.stderr.contains("generate, check cannot complete"), "{o}");
        assert_eq!(o.lines_with("sum of squares"), 0, "{o}");
    }
}

#[test]
fn a_bad_groups_file_is_one_line_and_exit_2() {
    for (text, says) in [
        (
            "group G1 nodes 0\nplace G1 generate square* check nothing\n",
            "line 2: 'nothing' matches no stage",
        ),
        (
            "group G1 nodes 0\nplace G1 generate sqare* check\n",
            "stage square[0] is in no group",
        ),
        (
            "group G1 cores 0\n",
            "line 1: 'cores' is not where a group runs",
        ),
        (
            "group G1 nodes 0-7\nplace G1 generate square* check\n",
            "names node 3, which the job does not have",
        ),
    ] {
        let f = file("bad", text);
        let o = run_bounded(
            Launcher::Direct { machine: "local" }
                .command(&example("groups"), 3, &["--groups", &f.to_string_lossy()])
                .arg("+quiet"),
            LIMIT,
        );
        assert_eq!(o.code, Some(2), "{o}");
        let lines: Vec<&str> = o.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{o}");
        assert!(lines[0].contains(says), "{o}");
    }
}

/// A groups file making each group a job of its own, at these three addresses.
fn jobs_file(tag: &str, addrs: [&str; 3]) -> PathBuf {
    file(
        tag,
        &format!(
            "group G1 pes 0 at {}\ngroup G2 pes 0-1 at {}\ngroup G3 pes 0 at {}\n\
             place G1 generate\nplace G2 square*\nplace G3 check\n",
            addrs[0], addrs[1], addrs[2]
        ),
    )
}

fn secret_file(tag: &str) -> PathBuf {
    let p = file(tag, "");
    converse_endpoint::Secret::generate()
        .and_then(|s| s.write_file(&p))
        .expect("secret");
    p
}

/// The command of group `g`'s job: `pes` PEs under charmrun on `machine`.
fn group_job(
    g: &str,
    pes: usize,
    groups: &Path,
    secret: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(converse_tests::charmrun_path(PROGRAM));
    c.arg(format!("+p{pes}"))
        .arg(example("groups"))
        .args(["--group", g, "--groups"])
        .arg(groups)
        .arg("--secret-file")
        .arg(secret)
        .args(extra)
        .args(["+machine", "tcp"]);
    c
}

#[test]
fn three_groups_started_apart_stream_over_an_address_string() {
    let secret = secret_file("secret-si");
    let pid = std::process::id();
    let groups = jobs_file(
        "jobs-si",
        [
            &format!("si://flow-{pid}-1"),
            &format!("si://flow-{pid}-2"),
            &format!("si://flow-{pid}-3"),
        ],
    );
    let args = ["--items", "40000"];
    // Started last to first and first to last: the jobs wait for each other.
    let g3 =
        converse_tests::Running::start(&mut group_job("G3", 1, &groups, &secret, &args), LIMIT)
            .expect("G3");
    let g2 =
        converse_tests::Running::start(&mut group_job("G2", 2, &groups, &secret, &args), LIMIT)
            .expect("G2");
    let g1 = run_bounded(&mut group_job("G1", 1, &groups, &secret, &args), LIMIT);
    let (g2, g3) = (g2.finish(), g3.finish());
    for o in [&g1, &g2, &g3] {
        assert_eq!(o.code, Some(0), "{o}");
    }
    ok_line(&g3, 40000);
}

#[test]
fn three_group_jobs_on_three_hosts_over_tcp_addresses() {
    let Some(hosts) = Hosts::new("fj", 3) else {
        return;
    };
    let secret = hosts.file("secret", "");
    converse_endpoint::Secret::generate()
        .and_then(|s| s.write_file(&secret))
        .expect("secret");
    let groups = hosts.file(
        "jobs",
        &format!(
            "group G1 pes 0 at tcp://{}:7101\ngroup G2 pes 0-1 at tcp://{}:7102\n\
             group G3 pes 0 at tcp://{}:7103\nplace G1 generate\nplace G2 square*\nplace G3 check\n",
            Hosts::addr(0),
            Hosts::addr(1),
            Hosts::addr(2)
        ),
    );
    // Each job on its own host, started there by hand (no launcher between them).
    let on = |h: usize, g: &str, pes: usize| {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &hosts.host_ns(h)])
            .arg(converse_tests::charmrun_path(PROGRAM))
            .arg(format!("+p{pes}"))
            .arg("++local")
            .arg(example("groups"))
            .args(["--items", "60000", "--group", g, "--groups"])
            .arg(&groups)
            .arg("--secret-file")
            .arg(&secret)
            .args(["+machine", "tcp"]);
        c
    };
    let g3 = converse_tests::Running::start(&mut on(2, "G3", 1), LIMIT).expect("G3");
    let g2 = converse_tests::Running::start(&mut on(1, "G2", 2), LIMIT).expect("G2");
    let g1 = run_bounded(&mut on(0, "G1", 1), LIMIT);
    let (g2, g3) = (g2.finish(), g3.finish());
    for o in [&g1, &g2, &g3] {
        assert_eq!(o.code, Some(0), "{o}");
    }
    ok_line(&g3, 60000);
}

#[test]
fn a_group_job_that_dies_ends_the_others_with_an_error_not_a_hang() {
    let secret = secret_file("secret-die");
    let pid = std::process::id();
    let groups = jobs_file(
        "jobs-die",
        [
            &format!("si://flowd-{pid}-1"),
            &format!("si://flowd-{pid}-2"),
            &format!("si://flowd-{pid}-3"),
        ],
    );
    let args = ["--items", "200000"];
    let g3 =
        converse_tests::Running::start(&mut group_job("G3", 1, &groups, &secret, &args), LIMIT)
            .expect("G3");
    let g2 = converse_tests::Running::start(
        &mut group_job(
            "G2",
            2,
            &groups,
            &secret,
            &["--items", "200000", "--work-us", "20", "--die-after", "300"],
        ),
        LIMIT,
    )
    .expect("G2");
    let g1 = run_bounded(&mut group_job("G1", 1, &groups, &secret, &args), LIMIT);
    let (g2, g3) = (g2.finish(), g3.finish());
    assert_ne!(g2.code, Some(0), "{g2}");
    for (o, stage) in [(&g1, "generate"), (&g3, "check")] {
        assert!(!o.timed_out, "{o}");
        assert_eq!(o.code, Some(1), "{o}");
        let lines = o
            .stderr
            .lines()
            .filter(|l| {
                l.starts_with("flow: group G2 (si://flowd-")
                    && l.ends_with(&format!("{stage} cannot complete"))
            })
            .count();
        assert_eq!(lines, 1, "{o}");
    }
}

#[test]
fn a_group_job_whose_peers_never_start_says_so_and_exits() {
    let secret = secret_file("secret-alone");
    let pid = std::process::id();
    let groups = jobs_file(
        "jobs-alone",
        [
            &format!("si://flowa-{pid}-1"),
            &format!("si://flowa-{pid}-2"),
            &format!("si://flowa-{pid}-3"),
        ],
    );
    // G3 waits to be connected to; G1 to connect.
    for (g, says) in [
        ("G3", "flow: group G2 at si://flowa-"),
        ("G1", "flow: group G2 at si://flowa-"),
    ] {
        let o = run_bounded(
            &mut group_job(g, 1, &groups, &secret, &["--wait-s", "1"]),
            LIMIT,
        );
        assert_eq!(o.code, Some(1), "{g}: {o}");
        assert_eq!(
            o.stderr.lines().filter(|l| l.starts_with(says)).count(),
            1,
            "{g}: {o}"
        );
    }
}

#[test]
fn an_all_to_all_split_over_two_group_jobs_gives_the_unsplit_result() {
    let secret = secret_file("secret-a2a");
    let pid = std::process::id();
    let groups = file(
        "a2a-jobs",
        &format!(
            "group G1 pes 0-1 at si://a2aj-{pid}-1\ngroup G2 pes 0 at si://a2aj-{pid}-2\n\
             place G1 numbers L[0] R[0]\nplace G2 L[1] R[1] report\n"
        ),
    );
    let job = |g: &str, pes: usize| {
        let mut c = std::process::Command::new(converse_tests::charmrun_path(PROGRAM));
        c.arg(format!("+p{pes}"))
            .arg(example("a2a"))
            .args(["--items", "30000", "--group", g, "--groups"])
            .arg(&groups)
            .arg("--secret-file")
            .arg(&secret)
            .args(["+machine", "tcp"]);
        c
    };
    let g2 = converse_tests::Running::start(&mut job("G2", 1), LIMIT).expect("G2");
    let g1 = run_bounded(&mut job("G1", 2), LIMIT);
    let g2 = g2.finish();
    assert_eq!(g1.code, Some(0), "{g1}");
    assert_eq!(g2.code, Some(0), "{g2}");
    let whole =
        Launcher::Direct { machine: "local" }.run(&example("a2a"), 2, &["--items", "30000"], LIMIT);
    assert_eq!(whole.code, Some(0), "{whole}");
    assert_eq!(
        a2a_lines(&g2),
        a2a_lines(&whole),
        "split\n{g2}\nunsplit\n{whole}"
    );
    assert_eq!(a2a_lines(&whole).len(), 8);
}

#[test]
fn group_jobs_running_different_flows_refuse_each_other() {
    let secret = secret_file("secret-mismatch");
    let pid = std::process::id();
    let groups = jobs_file(
        "jobs-mismatch",
        [
            &format!("si://flowm-{pid}-1"),
            &format!("si://flowm-{pid}-2"),
            &format!("si://flowm-{pid}-3"),
        ],
    );
    // G1 has 3 workers where the others have 4: its stages are not theirs.
    let g3 = converse_tests::Running::start(
        &mut group_job("G3", 1, &groups, &secret, &["--wait-s", "5"]),
        LIMIT,
    )
    .expect("G3");
    let g2 = converse_tests::Running::start(
        &mut group_job("G2", 2, &groups, &secret, &["--wait-s", "5"]),
        LIMIT,
    )
    .expect("G2");
    let g1 = run_bounded(
        &mut group_job(
            "G1",
            1,
            &groups,
            &secret,
            &["--workers", "3", "--wait-s", "5"],
        ),
        LIMIT,
    );
    let (g2, g3) = (g2.finish(), g3.finish());
    for o in [&g1, &g2, &g3] {
        assert!(!o.timed_out, "{o}");
        assert_eq!(o.code, Some(1), "{o}");
        assert_eq!(o.lines_with("sum of squares"), 0, "{o}");
    }
    assert_eq!(
        g2.stderr
            .lines()
            .filter(|l| l.starts_with("flow: group G1 at si://flowm-")
                && l.contains("runs another flow"))
            .count(),
        1,
        "{g2}"
    );
}
