//! Names the key a serde error points at: serde reports a byte span, users want a key path.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// Every key of a table with the spans of the key and its value.
type KeySpans = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// The sections of the file with their keys' spans; read only to name the key of a serde error.
#[derive(Deserialize)]
struct Outline {
    broker: Option<Spanned<KeySpans>>,
    #[serde(default)]
    queues: Vec<Spanned<KeySpans>>,
}

/// The path of the key whose name or value covers byte `offset`: `broker.listen`,
/// `queues[1].name`, `queues[1]` (the table itself) or a top-level key.
pub(super) fn key_path_at(text: &str, offset: usize) -> Option<String> {
    if let Ok(outline) = toml::from_str::<Outline>(text) {
        let broker = outline.broker.map(|table| ("broker".to_owned(), table));
        let queues = outline
            .queues
            .into_iter()
            .enumerate()
            .map(|(index, table)| (format!("queues[{index}]"), table));
        for (section, table) in broker.into_iter().chain(queues) {
            if let Some(key) = key_at(table.get_ref(), offset) {
                return Some(format!("{section}.{key}"));
            }
            if table.span().contains(&offset) {
                return Some(section);
            }
        }
    }
    let root: KeySpans = toml::from_str(text).ok()?;
    key_at(&root, offset).map(str::to_owned)
}

fn key_at(table: &KeySpans, offset: usize) -> Option<&str> {
    table
        .iter()
        .find(|(key, value)| key.span().contains(&offset) || value.span().contains(&offset))
        .map(|(key, _)| key.get_ref().as_str())
}
