//! A descriptor-driven walk over an encoded protobuf request, before tonic decodes it.
//!
//! Postgres refuses NUL in `text` and `\u0000` in `jsonb`, and prost refuses invalid UTF-8 and nesting
//! past its recursion limit; each of those used to reach the caller as INTERNAL. Walking the wire bytes
//! with the request's descriptor finds them generically (every string field and every `Struct` of every
//! RPC, present and future) without a second decode, and names the offending field the way a caller
//! writes it: `step.actions[2].arguments.text`.

use std::collections::HashMap;

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};

/// The three well-known types that carry free-form JSON, walked as JSON (keys as path segments).
const STRUCT: &str = "google.protobuf.Struct";
const LIST_VALUE: &str = "google.protobuf.ListValue";
const VALUE: &str = "google.protobuf.Value";

/// prost's default recursion limit: a request nested deeper cannot be decoded at all.
const MAX_MESSAGE_DEPTH: u32 = 100;

/// What a string, bytes or message field holds, as far as the walk cares.
#[derive(Debug, Clone)]
enum FieldType {
    String,
    Message(String),
    /// Bytes: skipped, but only length-delimited (prost refuses any other wire type, as INTERNAL).
    Bytes,
    /// Every scalar: skipped by wire type.
    Other,
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    ty: FieldType,
    repeated: bool,
    /// A `map<K, V>` field: its entries are named by their key.
    map: bool,
}

#[derive(Debug, Default)]
struct MessageInfo {
    fields: HashMap<u32, Field>,
}

/// The message types of a descriptor set and the input type of each unary-request method.
#[derive(Debug, Default)]
pub struct Descriptors {
    messages: HashMap<String, MessageInfo>,
    /// `/package.Service/Method` → fully-qualified input message name.
    methods: HashMap<String, String>,
    /// The synthetic `…Entry` messages of `map<K, V>` fields: their `key`/`value` add no path segment.
    map_entries: std::collections::HashSet<String>,
}

/// Why a descriptor set could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode the file descriptor set")]
pub struct DescriptorError(#[from] prost::DecodeError);

/// Why a request was refused: the field path (empty for the message itself) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, e.g. `step.actions[0].arguments.text`.
    pub field: String,
    /// What, e.g. `contains a NUL character`.
    pub problem: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.field, self.problem)
        }
    }
}

/// The checks a walk applies.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Refuse NUL in string fields and JSON keys/strings (the database cannot store it).
    pub reject_nul: bool,
    /// Deepest nesting of JSON objects and arrays (`Struct`/`ListValue`) in any field.
    pub max_json_depth: u32,
}

impl Descriptors {
    /// Indexes encoded `FileDescriptorSet`s (e.g. `ufo_proto::FILE_DESCRIPTOR_SET`, which includes its
    /// imports such as `google/protobuf/struct.proto`).
    pub fn from_sets(sets: &[&[u8]]) -> Result<Self, DescriptorError> {
        let mut out = Self::default();
        for set in sets {
            let set = prost_types::FileDescriptorSet::decode(*set)?;
            for file in set.file {
                let package = file.package.clone().unwrap_or_default();
                let prefix = if package.is_empty() {
                    String::new()
                } else {
                    format!("{package}.")
                };
                for message in &file.message_type {
                    out.add_message(&prefix, message);
                }
                for service in &file.service {
                    let service_name = format!("{prefix}{}", service.name());
                    for method in &service.method {
                        // Client-streaming requests are never buffered whole: they are left to tonic.
                        if method.client_streaming() {
                            continue;
                        }
                        out.methods.insert(
                            format!("/{service_name}/{}", method.name()),
                            method.input_type().trim_start_matches('.').to_owned(),
                        );
                    }
                }
            }
        }
        Ok(out)
    }

    fn add_message(&mut self, prefix: &str, message: &prost_types::DescriptorProto) {
        let full = format!("{prefix}{}", message.name());
        let nested_prefix = format!("{full}.");
        let map_entries: Vec<String> = message
            .nested_type
            .iter()
            .filter(|n| n.options.as_ref().is_some_and(|o| o.map_entry()))
            .map(|n| format!("{nested_prefix}{}", n.name()))
            .collect();
        for nested in &message.nested_type {
            self.add_message(&nested_prefix, nested);
        }
        self.map_entries.extend(map_entries.iter().cloned());
        let fields = message
            .field
            .iter()
            .map(|f| {
                let ty = match f.r#type() {
                    Type::String => FieldType::String,
                    Type::Bytes => FieldType::Bytes,
                    Type::Message => {
                        FieldType::Message(f.type_name().trim_start_matches('.').to_owned())
                    }
                    _ => FieldType::Other,
                };
                let map = matches!(&ty, FieldType::Message(name) if map_entries.contains(name));
                let field = Field {
                    name: f.name().to_owned(),
                    ty,
                    repeated: f.label() == Label::Repeated,
                    map,
                };
                (u32::try_from(f.number()).unwrap_or(0), field)
            })
            .collect();
        self.messages.insert(full, MessageInfo { fields });
    }

    /// The input message of a unary-request method path (`/ufo.v1.SessionStore/RecordStep`).
    pub fn input_of(&self, path: &str) -> Option<&str> {
        self.methods.get(path).map(String::as_str)
    }

    /// Walks `bytes` as an encoded `message`, applying `rules`.
    pub fn check(&self, message: &str, bytes: &[u8], rules: Rules) -> Result<(), Problem> {
        let mut walk = Walk {
            descriptors: self,
            rules,
        };
        walk.message(message, bytes, &mut String::new(), 0, 0)
    }
}

