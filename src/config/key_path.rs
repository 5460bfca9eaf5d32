//! Names the key a serde error points at: serde reports a byte span, users want a key path such
//! as `topics[0].subscriptions[1].rules[0].correlation.foo`.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The path of the deepest key or array element whose key or value covers byte `offset`:
/// `broker.listen`, `queues[1].name`, `queues[1]` (the table itself), a top-level key. `None`
/// when the text is not TOML or no key covers the offset.
pub(super) fn key_path_at(text: &str, offset: usize) -> Option<String> {
    let root: Node = toml::from_str(text).ok()?;
    let path = root.path_at(offset);
    (!path.is_empty()).then(|| render(&path))
}

/// A TOML value with the spans of its keys and values: the file read again, leniently, only to
/// name the key of an error.
enum Node {
    Table(Vec<(Spanned<String>, Spanned<Node>)>),
    Array(Vec<Spanned<Node>>),
    Leaf,
}

/// One step of a key path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl Node {
    /// The path below this node to the deepest key or element that covers `offset`. A child
    /// is searched even when its own span does not cover the offset: toml's span of a table
    /// written as a header ends before the sub-tables written after it.
    fn path_at(&self, offset: usize) -> Vec<Step<'_>> {
        let children: Vec<(Step<'_>, bool, &Node)> = match self {
            Node::Table(entries) => entries
                .iter()
                .map(|(key, value)| {
                    let covers = key.span().contains(&offset) || value.span().contains(&offset);
                    (Step::Key(key.get_ref()), covers, value.get_ref())
                })
                .collect(),
            Node::Array(items) => items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    let covers = item.span().contains(&offset);
                    (Step::Index(index), covers, item.get_ref())
                })
                .collect(),
            Node::Leaf => Vec::new(),
        };
        children
            .into_iter()
            .find_map(|(step, covers, child)| {
                let below = child.path_at(offset);
                (covers || !below.is_empty()).then(|| {
                    let mut path = vec![step];
                    path.extend(below);
                    path
                })
            })
            .unwrap_or_default()
    }
}

fn render(path: &[Step<'_>]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) if text.is_empty() => text.push_str(key),
            Step::Key(key) => {
                text.push('.');
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    /// toml hands a datetime over as a map of one private key that carries no span; such
    /// entries are skipped, so a datetime reads as an empty table (named by its own key).
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(IfSpanned::<String>::default())? {
            let value = map.next_value_seed(IfSpanned::<Node>::default())?;
            if let (Some(key), Some(value)) = (key, value) {
                entries.push((key, value));
            }
        }
        Ok(Node::Table(entries))
    }
}

/// Reads a `Spanned<T>`, or `None` where toml has no span to give.
struct IfSpanned<T>(std::marker::PhantomData<T>);

impl<T> Default for IfSpanned<T> {
    fn default() -> Self {
        IfSpanned(std::marker::PhantomData)
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for IfSpanned<T> {
    type Value = Option<Spanned<T>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        Ok(Spanned::<T>::deserialize(deserializer).ok())
    }
}
