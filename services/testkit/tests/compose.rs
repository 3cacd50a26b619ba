//! Validates `docker-compose.yml` without a Docker engine: the services, ports, dependencies and health
//! checks it must have, and — kept honest as the services change — that every flag and `UFO_*`
//! environment variable it gives our binaries exists in the real `--help` of the binaries built from this
//! tree, that addresses point at services that listen there, and that the Dockerfile stages exist.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_yaml::Value;
use ufo_testkit::workspace_binary;

/// Our services in the compose file and the workspace binary each runs.
const OURS: [(&str, &str); 3] = [
    ("session", "ufo-session"),
    ("agent", "ufo-agent"),
    ("executor", "ufo-executor"),
];

/// Our services that listen on no port: executors that dial out to the agent (issue 36).
const DIALLING: [(&str, &str); 1] = [("desk2", "ufo-executor")];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compose() -> Value {
    let text = std::fs::read_to_string(repo_root().join("docker-compose.yml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn services(compose: &Value) -> BTreeMap<String, Value> {
    compose["services"]
        .as_mapping()
        .expect("services is a mapping")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
        .collect()
}

/// The flags and environment variables a binary's `--help` documents.
#[derive(Debug, Default)]
struct Help {
    flags: BTreeSet<String>,
    envs: BTreeSet<String>,
}

fn read_help(binary: &Path, subcommand: &[&str]) -> Help {
    let output = std::process::Command::new(binary)
        .args(subcommand)
        .arg("--help")
        // Inherited values would show in the help text; the names are what matter.
        .env_clear()
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} --help failed",
        binary.display()
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let mut parsed = Help::default();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('-') {
            for token in line.split([' ', ',', '=', '<', '[']) {
                if token.starts_with("--") && token.len() > 2 {
                    parsed.flags.insert(token.to_owned());
                }
            }
        }
        if let Some(rest) = line.split("[env: ").nth(1) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            parsed.envs.insert(name);
        }
    }
    assert!(
        !parsed.flags.is_empty(),
        "no flags parsed from {}",
        binary.display()
    );
    parsed
}