struct Walk<'a> {
    descriptors: &'a Descriptors,
    rules: Rules,
}

fn problem(field: &str, problem: impl Into<String>) -> Problem {
    Problem {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// Reads a base-128 varint, advancing `pos`.
fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

const UNDECODABLE: &str = "not a valid protobuf encoding of the request message";

impl Walk<'_> {
    fn message(
        &mut self,
        name: &str,
        bytes: &[u8],
        path: &mut String,
        depth: u32,
        json_depth: u32,
    ) -> Result<(), Problem> {
        if depth >= MAX_MESSAGE_DEPTH {
            return Err(problem(path, "nested too deeply"));
        }
        let json_depth = if name == STRUCT || name == LIST_VALUE {
            let deeper = json_depth + 1;
            if deeper > self.rules.max_json_depth {
                return Err(problem(
                    path,
                    format!(
                        "JSON nested deeper than {} levels (the configured maximum)",
                        self.rules.max_json_depth
                    ),
                ));
            }
            deeper
        } else {
            json_depth
        };
        let info = self.descriptors.messages.get(name);
        let mut counts: HashMap<u32, usize> = HashMap::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let key = varint(bytes, &mut pos).ok_or_else(|| problem(path, UNDECODABLE))?;
            let number = u32::try_from(key >> 3).map_err(|_| problem(path, UNDECODABLE))?;
            if number == 0 {
                return Err(problem(path, UNDECODABLE));
            }
            let field = info.and_then(|i| i.fields.get(&number));
            match key & 7 {
                0 => {
                    varint(bytes, &mut pos).ok_or_else(|| problem(path, UNDECODABLE))?;
                }
                1 => pos += 8,
                5 => pos += 4,
                2 => {
                    let len = varint(bytes, &mut pos)
                        .and_then(|l| usize::try_from(l).ok())
                        .ok_or_else(|| problem(path, UNDECODABLE))?;
                    let end = pos
                        .checked_add(len)
                        .filter(|end| *end <= bytes.len())
                        .ok_or_else(|| problem(path, UNDECODABLE))?;
                    let value = &bytes[pos..end];
                    pos = end;
                    if let Some(field) = field {
                        let index = counts.entry(number).or_default();
                        self.field(name, field, *index, value, path, depth, json_depth)?;
                        *index += 1;
                    }
                }
                // Groups (3, 4) are not used by proto3; anything else is not a wire type.
                _ => return Err(problem(path, UNDECODABLE)),
            }
            if pos > bytes.len() {
                return Err(problem(path, UNDECODABLE));
            }
            if let Some(field) = field
                && key & 7 != 2
                && !matches!(field.ty, FieldType::Other)
            {
                return Err(problem(&join(path, &field.name), UNDECODABLE));
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn field(
        &mut self,
        parent: &str,
        field: &Field,
        index: usize,
        value: &[u8],
        path: &mut String,
        depth: u32,
        json_depth: u32,
    ) -> Result<(), Problem> {
        let len = path.len();
        self.segment(parent, field, index, value, path);
        let result = match &field.ty {
            FieldType::String => match std::str::from_utf8(value) {
                Err(_) => Err(problem(path, "not valid UTF-8")),
                Ok(s) if self.rules.reject_nul && s.contains('\0') => {
                    Err(problem(path, "contains a NUL character"))
                }
                Ok(_) => Ok(()),
            },
            FieldType::Message(name) => self.message(name, value, path, depth + 1, json_depth),
            FieldType::Bytes | FieldType::Other => Ok(()),
        };
        path.truncate(len);
        result
    }

    /// Appends how a caller names this occurrence of `field` inside a `parent` message to `path`.
    fn segment(&self, parent: &str, field: &Field, index: usize, value: &[u8], path: &mut String) {
        // JSON: a Struct's entries are named by key, a list's items by index, and a Value's variants
        // (`string_value`, `struct_value`...) add nothing: `payload.a.b[2]`.
        match parent {
            VALUE => return,
            LIST_VALUE => {
                path.push_str(&format!("[{index}]"));
                return;
            }
            STRUCT => {
                let key = map_key(value).unwrap_or_default();
                push_name(path, &key);
                return;
            }
            _ if self.descriptors.map_entries.contains(parent) => return,
            _ => {}
        }
        push_name(path, &field.name);
        if field.map {
            let key = map_key(value).unwrap_or_default();
            path.push_str(&format!("[{key:?}]"));
        } else if field.repeated {
            path.push_str(&format!("[{index}]"));
        }
    }
}

fn push_name(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    // A key with NUL is shown escaped, so the message itself stays valid text.
    path.push_str(&name.escape_debug().to_string());
}

fn join(path: &str, name: &str) -> String {
    let mut out = path.to_owned();
    push_name(&mut out, name);
    out
}

/// A map entry's string key (field 1), when it has one, for naming the entry.
fn map_key(entry: &[u8]) -> Option<String> {
    let mut pos = 0;
    while pos < entry.len() {
        let key = varint(entry, &mut pos)?;
        match key & 7 {
            0 => {
                varint(entry, &mut pos)?;
            }
            1 => pos += 8,
            5 => pos += 4,
            2 => {
                let len = usize::try_from(varint(entry, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|e| *e <= entry.len())?;
                if key >> 3 == 1 {
                    return Some(String::from_utf8_lossy(&entry[pos..end]).into_owned());
                }
                pos = end;
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
