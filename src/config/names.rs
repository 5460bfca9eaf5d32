//! What a queue, topic, subscription or rule may be called: Service Bus's length limits, with
//! a character set narrow enough to be safe in every address and log line.

/// The rules for one kind of name.
pub(crate) struct NameRules {
    /// What is named, for messages: `queue`, `topic`, `subscription`, `rule`.
    pub(super) kind: &'static str,
    max_chars: usize,
    /// Characters allowed anywhere, besides ASCII letters and digits.
    allowed: &'static [char],
    /// Characters allowed besides, but not first or last.
    inner: &'static [char],
    /// A character allowed besides, first only.
    leading: Option<char>,
    /// How `allowed`, `inner` and `leading` read in a message.
    allowed_text: &'static str,
    /// Whether a JMS subscription's name is one too: `<name>$<client id>$D` or `$ND`, its
    /// name and client id (which may be empty) each a name of this kind.
    jms: bool,
}

/// Queue names: up to 260 characters (Service Bus's entity path limit); `/` separates path
/// segments, so it may not start or end one.
pub(super) const QUEUE_NAMES: NameRules = NameRules {
    kind: "queue",
    max_chars: 260,
    allowed: &['.', '_', '-'],
    inner: &['/'],
    leading: None,
    allowed_text: "letters, digits, '.', '_', '-' and '/'",
    jms: false,
};

/// Topic names follow the queue-name rules (Service Bus checks both alike).
pub(super) const TOPIC_NAMES: NameRules = NameRules {
    kind: "topic",
    ..QUEUE_NAMES
};

/// Subscription names: up to 50 characters, no `/` (a subscription is one path segment of
/// `<topic>/subscriptions/<name>`); a JMS subscription's as Service Bus names them,
/// `<name>$<client id>$D` or `$ND`.
pub(super) const SUBSCRIPTION_NAMES: NameRules = NameRules {
    kind: "subscription",
    max_chars: 50,
    allowed: &['.', '_', '-'],
    inner: &[],
    leading: None,
    allowed_text: "letters, digits, '.', '_' and '-'",
    jms: true,
};

/// Rule names: as subscription names, and `$` first so that Service Bus's `$Default` can be
/// written.
pub(crate) const RULE_NAMES: NameRules = NameRules {
    kind: "rule",
    leading: Some('$'),
    allowed_text: "letters, digits, '.', '_', '-' and '$' first",
    jms: false,
    ..SUBSCRIPTION_NAMES
};

/// Shared access policy names: up to 256 characters, as in Service Bus.
pub(super) const POLICY_NAMES: NameRules = NameRules {
    kind: "policy",
    max_chars: 256,
    jms: false,
    ..SUBSCRIPTION_NAMES
};

impl NameRules {
    /// Why `name` is not a valid name of this kind, if it is not.
    pub(crate) fn check(&self, name: &str) -> Result<(), String> {
        match self.jms_parts(name) {
            Some((jms_name, client_id)) => {
                self.check_length(name)?;
                self.check_plain(jms_name)?;
                match client_id.is_empty() {
                    true => Ok(()),
                    false => self.check_plain(client_id),
                }
            }
            None => self.check_plain(name),
        }
    }

