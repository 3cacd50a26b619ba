//! The operator's executor registry: which executors tasks may use, by name, and the credentials the runner
//! sends to each. A task names an executor; its address, token and CA come from here, so no credential ever
//! leaves for an address the operator did not declare (issue 16).
//!
//! Entries come from `--executors name=address` (token and CA from `--executor-token` / `--executor-ca`),
//! `--default-executor` (a name, or an address registered as `default`) and an optional JSON file
//! (`--executors-file`, format in [`ExecutorsFile`]) whose entries may carry their own token and CA.
//!
//! A task may give an address instead of a name only when the operator lists its host in
//! `--executor-address-hosts`; such a task's executor receives no token. Link-local and cloud metadata
//! addresses are refused always: the agent must never be a way to reach them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Config;

/// The name the default executor gets when `--default-executor` is an address.
pub const DEFAULT_NAME: &str = "default";

/// One declared executor.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecutorEntry {
    /// `http(s)://host:port`.
    pub address: String,
    /// Bearer token sent to it.
    pub token: Option<String>,
    /// PEM of the CA that signed its TLS certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// Its labels as a desktop of the pool (from the executors file).
    pub labels: BTreeMap<String, String>,
}

impl std::fmt::Debug for ExecutorEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorEntry")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("labels", &self.labels)
            .finish()
    }
}

/// The `--executors-file` format (JSON):
///
/// ```json
/// {"executors": {"desk1": {"address": "https://desk1.lan:50051",
///                          "token_file": "/etc/ufo/desk1.token", "ca": "/etc/ufo/ca.pem",
///                          "labels": {"app": "mousepad"}}}}
/// ```
///
/// `token` may be given inline instead of `token_file`; without either, `--executor-token` is used.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorsFile {
    /// Executors by name.
    #[serde(default)]
    pub executors: BTreeMap<String, FileEntry>,
}

/// One executor in [`ExecutorsFile`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// `http(s)://host:port`.
    pub address: String,
    /// Inline bearer token.
    #[serde(default)]
    pub token: Option<String>,
    /// File holding the bearer token (trimmed).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA of its TLS certificate.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Its labels as a desktop of the pool, e.g. `{"app": "mousepad"}` (tasks may ask for labels).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Why the registry could not be built (at startup).
#[derive(Debug, thiserror::Error)]
pub enum ExecutorConfigError {
    /// A file cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The executors file is not valid.
    #[error("invalid executors file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An entry is malformed.
    #[error("invalid executor entry {0:?}: expected NAME=http(s)://host[:port]")]
    Entry(String),
    /// The default executor is not declared.
    #[error("--default-executor {0:?} is neither an address nor a declared executor name")]
    Default(String),
}

/// Why a task's executor is refused (a 400 naming `executor`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutorRefusal {
    /// Not a declared name.
    #[error("executor {0:?} is not a registered executor name")]
    UnknownName(String),
    /// An address, and addresses are not enabled for its host.
    #[error(
        "executor must be a registered executor name; addresses are accepted only for hosts the operator allows"
    )]
    AddressNotAllowed,
    /// An address that is not `http(s)://host[:port]`.
    #[error("executor is not a valid address (http(s)://host[:port])")]
    BadAddress,
    /// A link-local or cloud metadata address.
    #[error("executor address {0:?} is a link-local or metadata address, which is never allowed")]
    Forbidden(String),
}

/// Where and how the runner reaches a task's executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The address.
    pub address: String,
    /// The token to send (only for a registered executor).
    pub token: Option<String>,
    /// The CA for `https`.
    pub ca_pem: Option<Vec<u8>>,
}

/// Dial-out executors: who may connect (enrollment tokens) and who is connected (the hub).
#[derive(Debug, Clone)]
pub struct DialOut {
    /// The enrollment tokens.
    pub enrollments: super::dialout::enroll::Enrollments,
    /// The connected executors.
    pub hub: std::sync::Arc<super::dialout::Hub>,
}

/// The declared executors and the hosts callers may name by address.
#[derive(Debug, Clone, Default)]
pub struct ExecutorRegistry {
    entries: BTreeMap<String, ExecutorEntry>,
    /// Dial-out executors, when `--executor-enrollments-file` is set.
    dial_out: Option<DialOut>,
    default: String,
    address_hosts: Vec<String>,
    /// CA for caller-named `https` addresses (a CA is not a secret).
    shared_ca: Option<Vec<u8>>,
}

pub use super::grpc::parse_address;

