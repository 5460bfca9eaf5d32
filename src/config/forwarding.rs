//! Auto-forwarding as a graph: which queue or topic each queue, subscription and dead-letter
//! queue forwards to, checked as a whole. A target must be a queue or topic; a message must
//! never come back to where it was (a loop), and no chain may take more than
//! [`MAX_HOPS`] forwarding moves (Service Bus's limit). A topic fans out to each of its
//! subscriptions without a hop of its own, so a subscription that forwards to its topic is a
//! loop. Names compare case-insensitively.
//!
//! The config file, the emulator's `Config.json`, the administration API and a reload all ask
//! [`check`]; each turns a [`Refusal`] into its own error, naming the key at fault.

use std::collections::HashMap;

use super::{QueueConfig, TopicConfig};

/// Most forwarding moves one message may take (Service Bus's `MaxTransferHopCount`).
pub const MAX_HOPS: usize = 4;

/// Which of a lane's two forwarding keys a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// `forward_to` (`ForwardTo`).
    ForwardTo,
    /// `forward_dead_lettered_messages_to` (`ForwardDeadLetteredMessagesTo`).
    DeadLetters,
}

/// The queue or subscription whose key is at fault, by its place in the slices given to
/// [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// `queues[index]`.
    Queue(usize),
    /// `topics[topic].subscriptions[subscription]`.
    Subscription(usize, usize),
}

/// Why a set of entities cannot forward as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The lane whose key is at fault.
    pub lane: Lane,
    /// Which key.
    pub key: Key,
    /// What is wrong, naming the target, the loop or the chain.
    pub message: String,
}

/// One node: a queue, a topic or a subscription, with its display path.
struct Node {
    path: String,
    /// Where its messages go: each target node, whether the move is a hop (a topic's fan-out
    /// is not), and the lane and key that declare it (none for a fan-out).
    edges: Vec<(usize, Option<(Lane, Key)>)>,
}

/// Checks the forwarding of `queues` and `topics` (all the entities there are).
///
/// # Errors
/// The first [`Refusal`]: a target that is not a queue or topic, a dead-letter queue that
/// forwards to its own entity, a loop, or a chain longer than [`MAX_HOPS`].
pub fn check(queues: &[QueueConfig], topics: &[TopicConfig]) -> Result<(), Refusal> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut entities: HashMap<String, usize> = HashMap::new();
    let node = |path: String, nodes: &mut Vec<Node>| {
        nodes.push(Node {
            path,
            edges: Vec::new(),
        });
        nodes.len() - 1
    };
    for queue in queues {
        let index = node(queue.name.clone(), &mut nodes);
        entities.insert(queue.name.to_lowercase(), index);
    }
    for topic in topics {
        let index = node(topic.name.clone(), &mut nodes);
        entities.insert(topic.name.to_lowercase(), index);
    }
    // Lanes with their node, their own entity's node and their two targets.
    let mut lanes = Vec::new();
    let sessions = |lane: Lane, forward_to: &Option<String>, requires_session: bool| match (
        forward_to,
        requires_session,
    ) {
        (Some(_), true) => Err(Refusal {
            lane,
            key: Key::ForwardTo,
            message: "is set on a queue or subscription that requires sessions: Tidebus does \
                      not forward from those yet"
                .to_owned(),
        }),
        _ => Ok(()),
    };
    for (index, queue) in queues.iter().enumerate() {
        let own = entities[&queue.name.to_lowercase()];
        sessions(
            Lane::Queue(index),
            &queue.forward_to,
            queue.requires_session,
        )?;
        let targets = [&queue.forward_to, &queue.forward_dead_lettered_messages_to];
        lanes.push((Lane::Queue(index), own, own, targets));
    }
    for (t, topic) in topics.iter().enumerate() {
        let own = entities[&topic.name.to_lowercase()];
        for (s, subscription) in topic.subscriptions.iter().enumerate() {
            let lane = Lane::Subscription(t, s);
            sessions(
                lane,
                &subscription.forward_to,
                subscription.requires_session,
            )?;
            let path = format!("{}/Subscriptions/{}", topic.name, subscription.name);
            let at = node(path, &mut nodes);
            nodes[own].edges.push((at, None));
            let targets = [
                &subscription.forward_to,
                &subscription.forward_dead_lettered_messages_to,
            ];
            lanes.push((lane, at, own, targets));
        }
    }
    // Dead-letter queues are where chains may start, never where they pass.
    let mut dead_letter_starts = Vec::new();
    for (lane, at, own, [forward_to, dead_letters]) in lanes {
        for (key, target) in [
            (Key::ForwardTo, forward_to),
            (Key::DeadLetters, dead_letters),
        ] {
            let Some(target) = target else { continue };
            let refuse = |message: String| Refusal { lane, key, message };
            let Some(&to) = entities.get(&target.to_lowercase()) else {
                return Err(refuse(missing(target)));
            };
            match key {
                Key::ForwardTo => nodes[at].edges.push((to, Some((lane, key)))),
                Key::DeadLetters if to == own && matches!(lane, Lane::Queue(_)) => {
                    return Err(refuse(format!(
                        "'{target}' is the queue itself: its dead-lettered messages would \
                         come back to it"
                    )));
                }
                Key::DeadLetters => dead_letter_starts.push((lane, at, to)),
            }
        }
    }
    find_loop(&nodes)?;
    let mut longest = vec![None; nodes.len()];
    for start in 0..nodes.len() {
        let (hops, chain, blame) = longest_chain(&nodes, start, &mut longest);
        if hops > MAX_HOPS {
            let (lane, key) = blame.expect("a chain of hops has a first hop");
            return Err(too_long(lane, key, &nodes, &chain, hops));
        }
    }
    for (lane, at, to) in dead_letter_starts {
        let (hops, chain, _) = longest_chain(&nodes, to, &mut longest);
        if hops + 1 > MAX_HOPS {
            let mut names = vec![format!("{}/$DeadLetterQueue", nodes[at].path)];
            names.extend(chain.iter().map(|&n| nodes[n].path.clone()));
            return Err(Refusal {
                lane,
                key: Key::DeadLetters,
                message: chain_message(&names, hops + 1),
            });
        }
    }
    Ok(())
}

