//! Shared access signatures: reading a token, checking its signature, and signing one.
//!
//! A token reads `SharedAccessSignature sr=<url-encoded resource>&sig=<url-encoded base64
//! HMAC-SHA256>&se=<expiry, unix seconds>&skn=<policy name>`, its fields in any order. The
//! signature covers `<sr as written>\n<se>`, keyed with the policy key's UTF-8 bytes
//! (Service Bus's rule; every SDK signs that way).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};
use sha2::Sha256;

/// What precedes the fields of every token.
pub const PREFIX: &str = "SharedAccessSignature ";

/// A token as read, not yet verified.
#[derive(Debug, PartialEq, Eq)]
pub struct Token {
    /// The resource it grants, decoded (e.g. `sb://host/queue`).
    pub resource: String,
    /// The policy that signed it (`skn`).
    pub key_name: String,
    /// When it stops being valid, in unix seconds (`se`).
    pub expiry: u64,
    /// The HMAC-SHA256 it carries.
    signature: Vec<u8>,
    /// What was signed: `sr` as written, a newline, `se` as written.
    signed: String,
}

/// Why a string is not a shared access signature. The descriptions never quote the token.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// It does not start with `SharedAccessSignature `.
    #[error("the token is not a shared access signature (it must start with \"SharedAccessSignature \")")]
    NotSas,
    /// A field is missing.
    #[error("the shared access signature has no {0} field")]
    Missing(&'static str),
    /// A field is there twice.
    #[error("the shared access signature has its {0} field twice")]
    Repeated(&'static str),
    /// A field does not decode.
    #[error("the {0} field of the shared access signature does not decode")]
    Undecodable(&'static str),
}

/// The fields a token must have, in the order errors name them.
const FIELDS: [&str; 4] = ["sr", "sig", "se", "skn"];

impl Token {
    /// The path its resource (`sr`) covers, as [`crate::auth::resource_path`] reads an
    /// address. A resource is a URI: without a scheme its first segment is the host (the Go
    /// SDK signs a namespace-wide token for the bare host name), not an entity; a query is
    /// not part of it.
    pub fn resource_path(&self) -> String {
        let resource = self.resource.split('?').next().unwrap_or_default();
        match resource.contains("://") {
            true => crate::auth::resource_path(resource),
            false => crate::auth::resource_path(&format!("sb://{resource}")),
        }
    }

    /// Why the token is refused once it has expired, in Service Bus's words (the Go SDK's
    /// suite looks for them): `ExpiredToken: The token is expired. Expiration time:
    /// '2019-04-11 21:12:56Z'`.
    pub fn expired(&self) -> String {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.expiry);
        let at = humantime::format_rfc3339_seconds(at)
            .to_string()
            .replace('T', " ");
        format!("ExpiredToken: The token is expired. Expiration time: '{at}'")
    }

    /// Reads a token's fields.
    ///
    /// # Errors
    /// A [`TokenError`] naming the first field that is missing, repeated or undecodable.
    pub fn parse(text: &str) -> Result<Token, TokenError> {
        let fields = text.strip_prefix(PREFIX).ok_or(TokenError::NotSas)?;
        let mut values: [Option<&str>; 4] = [None; 4];
        for pair in fields.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if let Some(index) = FIELDS.iter().position(|field| *field == key) {
                if values[index].replace(value).is_some() {
                    return Err(TokenError::Repeated(FIELDS[index]));
                }
            }
        }
        let field = |index: usize| values[index].ok_or(TokenError::Missing(FIELDS[index]));
        let (sr, sig, se, skn) = (field(0)?, field(1)?, field(2)?, field(3)?);
        let decoded = |name: &'static str, value: &str| {
            percent_decode_str(value)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| TokenError::Undecodable(name))
        };
        let signature = STANDARD
            .decode(decoded("sig", sig)?)
            .map_err(|_| TokenError::Undecodable("sig"))?;
        let expiry = se.parse().map_err(|_| TokenError::Undecodable("se"))?;
        Ok(Token {
            resource: decoded("sr", sr)?,
            key_name: decoded("skn", skn)?,
            expiry,
            signature,
            signed: format!("{sr}\n{se}"),
        })
    }

    /// Whether the token was signed with `key` (compared in constant time).
    pub fn is_signed_with(&self, key: &[u8]) -> bool {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return false;
        };
        mac.update(self.signed.as_bytes());
        mac.verify_slice(&self.signature).is_ok()
    }
}

