//! A generated malformed-input sweep over every unary-request RPC of a `ufo.v1` service.
//!
//! The RPCs and their request messages come from the descriptor set the proto crate exports (the one
//! reflection serves), so a new RPC or field is swept without editing a test. For each request message
//! the sweep builds a well-formed base (every field set, JSON fields holding an object) with its own
//! wire encoder, then variants: NUL in each string field and in a JSON key, JSON nested past the limit
//! and past prost's recursion limit, random bytes, truncations of the base, a missing message and an
//! oversized one. [`call`] sends raw bytes to the real server over gRPC.

use std::collections::HashMap;

use bytes::{BufMut as _, Bytes};
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

/// One unary-request method: its path and input message.
#[derive(Debug, Clone)]
pub struct Method {
    /// `/ufo.v1.SessionStore/RecordStep`.
    pub path: String,
    /// `ufo.v1.RecordStepRequest`.
    pub input: String,
}

/// What the server must answer a variant with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// INVALID_ARGUMENT whose message starts with `field:`.
    InvalidNaming(String),
    /// INVALID_ARGUMENT, the field unnamed (the bytes are not the message).
    Invalid,
    /// Anything but INTERNAL or UNKNOWN (random bytes may well decode into a valid request).
    NotInternal,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Variant {
    /// What was done to the request, for failure messages.
    pub name: String,
    /// The gRPC request body: zero or more length-prefixed frames.
    pub body: Bytes,
    /// The answer the server owes.
    pub expect: Expect,
}

/// A value in the sweep's message tree.
#[derive(Debug, Clone)]
enum Node {
    Str(String),
    Bytes(Vec<u8>),
    Varint(u64),
    Fixed64(u64),
    Msg(Vec<(u32, Node)>),
}

/// The descriptors, indexed.
#[derive(Debug)]
pub struct Sweep {
    messages: HashMap<String, DescriptorProto>,
    methods: HashMap<String, Vec<Method>>,
}

const STRUCT: &str = "google.protobuf.Struct";
const VALUE: &str = "google.protobuf.Value";
const MAX_DEPTH: usize = 4;

impl Sweep {
    /// Indexes an encoded file descriptor set (`ufo_proto::FILE_DESCRIPTOR_SET`).
    pub fn new(set: &[u8]) -> Result<Self, prost::DecodeError> {
        let set = FileDescriptorSet::decode(set)?;
        let mut messages = HashMap::new();
        let mut methods: HashMap<String, Vec<Method>> = HashMap::new();
        fn add(prefix: &str, m: &DescriptorProto, out: &mut HashMap<String, DescriptorProto>) {
            let name = format!("{prefix}{}", m.name());
            for nested in &m.nested_type {
                add(&format!("{name}."), nested, out);
            }
            out.insert(name, m.clone());
        }
        for file in set.file {
            let prefix = format!("{}.", file.package());
            for m in &file.message_type {
                add(&prefix, m, &mut messages);
            }
            for service in &file.service {
                let name = format!("{prefix}{}", service.name());
                let list = service
                    .method
                    .iter()
                    .filter(|m| !m.client_streaming())
                    .map(|m| Method {
                        path: format!("/{name}/{}", m.name()),
                        input: m.input_type().trim_start_matches('.').to_owned(),
                    })
                    .collect();
                methods.insert(name, list);
            }
        }
        Ok(Self { messages, methods })
    }

    /// Every unary-request method of `service` (`ufo.v1.SessionStore`).
    pub fn methods(&self, service: &str) -> Vec<Method> {
        self.methods.get(service).cloned().unwrap_or_default()
    }

