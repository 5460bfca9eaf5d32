//! `forward_to` and `forward_dead_lettered_messages_to`: read, written back, and the forwarding
//! graph refused when a target is missing, a message could come back (a loop) or a chain is
//! longer than Service Bus allows.

use super::*;

/// The refusal of `text` with a policy appended (so that only forwarding is at fault).
fn forwarding_refusal(text: &str) -> String {
    refusal(&format!("{text}{A_POLICY}"))
}

#[test]
fn targets_are_read_case_insensitively_and_written_back() {
    let config = parse(
        "[[queues]]\nname = \"orders\"\nforward_to = \"AUDIT\"\n\
         forward_dead_lettered_messages_to = \"errors\"\n\
         [[queues]]\nname = \"audit\"\n[[queues]]\nname = \"errors\"\nforward_to = \"\"\n",
    );
    let orders = &config.queues[0];
    assert_eq!(orders.forward_to.as_deref(), Some("AUDIT"));
    assert_eq!(
        orders.forward_dead_lettered_messages_to.as_deref(),
        Some("errors")
    );
    assert_eq!(config.queues[2].forward_to, None, "\"\" is none");
    // Alone, a declaration's targets are the live entities' business (the registry checks).
    let declaration = Declaration::Queue(orders.clone());
    let back = Declaration::parse(&declaration.to_toml(), "d").expect("reads back");
    assert_eq!(back, declaration);
}

#[test]
fn a_missing_target_is_refused_with_its_key_and_position() {
    assert_eq!(
        forwarding_refusal("[[queues]]\nname = \"orders\"\nforward_to = \"nowhere\"\n"),
        "queues[0].forward_to (t.toml:3:14): The auto forwarding destination entity \
         'nowhere' does not exist."
    );
    let subscription = forwarding_refusal(
        "[[queues]]\nname = \"q\"\nforward_to = \"t/Subscriptions/s\"\n\
         [[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n",
    );
    assert!(
        subscription.contains("a subscription cannot be"),
        "{subscription}"
    );
}

#[test]
fn a_loop_is_refused_naming_the_cycle() {
    assert_eq!(
        forwarding_refusal(
            "[[queues]]\nname = \"orders\"\nforward_to = \"audit\"\n\
             [[queues]]\nname = \"audit\"\nforward_to = \"Orders\"\n"
        ),
        "queues[1].forward_to (t.toml:6:14): forwarding loop: orders → audit → orders"
    );
    assert!(
        forwarding_refusal("[[queues]]\nname = \"q\"\nforward_to = \"q\"\n")
            .contains("forwarding loop: q → q")
    );
}

#[test]
fn a_subscription_forwarding_to_its_own_topic_is_a_loop() {
    let message = forwarding_refusal(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nforward_to = \"t\"\n",
    );
    assert_eq!(
        message,
        "topics[0].subscriptions[0].forward_to (t.toml:5:14): forwarding loop: \
         t → t/Subscriptions/s → t"
    );
}

#[test]
fn dead_letters_may_go_anywhere_but_back_to_their_queue() {
    parse(
        "[[queues]]\nname = \"a\"\nforward_dead_lettered_messages_to = \"b\"\n\
         [[queues]]\nname = \"b\"\nforward_to = \"a\"\n",
    );
    let message =
        forwarding_refusal("[[queues]]\nname = \"a\"\nforward_dead_lettered_messages_to = \"A\"\n");
    assert!(
        message.starts_with("queues[0].forward_dead_lettered_messages_to (t.toml:3:"),
        "{message}"
    );
}

/// `n` queues q0 → q1 → ... → q(n-1).
fn chain(n: usize) -> String {
    (0..n)
        .map(|i| match i + 1 < n {
            true => format!("[[queues]]\nname = \"q{i}\"\nforward_to = \"q{}\"\n", i + 1),
            false => format!("[[queues]]\nname = \"q{i}\"\n"),
        })
        .collect()
}

#[test]
fn chains_of_more_than_four_hops_are_refused() {
    parse(&chain(5));
    assert_eq!(
        forwarding_refusal(&chain(6)),
        "queues[0].forward_to (t.toml:3:14): forwarding chain of 5 hops: \
         q0 → q1 → q2 → q3 → q4 → q5; Service Bus allows at most 4"
    );
    let from_dead_letters = format!(
        "{}[[queues]]\nname = \"d\"\nforward_dead_lettered_messages_to = \"q0\"\n",
        chain(5)
    );
    assert!(forwarding_refusal(&from_dead_letters)
        .contains("d/$DeadLetterQueue → q0 → q1 → q2 → q3 → q4"));
}

#[test]
fn a_topic_fan_out_is_not_a_hop() {
    // queue → topic → subscription → queue → queue: three hops.
    parse(
        "[[queues]]\nname = \"in\"\nforward_to = \"t\"\n\
         [[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nforward_to = \"mid\"\n\
         [[queues]]\nname = \"mid\"\nforward_to = \"out\"\n[[queues]]\nname = \"out\"\n",
    );
}

#[test]
fn forwarding_from_a_session_queue_is_refused() {
    let message = forwarding_refusal(
        "[[queues]]\nname = \"s\"\nrequires_session = true\nforward_to = \"o\"\n\
         [[queues]]\nname = \"o\"\n",
    );
    assert!(message.contains("requires sessions"), "{message}");
}
