//! The schema of who may connect and how: `[broker] allow_anonymous`, `[broker.tls]` and the
//! shared access policies of the namespace (`[[shared_access_policies]]`) and of queues and
//! topics (`[[queues.shared_access_policies]]`, `[[topics.shared_access_policies]]`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned;

use super::names::POLICY_NAMES;
use super::raw::{RawPolicy, RawTls};
use super::validate::Source;
use super::ConfigError;

/// Longest key a policy may have, in bytes (Service Bus's keys are 44 characters).
const MAX_KEY_BYTES: usize = 256;

/// One shared access policy: a name, a key and the rights a token signed with it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Name, as clients give it in a token's `skn` or as the SASL PLAIN user name.
    pub name: String,
    /// The key that signs tokens (the SASL PLAIN password).
    pub key: SecretKey,
    /// A second key that signs them too (Service Bus's `SecondaryKey`, for rotating keys).
    pub secondary_key: Option<SecretKey>,
    /// What a token signed with the key allows.
    pub rights: Rights,
}

/// A shared access key. Its `Debug` form hides it, so a key never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey(String);

impl SecretKey {
    /// The key's bytes, as HMAC-SHA256 takes them (Service Bus signs with the key's UTF-8
    /// text, not its base64 decoding).
    pub fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The key as written (for the administration API's descriptions and stored
    /// declarations, never for a log).
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<hidden>)")
    }
}

impl From<&str> for SecretKey {
    fn from(key: &str) -> Self {
        SecretKey(key.to_owned())
    }
}

/// A set of Service Bus rights. A policy with `Manage` has `Send` and `Listen` too, as in
/// Service Bus; as a requirement, each right is its own bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rights(u8);

impl Rights {
    /// No right at all.
    pub const NONE: Rights = Rights(0);
    /// Send messages, schedule and cancel scheduled messages.
    pub const SEND: Rights = Rights(1);
    /// Receive, peek, settle and renew locks; session state.
    pub const LISTEN: Rights = Rights(2);
    /// Manage the entity (rules).
    pub const MANAGE: Rights = Rights(4);
    /// Any of the three: what a management link needs to attach.
    pub const ANY: Rights = Rights(4 | 1 | 2);

    /// The rights of both sets.
    pub const fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }

    /// Whether `self` holds at least one right of `wanted`.
    pub const fn grants_any_of(self, wanted: Rights) -> bool {
        self.0 & wanted.0 != 0
    }

    /// The names of the rights in `self`, as Service Bus writes them in its errors
    /// (`'Manage'`, `'Send'`, `'Listen'`), joined with `,`.
    pub fn names(self) -> String {
        let quoted: Vec<String> = self
            .access_rights()
            .map(|name| format!("'{name}'"))
            .collect();
        quoted.join(",")
    }

    /// The names of the rights in `self` as Service Bus lists a policy's (`Manage`, `Send`,
    /// `Listen`).
    pub fn access_rights(self) -> impl Iterator<Item = &'static str> {
        [
            (Rights::MANAGE, "Manage"),
            (Rights::SEND, "Send"),
            (Rights::LISTEN, "Listen"),
        ]
        .into_iter()
        .filter(move |(right, _)| self.grants_any_of(*right))
        .map(|(_, name)| name)
    }

    /// The rights a policy granting `name` has (`Manage`, `Send` or `Listen`,
    /// case-insensitively); `Manage` brings the other two.
    pub fn named(name: &str) -> Option<Rights> {
        ["Manage", "Send", "Listen"]
            .iter()
            .zip([Rights::ANY, Rights::SEND, Rights::LISTEN])
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|(_, rights)| rights)
    }
}