/// A forwarding key's value as read: `None` when absent or empty (the emulator's file writes
/// `""` for none).
pub fn target(written: Option<String>) -> Option<String> {
    written.filter(|name| !name.is_empty())
}

/// Service Bus's words for a target that does not exist, naming it.
fn missing(target: &str) -> String {
    let kind = match target.to_lowercase().contains("/subscriptions/") {
        true => " (a subscription cannot be a forwarding target: name a queue or topic)",
        false => "",
    };
    format!("The auto forwarding destination entity '{target}' does not exist{kind}.")
}

/// Refuses a cycle, naming it: `forwarding loop: a → b → a`. The edge that closes it is
/// blamed.
fn find_loop(nodes: &[Node]) -> Result<(), Refusal> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; nodes.len()];
    for start in 0..nodes.len() {
        if marks[start] != Mark::New {
            continue;
        }
        // (node, next edge to follow); the stack is the current path.
        let mut stack = vec![(start, 0)];
        marks[start] = Mark::OnPath;
        while let Some((at, edge)) = stack.last_mut() {
            let Some(&(to, declared)) = nodes[*at].edges.get(*edge) else {
                marks[*at] = Mark::Done;
                stack.pop();
                continue;
            };
            *edge += 1;
            match marks[to] {
                Mark::Done => {}
                Mark::New => {
                    marks[to] = Mark::OnPath;
                    stack.push((to, 0));
                }
                Mark::OnPath => {
                    let from = stack.iter().position(|(n, _)| *n == to).unwrap_or(0);
                    let mut names: Vec<&str> = stack[from..]
                        .iter()
                        .map(|(n, _)| nodes[*n].path.as_str())
                        .collect();
                    names.push(&nodes[to].path);
                    // A cycle always holds a declared hop: fan-outs only go topic → subscription.
                    let (lane, key) = declared.unwrap_or_else(|| blame_in(nodes, &stack[from..]));
                    return Err(Refusal {
                        lane,
                        key,
                        message: format!("forwarding loop: {}", names.join(" → ")),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The first declared hop along a path of (node, next edge) pairs.
fn blame_in(nodes: &[Node], path: &[(usize, usize)]) -> (Lane, Key) {
    path.iter()
        .find_map(|(n, edge)| nodes[*n].edges.get(edge.saturating_sub(1))?.1)
        .expect("a loop holds a declared hop")
}

/// A chain of forwarding moves: its hops, its nodes and its first declared hop.
type Chain = (usize, Vec<usize>, Option<(Lane, Key)>);

/// The most hops a message entering `start` may take from there, the nodes of that chain
/// (from `start`) and its first declared hop; memoized in `longest`. The graph has no loop.
fn longest_chain(nodes: &[Node], start: usize, longest: &mut [Option<Chain>]) -> Chain {
    if let Some(known) = &longest[start] {
        return known.clone();
    }
    let mut best = (0, vec![start], None);
    for &(to, declared) in &nodes[start].edges {
        let (hops, chain, first) = longest_chain(nodes, to, longest);
        let hops = hops + usize::from(declared.is_some());
        if hops > best.0 {
            let mut path = vec![start];
            path.extend(chain);
            best = (hops, path, declared.or(first));
        }
    }
    longest[start] = Some(best.clone());
    best
}

fn too_long(lane: Lane, key: Key, nodes: &[Node], chain: &[usize], hops: usize) -> Refusal {
    let names: Vec<String> = chain.iter().map(|&n| nodes[n].path.clone()).collect();
    Refusal {
        lane,
        key,
        message: chain_message(&names, hops),
    }
}

fn chain_message(names: &[String], hops: usize) -> String {
    format!(
        "forwarding chain of {hops} hops: {}; Service Bus allows at most {MAX_HOPS}",
        names.join(" → ")
    )
}
