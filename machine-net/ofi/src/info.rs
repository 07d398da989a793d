//! A node's entry in the node table (its `info`): what a peer needs to reach it, and what
//! must agree across the job.
//!
//! | offset | field | type |
//! |---:|---|---|
//! | 0 | format version (1) | u8 |
//! | 1 | eager limit, wire bytes | u32 LE |
//! | 5 | length P of the provider's name | u8 |
//! | 6 | the provider's name (`tcp;ofi_rxm`) | P bytes |
//! | 6+P | the endpoint's address (`fi_getname`) | the rest |

/// What one node's info says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeInfo<'a> {
    pub(crate) eager: u32,
    pub(crate) provider: &'a str,
    pub(crate) name: &'a [u8],
}

const VERSION: u8 = 1;

pub(crate) fn encode(eager: u32, provider: &str, name: &[u8]) -> Vec<u8> {
    let p = &provider.as_bytes()[..provider.len().min(255)];
    let mut v = Vec::with_capacity(6 + p.len() + name.len());
    v.push(VERSION);
    v.extend_from_slice(&eager.to_le_bytes());
    v.push(p.len() as u8);
    v.extend_from_slice(p);
    v.extend_from_slice(name);
    v
}

/// Read a node's info; `Err` says which rule it breaks.
pub(crate) fn decode(b: &[u8]) -> Result<NodeInfo<'_>, String> {
    let (&v, rest) = b.split_first().ok_or("empty")?;
    if v != VERSION {
        return Err(format!("format {v}, this node reads {VERSION}"));
    }
    let eager = rest
        .get(..4)
        .and_then(|e| e.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("shorter than its eager limit")?;
    let plen = *rest.get(4).ok_or("no provider")? as usize;
    let provider = rest
        .get(5..5 + plen)
        .and_then(|p| std::str::from_utf8(p).ok())
        .ok_or("provider name cut short or not UTF-8")?;
    let name = &rest[5 + plen..];
    if name.is_empty() {
        return Err("no endpoint address".into());
    }
    Ok(NodeInfo {
        eager,
        provider,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_reads_back_and_bad_bytes_say_why() {
        let e = encode(16 << 10, "tcp;ofi_rxm", &[1, 2, 3]);
        assert_eq!(
            decode(&e),
            Ok(NodeInfo {
                eager: 16 << 10,
                provider: "tcp;ofi_rxm",
                name: &[1, 2, 3]
            })
        );
        // Cut anywhere up to the address: refused. (A shortened address still reads: only
        // the provider can judge it, at fi_av_insert.)
        for cut in 0..=e.len() - 3 {
            assert!(decode(&e[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = e.clone();
        bad[0] = 9;
        assert!(decode(&bad).unwrap_err().contains("format 9"));
    }
}
