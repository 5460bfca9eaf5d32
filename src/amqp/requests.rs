//! Request/response nodes: requests to `$cbs` and `<entity>/$management` answered on the
//! client's reply link (amqp-dialect.md §2.1), CBS at once, management once the entity has
//! answered; requests deferred while the connection holds as many answers as it may.

use foldhash::HashMap;
use std::collections::VecDeque;

use bytes::Bytes;
use fe2o3_amqp::types::definitions::{AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState, MessageId};
use fe2o3_amqp::types::performatives::Flow;
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::types::transaction::TransactionError;

use crate::amqp::link::{self, Charge, Link, LinkKind, Replies, Whole};
use crate::amqp::outbox::{Context, Fault, Outbox};
use crate::amqp::outcome;
use crate::amqp::transactions::Transactions;
use crate::clock;
use crate::entity::handle::{Command, EntityError, EntityHandle, LaneId, Ticket, TxnId, Work};
use crate::entity::operation::Answer;
use crate::entity::operation::Operation;
use crate::node::management;
use crate::node::response::{Response, Style};
use crate::node::{router, Node};
use crate::wire;

/// A request that arrived whole on a link to a request/response node.
#[derive(Debug)]
pub struct Request {
    /// The node it was sent to.
    pub node: Node,
    /// The address its link was authorized for (each management operation checks its right
    /// there).
    pub address: Option<String>,
    /// The encoded request message.
    pub bytes: Bytes,
    /// The transaction its transfer named, if any.
    pub txn: Option<Binary>,
    /// Why it is refused unread, when it was larger than its link takes: then `bytes` are
    /// only its first ones, and it is answered with 403 `amqp:link:message-size-exceeded`.
    pub too_large: Option<String>,
}

impl Request {
    /// A request that arrived whole on a link to `node` authorized for `address`: accepted
    /// at once (unless the client settled it), whatever its answer will be.
    pub fn accept(node: Node, address: Option<String>, whole: Whole, out: &mut Outbox) -> Self {
        if !whole.settled {
            let accepted = DeliveryState::Accepted(Accepted {});
            let state = match &whole.txn {
                Some(txn) => outcome::transactional(txn.clone(), accepted),
                None => accepted,
            };
            out.frames
                .push(outcome::settled_disposition(whole.delivery_id, state));
        }
        Request {
            node,
            address,
            bytes: whole.bytes,
            txn: whole.txn,
            too_large: None,
        }
    }

    /// A request larger than its link takes, of which `whole` holds the first bytes:
    /// accepted, and answered with a refusal saying `description`, when those bytes name it (a
    /// `message-id`) and a reply link answers to it. A client waiting for its response learns
    /// at once (it ignores a rejected delivery), its link and the others stay. `None` when it
    /// cannot be answered: its link is then to be detached with the error.
    pub fn oversized(
        node: Node,
        address: Option<String>,
        whole: Whole,
        description: String,
        links: &HashMap<u32, Link>,
        out: &mut Outbox,
    ) -> Option<Self> {
        let decoded = management::Request::decode_head(&whole.bytes);
        decoded.message_id.as_ref()?;
        reply_link(links, &link::node_key(&node), decoded.reply_to.as_deref())?;
        let mut request = Request::accept(node, address, whole, out);
        request.too_large = Some(description);
        Some(request)
    }
}

/// An answer to put on a reply link.
#[derive(Debug)]
pub struct Reply {
    /// The reply link's id.
    pub link: u64,
    /// The encoded answer message.
    pub encoded: Bytes,
}

/// One session's requests: those at an entity, the answers waiting for the client, and the
/// requests deferred until the connection's answers have room.
#[derive(Debug, Default)]
pub struct Requests {
    next_request: u64,
    /// Management requests at an entity: the `message-id` each answer echoes.
    correlations: HashMap<u64, Option<MessageId>>,
    /// Bytes of answers that wait for the client's link credit or session window.
    answers_waiting: u64,
    /// Requests that arrived while the connection held as many answers as it may, in order,
    /// each charged to the connection's reassembly budget.
    deferred: VecDeque<(Request, Charge)>,
}