fn environment(service: &Value, name: &str) -> BTreeMap<String, String> {
    match &service["environment"] {
        Value::Null => BTreeMap::new(),
        Value::Mapping(map) => map
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    other => panic!("{name}: environment value {other:?} is not a scalar"),
                };
                (k.as_str().unwrap().to_owned(), value)
            })
            .collect(),
        other => panic!("{name}: write environment as a mapping (KEY: value), not {other:?}"),
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|s| s.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// Resolves `${VAR:-default}` the way compose does when VAR is unset.
fn with_defaults(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let inner = &rest[start + 2..end];
        out.push_str(inner.split_once(":-").map_or("", |(_, d)| d));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `(host, port)` of every `scheme://host:port` in a value.
fn addresses(value: &str) -> Vec<(String, u16)> {
    let value = with_defaults(value);
    let mut found = Vec::new();
    for part in value.split("://").skip(1) {
        let authority = part.split(['/', '?']).next().unwrap_or("");
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        if let Some((host, port)) = authority.rsplit_once(':')
            && let Ok(port) = port.parse()
        {
            found.push((host.to_owned(), port));
        }
    }
    found
}

/// The ports a service listens on inside its container, from its `*_LISTEN` variables.
fn listen_ports(env: &BTreeMap<String, String>) -> BTreeMap<String, u16> {
    env.iter()
        .filter(|(k, _)| k.ends_with("_LISTEN"))
        .map(|(k, v)| {
            let value = with_defaults(v);
            let (host, port) = value.rsplit_once(':').unwrap();
            assert_eq!(
                host, "0.0.0.0",
                "{k}={v}: a container must listen on 0.0.0.0 to be reachable"
            );
            (k.clone(), port.parse().unwrap())
        })
        .collect()
}

/// Container ports of `ports:` entries like "127.0.0.1:8080:8080".
fn published(service: &Value) -> BTreeSet<u16> {
    strings(&service["ports"])
        .iter()
        .map(|p| p.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

fn dockerfile_stage(dockerfile: &str, target: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(dockerfile))
        .unwrap_or_else(|e| panic!("{dockerfile}: {e}"));
    let mut stage = None::<String>;
    for line in text.lines() {
        let upper = line.to_uppercase();
        if upper.starts_with("FROM ") {
            if stage.is_some() {
                break;
            }
            if upper.ends_with(&format!(" AS {}", target.to_uppercase())) {
                stage = Some(String::new());
            }
        }
        if let Some(stage) = stage.as_mut() {
            stage.push_str(line);
            stage.push('\n');
        }
    }
    stage.unwrap_or_else(|| panic!("{dockerfile} has no stage `{target}`"))
}

#[test]
fn the_compose_file_has_every_service_with_health_checks_and_sound_dependencies() {
    let compose = compose();
    let services = services(&compose);
    for name in [
        "postgres", "jaeger", "session", "agent", "executor", "desk2",
    ] {
        assert!(services.contains_key(name), "service {name} is missing");
    }
    for (name, service) in &services {
        assert!(
            service["image"].is_string() || service["build"].is_mapping(),
            "{name} needs an image or a build"
        );
        let test = strings(&service["healthcheck"]["test"]);
        assert!(
            matches!(test.first().map(String::as_str), Some("CMD" | "CMD-SHELL")),
            "{name} needs a healthcheck with a CMD test"
        );
        if let Some(deps) = service["depends_on"].as_mapping() {
            for (dep, how) in deps {
                let dep = dep.as_str().unwrap();
                let target = services
                    .get(dep)
                    .unwrap_or_else(|| panic!("{name} depends on unknown service {dep}"));
                if how["condition"].as_str() == Some("service_healthy") {
                    assert!(
                        target["healthcheck"].is_mapping(),
                        "{name} waits for {dep} to be healthy but {dep} has no healthcheck"
                    );
                }
            }
        }
    }
    // No dependency cycles: repeatedly remove services whose dependencies are all removed.
    let mut remaining: BTreeMap<&str, BTreeSet<String>> = services
        .iter()
        .map(|(name, s)| {
            let deps = s["depends_on"]
                .as_mapping()
                .map(|m| m.keys().map(|k| k.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            (name.as_str(), deps)
        })
        .collect();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !remaining.contains_key(d.as_str())))
            .map(|(n, _)| *n)
            .collect();
        assert!(!ready.is_empty(), "dependency cycle among {remaining:?}");
        for name in ready {
            remaining.remove(name);
        }
    }
    let healthy = |from: &str, to: &str| {
        assert_eq!(
            services[from]["depends_on"][to]["condition"].as_str(),
            Some("service_healthy"),
            "{from} must wait for {to} to be healthy"
        );
    };
    healthy("session", "postgres");
    healthy("agent", "session");
    healthy("agent", "executor");
    healthy("desk2", "agent");

    let jaeger = &services["jaeger"];
    let ports = published(jaeger);
    assert!(
        ports.contains(&16686) && ports.contains(&4317),
        "jaeger publishes UI 16686 and OTLP 4317: {ports:?}"
    );
    assert_eq!(
        environment(jaeger, "jaeger")
            .get("COLLECTOR_OTLP_ENABLED")
            .map(String::as_str),
        Some("true")
    );
}

#[test]
fn every_flag_and_variable_given_to_our_binaries_exists_and_every_address_points_at_a_listener() {
    let compose = compose();
    let services = services(&compose);
    let ufo = workspace_binary("ufo").unwrap();
    let desktop_script =
        std::fs::read_to_string(repo_root().join("docker/executor-desktop.sh")).unwrap();

    // Where each of our services listens, to check the addresses others are given.
    let mut listening: BTreeMap<&str, BTreeSet<u16>> = BTreeMap::new();
    for (service, _) in OURS {
        let env = environment(&services[service], service);
        listening.insert(service, listen_ports(&env).into_values().collect());
    }
    listening.insert("postgres", BTreeSet::from([5432]));
    listening.insert("jaeger", BTreeSet::from([4317, 16686]));

    for (service_name, binary) in OURS {
        let service = &services[service_name];
        let help = read_help(&workspace_binary(binary).unwrap(), &[]);

        let build = &service["build"];
        let dockerfile = build["dockerfile"].as_str().unwrap();
        let target = build["target"].as_str().unwrap();
        let stage = dockerfile_stage(dockerfile, target);
        assert!(
            stage.contains(&format!("/usr/local/bin/{binary}")) && stage.contains("ENTRYPOINT"),
            "{dockerfile} stage {target} must install {binary} and set it as the entrypoint"
        );

        for flag in strings(&service["command"])
            .iter()
            .filter(|a| a.starts_with("--"))
        {
            let flag = flag.split('=').next().unwrap();
            assert!(
                help.flags.contains(flag),
                "{service_name}: {binary} has no flag {flag} (its flags: {:?})",
                help.flags
            );
        }

        let env = environment(service, service_name);
        for key in env.keys() {
            let known = help.envs.contains(key)
                // Variables for the desktop start-up script, not the executor: the script must read them.
                || (stage.contains("executor-desktop.sh") && desktop_script.contains(&format!("${{{key}")));
            assert!(
                known,
                "{service_name}: {binary} does not read {key} (its variables: {:?})",
                help.envs
            );
        }
        assert_eq!(
            env.get("UFO_OTLP_ENDPOINT").map(String::as_str),
            Some("http://jaeger:4317"),
            "{service_name} exports spans to jaeger"
        );
        assert!(
            !listen_ports(&env).is_empty(),
            "{service_name} sets its listen address"
        );

        for (key, value) in &env {
            for (host, port) in addresses(value) {
                let ports = listening.get(host.as_str()).unwrap_or_else(|| {
                    panic!(
                        "{service_name}: {key}={value} names {host}, which is not a compose service"
                    )
                });
                assert!(
                    ports.contains(&port),
                    "{service_name}: {key}={value}: {host} listens on {ports:?}, not {port}"
                );
            }
        }

        // The health check runs `ufo health` against the service's own gRPC port.
        let test = strings(&service["healthcheck"]["test"]);
        assert_eq!(
            &test[1..3],
            ["ufo", "health"],
            "{service_name}: health checks use `ufo health`"
        );
        let health_help = read_help(&ufo, &["health"]);
        for flag in test.iter().filter(|a| a.starts_with("--")) {
            assert!(
                health_help.flags.contains(flag.as_str()),
                "{service_name}: `ufo health` has no flag {flag}"
            );
        }
        let checked: Vec<u16> = test
            .iter()
            .flat_map(|a| addresses(a))
            .map(|(_, p)| p)
            .collect();
        assert!(
            checked.iter().all(|p| listening[service_name].contains(p)) && !checked.is_empty(),
            "{service_name}: the health check probes {checked:?}, the service listens on {:?}",
            listening[service_name]
        );
    }

    // Services that dial out: their flags, variables, image and the addresses they dial.
    for (service_name, binary) in DIALLING {
        let service = &services[service_name];
        let help = read_help(&workspace_binary(binary).unwrap(), &[]);
        let build = &service["build"];
        let stage = dockerfile_stage(
            build["dockerfile"].as_str().unwrap(),
            build["target"].as_str().unwrap(),
        );
        assert!(
            stage.contains(&format!("/usr/local/bin/{binary}")) && stage.contains("ENTRYPOINT"),
            "{service_name}: its stage must install {binary} and set it as the entrypoint"
        );
        let env = environment(service, service_name);
        for key in env.keys() {
            let known = help.envs.contains(key)
                || (stage.contains("executor-desktop.sh")
                    && desktop_script.contains(&format!("${{{key}")));
            assert!(known, "{service_name}: {binary} does not read {key}");
        }
        assert!(
            listen_ports(&env).is_empty(),
            "{service_name} dials out and listens on nothing"
        );
        let mut dialled = 0;
        for (key, value) in &env {
            for (host, port) in addresses(value) {
                let ports = listening.get(host.as_str()).unwrap_or_else(|| {
                    panic!(
                        "{service_name}: {key}={value} names {host}, which is not a compose service"
                    )
                });
                assert!(
                    ports.contains(&port),
                    "{service_name}: {key}={value}: {host} listens on {ports:?}, not {port}"
                );
                dialled += usize::from(key == "UFO_EXECUTOR_CONNECT");
            }
        }
        assert_eq!(
            dialled, 1,
            "{service_name} dials the agent (UFO_EXECUTOR_CONNECT)"
        );
    }

    // Secrets given to both ends of a connection must match (compared with their compose defaults), once
    // the client binary reads the setting at all.
    let agent_help = read_help(&workspace_binary("ufo-agent").unwrap(), &[]);
    let agent_env = environment(&services["agent"], "agent");
    for (client_key, server, server_key) in [
        (
            "UFO_AGENT_SESSION_TOKEN",
            "session",
            "UFO_SESSION_AUTH_TOKEN",
        ),
        ("UFO_AGENT_EXECUTOR_TOKEN", "executor", "UFO_EXECUTOR_TOKEN"),
    ] {
        if !agent_help.envs.contains(client_key) {
            continue;
        }
        let server_env = environment(&services[server], server);
        assert_eq!(
            agent_env.get(client_key).map(|v| with_defaults(v)),
            server_env.get(server_key).map(|v| with_defaults(v)),
            "agent {client_key} must match {server} {server_key}"
        );
    }

    // Users reach the agent's APIs from the host: every port it listens on is published.
    let agent_ports = published(&services["agent"]);
    for port in &listening["agent"] {
        assert!(
            agent_ports.contains(port),
            "agent listens on {port} but does not publish it"
        );
    }
}

/// The file a service's `configs:` entry of `source` is mounted at.
fn config_target(service: &Value, source: &str) -> Option<String> {
    service["configs"].as_sequence()?.iter().find_map(|c| {
        (c["source"].as_str() == Some(source))
            .then(|| c["target"].as_str().map(str::to_owned))
            .flatten()
    })
}

#[test]
fn the_second_desktop_dials_out_with_the_token_the_agent_enrolls_at_start() {
    let compose = compose();
    let services = services(&compose);
    let agent = environment(&services["agent"], "agent");
    let desk2 = environment(&services["desk2"], "desk2");
    assert!(
        agent.contains_key("UFO_AGENT_EXECUTOR_ENROLLMENTS_FILE"),
        "the agent accepts dial-out executors"
    );
    let given = agent
        .get("UFO_AGENT_ENROLL_EXECUTOR")
        .expect("the agent enrolls desk2's token at start");
    let (name, file) = given
        .split(',')
        .find_map(|g| g.split_once('='))
        .expect("NAME=FILE");
    assert_eq!(
        desk2.get("UFO_EXECUTOR_NAME").map(String::as_str),
        Some(name)
    );
    let token_file = desk2
        .get("UFO_EXECUTOR_ENROLL_TOKEN_FILE")
        .expect("desk2 reads its token from a file");
    // Both read the same config: the agent at FILE, desk2 at its token file.
    let source = compose["configs"]
        .as_mapping()
        .expect("top-level configs")
        .keys()
        .filter_map(|k| k.as_str())
        .find(|source| config_target(&services["agent"], source).as_deref() == Some(file))
        .unwrap_or_else(|| panic!("no config is mounted in the agent at {file}"));
    assert_eq!(
        config_target(&services["desk2"], source).as_deref(),
        Some(token_file.as_str()),
        "desk2 reads config {source} as its token"
    );
    let token = with_defaults(compose["configs"][source]["content"].as_str().unwrap());
    assert!(
        token.len() >= 16 && token.bytes().all(|b| b.is_ascii_graphic()),
        "the default token ({token:?}) is one the agent accepts: 16 or more visible ASCII characters"
    );
    // The agent's flag exists (the executor's are checked above with every service's).
    let help = read_help(&workspace_binary("ufo-agent").unwrap(), &[]);
    assert!(
        help.flags.contains("--enroll-executor") && help.envs.contains("UFO_AGENT_ENROLL_EXECUTOR")
    );
}

#[test]
fn the_checks_catch_a_flag_the_binary_does_not_have() {
    let help = read_help(&workspace_binary("ufo-session").unwrap(), &[]);
    assert!(help.flags.contains("--listen") && help.envs.contains("UFO_SESSION_LISTEN"));
    assert!(!help.flags.contains("--no-such-flag") && !help.envs.contains("UFO_NO_SUCH_VARIABLE"));
    assert_eq!(
        addresses("postgres://ufo:${PW:-x}@postgres:5432/ufo http://jaeger:4317"),
        [("postgres".to_owned(), 5432), ("jaeger".to_owned(), 4317)]
    );
}
