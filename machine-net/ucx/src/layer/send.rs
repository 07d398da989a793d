//! The sending side: endpoints made on a pair's first send (with the error callback that
//! marks a dead peer), sends kept with their requests until UCX completes them, endpoints
//! closed.

use super::*;

/// What an endpoint's error callback gets: which peer, and where to say it failed. Boxed, so
/// its address stays put for as long as the machine (and the endpoint) lives.
pub(super) struct EpArg {
    pub(super) node: usize,
    pub(super) status: Cell<sys::ucs_status_t>,
    /// The machine's flag: some endpoint failed.
    any: *const Cell<bool>,
}

/// UCX's endpoint error callback (peer failure): noted, reported by the next call.
pub(super) unsafe extern "C" fn on_ep_error(
    arg: *mut c_void,
    _ep: sys::ucp_ep_h,
    status: sys::ucs_status_t,
) {
    // SAFETY: `arg` is the address of an `EpArg` the machine boxed for this endpoint and keeps
    // until after the worker is destroyed; callbacks run inside ucp_worker_progress (or close),
    // on the node's thread, so nothing else touches the cells meanwhile.
    unsafe {
        let a = &*arg.cast::<EpArg>();
        a.status.set(status);
        (*a.any).set(true);
    }
}

/// Whether the transports shown as `tls` may include shared memory (UCX's names for it, or
/// UCX's own choice).
pub(super) fn may_be_shm(tls: &str) -> bool {
    ["posix", "sysv", "cma", "shm", "sm", "mm", "all", "UCX"]
        .iter()
        .any(|t| tls.contains(t))
}