    /// The variants for one request message; `max_json_depth` is the server's limit and
    /// `max_message_bytes` its decoding limit.
    pub fn variants(
        &self,
        input: &str,
        max_json_depth: usize,
        max_message_bytes: usize,
        seed: u64,
    ) -> Vec<Variant> {
        let mut strings = Vec::new();
        let mut structs = Vec::new();
        let base = self.build(input, 0, &mut Vec::new(), "", &mut strings, &mut structs);
        let base_bytes = encode_msg(&base);
        let mut out = vec![Variant {
            name: "well-formed base".into(),
            body: frame(&base_bytes),
            expect: Expect::NotInternal,
        }];
        for (route, path) in &strings {
            out.push(Variant {
                name: format!("NUL in {path}"),
                body: frame(&encode_msg(&replace(
                    &base,
                    route,
                    Node::Str("a\0b".into()),
                ))),
                expect: Expect::InvalidNaming(path.clone()),
            });
        }
        for (route, path) in &structs {
            out.push(Variant {
                name: format!("NUL in a key of {path}"),
                body: frame(&encode_msg(&replace(
                    &base,
                    route,
                    json_object("k\0", text("v")),
                ))),
                expect: Expect::InvalidNaming(format!("{path}.k\\0")),
            });
            out.push(Variant {
                name: format!("{path} nested {} levels", max_json_depth + 1),
                body: frame(&encode_msg(&replace(
                    &base,
                    route,
                    nested(max_json_depth + 1),
                ))),
                expect: Expect::InvalidNaming(format!("{path}{}", ".a".repeat(max_json_depth))),
            });
            out.push(Variant {
                name: format!("{path} nested 200 levels"),
                body: frame(&encode_msg(&replace(&base, route, nested(200)))),
                expect: Expect::Invalid,
            });
        }
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for i in 0..24 {
            let len = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            out.push(Variant {
                name: format!("random bytes #{i}"),
                body: frame(&bytes),
                expect: Expect::NotInternal,
            });
        }
        for i in 0..8 {
            let mut bytes = base_bytes.clone();
            if !bytes.is_empty() {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
                bytes.truncate(at + 1 + (next() as usize) % (bytes.len() - at));
            }
            out.push(Variant {
                name: format!("corrupted base #{i}"),
                body: frame(&bytes),
                expect: Expect::NotInternal,
            });
        }
        let mut truncated = frame(&base_bytes).to_vec();
        truncated.truncate(truncated.len().saturating_sub(1).max(3));
        out.push(Variant {
            name: "truncated frame".into(),
            body: truncated.into(),
            expect: Expect::Invalid,
        });
        out.push(Variant {
            name: "no message".into(),
            body: Bytes::new(),
            expect: Expect::Invalid,
        });
        if let Some((route, _)) = strings.first() {
            let huge = Node::Str("x".repeat(max_message_bytes + 1));
            out.push(Variant {
                name: "oversized".into(),
                body: frame(&encode_msg(&replace(&base, route, huge))),
                expect: Expect::NotInternal,
            });
        }
        out
    }

    /// A message with every field set; records where the strings and Structs are (a route of field
    /// indexes into the tree, and the path a caller would name).
    fn build(
        &self,
        name: &str,
        depth: usize,
        route: &mut Vec<usize>,
        path: &str,
        strings: &mut Vec<(Vec<usize>, String)>,
        structs: &mut Vec<(Vec<usize>, String)>,
    ) -> Node {
        if name == STRUCT {
            structs.push((route.clone(), path.to_owned()));
            return json_object("k", text("v"));
        }
        if name == VALUE {
            // A JSON value is named by its field alone (`result`, not `result.string_value`).
            let mut inner = route.clone();
            inner.push(0);
            strings.push((inner, path.to_owned()));
            return text("v");
        }
        let Some(message) = self.messages.get(name) else {
            return Node::Msg(Vec::new());
        };
        let mut fields = Vec::new();
        for field in &message.field {
            let number = u32::try_from(field.number()).unwrap_or(1);
            let repeated = field.label() == Label::Repeated;
            let field_path = match (path.is_empty(), repeated) {
                (true, false) => field.name().to_owned(),
                (true, true) => format!("{}[0]", field.name()),
                (false, false) => format!("{path}.{}", field.name()),
                (false, true) => format!("{path}.{}[0]", field.name()),
            };
            route.push(fields.len());
            let node = match field.r#type() {
                Type::String => {
                    strings.push((route.clone(), field_path));
                    Node::Str("7d0c4e4e-1111-4222-8333-944445555666".into())
                }
                Type::Bytes => Node::Bytes(b"bytes".to_vec()),
                Type::Message if depth < MAX_DEPTH => {
                    let inner = field.type_name().trim_start_matches('.');
                    self.build(inner, depth + 1, route, &field_path, strings, structs)
                }
                Type::Message => Node::Msg(Vec::new()),
                Type::Double | Type::Fixed64 | Type::Sfixed64 => Node::Fixed64(1f64.to_bits()),
                // 32-bit fixed-width scalars are left unset: no request uses them.
                Type::Float | Type::Fixed32 | Type::Sfixed32 => {
                    route.pop();
                    continue;
                }
                _ => Node::Varint(1),
            };
            route.pop();
            fields.push((number, node));
        }
        Node::Msg(fields)
    }
}

