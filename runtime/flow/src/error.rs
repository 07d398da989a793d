//! What can go wrong in building a flow, reading its groups file, and running it.

/// Why a flow could not be built or did not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlowError {
    /// The building blocks do not make a flow (a source that is not first, a farm without
    /// workers, two stages of one name, ...): a mistake in the program.
    #[error("flow: {0}")]
    Shape(String),
    /// A line of the groups file that is not in its grammar (see [`Groups`](crate::Groups)).
    #[error("{file} line {line}: {msg}")]
    Config {
        /// Where the text came from (a path, or `groups` for text given in code).
        file: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        msg: String,
    },
    /// The groups file does not fit this flow or this job (a stage in no group, a pattern
    /// that matches no stage, a PE the job does not have).
    #[error("{file}: {msg}")]
    Placement {
        /// Where the groups came from.
        file: String,
        /// What does not fit.
        msg: String,
    },
    /// The groups file could not be read.
    #[error("{file}: {msg}")]
    Read {
        /// The path.
        file: String,
        /// The system's reason.
        msg: String,
    },
    /// Each group a job of its own: another group's job could not be reached (not started
    /// within the time allowed, another secret) or this job could not listen at its address.
    #[error("flow: group {group} at {addr}: {why}")]
    Connect {
        /// The group.
        group: String,
        /// Its address.
        addr: String,
        /// Why.
        why: String,
    },
    /// Each group a job of its own: another group's connection ended before every channel
    /// with it had (its job died, or was killed).
    #[error("flow: group {group} ({addr}) left before the end of the stream ({why}){}", stages_of(.stages))]
    GroupLost {
        /// The group.
        group: String,
        /// Its address.
        addr: String,
        /// Why the connection ended.
        why: String,
        /// This job's stages connected to it.
        stages: Vec<String>,
    },
    /// A node that held stages died before the stream ended (report mode): the stages it
    /// held are lost, and the ones that took items from them or sent items to them cannot
    /// complete.
    #[error("flow: stage{} {} lost with node {node} ({reason}); {} cannot complete", plural(.lost), .lost.join(", "), depends(.dependents))]
    Lost {
        /// The dead node.
        node: usize,
        /// Why it died, as the runtime was told.
        reason: String,
        /// The stages it held that had not finished.
        lost: Vec<String>,
        /// Stages on other nodes connected to a lost stage.
        dependents: Vec<String>,
    },
}

fn plural(v: &[String]) -> &'static str {
    if v.len() == 1 {
        ""
    } else {
        "s"
    }
}

fn depends(v: &[String]) -> String {
    if v.is_empty() {
        "the stream".to_owned()
    } else {
        format!("the stream through {}", v.join(", "))
    }
}

fn stages_of(v: &[String]) -> String {
    if v.is_empty() {
        String::new()
    } else {
        format!("; {} cannot complete", v.join(", "))
    }
}