    /// The name and client id of a JMS subscription's name, when this kind has them and
    /// `name` is one.
    fn jms_parts<'n>(&self, name: &'n str) -> Option<(&'n str, &'n str)> {
        let mut parts = name.split('$');
        let parts = (parts.next()?, parts.next()?, parts.next()?, parts.next());
        match parts {
            (jms_name, client_id, "D" | "ND", None) if self.jms => Some((jms_name, client_id)),
            _ => None,
        }
    }

    /// Why `name` is too long or empty, if it is.
    fn check_length(&self, name: &str) -> Result<(), String> {
        let length = name.chars().count();
        if length == 0 {
            return Err("it is empty".to_owned());
        }
        if length > self.max_chars {
            return Err(format!(
                "it has {length} characters; at most {} are allowed",
                self.max_chars
            ));
        }
        Ok(())
    }

    /// Why `name`, checked as a plain name of this kind, is not one.
    fn check_plain(&self, name: &str) -> Result<(), String> {
        self.check_length(name)?;
        let allowed = |(index, c): &(usize, char)| {
            c.is_ascii_alphanumeric()
                || self.allowed.contains(c)
                || self.inner.contains(c)
                || (*index == 0 && self.leading == Some(*c))
        };
        if let Some((_, bad)) = name.chars().enumerate().find(|entry| !allowed(entry)) {
            return Err(format!("{bad:?} is not allowed; use {}", self.allowed_text));
        }
        let ends = [name.chars().next(), name.chars().last()];
        if let Some(edge) = self.inner.iter().find(|c| ends.contains(&Some(**c))) {
            return Err(format!("{edge:?} is not allowed first or last"));
        }
        // A client that normalises paths would address another entity through these.
        if let Some(segment) = name
            .split('/')
            .find(|segment| matches!(*segment, "" | "." | ".."))
        {
            return Err(match segment {
                "" => "'//' is not allowed (an empty path segment)".to_owned(),
                dots => format!("a path segment may not be {dots:?}"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_the_service_bus_rules() {
        assert_eq!(QUEUE_NAMES.check("orders/eu-west_1.v2"), Ok(()));
        assert_eq!(QUEUE_NAMES.check(&"a".repeat(260)), Ok(()));
        let reason = |name: &str| QUEUE_NAMES.check(name).expect_err("should be refused");
        assert_eq!(reason(""), "it is empty");
        assert_eq!(
            reason(&"a".repeat(261)),
            "it has 261 characters; at most 260 are allowed"
        );
        assert_eq!(
            reason("a b"),
            "' ' is not allowed; use letters, digits, '.', '_', '-' and '/'"
        );
        assert_eq!(reason("/a"), "'/' is not allowed first or last");
        assert_eq!(reason("a/"), "'/' is not allowed first or last");
        assert_eq!(reason("$a"), reason("a$"), "no '$' in queue names");
        assert_eq!(
            reason("a//b"),
            "'//' is not allowed (an empty path segment)"
        );
        assert_eq!(reason("a/../b"), "a path segment may not be \"..\"");
        assert_eq!(reason(".."), "a path segment may not be \"..\"");
        assert_eq!(reason("a/."), "a path segment may not be \".\"");
        assert_eq!(QUEUE_NAMES.check("a/.b/c..d"), Ok(()));
    }

    #[test]
    fn topic_names_are_queue_names() {
        assert_eq!(TOPIC_NAMES.check("orders/eu-west_1.v2"), Ok(()));
        assert_eq!(
            TOPIC_NAMES.check("a/"),
            Err("'/' is not allowed first or last".to_owned())
        );
        assert!(TOPIC_NAMES.check(&"a".repeat(261)).is_err());
    }

    #[test]
    fn jms_subscription_names_are_subscription_names_as_service_bus_makes_them() {
        assert_eq!(SUBSCRIPTION_NAMES.check("audit$cid-1$D"), Ok(()));
        assert_eq!(SUBSCRIPTION_NAMES.check("shared$$ND"), Ok(()));
        let reason = |name: &str| {
            SUBSCRIPTION_NAMES
                .check(name)
                .expect_err("should be refused")
        };
        assert_eq!(reason("$cid$D"), "it is empty");
        assert_eq!(
            reason("a$c:d$D"),
            "':' is not allowed; use letters, digits, '.', '_' and '-'"
        );
        assert!(reason("a$b$X").contains("'$' is not allowed"));
        assert!(reason("a$b$c$D").contains("'$' is not allowed"));
        assert_eq!(
            reason(&format!("{}$c$D", "s".repeat(47))),
            "it has 51 characters; at most 50 are allowed"
        );
        assert!(RULE_NAMES.check("a$b$D").is_err());
    }

    #[test]
    fn subscription_names_have_at_most_50_characters_and_no_slash() {
        assert_eq!(SUBSCRIPTION_NAMES.check("eu-west_1.v2"), Ok(()));
        assert_eq!(SUBSCRIPTION_NAMES.check(&"s".repeat(50)), Ok(()));
        let reason = |name: &str| {
            SUBSCRIPTION_NAMES
                .check(name)
                .expect_err("should be refused")
        };
        assert_eq!(
            reason(&"s".repeat(51)),
            "it has 51 characters; at most 50 are allowed"
        );
        assert_eq!(
            reason("eu/west"),
            "'/' is not allowed; use letters, digits, '.', '_' and '-'"
        );
        assert_eq!(
            reason("$Default"),
            "'$' is not allowed; use letters, digits, '.', '_' and '-'"
        );
        assert_eq!(reason(""), "it is empty");
        assert_eq!(reason(".."), "a path segment may not be \"..\"");
    }

    #[test]
    fn rule_names_may_start_with_a_dollar() {
        assert_eq!(RULE_NAMES.check("$Default"), Ok(()));
        assert_eq!(RULE_NAMES.check(&"r".repeat(50)), Ok(()));
        let reason = |name: &str| RULE_NAMES.check(name).expect_err("should be refused");
        assert_eq!(
            reason("a$b"),
            "'$' is not allowed; use letters, digits, '.', '_', '-' and '$' first"
        );
        assert_eq!(
            reason(&"r".repeat(51)),
            "it has 51 characters; at most 50 are allowed"
        );
        assert_eq!(
            reason("vip/gold"),
            "'/' is not allowed; use letters, digits, '.', '_', '-' and '$' first"
        );
    }
}