fn text(s: &str) -> Node {
    // Value.string_value = 3
    Node::Msg(vec![(3, Node::Str(s.into()))])
}

/// A Struct with one entry (`fields` = 1, entry key = 1, value = 2).
fn json_object(key: &str, value: Node) -> Node {
    Node::Msg(vec![(
        1,
        Node::Msg(vec![(1, Node::Str(key.into())), (2, value)]),
    )])
}

/// `{"a": {"a": ... 1}}`, `levels` objects deep.
fn nested(levels: usize) -> Node {
    // Value.number_value = 2
    let mut node = Node::Msg(vec![(2, Node::Fixed64(1f64.to_bits()))]);
    for _ in 0..levels {
        // Value.struct_value = 5
        node = Node::Msg(vec![(5, json_object("a", node))]);
    }
    match node {
        Node::Msg(mut fields) => match fields.pop() {
            Some((_, inner)) => inner,
            None => Node::Msg(Vec::new()),
        },
        other => other,
    }
}

fn replace(base: &Node, route: &[usize], with: Node) -> Node {
    let Some((first, rest)) = route.split_first() else {
        return with;
    };
    match base {
        Node::Msg(fields) => {
            let mut fields = fields.clone();
            if let Some((_, node)) = fields.get_mut(*first) {
                *node = replace(node, rest, with);
            }
            Node::Msg(fields)
        }
        other => other.clone(),
    }
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn encode_msg(node: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    if let Node::Msg(fields) = node {
        for (number, value) in fields {
            let number = u64::from(*number);
            match value {
                Node::Varint(v) => {
                    varint(number << 3, &mut out);
                    varint(*v, &mut out);
                }
                Node::Fixed64(v) => {
                    varint((number << 3) | 1, &mut out);
                    out.extend_from_slice(&v.to_le_bytes());
                }
                Node::Str(s) => {
                    varint((number << 3) | 2, &mut out);
                    varint(s.len() as u64, &mut out);
                    out.extend_from_slice(s.as_bytes());
                }
                Node::Bytes(b) => {
                    varint((number << 3) | 2, &mut out);
                    varint(b.len() as u64, &mut out);
                    out.extend_from_slice(b);
                }
                Node::Msg(_) => {
                    let inner = encode_msg(value);
                    varint((number << 3) | 2, &mut out);
                    varint(inner.len() as u64, &mut out);
                    out.extend_from_slice(&inner);
                }
            }
        }
    }
    out
}

/// One uncompressed gRPC message frame.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = bytes::BytesMut::with_capacity(message.len() + 5);
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(message);
    out.freeze()
}

/// A client for [`call`]: HTTP/2 without TLS, as gRPC speaks it.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    ufo_common::tls::install_crypto_provider();
    reqwest::Client::builder().http2_prior_knowledge().build()
}

/// Sends `body` (already framed) as a unary call to `path` and returns the status (OK included).
pub async fn call(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    body: Bytes,
    token: Option<&str>,
) -> Result<tonic::Status, reqwest::Error> {
    // A plain HTTP/2 POST (`client` from [`client`]): the body is sent exactly as generated (frames and all), which a tonic
    // client, framing its own messages, could not do for the truncated and empty variants.
    let mut request = client
        .post(format!("{url}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await?;
    // A trailers-only answer (every refusal, and every unary error) carries the status in the headers.
    // Without one the call was accepted: a unary reply or an open stream (its status would come in the
    // trailers, which are not awaited: a stream may stay open for as long as the task runs).
    Ok(tonic::Status::from_header_map(response.headers())
        .unwrap_or_else(|| tonic::Status::ok("accepted")))
}

/// Whether a refusal `message` names `field` the way the services do: `field: …`. A map entry's key or
/// value, which the sweep names like a repeated entry (`labels[0].key`), is named by its key
/// (`labels["k"]: …`, the key escaped).
pub fn names_field(message: &str, field: &str) -> bool {
    if message.starts_with(&format!("{field}:")) {
        return true;
    }
    [".key", ".value"].iter().any(|part| {
        field
            .strip_suffix(part)
            .and_then(|f| f.strip_suffix("[0]"))
            .is_some_and(|map| message.starts_with(&format!("{map}[\"")))
    })
}
