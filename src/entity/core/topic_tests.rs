//! The pure core of a topic: fan-out by rules under one number, copies independent, filter
//! failures dead-lettered, the shortest time to live, scheduling held by the topic, recovery
//! of every lane.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::entity::core::tests::RULES as LANE_RULES;
use crate::entity::core::{EntityCore, SubscriptionLanes};
use crate::entity::handle::{ConsumerId, LaneId, LockRef, ReceiveMode, Settlement};
use crate::entity::queue::{Reader, Rules, Unread};
use crate::entity::topic::{Route, Rule};
use crate::filter::{Filter, MessageView, SqlFilter, Value};
use crate::message::Arrival;
use crate::store::record::{Record, NEVER};
use crate::store::{Change, Recovered};

fn lane(subscription: u32) -> LaneId {
    LaneId {
        subscription,
        dead_letter: false,
    }
}

fn sql(expression: &str) -> Filter {
    Filter::Sql(SqlFilter::parse(expression).expect("valid SQL"))
}

/// Subscription `number` with one rule.
fn subscription(number: u32, filter: Filter, rules: Rules, dead_letter: bool) -> SubscriptionLanes {
    SubscriptionLanes {
        route: Route {
            lane: lane(number),
            rules: vec![Rule {
                name: format!("r{number}"),
                filter,
                action: None,
                created_ms: 0,
                local_times: Default::default(),
            }],
            dead_letter_on_filter_error: dead_letter,
            auto_delete_ms: None,
            last_active_ms: 0,
        },
        rules,
        main: Recovered::default(),
        dead_letter: Recovered::default(),
    }
}

/// Subscriptions 1 (everything), 2 (`region = 'eu'`), 3 (nothing), 4 (`amount + 1 > 2`,
/// dead-lettering what it cannot evaluate) and 5 (the same, not dead-lettering).
fn topic(default_ttl_ms: i64) -> EntityCore {
    EntityCore::topic(
        u64::MAX,
        default_ttl_ms,
        Recovered::default(),
        vec![
            subscription(1, Filter::True, LANE_RULES, true),
            subscription(2, sql("region = 'eu'"), LANE_RULES, true),
            subscription(3, Filter::False, LANE_RULES, true),
            subscription(4, sql("amount + 1 > 2"), LANE_RULES, true),
            subscription(5, sql("amount + 1 > 2"), LANE_RULES, false),
        ],
    )
}

fn message(properties: &[(&str, Value)], ttl_ms: Option<i64>) -> Arrival {
    let view = MessageView {
        application_properties: properties
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect(),
        ..MessageView::default()
    };
    Arrival {
        bytes: Bytes::from_static(b"m"),
        ttl_ms,
        scheduled_ms: None,
        view: Some(Box::new(view)),
        session_id: None,
        message_id: None,
        partition_key: None,
    }
}

/// The records each lane stored.
fn stored(core: &mut EntityCore) -> BTreeMap<LaneId, Vec<(i64, Record)>> {
    let mut lanes: BTreeMap<LaneId, Vec<(i64, Record)>> = BTreeMap::new();
    for (lane, change) in core.take_changes().0 {
        if let Change::Put { seq, record, .. } = change {
            lanes.entry(lane).or_default().push((seq, record));
        }
    }
    lanes
}

fn seqs(lanes: &BTreeMap<LaneId, Vec<(i64, Record)>>, id: LaneId) -> Vec<i64> {
    lanes
        .get(&id)
        .map(|records| records.iter().map(|(seq, _)| *seq).collect())
        .unwrap_or_default()
}