fn read(path: &Path) -> Result<Vec<u8>, ExecutorConfigError> {
    std::fs::read(path).map_err(|source| ExecutorConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Host names of cloud instance metadata services.
const METADATA_HOSTS: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.internal",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip == Ipv4Addr::new(100, 100, 100, 200)
}

/// Whether `host` is a link-local or metadata address (never an executor, whatever the operator allows).
/// Numeric spellings a resolver would accept (`2852039166`, `0xa9.0xfe.0xa9.0xfe`, `169.254.1`) count as
/// the address they spell.
pub fn forbidden_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if METADATA_HOSTS.contains(&host.as_str()) {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => forbidden_v4(ip),
        Ok(IpAddr::V6(ip)) => {
            (ip.segments()[0] & 0xffc0) == 0xfe80
                || ip.is_unspecified()
                || ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
                || ip.to_ipv4_mapped().is_some_and(forbidden_v4)
        }
        Err(_) => inet_aton(&host).is_some_and(forbidden_v4),
    }
}

/// The address the C library's `inet_aton` reads from `text` (1 to 4 parts, decimal, octal or hex).
fn inet_aton(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = text
        .split('.')
        .map(|p| {
            if let Some(hex) = p.strip_prefix("0x") {
                u64::from_str_radix(hex, 16).ok()
            } else if p.len() > 1 && p.starts_with('0') {
                u64::from_str_radix(&p[1..], 8).ok()
            } else {
                p.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    let (last, head) = parts.split_last()?;
    if head.len() > 3 || head.iter().any(|p| *p > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - head.len() as u32);
    if rest_bits < 64 && *last >= (1u64 << rest_bits) {
        return None;
    }
    let mut value: u64 = 0;
    for (i, p) in head.iter().enumerate() {
        value |= p << (24 - 8 * i as u32);
    }
    Some(Ipv4Addr::from((value | last) as u32))
}

impl ExecutorRegistry {
    /// The registry the flags and the executors file declare.
    pub fn from_config(config: &Config) -> Result<Self, ExecutorConfigError> {
        let shared_token = config.runner.executor_token.clone();
        let shared_ca = config.runner.executor_ca.as_deref().map(read).transpose()?;
        let mut entries = BTreeMap::new();
        for spec in &config.api.executors {
            let (name, address) = spec
                .split_once('=')
                .map(|(n, a)| (n.trim(), a.trim()))
                .filter(|(n, a)| !n.is_empty() && parse_address(a).is_some())
                .ok_or_else(|| ExecutorConfigError::Entry(spec.clone()))?;
            entries.insert(
                name.to_owned(),
                ExecutorEntry {
                    address: address.to_owned(),
                    token: shared_token.clone(),
                    ca_pem: shared_ca.clone(),
                    labels: BTreeMap::new(),
                },
            );
        }
        if let Some(path) = &config.api.executors_file {
            let bad = |message: String| ExecutorConfigError::File {
                path: path.display().to_string(),
                message,
            };
            let file: ExecutorsFile =
                serde_json::from_slice(&read(path)?).map_err(|e| bad(e.to_string()))?;
            for (name, e) in file.executors {
                if parse_address(&e.address).is_none() {
                    return Err(bad(format!("executor {name:?}: invalid address")));
                }
                let token = match (&e.token, &e.token_file) {
                    (Some(t), None) => Some(t.clone()),
                    (None, Some(p)) => Some(String::from_utf8_lossy(&read(p)?).trim().to_owned()),
                    (None, None) => shared_token.clone(),
                    (Some(_), Some(_)) => {
                        return Err(bad(format!(
                            "executor {name:?}: give token or token_file, not both"
                        )));
                    }
                };
                let ca_pem = match &e.ca {
                    Some(p) => Some(read(p)?),
                    None => shared_ca.clone(),
                };
                entries.insert(
                    name,
                    ExecutorEntry {
                        address: e.address,
                        token,
                        ca_pem,
                        labels: e.labels,
                    },
                );
            }
        }
        let default = config.api.default_executor.trim();
        let default = if entries.contains_key(default) {
            default.to_owned()
        } else if parse_address(default).is_some() {
            entries
                .entry(DEFAULT_NAME.to_owned())
                .or_insert_with(|| ExecutorEntry {
                    address: default.to_owned(),
                    token: shared_token.clone(),
                    ca_pem: shared_ca.clone(),
                    labels: BTreeMap::new(),
                });
            DEFAULT_NAME.to_owned()
        } else {
            return Err(ExecutorConfigError::Default(default.to_owned()));
        };
        Ok(Self {
            entries,
            default,
            address_hosts: config
                .api
                .executor_address_hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            shared_ca,
            dial_out: config
                .dial_out
                .enrollments_file
                .as_ref()
                .map(|path| DialOut {
                    enrollments: super::dialout::enroll::Enrollments::new(path),
                    hub: config.dial_out.hub.0.clone(),
                }),
        })
    }

    /// Dial-out executors, when enabled.
    pub fn dial_out(&self) -> Option<&DialOut> {
        self.dial_out.as_ref()
    }

    /// Whether `name` is a declared (dial-in) executor.
    pub fn is_declared(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Whether `name` is a dial-out executor tasks may use: enrolled with a token that is not revoked,
    /// or connected now.
    fn is_dial_out(&self, name: &str) -> bool {
        self.dial_out
            .as_ref()
            .is_some_and(|d| d.hub.get(name).is_some() || d.enrollments.is_enrolled(name))
    }

    /// The dispatcher for `conn`: over the executor's dial-out stream for a `dialout://NAME` address,
    /// else a gRPC connection to the address.
    pub fn dispatcher(
        &self,
        conn: &Connection,
        command_deadline_ms: u32,
        max_message_bytes: usize,
    ) -> Result<super::grpc::GrpcDispatcher, super::DispatchError> {
        if let Some(name) = conn.address.strip_prefix(super::dialout::SCHEME) {
            let dial_out = self.dial_out.as_ref().ok_or_else(|| {
                super::DispatchError::Address(
                    "dial-out executors are not enabled (--executor-enrollments-file)".into(),
                )
            })?;
            return super::grpc::GrpcDispatcher::dial_out(
                dial_out.hub.channel(name, max_message_bytes),
                name,
                command_deadline_ms,
                max_message_bytes,
            );
        }
        super::grpc::GrpcDispatcher::connect_lazy(
            &conn.address,
            conn.token.as_deref(),
            command_deadline_ms,
            max_message_bytes,
            conn.ca_pem.as_deref(),
        )
    }

    /// The declared executors as desktops of the pool: name and labels, sorted by name.
    pub fn desktops(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.entries
            .iter()
            .map(|(name, e)| (name.clone(), e.labels.clone()))
            .collect()
    }

    /// The declared names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether callers may give addresses (for some host).
    pub fn addresses_enabled(&self) -> bool {
        !self.address_hosts.is_empty()
    }

    /// What a task asked for → `(name, address)`; the name is empty for a caller-named address.
    pub fn resolve(&self, requested: &str) -> Result<(String, String), ExecutorRefusal> {
        let requested = requested.trim();
        let name = if requested.is_empty() {
            self.default.as_str()
        } else {
            requested
        };
        if let Some(entry) = self.entries.get(name) {
            return Ok((name.to_owned(), entry.address.clone()));
        }
        if self.is_dial_out(name) {
            return Ok((name.to_owned(), format!("{}{name}", super::dialout::SCHEME)));
        }
        if !(name.starts_with("http://") || name.starts_with("https://")) {
            return Err(ExecutorRefusal::UnknownName(
                name.chars().take(100).collect(),
            ));
        }
        let (host, _) = parse_address(name).ok_or(ExecutorRefusal::BadAddress)?;
        if forbidden_host(&host) {
            return Err(ExecutorRefusal::Forbidden(host));
        }
        if !self.address_hosts.contains(&host) {
            return Err(ExecutorRefusal::AddressNotAllowed);
        }
        Ok((String::new(), name.to_owned()))
    }

    /// How the runner reaches a task's executor, given the registered name it chose (`executor_name`,
    /// empty for a caller-named address) and the address stored with it. A registered name gets its
    /// entry's address, token and CA;
    /// an address gets no token, unless it is exactly a registered entry's address (a task stored before
    /// names existed), which is that entry. Refuses forbidden hosts here too, so a stored config edited
    /// behind the API's back cannot reach them.
    pub fn connection(
        &self,
        executor_name: &str,
        executor: &str,
    ) -> Result<Connection, ExecutorRefusal> {
        if !executor_name.is_empty() && !self.entries.contains_key(executor_name) {
            if self.is_dial_out(executor_name) {
                return Ok(Connection {
                    address: format!("{}{executor_name}", super::dialout::SCHEME),
                    token: None,
                    ca_pem: None,
                });
            }
            return Err(ExecutorRefusal::UnknownName(executor_name.to_owned()));
        }
        if !executor_name.is_empty() {
            let entry = self
                .entries
                .get(executor_name)
                .ok_or_else(|| ExecutorRefusal::UnknownName(executor_name.to_owned()))?;
            return Ok(Connection {
                address: entry.address.clone(),
                token: entry.token.clone(),
                ca_pem: entry.ca_pem.clone(),
            });
        }
        if let Some(entry) = self.entries.values().find(|e| e.address == executor) {
            return Ok(Connection {
                address: entry.address.clone(),
                token: entry.token.clone(),
                ca_pem: entry.ca_pem.clone(),
            });
        }
        let (host, _) = parse_address(executor).ok_or(ExecutorRefusal::BadAddress)?;
        if forbidden_host(&host) {
            return Err(ExecutorRefusal::Forbidden(host));
        }
        Ok(Connection {
            address: executor.to_owned(),
            token: None,
            ca_pem: self.shared_ca.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn registry(args: &[&str]) -> ExecutorRegistry {
        let config = crate::Config::parse_from(
            ["ufo-agent", "--executor-token", "secret"]
                .into_iter()
                .chain(args.iter().copied()),
        );
        ExecutorRegistry::from_config(&config).unwrap()
    }

    #[test]
    fn metadata_and_link_local_hosts_are_forbidden() {
        for host in [
            "169.254.169.254",
            "169.254.0.1",
            "100.100.100.200",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "metadata.google.internal",
            "METADATA.google.internal.",
            "instance-data",
            "2852039166",
            "0xa9.0xfe.0xa9.0xfe",
            "0251.0376.0251.0376",
            "169.254.43518",
            "0.0.0.0",
        ] {
            assert!(forbidden_host(host), "{host}");
        }
        for host in ["127.0.0.1", "desk1.lan", "10.0.0.5", "::1", "example.com"] {
            assert!(!forbidden_host(host), "{host}");
        }
    }

    #[test]
    fn names_resolve_addresses_refused_by_default() {
        let r = registry(&["--executors", "desk=http://10.0.0.5:50051"]);
        assert_eq!(
            r.resolve("desk").unwrap(),
            ("desk".into(), "http://10.0.0.5:50051".into())
        );
        assert_eq!(r.resolve("").unwrap().0, DEFAULT_NAME);
        assert_eq!(
            r.resolve("http://10.0.0.5:50051"),
            Err(ExecutorRefusal::AddressNotAllowed)
        );
        assert!(matches!(
            r.resolve("http://169.254.169.254:80"),
            Err(ExecutorRefusal::Forbidden(_))
        ));
        assert!(matches!(
            r.resolve("nope"),
            Err(ExecutorRefusal::UnknownName(_))
        ));
    }

    #[test]
    fn allowed_addresses_get_no_token_and_metadata_stays_forbidden() {
        let r = registry(&[
            "--executor-address-hosts",
            "127.0.0.1,169.254.169.254,metadata",
        ]);
        let (name, address) = r.resolve("http://127.0.0.1:9").unwrap();
        assert!(name.is_empty());
        assert_eq!(r.connection(&name, &address).unwrap().token, None);
        assert!(matches!(
            r.resolve("http://169.254.169.254"),
            Err(ExecutorRefusal::Forbidden(_))
        ));
        assert!(matches!(
            r.resolve("http://metadata"),
            Err(ExecutorRefusal::Forbidden(_))
        ));
        assert!(matches!(
            r.resolve("http://[fe80::1]:80"),
            Err(ExecutorRefusal::Forbidden(_))
        ));
        // The default (a registered name) gets the operator's token.
        let (name, address) = r.resolve("").unwrap();
        assert_eq!(
            r.connection(&name, &address).unwrap().token.as_deref(),
            Some("secret")
        );
    }

    #[test]
    fn executors_file_entries_carry_their_own_token() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("t");
        std::fs::write(&token, "file-token\n").unwrap();
        let file = dir.path().join("executors.json");
        std::fs::write(
            &file,
            serde_json::json!({"executors": {
                "a": {"address": "http://a.lan:1", "token_file": token},
                "b": {"address": "http://b.lan:2"}}})
            .to_string(),
        )
        .unwrap();
        let r = registry(&["--executors-file", file.to_str().unwrap()]);
        let conn = |name: &str| {
            let (executor_name, executor) = r.resolve(name).unwrap();
            r.connection(&executor_name, &executor).unwrap()
        };
        assert_eq!(conn("a").token.as_deref(), Some("file-token"));
        assert_eq!(conn("b").token.as_deref(), Some("secret"));
        assert_eq!(r.names().collect::<Vec<_>>(), ["a", "b", "default"]);
    }
}
