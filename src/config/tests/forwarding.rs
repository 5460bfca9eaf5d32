//! `forward_to` and `forward_dead_lettered_messages_to`: read, written back, and refused when
//! a target is missing; loops and long chains are accepted, as Service Bus accepts them.

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

/// A target may be given as its address, as the SDKs send it (kept so, for the
/// administration API to write back as given): it names the entity of its path.
#[test]
fn a_target_s_address_names_its_entity() {
    let config = parse(
        "[[queues]]\nname = \"orders\"\nforward_to = \"https://ns.example/Audit\"\n\
         forward_dead_lettered_messages_to = \"sb://ns.example/audit\"\n\
         [[queues]]\nname = \"audit\"\n",
    );
    let orders = &config.queues[0];
    assert_eq!(
        orders.forward_to.as_deref(),
        Some("https://ns.example/Audit")
    );
    let forward = crate::entity::settings::Forward::of(
        &orders.forward_to,
        &orders.forward_dead_lettered_messages_to,
    );
    assert_eq!(
        (forward.to.as_deref(), forward.dead_letters.as_deref()),
        (Some("Audit"), Some("audit"))
    );
    assert_eq!(
        forwarding_refusal("[[queues]]\nname = \"orders\"\nforward_to = \"sb://ns/nowhere\"\n"),
        "queues[0].forward_to (t.toml:3:14): The auto forwarding destination entity \
         'nowhere' does not exist."
    );
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
fn loops_and_long_chains_are_accepted_as_service_bus_accepts_them() {
    // Each message is bounded at run time instead: at most four forwarding moves.
    let chain: String = (0..6)
        .map(|i| {
            format!(
                "[[queues]]\nname = \"q{i}\"\nforward_to = \"q{}\"\n",
                (i + 1) % 6
            )
        })
        .collect();
    parse(&chain);
    parse(
        "[[queues]]\nname = \"q\"\nforward_to = \"Q\"\nforward_dead_lettered_messages_to = \"q\"\n",
    );
    parse(
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\nforward_to = \"t\"\n\
         forward_dead_lettered_messages_to = \"t\"\n",
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