/// `[broker.tls]`: a TLS listener beside (or instead of) the plain one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Address the TLS listener binds (Service Bus and the SDKs use port 5671).
    pub listen: SocketAddr,
    /// PEM file with the server certificate, followed by any intermediates.
    pub cert: PathBuf,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl Source<'_> {
    /// The policies of the array at `list` (`shared_access_policies` or
    /// `queues[0].shared_access_policies`), with unique names.
    pub(super) fn policies(
        &self,
        list: &str,
        raw: Vec<RawPolicy>,
    ) -> Result<Vec<PolicyConfig>, ConfigError> {
        let names = raw.iter().map(|policy| &policy.name);
        self.check_unique_names(
            super::validate::entry_names(list, "policy", names),
            "policy names are compared case-insensitively within their namespace or entity",
        )?;
        super::validate::each(list, raw, |path, policy| self.policy(path, policy))
    }

    fn policy(&self, path: &str, raw: RawPolicy) -> Result<PolicyConfig, ConfigError> {
        self.check_name(path, &raw.name, &POLICY_NAMES)?;
        let key = match (raw.key, raw.key_env) {
            (Some(key), None) => self.key(&format!("{path}.key"), &key, key.get_ref())?,
            (None, Some(variable)) => {
                let value = std::env::var(variable.get_ref()).map_err(|_| {
                    let message = format!(
                        "the environment variable {:?} is not set or not valid UTF-8",
                        variable.get_ref()
                    );
                    self.invalid(&format!("{path}.key_env"), variable.span(), message)
                })?;
                self.key(&format!("{path}.key_env"), &variable, &value)?
            }
            (Some(key), Some(_)) => {
                let message = "sets both `key` and `key_env`; set exactly one".to_owned();
                return Err(self.invalid(&format!("{path}.key"), key.span(), message));
            }
            (None, None) => {
                let message = "sets no key; set `key` or `key_env`".to_owned();
                return Err(self.invalid(path, raw.name.span(), message));
            }
        };
        let mut rights = Rights::NONE;
        for right in raw.rights.get_ref() {
            let named = Rights::named(right.get_ref()).ok_or_else(|| {
                let message = format!(
                    "{:?} is not a right; use \"Manage\", \"Send\" or \"Listen\"",
                    right.get_ref()
                );
                self.invalid(&format!("{path}.rights"), right.span(), message)
            })?;
            rights = rights.union(named);
        }
        if rights == Rights::NONE {
            let message = "is empty; a policy grants at least one of \"Manage\", \"Send\" and \
                           \"Listen\""
                .to_owned();
            return Err(self.invalid(&format!("{path}.rights"), raw.rights.span(), message));
        }
        let secondary_key = match &raw.secondary_key {
            Some(written) => {
                Some(self.key(&format!("{path}.secondary_key"), written, written.get_ref())?)
            }
            None => None,
        };
        Ok(PolicyConfig {
            name: raw.name.into_inner(),
            key,
            secondary_key,
            rights,
        })
    }

    /// A key's value, checked; errors describe it without showing it.
    fn key(
        &self,
        key: &str,
        written: &Spanned<String>,
        value: &str,
    ) -> Result<SecretKey, ConfigError> {
        if value.is_empty() || value.len() > MAX_KEY_BYTES {
            let message = format!(
                "the key has {} bytes; from 1 to {MAX_KEY_BYTES} are allowed",
                value.len()
            );
            return Err(self.invalid(key, written.span(), message));
        }
        Ok(SecretKey(value.to_owned()))
    }

    /// `[broker.tls]`, if set.
    pub(super) fn tls(&self, raw: Option<RawTls>) -> Result<Option<TlsConfig>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let listen = self.socket_address("broker.tls.listen", &raw.listen, "5671")?;
        let path = |key: &str, value: Spanned<PathBuf>| {
            if value.get_ref().as_os_str().is_empty() {
                let message = "must not be empty; expected the path of a PEM file".to_owned();
                return Err(self.invalid(&format!("broker.tls.{key}"), value.span(), message));
            }
            Ok(value.into_inner())
        };
        Ok(Some(TlsConfig {
            listen,
            cert: path("cert", raw.cert)?,
            key: path("key", raw.key)?,
        }))
    }
}
