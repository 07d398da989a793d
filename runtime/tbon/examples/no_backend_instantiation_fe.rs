//! The guide's NoBackEndInstantiation example: a front-end whose network has no back-ends
//! of its own (back-end attach mode). Run it on a job (`charmrun +p3
//! no_backend_instantiation_fe ATTACH_FILE N`): the processes of a `g:2` tree are internal,
//! the front-end writes where the two leaves listen to ATTACH_FILE, waits for N back-ends
//! started apart (`no_backend_instantiation_be ATTACH_FILE RANK`, or the C one in
//! `runtime/tbon/lightweight/examples/c_backend.c`), sums a wave of their answers and shuts
//! the network down.

use converse_tbon::{self as tbon, topgen, MapPolicy, Options, SyncMode, TFILTER_SUM};
use std::path::Path;
use std::time::Duration;

const PROT_SUM: i32 = 100;

fn main() {
    converse::run(|pe| {
        let args = pe.args().to_vec();
        let file = args.get(1).cloned().unwrap_or_else(|| "attach.txt".into());
        let want: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(2);
        let opts = Options::default()
            .attach_backends(true)
            .policy(MapPolicy::InOrder);
        let tree = |_: &converse::Pe| {
            let spec = topgen::TreeSpec::Generic(vec![2]);
            Ok(topgen::generate(&spec, &topgen::Placement::default())?)
        };
        let mut net = match tbon::attach(pe, opts, tree) {
            Ok(net) => net,
            Err(e) => return converse::input::error_line(&format!("front-end: {e}")),
        };
        if !net.is_front_end() {
            let _ = net.wait_for_shutdown();
            return;
        }
        let run = |net: &mut tbon::Network<'_>| -> Result<(), tbon::TbonError> {
            net.write_attach_file(Path::new(&file))?;
            converse::input::out_line(&format!(
                "front-end: {} leaves listen (written to {file}); waiting for {want} back-ends",
                net.attach_points().len()
            ));
            let have = net.wait_for_backends(want, Duration::from_secs(300))?;
            converse::input::out_line(&format!(
                "front-end: back-ends {:?} attached",
                net.attached_backends()
            ));
            let comm = net.broadcast_communicator();
            let s = net.new_stream(&comm, TFILTER_SUM, SyncMode::WaitForAll, 0)?;
            net.send(&s, PROT_SUM, "%d", 1000)?;
            let sum: i32 = net.recv_on(&s)?.unpack("%d")?;
            converse::input::out_line(&format!(
                "front-end: {have} back-ends answered, their sum is {sum}"
            ));
            net.shutdown()
        };
        if let Err(e) = run(&mut net) {
            converse::input::error_line(&format!("front-end: {e}"));
        }
        net.exit(0);
    });
}
