//! Responses of the request/response nodes (amqp-dialect.md §7.1, §11); an entity's refusal
//! takes the status and condition of [`EntityError::status`], the one table every surface
//! answers with.

use bytes::Bytes;
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, MessageId, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Symbol, Value};

use crate::entity::handle::EntityError;
use crate::wire;

/// A response: a status, its description, an error condition on failure, and a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// HTTP-like status code.
    pub status: i32,
    /// Human-readable status.
    pub description: String,
    /// Error condition symbol, on failures.
    pub condition: Option<&'static str>,
    /// The `amqp-value` body, if any.
    pub body: Option<Value>,
}

impl Response {
    /// 200 with a body map.
    pub fn ok(body: Vec<(&str, Value)>) -> Response {
        Response {
            status: 200,
            description: "OK".into(),
            condition: None,
            body: Some(string_map(body)),
        }
    }

    /// 204: nothing to return (an empty peek).
    pub fn no_content() -> Response {
        Response {
            status: 204,
            description: "No Content".into(),
            condition: None,
            body: None,
        }
    }

    /// A failure with its status, condition and description.
    pub fn error(status: i32, condition: &'static str, description: impl Into<String>) -> Response {
        Response {
            status,
            description: description.into(),
            condition: Some(condition),
            body: None,
        }
    }

    /// An entity's refusal, with the status and condition of [`EntityError::status`].
    pub fn refusal(error: &EntityError) -> Response {
        let status = error.status();
        Response::error(i32::from(status.code), status.condition, error.to_string())
    }

    /// 400 with `com.microsoft:argument-error`.
    pub fn bad_request(description: impl Into<String>) -> Response {
        Response::error(400, wire::condition::ARGUMENT_ERROR, description)
    }

    /// The encoded response message. Management uses `statusCode`, CBS `status-code`.
    pub fn encode(&self, correlation: Option<MessageId>, style: Style) -> Bytes {
        let (code_key, description_key) = match style {
            Style::Management => ("statusCode", "statusDescription"),
            Style::Cbs => ("status-code", "status-description"),
        };
        let properties = Properties {
            correlation_id: correlation,
            ..Properties::default()
        };
        let mut app = ApplicationProperties::default();
        app.0.insert(code_key.into(), SimpleValue::Int(self.status));
        app.0.insert(
            description_key.into(),
            SimpleValue::String(self.description.clone()),
        );
        if let Some(condition) = self.condition {
            app.0.insert(
                "errorCondition".into(),
                SimpleValue::Symbol(Symbol::from(condition)),
            );
        }
        let body = AmqpValue(self.body.clone().unwrap_or(Value::Null));
        let mut out = Vec::new();
        for part in [
            serde_amqp::to_vec(&properties),
            serde_amqp::to_vec(&app),
            serde_amqp::to_vec(&body),
        ] {
            // Encoding values the broker built itself cannot fail.
            out.extend(part.unwrap_or_default());
        }
        Bytes::from(out)
    }
}

/// Which application-property names a response uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `$management`: `statusCode`, `statusDescription`.
    Management,
    /// `$cbs`: `status-code`, `status-description`.
    Cbs,
}

/// A map with string keys, as the SDKs require in responses.
pub fn string_map(entries: Vec<(&str, Value)>) -> Value {
    let mut map = OrderedMap::new();
    for (key, value) in entries {
        map.insert(Value::String(key.to_string()), value);
    }
    Value::Map(map)
}