#[test]
fn a_send_is_copied_under_one_number_to_exactly_the_subscriptions_that_match() {
    let mut core = topic(NEVER);
    let eu = message(&[("region", Value::String("eu".into()))], None);
    let us = message(&[("region", Value::String("us".into()))], None);
    let bad = message(&[("amount", Value::String("ten".into()))], None);
    assert_eq!(core.enqueue(10, vec![eu, us, bad]), Ok(vec![1, 2, 3]));
    let lanes = stored(&mut core);
    assert_eq!(seqs(&lanes, lane(1)), vec![1, 2, 3]);
    assert_eq!(seqs(&lanes, lane(2)), vec![1]);
    assert_eq!(seqs(&lanes, lane(3)), Vec::<i64>::new());
    assert_eq!(seqs(&lanes, lane(4)), Vec::<i64>::new(), "'ten' + 1 fails");
    assert_eq!(
        seqs(&lanes, lane(4).dead_letter_lane()),
        vec![3],
        "dead-lettered"
    );
    assert_eq!(seqs(&lanes, lane(5)), Vec::<i64>::new());
    assert_eq!(
        seqs(&lanes, lane(5).dead_letter_lane()),
        Vec::<i64>::new(),
        "dropped"
    );
    let enqueued: Vec<i64> = lanes
        .values()
        .flatten()
        .map(|(_, r)| r.enqueued_ms)
        .collect();
    assert!(
        enqueued.iter().all(|at| *at == 10),
        "one enqueued time: {enqueued:?}"
    );
}

#[test]
fn settling_a_copy_in_one_subscription_leaves_the_others() {
    let mut core = topic(NEVER);
    core.enqueue(
        0,
        vec![message(&[("region", Value::String("eu".into()))], None)],
    )
    .expect("room");
    core.reveal_up_to(core.next_seq());
    let (one, two) = (ConsumerId(1), ConsumerId(2));
    for (consumer, id) in [(one, lane(1)), (two, lane(2))] {
        core.add_consumer(consumer, id, ReceiveMode::PeekLock, u64::MAX)
            .expect("lane");
        core.lane(id).expect("lane").add_credit(consumer, 5);
    }
    let got = core.dispatch(0, &mut Reader::new(&mut Unread));
    assert_eq!(got.len(), 2, "one delivery per subscription");
    let first = got.iter().find(|d| d.consumer == one).expect("s1 copy");
    let lock = LockRef {
        seq: first.seq,
        token: first.lock_token.expect("peek-lock"),
    };
    assert_eq!(core.settle(one, lock, &Settlement::Complete), Ok(lane(1)));
    assert_eq!(core.lane(lane(1)).expect("lane").len(), 0);
    assert_eq!(
        core.lane(lane(2)).expect("lane").len(),
        1,
        "s2's copy stays"
    );
    let other = got.iter().find(|d| d.consumer == two).expect("s2 copy");
    let foreign = LockRef {
        seq: other.seq,
        token: other.lock_token.expect("peek-lock"),
    };
    assert!(
        core.settle(one, foreign, &Settlement::Complete).is_err(),
        "a lock of one subscription settles nothing in another"
    );
}

#[test]
fn a_copy_lives_the_shortest_of_the_message_topic_and_subscription_ttl() {
    let short = Rules {
        default_ttl_ms: 2_000,
        ..LANE_RULES
    };
    let mut core = EntityCore::topic(
        u64::MAX,
        60_000,
        Recovered::default(),
        vec![
            subscription(1, Filter::True, LANE_RULES, true),
            subscription(2, Filter::True, short, true),
        ],
    );
    core.enqueue(1_000, vec![message(&[], None), message(&[], Some(500))])
        .expect("room");
    let lanes = stored(&mut core);
    let expiries = |id| -> Vec<i64> { lanes[&id].iter().map(|(_, r)| r.expires_ms).collect() };
    assert_eq!(
        expiries(lane(1)),
        vec![61_000, 1_500],
        "the topic's, then the message's"
    );
    assert_eq!(
        expiries(lane(2)),
        vec![3_000, 1_500],
        "the subscription's, the message's"
    );
}

