//! Checks the model endpoint before a task needs it (`ufo-agent --check-model`, which `ufo up` and
//! `ufo doctor` run, and a warning in the log at every start): is there a key where one is needed, does
//! the endpoint answer, does it accept the key, does it list the configured models. Every finding names
//! the URL, the model and the cause, with what to change.

use std::time::Duration;

use serde_json::Value;

use crate::config::{LlmArgs, LlmFlavor};

/// One finding of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether a task would fail because of it.
    pub problem: bool,
    /// Whether it is a note: nothing fails, but the operator should know (a local model priced 0).
    pub note: bool,
    /// What was found, naming the URL, the model and the cause, and the fix.
    pub text: String,
}

impl Finding {
    fn problem(text: String) -> Self {
        Self {
            problem: true,
            note: false,
            text,
        }
    }

    fn ok(text: String) -> Self {
        Self {
            problem: false,
            note: false,
            text,
        }
    }

    fn note(text: String) -> Self {
        Self {
            problem: false,
            note: true,
            text,
        }
    }

    /// The word `--check-model` prints before the finding: `problem`, `note` or `ok`.
    pub fn word(&self) -> &'static str {
        if self.problem {
            "problem"
        } else if self.note {
            "note"
        } else {
            "ok"
        }
    }
}

/// Whether the endpoint is on this machine or a private network (local model servers need no key).
fn is_local(url: &reqwest::Url) -> bool {
    crate::config::prices::is_local_endpoint(url.as_str())
}

/// Whether every model the agents may call has a price (no network needed): an unpriced model on a
/// remote endpoint is a problem (tasks using it are refused at submission); on a local endpoint it is
/// priced 0, which is a note.
pub fn price_findings(llm: &LlmArgs) -> Vec<Finding> {
    let mut models = vec![(llm.host_model.as_str(), llm.llm_base_url.as_str())];
    if llm.app_model != llm.host_model {
        models.push((&llm.app_model, &llm.llm_base_url));
    }
    if let Some(backup) = &llm.llm_backup_model {
        models.push((backup, llm.backup_base_url()));
    }
    let mut findings = Vec::new();
    for (model, base) in models {
        let priced = llm.llm_prices.price(model).is_some() || llm.llm_default_price.is_some();
        if priced {
            continue;
        }
        if crate::config::prices::is_local_endpoint(base) {
            findings.push(Finding::note(format!(
                "model {model} has no price; it is served from {base} (this machine or a private \
                 network), so it is priced 0 (to count its cost: --llm-prices {model}=IN/OUT)"
            )));
        } else {
            findings.push(Finding::problem(format!(
                "model {model} at {base} has no price, so every task using it is refused at \
                 submission; fix: --llm-prices {model}=IN/OUT (US dollars per million input/output \
                 tokens) or --llm-default-price IN/OUT"
            )));
        }
    }
    findings
}

/// Checks the configured endpoint and models, waiting at most `timeout` for the endpoint.
pub async fn check(llm: &LlmArgs, timeout: Duration) -> Vec<Finding> {
    let base = llm.llm_base_url.trim_end_matches('/');
    let models: Vec<&str> = {
        let mut m = vec![llm.host_model.as_str()];
        if llm.app_model != llm.host_model {
            m.push(&llm.app_model);
        }
        m
    };
    let named = format!("model endpoint {base} (model {})", models.join(", "));
    let Ok(url) = reqwest::Url::parse(base) else {
        return vec![Finding::problem(format!(
            "{named}: not a URL; fix: set --llm-base-url to e.g. https://api.openai.com/v1"
        ))];
    };
    let mut findings = price_findings(llm);
    let key = llm.llm_api_key.as_ref().map(|k| k.expose().to_owned());
    if key.is_none() && !is_local(&url) {
        findings.push(Finding::problem(format!(
            "{named}: no API key; fix: give the key with --llm-api-key (UFO_LLM_API_KEY for ufo up \
             and ufo doctor, UFO_AGENT_LLM_API_KEY for ufo-agent), or point --llm-base-url at a local \
             server that needs none"
        )));
    }
    let list_url = match llm.llm_flavor {
        LlmFlavor::Openai => format!("{base}/models"),
        LlmFlavor::Azure => format!(
            "{base}/openai/models?api-version={}",
            llm.llm_azure_api_version
        ),
    };
    ufo_common::tls::install_crypto_provider();
    let client = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => {
            findings.push(Finding::problem(format!(
                "{named}: cannot build an HTTP client ({e})"
            )));
            return findings;
        }
    };
    let mut request = client.get(&list_url);
    if let Some(key) = &key {
        request = match llm.llm_flavor {
            LlmFlavor::Openai => request.bearer_auth(key),
            LlmFlavor::Azure => request.header("api-key", key),
        };
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            findings.push(Finding::problem(format!(
                "{named}: cannot reach it ({}); fix: check the address and that the server runs \
                 (--llm-base-url), or the network/proxy",
                transport_cause(&e)
            )));
            return findings;
        }
    };
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let fix = if key.is_some() {
            "the key is wrong or lacks access: give a valid one with --llm-api-key"
        } else {
            "give the key with --llm-api-key"
        };
        findings.push(Finding::problem(format!(
            "{named}: the endpoint refused the key (HTTP {}); fix: {fix}",
            status.as_u16()
        )));
        return findings;
    }
    if !status.is_success() {
        // Not every compatible server lists models (some answer 404): reachable is what we can say.
        findings.push(Finding::ok(format!(
            "{named}: reachable (listing models answered HTTP {}; the models were not checked)",
            status.as_u16()
        )));
        return findings;
    }
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let listed: Vec<String> = body
        .get("data")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let unknown: Vec<&str> = models
        .iter()
        .copied()
        .filter(|m| !listed.is_empty() && !listed.iter().any(|l| l == m))
        .collect();
    if unknown.is_empty() {
        findings.push(Finding::ok(format!("{named}: reachable, models available")));
    } else {
        findings.push(Finding::problem(format!(
            "{named}: the endpoint does not offer {}; fix: set --host-model / --app-model to one it \
             lists ({})",
            unknown.join(", "),
            listed.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    findings
}

/// The innermost cause of a transport error ("Connection refused", "dns error: ..."), which says the most.
pub fn transport_cause(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".to_owned();
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_servers_need_no_key() {
        for (url, local) in [
            ("http://127.0.0.1:11434/v1", true),
            ("http://localhost:8000/v1", true),
            ("http://192.168.1.5:8000/v1", true),
            ("https://api.openai.com/v1", false),
        ] {
            assert_eq!(is_local(&reqwest::Url::parse(url).unwrap()), local, "{url}");
        }
    }
}
