//! A topic's subscriptions in its tree: the lane number each subscription got, and the rules
//! it was given at run time.

use std::collections::HashMap;

use bytes::Bytes;

use crate::store::keys::{RULE_PREFIX, SUBSCRIPTION_PREFIX};
use crate::store::log::EntityLog;
use crate::store::{LaneId, StoreError};

impl EntityLog {
    /// [`Log::subscription_numbers`](crate::store::Log::subscription_numbers): each kept in the
    /// tree under `s` + name. In `memory` mode nothing is stored: they are numbered from
    /// `in_use` + 1.
    pub(super) fn subscription_numbers<S: std::hash::BuildHasher>(
        &mut self,
        names: &[String],
        in_use: u32,
        imposed: Option<&HashMap<String, u32, S>>,
    ) -> Result<HashMap<String, u32>, StoreError> {
        let mut known: HashMap<String, u32> = HashMap::new();
        if let Some(tree) = &self.tree {
            for item in tree.scan_prefix([SUBSCRIPTION_PREFIX]) {
                let (key, value) = item?;
                if let (Ok(name), Ok(number)) = (
                    std::str::from_utf8(&key[1..]),
                    <[u8; 4]>::try_from(&value[..]),
                ) {
                    known.insert(name.to_string(), u32::from_be_bytes(number));
                }
            }
        }
        let mut next = known.values().max().copied().unwrap_or(0).max(in_use) + 1;
        let mut numbers = HashMap::with_capacity(names.len());
        for name in names {
            let imposed = imposed.and_then(|imposed| imposed.get(name)).copied();
            let number = match (imposed, known.get(name)) {
                (Some(number), Some(known)) if number == *known => number,
                (Some(number), _) => {
                    self.store_subscription_number(name, number)?;
                    number
                }
                (None, Some(number)) => *number,
                (None, None) => {
                    let number = next;
                    next += 1;
                    self.store_subscription_number(name, number)?;
                    number
                }
            };
            numbers.insert(name.clone(), number);
        }
        Ok(numbers)
    }

    /// Stores the lane number of the subscription `name` (nothing in `memory` mode).
    fn store_subscription_number(&self, name: &str, number: u32) -> Result<(), StoreError> {
        if let Some(tree) = &self.tree {
            let mut key = vec![SUBSCRIPTION_PREFIX];
            key.extend_from_slice(name.as_bytes());
            tree.insert(key, &number.to_be_bytes()[..])?;
        }
        Ok(())
    }

    /// [`Log::rules`](crate::store::Log::rules): none in `memory` mode.
    pub(super) fn rules(&self, lane: LaneId) -> Result<Vec<Bytes>, StoreError> {
        let Some(tree) = &self.tree else {
            return Ok(Vec::new());
        };
        let mut prefix = vec![RULE_PREFIX];
        prefix.extend_from_slice(&lane.subscription.to_be_bytes());
        let mut rules = Vec::new();
        for item in tree.scan_prefix(prefix) {
            let (_, value) = item?;
            rules.push(Bytes::copy_from_slice(&value));
        }
        Ok(rules)
    }
}
