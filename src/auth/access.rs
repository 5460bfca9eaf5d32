//! One connection's rights: the principal its SASL PLAIN exchange authenticated, if any, and
//! the tokens it put on `$cbs`, each for an audience until its expiry. Links and management
//! operations ask [`Access::check`]; the connection detaches the links a lapsed token
//! authorized ([`Access::next_expiry_ms`]).
//!
//! The tokens a connection holds are bounded by the entities: a token is kept only for an
//! audience that names an existing entity (or the namespace), and a newer token for the same
//! audience replaces the older.

use std::collections::HashMap;
use std::sync::Arc;

use crate::auth::sas::Token;
use crate::auth::{path_covers, resource_path, Policies, Principal};
use crate::config::Rights;

/// The token type of a shared access signature on `$cbs`.
pub const SAS_TOKEN_TYPE: &str = "servicebus.windows.net:sastoken";
/// The token type of a Microsoft Entra ID token on `$cbs`.
pub const JWT_TOKEN_TYPE: &str = "jwt";

/// Why `put-token` refused a token: a status code for the CBS answer and its description,
/// which never quotes the token or a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `status-code`: 401 for a token that does not authorize, 404 for an audience that names
    /// no entity.
    pub status: u16,
    /// `status-description`: which check failed.
    pub description: String,
}

/// Whether `token` reads as a shared access signature (whatever type it was put with).
fn is_shared_access_signature(token: &str) -> bool {
    token.starts_with(crate::auth::sas::PREFIX)
}

/// A token that verified.
#[derive(Debug)]
struct Grant {
    principal: Principal,
    expires_ms: i64,
}

/// What one connection may do.
#[derive(Debug)]
pub struct Access {
    policies: Arc<Policies>,
    /// Who SASL PLAIN authenticated, for the connection's lifetime.
    principal: Option<Principal>,
    /// Tokens by the path of their audience.
    grants: HashMap<String, Grant>,
}

impl Access {
    /// A connection's access after SASL: `principal` when PLAIN authenticated one.
    pub fn new(policies: Arc<Policies>, principal: Option<Principal>) -> Access {
        Access {
            policies,
            principal,
            grants: HashMap::new(),
        }
    }

    /// Takes a `put-token` of `kind` for `audience`: verified against the policies, kept until
    /// its expiry. `exists` says whether a path names an entity (or its sub-queue,
    /// subscription or management node). Returns the token's expiry in ms.
    ///
    /// # Errors
    /// A [`Refusal`]: 401 saying which check failed, or 404 for an audience that names no
    /// entity.
    pub fn put_token(
        &mut self,
        audience: &str,
        kind: &str,
        token: &str,
        exists: impl Fn(&str) -> bool,
        now_ms: i64,
    ) -> Result<i64, Refusal> {
        let unauthorized = |description: String| Refusal {
            status: 401,
            description,
        };
        // The Python SDK puts its shared access signatures with type "jwt": the token's text,
        // not the type, tells what it is.
        if kind == JWT_TOKEN_TYPE && !is_shared_access_signature(token) {
            return Err(unauthorized(
                "JWT (Microsoft Entra ID) tokens are not supported; put a shared access \
                 signature (type servicebus.windows.net:sastoken)"
                    .into(),
            ));
        }
        let token = Token::parse(token).map_err(|error| unauthorized(error.to_string()))?;
        let principal = self.policies.verify(&token).ok_or_else(|| {
            unauthorized(format!(
                "the signature does not verify with the key of a policy named {:?} that \
                 reaches the token's resource",
                token.key_name
            ))
        })?;
        let expires_ms = i64::try_from(token.expiry)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if expires_ms <= now_ms {
            return Err(unauthorized(token.expired()));
        }
        let audience_path = resource_path(audience);
        let resource_path = token.resource_path();
        if !path_covers(&resource_path, &audience_path) {
            return Err(unauthorized(format!(
                "the token's resource '{resource_path}' does not cover the audience \
                 '{audience_path}'"
            )));
        }
        if !principal.reaches(&audience_path) {
            return Err(unauthorized(format!(
                "the policy {:?} belongs to another entity than '{audience_path}'",
                principal.policy
            )));
        }
        if !audience_path.is_empty() && !exists(&audience_path) {
            return Err(Refusal {
                status: 404,
                description: format!(
                    "The messaging entity '{audience_path}' could not be found. To know more \
                     visit https://aka.ms/sbResourceMgrExceptions."
                ),
            });
        }
        tracing::debug!(policy = %principal.policy, audience = %audience_path, expiry = token.expiry, "token accepted");
        self.grants.insert(
            audience_path,
            Grant {
                principal,
                expires_ms,
            },
        );
        Ok(expires_ms)
    }

