//! Start-up: a node between the two phases of its boot, its worker made and its address
//! published, then its part made from the node table.

use super::*;

/// A UCX node between the two phases of its boot ([`Open`]): its worker exists, and
/// [`info`](Open::info) is its address.
pub struct UcxOpen<const K: usize> {
    ucp: Ucp,
    addr: Vec<u8>,
    tls: String,
    efd: Option<i32>,
    exit_flush: Duration,
    peer_errors: PeerErrors,
}

impl<const K: usize> std::fmt::Debug for UcxOpen<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxOpen")
            .field("layer", &KINDS[K].name)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl<const K: usize> Open for UcxOpen<K> {
    type Part = UcxMachine;

    /// Read the settings, start UCX over the layer's transports, make the worker.
    fn open(
        cfg: &BootConfig,
        env: &LaunchEnv,
        _: &dyn Bootstrap,
    ) -> Result<UcxOpen<K>, MachineError> {
        let kind: Kind = KINDS[K];
        check_settings(&cfg.settings)?;
        let exit_flush = EXIT_FLUSH.read_seconds(&cfg.settings)?;
        let peer_errors = match ERR_MODE.read_choice(&cfg.settings)? {
            "peer" => PeerErrors::All,
            "none" => PeerErrors::No,
            // A transport list of the user's may hold shared memory: as `ucx`.
            _ if TLS.read_text(&cfg.settings).is_some() => PeerErrors::OtherHosts,
            _ => kind.peer_errors,
        };
        let tls = match TLS.read_text(&cfg.settings).or(kind.tls) {
            Some(t) => Some(tls_list(t)?),
            None => None,
        };
        let shown = match &tls {
            Some(t) => t.to_string_lossy().into_owned(),
            None => std::env::var("UCX_TLS")
                .map(|t| format!("{t} (UCX_TLS)"))
                .unwrap_or_else(|_| "as UCX chooses".into()),
        };
        // Wake-ups need transports that can signal; where UCX cannot give them, the layer
        // still runs and naps instead (a note says so).
        let ucp = match Ucp::new(tls.as_ref(), env.num_nodes, true) {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(target: "ucx", error = %e, "UCX without wake-ups");
                Ucp::new(tls.as_ref(), env.num_nodes, false).map_err(|_| e)?
            }
        };
        let efd = ucp.efd();
        if efd.is_none() && env.node == 0 {
            // Not eprintln!, which panics on a closed stderr.
            converse_machine::input::error_line(&format!(
                "note: ucx: the transports {shown} cannot wake a sleeping node; idle nodes poll \
                 every millisecond"
            ));
        }
        let addr = ucp.address()?;
        let open = ucp.transports();
        // Only `self` (a transport of the list missing here, as rc without InfiniBand): no
        // other node is reachable, and UCX only warned. Said once, at start-up.
        if env.num_nodes > 1 && !open.is_empty() && open.iter().all(|t| t == "self") {
            return Err(MachineError::Boot(format!(
                "{}: no transport of {shown} is available on this host, only self (UCX's \
                 warnings above say which are missing; ucx_info -d lists this host's)",
                kind.name
            )));
        }
        let shown = if open.is_empty() {
            shown
        } else {
            format!("{shown} (opened: {})", open.join(", "))
        };
        let _ = IN_USE.set(shown.clone());
        tracing::debug!(target: "ucx", layer = kind.name, tls = %shown, addr_len = addr.len(), "UCX worker up");
        Ok(UcxOpen {
            ucp,
            addr,
            tls: shown,
            efd,
            exit_flush,
            peer_errors,
        })
    }

    /// This node's info for the node table: its worker's address.
    fn info(&self) -> Vec<u8> {
        self.addr.clone()
    }

    fn connect(
        self,
        env: &LaunchEnv,
        table: NodeTable,
        _: &dyn Bootstrap,
    ) -> Result<UcxMachine, MachineError> {
        let kind = KINDS[K];
        let n = table.num_nodes();
        if kind.one_host {
            one_host(kind.name, &table)?;
        }
        if n > NODE_BITS as usize {
            return Err(MachineError::Boot(format!(
                "{} takes at most {NODE_BITS} nodes",
                kind.name
            )));
        }
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| MachineError::io("epoll_create", e.into()))?;
        let wake = WakeFd::new().map_err(|e| MachineError::io("creating the node's eventfd", e))?;
        epoll
            .add(wake.fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| MachineError::io("epoll_ctl", e.into()))?;
        if let Some(fd) = self.efd {
            // SAFETY: UCX's descriptor is open (the worker is); epoll takes the open file, and
            // the set outlives nothing it would need when the worker closes it (`ucp` is
            // dropped before `epoll`, and a closed descriptor simply leaves the set).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            epoll
                .add(bfd, EpollEvent::new(EpollFlags::EPOLLIN, UCX))
                .map_err(|e| MachineError::io("epoll_ctl (UCX's event descriptor)", e.into()))?;
        }
        let stamp = u64::from(u32::from_le_bytes([
            env.secret[0],
            env.secret[1],
            env.secret[2],
            env.secret[3],
        ])) << 32;
        Ok(UcxMachine {
            ucp: self.ucp,
            name: kind.name,
            tls: self.tls,
            me: env.node,
            my_tag: stamp | env.node as u64,
            stamp,
            peers: (0..n).map(|_| Peer::default()).collect(),
            table,
            failed: Box::new(Cell::new(false)),
            unreported: 0,
            sending: Vec::new(),
            receiving: Vec::new(),
            sends_out: 0,
            recvs_out: 0,
            graveyard: Vec::new(),
            epoll,
            events: [EpollEvent::empty(); 4],
            efd: self.efd.is_some(),
            wake,
            exit_flush: self.exit_flush,
            pool: BufferPool::default(),
            peer_errors: self.peer_errors,
            stats: Stats::default(),
        })
    }
}

/// `ucx+shm`: every node this part serves is on one host, or a one-line error.
pub(super) fn one_host(name: &str, table: &NodeTable) -> Result<(), MachineError> {
    let mut hosts = table
        .nodes()
        .iter()
        .filter(|i| !i.addr.is_empty())
        .map(|i| i.host.as_str());
    if let Some(first) = hosts.next() {
        if let Some(other) = hosts.find(|h| *h != first) {
            return Err(MachineError::Boot(format!(
                "{name} is shared memory within one host, and this job spans hosts ({first}, \
                 {other}): use ucx+tcp, or ucx to let UCX choose per peer"
            )));
        }
    }
    Ok(())
}
