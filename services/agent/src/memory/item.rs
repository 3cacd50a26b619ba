//! Memory items and an agent's memory (seed 000/001 "Memory Update").

use serde_json::{Map, Value};
use ufo_proto::v1;

/// One step's memory: each item carries its own keys (not a shared attribute list).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryItem(pub Map<String, Value>);

impl MemoryItem {
    /// An empty item.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a key.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    /// Adds every key of a JSON object (the seeds' `add_values_from_dict`).
    pub fn extend(&mut self, values: &Map<String, Value>) {
        for (k, v) in values {
            self.0.insert(k.clone(), v.clone());
        }
    }

    /// A key's value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// A key as a string ("" when absent or not a string).
    pub fn str(&self, key: &str) -> &str {
        self.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// Only the given keys that are present (the blackboard trajectory of `history_keys`).
    pub fn select(&self, keys: &[String]) -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| self.0.get(k).map(|v| (k.clone(), v.clone())))
            .collect()
    }
}

/// An agent's memory items in step order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    items: Vec<MemoryItem>,
}

impl Memory {
    /// Appends an item.
    pub fn push(&mut self, item: MemoryItem) {
        self.items.push(item);
    }

    /// All items.
    pub fn items(&self) -> &[MemoryItem] {
        &self.items
    }

    /// The plan of the latest step (seeds 000/001: "previous plan"); empty when there is none.
    pub fn previous_plan(&self) -> Vec<String> {
        self.last()
            .and_then(|m| m.get("plan"))
            .and_then(|p| p.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The newest item.
    pub fn last(&self) -> Option<&MemoryItem> {
        self.items.last()
    }

    /// The newest item, to amend.
    pub fn last_mut(&mut self) -> Option<&mut MemoryItem> {
        self.items.last_mut()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// As session protos for `agent_name`, step numbers taken from each item's `session_step`.
    pub fn to_proto(&self, agent_name: &str) -> Vec<v1::MemoryItem> {
        self.items
            .iter()
            .map(|i| v1::MemoryItem {
                agent_name: agent_name.to_owned(),
                step: i.get("session_step").and_then(Value::as_u64).unwrap_or(0),
                item: Some(ufo_proto::json::object_to_struct(i.0.clone())),
            })
            .collect()
    }

    /// Rebuilds the memory of `agent_name` from stored items (other agents' items are ignored).
    pub fn from_proto(items: &[v1::MemoryItem], agent_name: &str) -> Self {
        let mut stored: Vec<_> = items
            .iter()
            .filter(|i| i.agent_name == agent_name)
            .collect();
        stored.sort_by_key(|i| i.step);
        Self {
            items: stored
                .into_iter()
                .map(|i| {
                    MemoryItem(
                        i.item
                            .clone()
                            .map(ufo_proto::json::struct_to_map)
                            .unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn memory_round_trips_through_the_session_proto() {
        let mut m = Memory::default();
        let mut a = MemoryItem::new();
        a.set("session_step", 2).set("thought", "b");
        let mut b = MemoryItem::new();
        b.set("session_step", 1)
            .set("thought", "a")
            .set("plan", json!(["x"]));
        m.push(b);
        m.push(a);
        let mut stored = m.to_proto("HostAgent");
        stored.reverse();
        stored.push(v1::MemoryItem {
            agent_name: "Other".into(),
            step: 0,
            item: None,
        });
        let back = Memory::from_proto(&stored, "HostAgent");
        assert_eq!(back, m);
        assert_eq!(back.last().unwrap().str("thought"), "b");
        let keys = vec!["thought".to_owned(), "missing".to_owned()];
        assert_eq!(
            back.items()[0].select(&keys),
            json!({"thought": "a"}).as_object().unwrap().clone()
        );
    }
}