    /// Whether the connection holds at least one right of `wanted` on `path` (an address or
    /// entity path) at `now_ms`.
    ///
    /// # Errors
    /// Service Bus's description of what is missing.
    pub fn check(&self, path: &str, wanted: Rights, now_ms: i64) -> Result<(), String> {
        if self.policies.allow_anonymous() {
            return Ok(());
        }
        let path = resource_path(path);
        let allows = |principal: &Principal| {
            principal.reaches(&path) && principal.rights.grants_any_of(wanted)
        };
        let by_sasl = self.principal.as_ref().is_some_and(allows);
        let by_token = self.grants.iter().any(|(audience, grant)| {
            grant.expires_ms > now_ms && path_covers(audience, &path) && allows(&grant.principal)
        });
        if by_sasl || by_token {
            return Ok(());
        }
        let claims = match wanted {
            Rights::ANY => "One of the 'Manage','Send','Listen' claims is".to_owned(),
            _ => format!("{} claim(s) are", wanted.names()),
        };
        Err(format!(
            "Unauthorized access. {claims} required to perform this operation. Resource: \
             '{path}'. Put a token that grants it on $cbs, or authenticate with SASL PLAIN."
        ))
    }

    /// When the first token held expires, if any: the links it authorized are checked again
    /// then.
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.grants.values().map(|grant| grant.expires_ms).min()
    }

    /// Drops the tokens expired at `now_ms`.
    pub fn forget_expired(&mut self, now_ms: i64) {
        self.grants.retain(|_, grant| grant.expires_ms > now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::sas::sign;
    use crate::config::Config;

    const NOW_MS: i64 = 1_800_000_000_000;
    const LATER: u64 = 1_800_000_600;

    fn policies(allow_anonymous: bool) -> Arc<Policies> {
        let text = format!(
            "[broker]\nallow_anonymous = {allow_anonymous}\n\n\
             [[shared_access_policies]]\nname = \"Root\"\nkey = \"root-key\"\n\
             rights = [\"Manage\"]\n\n\
             [[shared_access_policies]]\nname = \"Reader\"\nkey = \"reader-key\"\n\
             rights = [\"Listen\"]\n\n\
             [[queues]]\nname = \"orders\"\n\
             [[queues.shared_access_policies]]\nname = \"writer\"\nkey = \"writer-key\"\n\
             rights = [\"Send\"]\n\n\
             [[queues]]\nname = \"other\"\n"
        );
        let config = Config::parse(&text, "test").expect("valid");
        Arc::new(Policies::from_config(&config))
    }

    fn put(access: &mut Access, audience: &str, token: &str) -> Result<i64, Refusal> {
        let exists = |path: &str| path.starts_with("orders") || path.starts_with("other");
        access.put_token(audience, SAS_TOKEN_TYPE, token, exists, NOW_MS)
    }

    #[test]
    fn a_namespace_token_grants_its_rights_everywhere_until_it_expires() {
        let mut access = Access::new(policies(false), None);
        assert!(access.check("orders", Rights::SEND, NOW_MS).is_err());
        let token = sign("sb://localhost/", "Root", b"root-key", LATER);
        assert_eq!(
            put(&mut access, "sb://localhost/", &token),
            Ok(1_800_000_600_000)
        );
        for path in [
            "orders",
            "amqps://h/Other/$DeadLetterQueue",
            "orders/$management",
        ] {
            for right in [Rights::SEND, Rights::LISTEN, Rights::MANAGE, Rights::ANY] {
                assert_eq!(access.check(path, right, NOW_MS), Ok(()), "{path}");
            }
        }
        assert_eq!(access.next_expiry_ms(), Some(1_800_000_600_000));
        let after = 1_800_000_600_000;
        assert!(access.check("orders", Rights::SEND, after).is_err());
        access.forget_expired(after - 1);
        assert_eq!(access.next_expiry_ms(), Some(after));
        access.forget_expired(after);
        assert_eq!(access.next_expiry_ms(), None);
    }

    #[test]
    fn a_token_reaches_its_audience_and_below_only() {
        let mut access = Access::new(policies(false), None);
        let token = sign("sb://host:5671/orders", "Root", b"root-key", LATER);
        put(&mut access, "sb://other-host/orders", &token).expect("paths compared, not hosts");
        assert_eq!(
            access.check("orders/$deadletterqueue", Rights::LISTEN, NOW_MS),
            Ok(())
        );
        let refused = access
            .check("other", Rights::LISTEN, NOW_MS)
            .expect_err("other queue");
        assert!(
            refused.starts_with(
                "Unauthorized access. 'Listen' claim(s) are required to perform this \
                 operation. Resource: 'other'."
            ),
            "{refused}"
        );
    }

    #[test]
    fn rights_are_the_policy_s() {
        let mut access = Access::new(policies(false), None);
        let token = sign("sb://h/orders", "Reader", b"reader-key", LATER);
        put(&mut access, "sb://h/orders", &token).expect("accepted");
        assert_eq!(access.check("orders", Rights::LISTEN, NOW_MS), Ok(()));
        assert_eq!(
            access.check("orders/$management", Rights::ANY, NOW_MS),
            Ok(())
        );
        assert!(access.check("orders", Rights::SEND, NOW_MS).is_err());
        assert!(access.check("orders", Rights::MANAGE, NOW_MS).is_err());
    }

    #[test]
    fn an_entity_policy_signs_for_its_entity_only() {
        let mut access = Access::new(policies(false), None);
        let token = sign("sb://h/orders", "writer", b"writer-key", LATER);
        put(&mut access, "sb://h/orders", &token).expect("its own entity");
        assert_eq!(access.check("orders", Rights::SEND, NOW_MS), Ok(()));
        assert!(access.check("orders", Rights::LISTEN, NOW_MS).is_err());
        let elsewhere = sign("sb://h/other", "writer", b"writer-key", LATER);
        let refusal = put(&mut access, "sb://h/other", &elsewhere).expect_err("another entity");
        assert_eq!(refusal.status, 401);
        let namespace = sign("sb://h/", "writer", b"writer-key", LATER);
        let refusal = put(&mut access, "sb://h/orders", &namespace).expect_err("wider resource");
        assert_eq!(refusal.status, 401);
    }

    #[test]
    fn every_failed_check_is_401_naming_it_and_never_the_key() {
        let mut access = Access::new(policies(false), None);
        let refused = |access: &mut Access, audience: &str, token: &str| {
            let refusal = put(access, audience, token).expect_err("refused");
            assert_eq!(refusal.status, 401, "{refusal:?}");
            assert!(!refusal.description.contains("root-key"), "{refusal:?}");
            refusal.description
        };
        let wrong_key = sign("sb://h/orders", "Root", b"guess", LATER);
        assert!(refused(&mut access, "sb://h/orders", &wrong_key).contains("does not verify"));
        let unknown = sign("sb://h/orders", "Nobody", b"root-key", LATER);
        assert!(refused(&mut access, "sb://h/orders", &unknown).contains("\"Nobody\""));
        let past = sign("sb://h/orders", "Root", b"root-key", 1_700_000_000);
        assert!(refused(&mut access, "sb://h/orders", &past).contains("expired"));
        let narrow = sign("sb://h/orders/$deadletterqueue", "Root", b"root-key", LATER);
        assert!(refused(&mut access, "sb://h/orders", &narrow).contains("does not cover"));
        assert!(refused(&mut access, "sb://h/orders", "garbage").contains("not a shared access"));
        assert!(access.check("orders", Rights::LISTEN, NOW_MS).is_err());
        let jwt = access
            .put_token(
                "sb://h/orders",
                JWT_TOKEN_TYPE,
                "eyJ.e30.x",
                |_| true,
                NOW_MS,
            )
            .expect_err("jwt");
        assert_eq!(jwt.status, 401);
        assert!(jwt.description.contains("not supported"));
        let signed = sign("sb://h/orders", "Root", b"root-key", LATER);
        access
            .put_token("sb://h/orders", JWT_TOKEN_TYPE, &signed, |_| true, NOW_MS)
            .expect("a signature put as jwt, as the Python SDK does, is verified as one");
        assert!(access.check("orders", Rights::LISTEN, NOW_MS).is_ok());
    }

    #[test]
    fn a_token_for_no_entity_is_refused_with_404() {
        let mut access = Access::new(policies(false), None);
        let token = sign("sb://h/", "Root", b"root-key", LATER);
        let refusal = put(&mut access, "sb://h/missing", &token).expect_err("no entity");
        assert_eq!(refusal.status, 404);
    }

    #[test]
    fn a_newer_token_for_the_audience_replaces_the_older() {
        let mut access = Access::new(policies(false), None);
        let first = sign("sb://h/orders", "Root", b"root-key", LATER);
        put(&mut access, "sb://h/orders", &first).expect("first");
        let second = sign("sb://h/orders", "Root", b"root-key", LATER + 600);
        put(&mut access, "sb://h/orders", &second).expect("refresh");
        assert_eq!(access.next_expiry_ms(), Some(1_800_001_200_000));
    }

    #[test]
    fn sasl_plain_and_anonymous() {
        let policies = policies(false);
        let reader = policies.authenticate("reader", b"reader-key");
        assert!(reader.is_some(), "names ignore case");
        assert_eq!(policies.authenticate("Reader", b"root-key"), None);
        assert_eq!(policies.authenticate("Root", b""), None);
        let access = Access::new(policies, reader);
        assert_eq!(access.check("orders", Rights::LISTEN, NOW_MS), Ok(()));
        assert!(access.check("orders", Rights::SEND, NOW_MS).is_err());
        let open = Access::new(self::policies(true), None);
        assert_eq!(open.check("orders", Rights::MANAGE, NOW_MS), Ok(()));
    }
}
