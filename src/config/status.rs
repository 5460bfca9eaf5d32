//! Service Bus's entity status: whether an entity takes sends and hands out messages. Set in
//! TOML (`status = "send_disabled"`), Config.json and the administration API (`Status`), and
//! applied to a running entity.

/// Whether an entity takes sends and hands out messages (Service Bus's `EntityStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntityStatus {
    /// Sends and receives both work.
    #[default]
    Active,
    /// Neither sends nor receives.
    Disabled,
    /// Receives work, sends are refused (a topic's subscriptions still hand out theirs).
    SendDisabled,
    /// Sends work, receives are refused.
    ReceiveDisabled,
}

/// What each kind of entity may be set to, as Service Bus allows: a topic has no receivers
/// and a subscription no senders of its own.
pub(super) const QUEUE_STATUSES: &[EntityStatus] = &[
    EntityStatus::Active,
    EntityStatus::Disabled,
    EntityStatus::SendDisabled,
    EntityStatus::ReceiveDisabled,
];
/// A topic's statuses (see [`QUEUE_STATUSES`]).
pub(super) const TOPIC_STATUSES: &[EntityStatus] = &[
    EntityStatus::Active,
    EntityStatus::Disabled,
    EntityStatus::SendDisabled,
];
/// A subscription's statuses (see [`QUEUE_STATUSES`]).
pub(super) const SUBSCRIPTION_STATUSES: &[EntityStatus] = &[
    EntityStatus::Active,
    EntityStatus::Disabled,
    EntityStatus::ReceiveDisabled,
];

impl EntityStatus {
    /// Every status with its TOML and Service Bus names.
    const NAMES: [(EntityStatus, &'static str, &'static str); 4] = [
        (EntityStatus::Active, "active", "Active"),
        (EntityStatus::Disabled, "disabled", "Disabled"),
        (EntityStatus::SendDisabled, "send_disabled", "SendDisabled"),
        (
            EntityStatus::ReceiveDisabled,
            "receive_disabled",
            "ReceiveDisabled",
        ),
    ];

    /// The name TOML gives it (`send_disabled`).
    pub fn config_name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(s, ..)| *s == self)
            .map_or("", |n| n.1)
    }

    /// The name Service Bus gives it (`SendDisabled`), in Config.json and the administration
    /// API.
    pub fn service_bus_name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(s, ..)| *s == self)
            .map_or("", |n| n.2)
    }

    /// The status of a TOML name.
    pub(super) fn from_config_name(name: &str) -> Option<EntityStatus> {
        Self::NAMES.iter().find(|n| n.1 == name).map(|n| n.0)
    }

    /// The status of a Service Bus name, ignoring case as Service Bus does.
    pub fn from_service_bus_name(name: &str) -> Option<EntityStatus> {
        (Self::NAMES.iter())
            .find(|n| n.2.eq_ignore_ascii_case(name))
            .map(|n| n.0)
    }

    /// Whether sends are taken.
    pub fn can_send(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::ReceiveDisabled)
    }

    /// Whether messages are handed out.
    pub fn can_receive(self) -> bool {
        matches!(self, EntityStatus::Active | EntityStatus::SendDisabled)
    }
}

/// `statuses` as a message lists them: `"active", "disabled" or "send_disabled"`.
pub(super) fn allowed_text(
    statuses: &[EntityStatus],
    name: fn(EntityStatus) -> &'static str,
) -> String {
    let quoted: Vec<String> = statuses.iter().map(|s| format!("{:?}", name(*s))).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_say_what_works() {
        for status in QUEUE_STATUSES {
            let config = EntityStatus::from_config_name(status.config_name());
            let service_bus = EntityStatus::from_service_bus_name(status.service_bus_name());
            assert_eq!((config, service_bus), (Some(*status), Some(*status)));
        }
        assert_eq!(
            EntityStatus::from_service_bus_name("senddisabled"),
            Some(EntityStatus::SendDisabled)
        );
        assert_eq!(EntityStatus::from_config_name("SendDisabled"), None);
        let works = |s: EntityStatus| (s.can_send(), s.can_receive());
        assert_eq!(works(EntityStatus::Active), (true, true));
        assert_eq!(works(EntityStatus::Disabled), (false, false));
        assert_eq!(works(EntityStatus::SendDisabled), (false, true));
        assert_eq!(works(EntityStatus::ReceiveDisabled), (true, false));
        assert_eq!(
            allowed_text(TOPIC_STATUSES, EntityStatus::config_name),
            "\"active\", \"disabled\" or \"send_disabled\""
        );
    }
}
