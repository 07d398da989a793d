//! The guide's Appendix B front-end: make the network, load the `IntegerAdd` filter from a
//! shared library, ask the back-ends for waves of integers and check each wave's sum.
//!
//! ```text
//! integer_addition_fe TOPOLOGY BACKEND FILTER_LIBRARY
//! integer_addition_fe tree.top target/release/examples/integer_addition_be \
//!     target/release/examples/libtbon_filters.so
//! ```
//! TOPOLOGY is a topology file, or a tree spec such as `g:4x8` (see `topgen --help`).

use converse_tbon::{
    self as tbon, topgen, topology_file, SyncMode, TbonError, FIRST_APPLICATION_TAG,
};
use std::process::ExitCode;

const PROT_EXIT: i32 = FIRST_APPLICATION_TAG;
const PROT_SUM: i32 = FIRST_APPLICATION_TAG + 1;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    // argv may be empty (execve allows it): no indexing.
    let me = argv.first().map_or("integer_addition_fe", String::as_str);
    let [_, topology, backend, library] = argv.as_slice() else {
        converse::input::error_line(&format!("usage: {me} TOPOLOGY BACKEND FILTER_LIBRARY"));
        return ExitCode::from(2);
    };
    let topo = if topology.contains(':') && !std::path::Path::new(topology).exists() {
        topgen::TreeSpec::parse(topology)
            .and_then(|s| topgen::generate(&s, &topgen::Placement::default()))
    } else {
        topology_file::load(std::path::Path::new(topology))
    };
    let topo = match topo {
        Ok(t) => t,
        Err(e) => {
            converse::input::error_line(&format!("{me}: {e}"));
            return ExitCode::from(2);
        }
    };
    let outcome = tbon::create_network_fe(&topo, backend, &[], |net| -> Result<bool, TbonError> {
        let filter = net.load_filter(library, "IntegerAdd")?;
        let comm = net.broadcast_communicator();
        let stream = net.new_stream(&comm, filter, SyncMode::WaitForAll, tbon::TFILTER_NULL)?;
        let num_backends = comm.size() as i32;
        let (send_val, num_iters) = (32, 5);
        net.send(&stream, PROT_SUM, "%d %d", (send_val, num_iters))?;
        net.flush(&stream)?;
        let mut all_good = true;
        for i in 0..num_iters {
            let recv_val: i32 = net.recv_on(&stream)?.unpack("%d")?;
            if recv_val == num_backends * i * send_val {
                converse::input::out_line(&format!(
                    "Iteration {i}: Success! recv_val({recv_val}) == {}",
                    send_val * i * num_backends
                ));
            } else {
                converse::input::out_line(&format!("Iteration {i}: Failure!"));
                all_good = false;
            }
        }
        net.send(&stream, PROT_EXIT, "", ())?;
        net.flush(&stream)?;
        Ok(all_good)
    });
    match outcome {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::from(1),
        Ok(Err(e)) | Err(e) => {
            converse::input::error_line(&format!("{me}: {e}"));
            ExitCode::from(1)
        }
    }
}