#[test]
fn a_scheduled_message_is_held_by_the_topic_and_fans_out_renumbered() {
    let mut core = topic(NEVER);
    let mut later = message(&[("region", Value::String("eu".into()))], None);
    later.scheduled_ms = Some(5_000);
    assert_eq!(core.enqueue(0, vec![later.clone()]), Ok(vec![1]));
    let lanes = stored(&mut core);
    assert_eq!(seqs(&lanes, LaneId::MAIN), vec![1], "held by the topic");
    assert_eq!(seqs(&lanes, lane(1)), Vec::<i64>::new());
    assert_eq!(core.due_scheduled(5_000, 10), vec![1]);
    later.scheduled_ms = None;
    core.activate(5_000, vec![(1, later)]);
    let lanes = stored(&mut core);
    assert_eq!(seqs(&lanes, lane(1)), vec![2]);
    assert_eq!(seqs(&lanes, lane(2)), vec![2]);
    assert!(!core.has_scheduled());
}

#[test]
fn recovery_gives_each_subscription_back_its_own_copies() {
    let mut core = topic(NEVER);
    core.enqueue(
        0,
        vec![message(&[("region", Value::String("eu".into()))], None)],
    )
    .expect("room");
    core.enqueue(0, vec![message(&[], None)]).expect("room");
    let lanes = stored(&mut core);
    let recovered = |id: LaneId| Recovered {
        next_seq: 3,
        records: lanes.get(&id).cloned().unwrap_or_default(),
        ..Recovered::default()
    };
    let with = |number: u32, filter: Filter| SubscriptionLanes {
        main: recovered(lane(number)),
        ..subscription(number, filter, LANE_RULES, true)
    };
    let mut back = EntityCore::topic(
        u64::MAX,
        NEVER,
        Recovered::default(),
        vec![with(1, Filter::True), with(2, sql("region = 'eu'"))],
    );
    assert_eq!(back.lane(lane(1)).expect("lane").len(), 2);
    assert_eq!(back.lane(lane(2)).expect("lane").len(), 1);
    assert_eq!(back.next_seq(), 3, "numbers go on after the recovered ones");
}

#[test]
fn a_replaced_rule_keeps_its_place_name_and_creation_time_and_is_stored() {
    let mut core = topic(NEVER);
    let second = Rule {
        name: "second".into(),
        filter: Filter::False,
        action: None,
        created_ms: 7,
        local_times: Default::default(),
    };
    core.add_rule(lane(2), second).expect("added");
    core.take_changes();
    let new = Rule {
        name: "R2".into(),
        filter: sql("region = 'us'"),
        action: None,
        created_ms: 99,
        local_times: Default::default(),
    };
    let replaced = core.replace_rule(lane(2), new).expect("replaced");
    assert_eq!((replaced.name.as_str(), replaced.created_ms), ("r2", 0));
    let rules = &core.route(lane(2)).expect("a subscription").rules;
    let names: Vec<&str> = rules.iter().map(|rule| rule.name.as_str()).collect();
    assert_eq!(names, ["r2", "second"], "in place");
    let changes = core.take_changes().0;
    assert!(
        matches!(&changes[..], [(id, Change::Rule { name, stored: Some(_) })] if *id == lane(2) && name == "r2"),
        "{changes:?}"
    );
    let us = message(&[("region", Value::String("us".into()))], None);
    let eu = message(&[("region", Value::String("eu".into()))], None);
    assert_eq!(core.enqueue(10, vec![us, eu]), Ok(vec![1, 2]));
    assert_eq!(
        seqs(&stored(&mut core), lane(2)),
        vec![1],
        "the new filter picks"
    );
    let missing = Rule {
        name: "nowhere".into(),
        filter: Filter::True,
        action: None,
        created_ms: 0,
        local_times: Default::default(),
    };
    assert!(matches!(
        core.replace_rule(lane(2), missing),
        Err(crate::entity::handle::EntityError::RuleNotFound(name)) if name == "nowhere"
    ));
}