impl Requests {
    /// A request arrived whole: answered now (the reply returned, or a command posted to its
    /// entity), or deferred while the connection holds as many answers as it may
    /// ([`Context::answers_full`]) or this session already defers one (they keep their order).
    ///
    /// # Errors
    /// [`Fault::Connection`] when deferred requests and unfinished deliveries outgrow the
    /// connection's reassembly budget.
    pub fn on_request(
        &mut self,
        request: Request,
        links: &HashMap<u32, Link>,
        ctx: &mut Context<'_>,
        out: &mut Outbox,
    ) -> Result<Option<Reply>, Fault> {
        if !ctx.answers_full && self.deferred.is_empty() {
            return Ok(self.answer(&request, links, ctx, out));
        }
        let mut charge = ctx.reassembly.charge();
        if !charge.add(request.bytes.len() as u64) {
            return Err(Fault::Connection(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "requests waiting for answers the client does not take, and unfinished \
                     deliveries, hold more than {} bytes on this connection",
                    ctx.reassembly.limit()
                ),
            )));
        }
        self.deferred.push_back((request, charge));
        Ok(None)
    }

    /// What this session holds of answers: bytes waiting for the client, and requests
    /// posted to entities and not answered yet.
    pub fn answers_held(&self) -> (u64, usize) {
        (self.answers_waiting, self.correlations.len())
    }

    /// Whether a request waits for the connection's answers to have room.
    pub fn defers(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Answers the first deferred request (the connection has room for its answer now).
    pub fn answer_deferred(
        &mut self,
        links: &HashMap<u32, Link>,
        ctx: &mut Context<'_>,
        out: &mut Outbox,
    ) -> Option<Reply> {
        let (request, _charge) = self.deferred.pop_front()?;
        self.answer(&request, links, ctx, out)
    }

    /// Decodes a request and answers it on the reply link it names: CBS at once, management
    /// once the entity has answered (a command is posted), or at once when the connection
    /// lacks the operation's right. `None` when no reply link answers to it (it is dropped).
    fn answer(
        &mut self,
        request: &Request,
        links: &HashMap<u32, Link>,
        ctx: &mut Context<'_>,
        out: &mut Outbox,
    ) -> Option<Reply> {
        let decoded = match request.too_large {
            Some(_) => management::Request::decode_head(&request.bytes),
            None => management::Request::decode(&request.bytes),
        };
        if let Some(why) = decoded
            .malformed
            .as_ref()
            .filter(|_| request.too_large.is_none())
        {
            tracing::info!(%why, "undecodable request");
        }
        let key = link::node_key(&request.node);
        let Some(reply_link) = reply_link(links, &key, decoded.reply_to.as_deref()) else {
            tracing::info!(node = %key, reply_to = ?decoded.reply_to, "request without a reply link dropped");
            return None;
        };
        if let Some(description) = &request.too_large {
            let style = match request.node {
                Node::Cbs => Style::Cbs,
                _ => Style::Management,
            };
            let refusal = Response::error(403, wire::condition::MESSAGE_SIZE_EXCEEDED, description);
            return Some(Reply {
                link: reply_link,
                encoded: refusal.encode(decoded.message_id, style),
            });
        }
        let response = match &request.node {
            Node::Cbs => {
                let registry = ctx.registry;
                let exists = |path: &str| router::route(registry, path).is_some();
                let response = management::cbs(&decoded, ctx.access, exists);
                return Some(Reply {
                    link: reply_link,
                    encoded: response.encode(decoded.message_id, Style::Cbs),
                });
            }
            Node::Management(entity, lane) => {
                let address = request.address.as_deref().unwrap_or_default();
                let checked = management::parse(&decoded).and_then(|operation| {
                    let rights = management::rights_of(&operation);
                    ctx.access
                        .check(address, rights, clock::real_ms())
                        .map_err(management::unauthorized)?;
                    match &request.txn {
                        None => Ok(Performed::Now(Box::new(operation))),
                        Some(txn) => staged(operation, *lane, txn, entity, ctx.transactions),
                    }
                });
                match checked {
                    Ok(performed) => {
                        let number = self.next_request;
                        self.next_request += 1;
                        self.correlations.insert(number, decoded.message_id);
                        let ticket = Ticket {
                            link: reply_link,
                            request: number,
                        };
                        let reply = (ticket, ctx.events.clone());
                        let command = match performed {
                            Performed::Now(operation) => Command::Manage {
                                lane: *lane,
                                operation,
                                reply,
                            },
                            Performed::Staged(txn, work) => Command::Stage {
                                txn,
                                work,
                                reply: Some(reply),
                            },
                        };
                        out.posts.push((entity.clone(), command));
                        return None;
                    }
                    Err(response) => response,
                }
            }
            Node::Entity(..) | Node::Coordinator => return None,
        };
        Some(Reply {
            link: reply_link,
            encoded: response.encode(decoded.message_id, Style::Management),
        })
    }

    /// The entity answered a management request: the response to send.
    pub fn on_managed(&mut self, ticket: Ticket, result: Result<Answer, EntityError>) -> Reply {
        let response = management::respond(result);
        let correlation = self.correlations.remove(&ticket.request).flatten();
        Reply {
            link: ticket.link,
            encoded: response.encode(correlation, Style::Management),
        }
    }

    /// `bytes` of answers started waiting for the client.
    pub fn waiting(&mut self, bytes: u64) {
        self.answers_waiting += bytes;
    }

    /// `bytes` of answers left for the socket, or went with their link.
    pub fn gone(&mut self, bytes: u64) {
        self.answers_waiting -= bytes;
    }
}

