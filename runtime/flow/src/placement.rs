//! Putting a compiled flow's stage instances on PEs: in turn over all PEs, or by a
//! [`Groups`] file (each group's PEs in turn; for groups that are jobs of their own, only this
//! job's group is placed here, the others' stages being reached through their jobs).

use crate::error::FlowError;
use crate::groups::{Groups, Where};
use crate::plan::{shape, Plan};

pub(crate) fn place(
    plan: &mut Plan,
    groups: Option<&Groups>,
    me: Option<&str>,
    node_pes: &dyn Fn(usize) -> Option<std::ops::Range<usize>>,
) -> Result<(), FlowError> {
    let n = plan.num_pes.max(1);
    let Some(g) = groups else {
        if let Some(me) = me {
            return Err(shape(&format!(
                "this job is to be group {me}, but the flow has no groups file"
            )));
        }
        for (k, inst) in plan.insts.iter_mut().enumerate() {
            inst.pe = k % n;
        }
        return Ok(());
    };
    let err = |msg: String| FlowError::Placement {
        file: g.file.clone(),
        msg,
    };
    let mine = match (g.separate_jobs(), me) {
        (false, None) => None,
        (false, Some(me)) => {
            return Err(err(format!(
                "this job is to be group {me}, but no group has an address ('at'): the groups are PEs of one job"
            )))
        }
        (true, None) => {
            return Err(err(
                "every group has an address, so each is a job of its own: say which group this job is (Flow::as_group)"
                    .to_owned(),
            ))
        }
        (true, Some(me)) => match g.groups.iter().position(|x| x.name == me) {
            Some(i) => Some(i),
            None => return Err(err(format!("there is no group {me}"))),
        },
    };
    let mut pes_of = Vec::new();
    for (gi, grp) in g.groups.iter().enumerate() {
        if mine.is_some_and(|m| m != gi) {
            // Another job's group: its PEs are its own job's, and only its job places there.
            pes_of.push(vec![0]);
            continue;
        }
        let pes: Vec<usize> = match &grp.at {
            Where::Pes(v) => {
                if let Some(&bad) = v.iter().find(|&&p| p >= n) {
                    return Err(err(format!(
                        "group {} (line {}) names PE {bad}, but the job has {n} PEs",
                        grp.name, grp.line
                    )));
                }
                v.clone()
            }
            Where::Nodes(v) => {
                let mut pes = Vec::new();
                for &node in v {
                    let Some(r) = node_pes(node) else {
                        return Err(err(format!(
                            "group {} (line {}) names node {node}, which the job does not have",
                            grp.name, grp.line
                        )));
                    };
                    pes.extend(r);
                }
                pes
            }
        };
        if pes.is_empty() {
            return Err(err(format!(
                "group {} (line {}) has no PEs",
                grp.name, grp.line
            )));
        }
        pes_of.push(pes);
    }
    let mut used = vec![false; g.rules.len()];
    let mut turn = vec![0usize; g.groups.len()];
    for inst in &mut plan.insts {
        let mut chosen: Option<(usize, usize)> = None;
        for (r, rule) in g.rules.iter().enumerate() {
            if rule.matches(&inst.name) {
                used[r] = true;
                match chosen {
                    Some((grp, line)) if grp != rule.group => {
                        return Err(err(format!(
                        "stage {} is placed in group {} (line {line}) and in group {} (line {})",
                        inst.name, g.groups[grp].name, g.groups[rule.group].name, rule.line
                    )))
                    }
                    Some(_) => {}
                    None => chosen = Some((rule.group, rule.line)),
                }
            }
        }
        let Some((grp, _)) = chosen else {
            return Err(err(format!("stage {} is in no group", inst.name)));
        };
        let pes = &pes_of[grp];
        inst.pe = pes[turn[grp] % pes.len()];
        turn[grp] += 1;
        inst.group = Some(grp);
    }
    if let Some(r) = used.iter().position(|u| !u) {
        let rule = &g.rules[r];
        return Err(err(format!(
            "line {}: '{}' matches no stage",
            rule.line, rule.pattern
        )));
    }
    plan.group_names = g.groups.iter().map(|x| x.name.clone()).collect();
    plan.group_addrs = g.groups.iter().map(|x| x.addr.clone()).collect();
    plan.my_group = mine;
    Ok(())
}
