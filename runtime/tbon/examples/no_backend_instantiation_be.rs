//! A back-end started apart for `no_backend_instantiation_fe`: `no_backend_instantiation_be
//! ATTACH_FILE RANK` attaches to leaf `RANK mod leaves` as back-end RANK, answers each
//! `PROT_SUM` value with its rank plus the value, and ends when the network shuts down.
//! MRNet's own argument vector works too: `no_backend_instantiation_be PARENT_HOST
//! PARENT_PORT PARENT_RANK MY_HOST MY_RANK`, with the secret in `CONVERSE_TBON_SECRET_FILE`.

use converse_tbon::{AttachFile, BackEnd, TbonError};
use std::process::ExitCode;

const PROT_SUM: i32 = 100;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let joined = if args.len() == 5 {
        BackEnd::from_args(&args)
    } else {
        let file = args.first().cloned().unwrap_or_else(|| "attach.txt".into());
        let rank: u32 = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(0);
        // Started beside the front-end, it may look before the file is written.
        AttachFile::read_waiting(file.as_ref(), std::time::Duration::from_secs(60)).and_then(|f| {
            let leaf = &f.points[rank as usize % f.points.len()];
            BackEnd::attach(leaf, rank, &f.secret)
        })
    };
    let mut be = match joined {
        Ok(be) => be,
        Err(e) => {
            converse::input::error_line(&format!("back-end: {e}"));
            return ExitCode::from(2);
        }
    };
    let rank = be.rank();
    converse::input::out_line(&format!(
        "back-end {rank}: attached to leaf {}",
        be.parent_rank()
    ));
    loop {
        match be.recv() {
            Ok((s, p)) if p.tag() == PROT_SUM => {
                let v: i32 = p.unpack("%d").unwrap_or(0);
                if let Err(e) = be.send(&s, PROT_SUM, "%d", rank as i32 + v) {
                    converse::input::error_line(&format!("back-end {rank}: {e}"));
                    return ExitCode::FAILURE;
                }
            }
            Ok(_) => {}
            Err(TbonError::ShutDown) => {
                converse::input::out_line(&format!("back-end {rank}: the network shut down"));
                return ExitCode::SUCCESS;
            }
            Err(e) => {
                converse::input::error_line(&format!("back-end {rank}: {e}"));
                return ExitCode::FAILURE;
            }
        }
    }
}