#[test]
fn rules_are_listed_by_name_ignoring_case_a_page_at_a_time() {
    let mut core = topic(NEVER);
    for name in [
        "sqlRule",
        "correlationRule",
        "Beta",
        "$Default",
        "zeta",
        "Alpha",
    ] {
        let rule = Rule {
            name: name.into(),
            filter: Filter::True,
            action: None,
            created_ms: 0,
            local_times: Default::default(),
        };
        core.add_rule(lane(2), rule).expect("added");
    }
    let names = |rules: Vec<Rule>| rules.into_iter().map(|rule| rule.name).collect::<Vec<_>>();
    let all = core.rules(lane(2), 0, usize::MAX).expect("a subscription");
    assert_eq!(
        names(all),
        [
            "$Default",
            "Alpha",
            "Beta",
            "correlationRule",
            "r2",
            "sqlRule",
            "zeta"
        ]
    );
    let page = core.rules(lane(2), 2, 2).expect("a subscription");
    assert_eq!(names(page), ["Beta", "correlationRule"]);
    assert!(core
        .rules(lane(2), 7, 1)
        .expect("a subscription")
        .is_empty());
    let routed = &core.route(lane(2)).expect("a subscription").rules;
    assert_eq!(
        routed[0].name, "r2",
        "messages meet the rules in creation order"
    );
}

#[test]
fn a_send_without_a_session_id_is_taken_and_dead_lettered_only_where_sessions_are_required() {
    // Service Bus takes the send; the session-enabled subscription dead-letters its copy with
    // "Session id is null." (Azure/azure-service-bus#196), the plain one delivers it.
    let sessions = Rules {
        requires_session: true,
        ..LANE_RULES
    };
    let mut core = EntityCore::topic(
        u64::MAX,
        NEVER,
        Recovered::default(),
        vec![
            subscription(1, Filter::True, LANE_RULES, true),
            subscription(2, Filter::True, sessions, true),
        ],
    );
    let data = fe2o3_amqp::types::messaging::Data(fe2o3_amqp::types::primitives::Binary::from(
        b"no session".to_vec(),
    ));
    let bytes = Bytes::from(serde_amqp::to_vec(&data).expect("a data section"));
    let without = Arrival {
        bytes,
        ..message(&[], None)
    };
    let with = Arrival {
        session_id: Some("s".into()),
        ..message(&[], None)
    };
    assert_eq!(core.send(10, vec![without, with]), Ok(vec![1, 2]));
    let changes = core.take_changes().0;
    let lanes = {
        let mut lanes: BTreeMap<LaneId, Vec<i64>> = BTreeMap::new();
        for (lane, change) in &changes {
            if let Change::Put { seq, .. } = change {
                lanes.entry(*lane).or_default().push(*seq);
            }
        }
        lanes
    };
    assert_eq!(lanes.get(&lane(1)), Some(&vec![1, 2]), "plain: both");
    assert_eq!(
        lanes.get(&lane(2)),
        Some(&vec![2]),
        "sessions: the one with an id"
    );
    assert_eq!(lanes.get(&lane(2).dead_letter_lane()), Some(&vec![1]));
    let dead = changes.iter().find_map(|(lane_id, change)| match change {
        Change::Put { body, .. } if *lane_id == lane(2).dead_letter_lane() => Some(body),
        _ => None,
    });
    let view = crate::message::view(dead.expect("the dead-lettered copy")).expect("a message");
    let property = |name: &str| {
        let found = view
            .application_properties
            .iter()
            .find(|(key, _)| key == name);
        found.map(|(_, value)| value.clone())
    };
    assert_eq!(
        property("DeadLetterReason"),
        Some(Value::String("Session id is null.".into()))
    );
    assert_eq!(
        property("DeadLetterErrorDescription"),
        Some(Value::String(
            "Session enabled entity doesn't allow a message whose session identifier is null."
                .into()
        ))
    );
}