/// How a management operation is performed at its entity.
enum Performed {
    /// At once (boxed: an operation is large, and the command carries it boxed).
    Now(Box<Operation>),
    /// Staged in a transaction, applied at its commit.
    Staged(TxnId, Work),
}

/// A management operation inside the transaction `txn` names: `update-disposition` is staged
/// there (the locks are checked now, the settlement applied at the commit), as is
/// `schedule-message` (numbered now, stored at the commit); `renew-lock` is performed at once
/// (a renewal has nothing to commit or undo); no other operation may be part of a
/// transaction here.
fn staged(
    operation: Operation,
    lane: LaneId,
    txn: &Binary,
    entity: &EntityHandle,
    transactions: &mut Transactions,
) -> Result<Performed, Response> {
    if let Operation::RenewLock { .. } = operation {
        return Ok(Performed::Now(Box::new(operation)));
    }
    let (work, operations, bytes) = match operation {
        Operation::UpdateDisposition { tokens, settlement } => {
            let operations = tokens.len();
            let work = Work::SettleByToken {
                lane,
                tokens,
                settlement,
            };
            (work, operations, 0)
        }
        Operation::Schedule { messages } => {
            let operations = messages.len();
            let bytes = messages.iter().map(|m| m.bytes.len() as u64).sum();
            (Work::Schedule { lane, messages }, operations, bytes)
        }
        _ => {
            return Err(Response::error(
                501,
                wire::condition::NOT_IMPLEMENTED,
                "only schedule-message, update-disposition and renew-lock may be part of a \
                 transaction",
            ));
        }
    };
    let txn = transactions
        .enlist(txn, entity, (operations, bytes), clock::now_ms())
        .map_err(|error| {
            let description = error.description.unwrap_or_default();
            Response::error(400, transaction_condition(&error.condition), description)
        })?;
    Ok(Performed::Staged(txn, work))
}

/// The condition a management response names for a transaction's refusal.
fn transaction_condition(condition: &ErrorCondition) -> &'static str {
    match condition {
        ErrorCondition::TransactionError(TransactionError::UnknownId) => {
            wire::condition::TRANSACTION_UNKNOWN_ID
        }
        ErrorCondition::TransactionError(_) => wire::condition::TRANSACTION_TIMEOUT,
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded) => {
            wire::condition::RESOURCE_LIMIT_EXCEEDED
        }
        _ => wire::condition::NOT_ALLOWED,
    }
}

/// The reply link for a request to `node`: the one whose target address is `reply-to`, else
/// the one named `reply-to`, else the node's only reply link (amqp-dialect.md §2.1).
fn reply_link(links: &HashMap<u32, Link>, node: &str, reply_to: Option<&str>) -> Option<u64> {
    let replies: Vec<(&Link, &Replies)> = links
        .values()
        .filter_map(|link| match &link.kind {
            LinkKind::Replies(replies) if replies.node == node => Some((link, replies)),
            _ => None,
        })
        .collect();
    let by = |matches: &dyn Fn(&Link, &Replies) -> bool| {
        replies
            .iter()
            .find(|(l, r)| matches(l, r))
            .map(|(l, _)| l.id)
    };
    reply_to
        .and_then(|to| by(&|_, r| r.address.as_deref() == Some(to)))
        .or_else(|| reply_to.and_then(|to| by(&|l, _| l.name == to)))
        .or_else(|| (replies.len() == 1).then(|| replies[0].0.id))
}