/// A token for `resource`, signed with the policy `key_name`'s `key`, valid until `expiry`
/// (unix seconds): what the SDKs make from a connection string.
pub fn sign(resource: &str, key_name: &str, key: &[u8], expiry: u64) -> String {
    let sr = utf8_percent_encode(resource, NON_ALPHANUMERIC).to_string();
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(format!("{sr}\n{expiry}").as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "{PREFIX}sr={sr}&sig={}&se={expiry}&skn={}",
        utf8_percent_encode(&signature, NON_ALPHANUMERIC),
        utf8_percent_encode(key_name, NON_ALPHANUMERIC)
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_resource_without_a_scheme_starts_with_its_host() {
        let path = |resource: &str| {
            let token = super::sign(resource, "k", b"key", 1);
            super::Token::parse(&token)
                .expect("a token")
                .resource_path()
        };
        assert_eq!(path("ns.servicebus.windows.net"), "");
        assert_eq!(path("127.0.0.1/Orders"), "orders");
        assert_eq!(path("sb://host/Orders/"), "orders");
        assert_eq!(path("https://host/orders?api-version=2021-05"), "orders");
    }

    #[test]
    fn an_expired_token_is_refused_in_service_bus_s_words() {
        let token = super::Token::parse(&super::sign("sb://ns/q", "k", b"key", 1_554_930_776))
            .expect("a token");
        assert_eq!(
            token.expired(),
            "ExpiredToken: The token is expired. Expiration time: '2019-04-10 21:12:56Z'"
        );
    }

    use super::*;

    /// Made with the Python SDK's own generator (azure-servicebus 7.15.0,
    /// `azure.servicebus._pyamqp.utils.generate_sas_token`), which encodes with `quote_plus`.
    const PYTHON_TOKEN: &str = "SharedAccessSignature \
        sr=sb%3A%2F%2Flocalhost%2Fqueue.1&sig=wduqmEEk0Rid871vHtLJ2BpFfGGaRgXGFXFla6QakaY%3D\
        &se=1893456000&skn=RootManageSharedAccessKey";

    #[test]
    fn a_token_made_by_the_python_sdk_verifies_with_its_key_only() {
        let token = Token::parse(PYTHON_TOKEN).expect("parses");
        assert_eq!(token.resource, "sb://localhost/queue.1");
        assert_eq!(token.key_name, "RootManageSharedAccessKey");
        assert_eq!(token.expiry, 1_893_456_000);
        assert!(token.is_signed_with(b"SAS_KEY_VALUE"));
        assert!(!token.is_signed_with(b"SAS_KEY_VALUF"));
        assert!(!token.is_signed_with(b""));
    }

    #[test]
    fn the_signature_covers_the_resource_as_written_and_the_expiry() {
        // .NET encodes with lower-case hex; the signature is over those bytes.
        let lower = PYTHON_TOKEN.replace("%3A%2F%2F", "%3a%2f%2f");
        assert!(!Token::parse(&lower)
            .expect("parses")
            .is_signed_with(b"SAS_KEY_VALUE"));
        let later = PYTHON_TOKEN.replace("se=1893456000", "se=1893456001");
        assert!(!Token::parse(&later)
            .expect("parses")
            .is_signed_with(b"SAS_KEY_VALUE"));
    }

    #[test]
    fn sign_makes_what_parse_verifies_in_any_field_order() {
        let token = sign("sb://host:5671/topic/Subscriptions/s 1", "p&q", b"k", 42);
        let parsed = Token::parse(&token).expect("parses");
        assert_eq!(parsed.resource, "sb://host:5671/topic/Subscriptions/s 1");
        assert_eq!(parsed.key_name, "p&q");
        assert!(parsed.is_signed_with(b"k"));
        let fields: Vec<&str> = token[PREFIX.len()..].split('&').rev().collect();
        let reordered = format!("{PREFIX}{}", fields.join("&"));
        assert!(Token::parse(&reordered)
            .expect("parses")
            .is_signed_with(b"k"));
    }

    #[test]
    fn what_is_not_a_token_is_refused_naming_the_field() {
        assert_eq!(Token::parse(""), Err(TokenError::NotSas));
        assert_eq!(Token::parse("eyJhbGciOi.e30.sig"), Err(TokenError::NotSas));
        assert_eq!(
            Token::parse("SharedAccessSignature "),
            Err(TokenError::Missing("sr"))
        );
        assert_eq!(
            Token::parse("SharedAccessSignature sr=a&sig=AA==&se=1"),
            Err(TokenError::Missing("skn"))
        );
        assert_eq!(
            Token::parse("SharedAccessSignature sr=a&sr=b&sig=AA==&se=1&skn=p"),
            Err(TokenError::Repeated("sr"))
        );
        assert_eq!(
            Token::parse("SharedAccessSignature sr=a&sig=AA==&se=soon&skn=p"),
            Err(TokenError::Undecodable("se"))
        );
        assert_eq!(
            Token::parse("SharedAccessSignature sr=a&sig=%%%&se=1&skn=p"),
            Err(TokenError::Undecodable("sig"))
        );
        assert_eq!(
            Token::parse("SharedAccessSignature sr=%FF&sig=AA==&se=1&skn=p"),
            Err(TokenError::Undecodable("sr"))
        );
    }
}