impl UcxMachine {
    /// The endpoint to `node`, made on first use from the table's address.
    pub(super) fn endpoint(&mut self, node: usize) -> Result<sys::ucp_ep_h, MachineError> {
        let ep = self.peers[node].ep;
        if !ep.is_null() {
            return Ok(ep);
        }
        let addr = self
            .table
            .node(node)
            .map(|i| i.addr.as_slice())
            .unwrap_or(&[]);
        if addr.is_empty() {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        let arg = Box::new(EpArg {
            node,
            status: Cell::new(sys::UCS_OK),
            any: &*self.failed,
        });
        // SAFETY: all-zero is a valid ucp_ep_params_t; only the fields in field_mask are read.
        let mut params: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64;
        params.address = addr.as_ptr().cast();
        let peer_mode = match self.peer_errors {
            PeerErrors::All => true,
            PeerErrors::No => false,
            PeerErrors::OtherHosts => {
                let host = |n: usize| self.table.node(n).map(|i| i.host.as_str());
                host(node) != host(self.me)
            }
        };
        params.err_mode = if peer_mode {
            sys::UCP_ERR_HANDLING_MODE_PEER
        } else {
            sys::UCP_ERR_HANDLING_MODE_NONE
        };
        params.err_handler.cb = Some(on_ep_error);
        params.err_handler.arg = (&*arg as *const EpArg).cast_mut().cast();
        let mut ep: sys::ucp_ep_h = std::ptr::null_mut();
        // SAFETY: the worker is live; `params.address` points into the table (a worker address
        // a peer published, only read during the call); the callback's argument is boxed and
        // kept in `peers[node]` until the machine is dropped, after the worker.
        let s = unsafe { sys::ucp_ep_create(self.ucp.worker, &params, &mut ep) };
        if s == sys::UCS_ERR_UNREACHABLE {
            // No transport of ours reaches the peer: a configuration error (a transport this
            // host lacks, shared memory only toward another host), not a death.
            return Err(MachineError::io(
                format!("making a UCX endpoint to node {node}"),
                std::io::Error::other(format!(
                    "no transport of {} reaches it (UCX's warnings above say which are missing; \
                     ucx_info -d lists this host's){}",
                    self.tls,
                    if peer_mode && may_be_shm(&self.tls) {
                        "; shared memory has no peer-failure handling in UCX 1.13: \
                         +set ucx.err_mode=none to use it"
                    } else {
                        ""
                    }
                )),
            ));
        }
        if s != sys::UCS_OK || ep.is_null() {
            return Err(self.dead(
                node,
                format!("UCX cannot make an endpoint to it: {}", sys::status_text(s)),
            ));
        }
        debug_assert_eq!(arg.node, node);
        self.peers[node].ep = ep;
        self.peers[node].arg = Some(arg);
        self.stats.endpoints += 1;
        Ok(ep)
    }

    /// Retire the sends UCX completed, from each peer's front (what `queued` counts).
    pub(super) fn reap_sends(&mut self) -> Result<(), MachineError> {
        let mut i = 0;
        while i < self.sending.len() {
            let node = self.sending[i];
            let p = &mut self.peers[node];
            let mut failure = None;
            while let Some((req, _)) = p.sends.front() {
                let s = req.status();
                if s == sys::UCS_INPROGRESS {
                    break;
                }
                let Some((req, msg)) = p.sends.pop_front() else {
                    break;
                };
                req.free();
                p.queued -= msg.wire_len();
                self.sends_out -= 1;
                self.pool.put(msg);
                if s != sys::UCS_OK && failure.is_none() {
                    failure = Some(s);
                }
            }
            if p.sends.is_empty() {
                self.sending.swap_remove(i);
            } else {
                i += 1;
            }
            if let Some(s) = failure {
                if local_failure(s) {
                    return Err(ucx_err("a UCX send failed", s));
                }
                self.mark_dead(
                    node,
                    format!("a send to it failed: {}", sys::status_text(s)),
                );
            }
        }
        self.report()
    }

    /// Send `msg` to `node` (`Transport::send`): at once if UCX completes it, else kept with
    /// its request in the peer's queue until it does.
    #[inline]
    pub(super) fn post(&mut self, node: usize, msg: Message) -> Result<(), MachineError> {
        if node >= self.peers.len() || node == self.me {
            return Err(MachineError::InvalidNode {
                node,
                nodes: self.table.num_nodes(),
            });
        }
        if self.peers[node].dead.is_some() || self.peers[node].gone {
            let p = &mut self.peers[node];
            if !p.reported && !p.gone {
                p.reported = true;
                self.unreported = self.unreported.saturating_sub(1);
            }
            let why = p
                .dead
                .clone()
                .unwrap_or_else(|| "out of the job".to_owned());
            return Err(self.dead(node, why));
        }
        let ep = self.endpoint(node)?;
        let wire = msg.wire();
        // SAFETY: all-zero is a valid ucp_request_param_t: contiguous bytes, no callback
        // (completion is polled with ucp_request_check_status, so no per-send state is
        // allocated here).
        let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: `ep` is live (made by `endpoint`, closed only by `forget`/`leave`, which
        // reset it); `wire` stays valid until the request completes: the message is kept with
        // its request below (its heap buffer does not move), or dropped here when UCX
        // completed the send at once (NULL: UCX no longer needs the buffer).
        let r = unsafe {
            sys::ucp_tag_send_nbx(ep, wire.as_ptr().cast(), wire.len(), self.my_tag, &param)
        };
        self.stats.sends += 1;
        if r.is_null() {
            self.pool.put(msg);
            return Ok(());
        }
        if sys::ptr_is_err(r) {
            let s = sys::ptr_status(r);
            if local_failure(s) {
                return Err(ucx_err("a UCX send failed", s));
            }
            self.mark_dead(
                node,
                format!("a send to it failed: {}", sys::status_text(s)),
            );
            return self.report();
        }
        self.stats.sends_held += 1;
        let p = &mut self.peers[node];
        p.queued += msg.wire_len();
        if p.sends.is_empty() {
            self.sending.push(node);
        }
        p.sends.push_back((Req(r), msg));
        self.sends_out += 1;
        Ok(())
    }

    /// Close `node`'s endpoint now (force: nothing more goes out, its requests end), keeping
    /// its callback argument until the machine is dropped.
    pub(super) fn close_ep(&mut self, node: usize) {
        let ep = std::mem::replace(&mut self.peers[node].ep, std::ptr::null_mut());
        if ep.is_null() {
            return;
        }
        // SAFETY: all-zero is a valid ucp_request_param_t; the fields named are set.
        let mut param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        // SAFETY: `ep` is live and closed once (its slot was reset above).
        let r = unsafe { sys::ucp_ep_close_nbx(ep, &param) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            self.graveyard.push((Req(r), Held::Frame(Vec::new())));
        }
    }
}