/// Applies a client `flow` to a reply link's credit.
pub fn apply_flow(replies: &mut Replies, flow: &Flow) {
    let credit = flow
        .delivery_count
        .unwrap_or(0)
        .wrapping_add(flow.link_credit.unwrap_or(0))
        .wrapping_sub(replies.delivery_count);
    replies.credit = if credit > u32::MAX / 2 { 0 } else { credit };
}

/// After the answers the credit allowed went out: a drain uses up the credit left. Returns
/// the credit state for the answering flow when the client drains or asks for an echo.
pub fn finish_flow(replies: &mut Replies, flow: &Flow) -> Option<(u32, u32)> {
    if flow.drain {
        replies.delivery_count = replies.delivery_count.wrapping_add(replies.credit);
        replies.credit = 0;
    }
    (flow.drain || flow.echo).then_some((replies.delivery_count, replies.credit))
}

/// The next waiting answer the link's credit allows, counted as delivered.
pub fn next_answer(replies: &mut Replies) -> Option<Bytes> {
    if replies.credit == 0 {
        return None;
    }
    let encoded = replies.waiting.pop_front()?;
    replies.credit -= 1;
    replies.delivery_count = replies.delivery_count.wrapping_add(1);
    Some(encoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures::{self, link_flow as flow};

    fn reply_links(links: &[(&str, &str, Option<&str>)]) -> HashMap<u32, Link> {
        links
            .iter()
            .enumerate()
            .map(|(index, (name, node, address))| {
                let kind = LinkKind::Replies(Replies {
                    node: (*node).to_owned(),
                    address: address.map(str::to_owned),
                    delivery_count: 0,
                    credit: 0,
                    waiting: VecDeque::new(),
                });
                let handle = index as u32;
                (
                    handle,
                    fixtures::link(name, handle, 100 + u64::from(handle), kind),
                )
            })
            .collect()
    }

    #[test]
    fn a_request_is_answered_on_the_link_its_reply_to_names_else_the_only_one() {
        let links = reply_links(&[
            ("by-name", "q/$management", None),
            ("other", "q/$management", Some("client-1")),
            ("cbs", "$cbs", None),
        ]);
        assert_eq!(
            reply_link(&links, "q/$management", Some("client-1")),
            Some(101)
        );
        assert_eq!(
            reply_link(&links, "q/$management", Some("by-name")),
            Some(100)
        );
        assert_eq!(
            reply_link(&links, "q/$management", None),
            None,
            "two candidates"
        );
        assert_eq!(reply_link(&links, "$cbs", None), Some(102));
        assert_eq!(reply_link(&links, "$cbs", Some("cbs")), Some(102));
        assert_eq!(reply_link(&links, "other/$management", None), None);
    }

    #[test]
    fn answers_go_while_there_is_credit_and_a_drain_uses_up_the_rest() {
        let mut links = reply_links(&[("r", "$cbs", None)]);
        let LinkKind::Replies(replies) = &mut links.get_mut(&0).unwrap().kind else {
            unreachable!()
        };
        for answer in ["a", "b", "c"] {
            replies
                .waiting
                .push_back(Bytes::from_static(answer.as_bytes()));
        }
        assert_eq!(next_answer(replies), None, "no credit yet");
        apply_flow(replies, &flow(0, 2, false, false));
        assert_eq!(next_answer(replies).as_deref(), Some(&b"a"[..]));
        assert_eq!(next_answer(replies).as_deref(), Some(&b"b"[..]));
        assert_eq!(next_answer(replies), None);
        assert_eq!(finish_flow(replies, &flow(0, 2, false, false)), None);
        // The client counted one answer so far and asks for four more, draining.
        apply_flow(replies, &flow(1, 4, true, false));
        assert_eq!(replies.credit, 3);
        assert_eq!(next_answer(replies).as_deref(), Some(&b"c"[..]));
        assert_eq!(finish_flow(replies, &flow(1, 4, true, false)), Some((5, 0)));
        // A stale count (beyond what was sent) means no credit.
        apply_flow(replies, &flow(0, 1, false, true));
        assert_eq!(replies.credit, 0);
        assert_eq!(finish_flow(replies, &flow(0, 1, false, true)), Some((5, 0)));
    }

    #[test]
    fn answer_bytes_are_counted_until_they_leave() {
        let mut requests = Requests::default();
        requests.waiting(10);
        requests.waiting(5);
        requests.gone(10);
        assert_eq!(requests.answers_held(), (5, 0));
        assert!(!requests.defers());
    }
}
