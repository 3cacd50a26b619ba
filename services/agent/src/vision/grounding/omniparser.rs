//! A client of an OmniParser-compatible grounding service (`--grounding-url`), for deployments with a GPU
//! grounding model. The protocol is OmniParser's `omniparserserver`: `POST {url}/parse/` with
//! `{"base64_image": …}` (the screenshot, base64 of its PNG or JPEG bytes) answers
//! `{"parsed_content_list": [{"type": "text"|"icon", "bbox": [x1, y1, x2, y2], "interactivity": bool,
//! "content": …}], "latency": …}` with boxes as fractions of the image; `GET {url}/probe/` says it is ready.
//!
//! Everything the service answers is untrusted: the body is read up to a size limit, boxes outside the
//! image or not finite are dropped, texts are cleaned like OCR text ([`super::ocr::sanitise`]), at most
//! `max_elements` are kept, and the whole call is bounded by a timeout. Results are cached per screenshot.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, json};

use super::{Cache, GROUNDED_ICON_TYPE, GROUNDED_TYPE, GroundingError, GroundingSource, ocr};
use crate::agents::target::{ControlSource, Rect, TargetInfo, TargetKind};
use crate::vision::Screenshot;

/// Limits of [`OmniParserClient`].
#[derive(Debug, Clone)]
pub struct OmniParserOptions {
    /// Longest a call may take (connect, send, answer).
    pub timeout: Duration,
    /// Largest answer read, in bytes.
    pub max_response_bytes: usize,
    /// Characters of text kept per element.
    pub max_text_chars: usize,
    /// Elements kept per window.
    pub max_elements: usize,
    /// Screenshots whose results are cached.
    pub cache_entries: usize,
    /// Sent as `Authorization: Bearer …` when set.
    pub token: Option<String>,
}

impl Default for OmniParserOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_response_bytes: 4 << 20,
            max_text_chars: 80,
            max_elements: 200,
            cache_entries: 16,
            token: None,
        }
    }
}

/// One element of the service's answer, as the protocol has it (fields it does not send are defaults).
#[derive(Debug, Deserialize)]
struct Parsed {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    bbox: Vec<serde_json::Value>,
    #[serde(default)]
    interactivity: Option<bool>,
    #[serde(default)]
    content: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Answer {
    /// Each element as sent: one that is not an element object is dropped, not the whole answer.
    parsed_content_list: Vec<serde_json::Value>,
}

/// The OmniParser-protocol grounding client: see the module doc.
pub struct OmniParserClient {
    http: reqwest::Client,
    parse_url: reqwest::Url,
    probe_url: reqwest::Url,
    options: OmniParserOptions,
    cache: Cache,
}

impl std::fmt::Debug for OmniParserClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OmniParserClient")
            .field("url", &self.parse_url.as_str())
            .field("timeout", &self.options.timeout)
            .finish()
    }
}

impl OmniParserClient {
    /// A client of the service at `base` (`http://host:port` or with a path prefix).
    pub fn new(base: &str, options: OmniParserOptions) -> Result<Self, GroundingError> {
        let mut base = reqwest::Url::parse(base)
            .map_err(|e| GroundingError::Config(format!("grounding URL {base:?}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(GroundingError::Config(format!(
                "grounding URL must be http or https, not {:?}",
                base.scheme()
            )));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let join = |p: &str| {
            base.join(p)
                .map_err(|e| GroundingError::Config(format!("grounding URL: {e}")))
        };
        ufo_common::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| GroundingError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            parse_url: join("parse/")?,
            probe_url: join("probe/")?,
            cache: Cache::new(options.cache_entries),
            options,
        })
    }

    /// Whether the service answers its readiness probe (`ufo doctor`, start-up logs).
    pub async fn probe(&self) -> Result<(), GroundingError> {
        let resp = self
            .http
            .get(self.probe_url.clone())
            .send()
            .await
            .map_err(|e| GroundingError::Service(format!("probe: {e}")))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(GroundingError::Service(format!(
                "probe answered HTTP {}",
                resp.status()
            )))
        }
    }

    async fn call(&self, shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError> {
        let body = json!({
            "base64_image": base64::engine::general_purpose::STANDARD.encode(&shot.bytes),
        });
        let mut req = self.http.post(self.parse_url.clone()).json(&body);
        if let Some(token) = &self.options.token {
            req = req.bearer_auth(token);
        }
        let mut resp = req.send().await.map_err(|e| self.http_error(e))?;
        if !resp.status().is_success() {
            return Err(GroundingError::Service(format!(
                "the service answered HTTP {}",
                resp.status()
            )));
        }
        let limit = self.options.max_response_bytes;
        if resp.content_length().is_some_and(|n| n > limit as u64) {
            return Err(GroundingError::Service(format!(
                "the answer is larger than {limit} bytes"
            )));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.http_error(e))? {
            if bytes.len() + chunk.len() > limit {
                return Err(GroundingError::Service(format!(
                    "the answer is larger than {limit} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        let answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| GroundingError::Service(format!("not an OmniParser answer: {e}")))?;
        Ok(self.to_targets(answer, shot))
    }

    /// A transport error: reqwest's own deadline (the same as the call's) is the timeout it is, whichever of
    /// the two fires first; anything else names its cause chain.
    fn http_error(&self, e: reqwest::Error) -> GroundingError {
        if e.is_timeout() {
            return GroundingError::Timeout(self.options.timeout);
        }
        GroundingError::Service(ufo_common::error::chain(&e))
    }

    fn to_targets(&self, answer: Answer, shot: &Screenshot) -> Vec<TargetInfo> {
        let (w, h) = (f64::from(shot.width), f64::from(shot.height));
        let s = if shot.scale > 0.0 { shot.scale } else { 1.0 };
        let mut out = Vec::new();
        for p in answer.parsed_content_list {
            if out.len() >= self.options.max_elements {
                break;
            }
            let Ok(p) = serde_json::from_value::<Parsed>(p) else {
                continue;
            };
            let Some(frac) = fractions(&p.bbox) else {
                continue;
            };
            let text = match &p.content {
                Some(serde_json::Value::String(t)) => ocr::sanitise(t, self.options.max_text_chars),
                _ => String::new(),
            };
            let icon = p.kind.eq_ignore_ascii_case("icon");
            if text.is_empty() && !icon {
                continue;
            }
            let at =
                |f: f64, size: f64, origin: i32| (f64::from(origin) + f * size * s).round() as i32;
            let rect = Rect::new(
                at(frac[0], w, shot.origin_x),
                at(frac[1], h, shot.origin_y),
                at(frac[2], w, shot.origin_x),
                at(frac[3], h, shot.origin_y),
            );
            if rect.width() <= 0 || rect.height() <= 0 {
                continue;
            }
            let mut extra = Map::new();
            if let Some(i) = p.interactivity {
                extra.insert("interactive".into(), json!(i));
            }
            out.push(TargetInfo {
                label: String::new(),
                id: String::new(),
                name: text,
                kind: TargetKind::Control,
                control_type: if icon {
                    GROUNDED_ICON_TYPE
                } else {
                    GROUNDED_TYPE
                }
                .into(),
                rect: Some(rect),
                enabled: true,
                source: ControlSource::Grounding,
                extra,
            });
        }
        out
    }
}

/// `[x1, y1, x2, y2]` as fractions of the image, ordered and inside it; anything else is `None`.
fn fractions(bbox: &[serde_json::Value]) -> Option<[f64; 4]> {
    if bbox.len() != 4 {
        return None;
    }
    let mut v = [0.0; 4];
    for (slot, value) in v.iter_mut().zip(bbox) {
        let f = value.as_f64()?;
        if !f.is_finite() || !(-0.01..=1.01).contains(&f) {
            return None;
        }
        *slot = f.clamp(0.0, 1.0);
    }
    (v[0] < v[2] && v[1] < v[3]).then_some(v)
}

#[async_trait]
impl GroundingSource for OmniParserClient {
    async fn detect(&self, shot: &Screenshot) -> Result<Vec<TargetInfo>, GroundingError> {
        let call = async {
            match tokio::time::timeout(self.options.timeout, self.call(shot)).await {
                Err(_) => Err(GroundingError::Timeout(self.options.timeout)),
                Ok(r) => r,
            }
        };
        self.cache.detect_cached("omniparser", shot, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_must_be_four_ordered_fractions() {
        let v = |xs: &[serde_json::Value]| fractions(xs);
        assert_eq!(
            v(&[json!(0.1), json!(0.2), json!(0.3), json!(0.4)]),
            Some([0.1, 0.2, 0.3, 0.4])
        );
        assert_eq!(v(&[json!(0.3), json!(0.2), json!(0.1), json!(0.4)]), None);
        assert_eq!(v(&[json!(0.1), json!(0.2), json!(0.3)]), None);
        assert_eq!(v(&[json!(0.1), json!("x"), json!(0.3), json!(0.4)]), None);
        assert_eq!(v(&[json!(0.1), json!(0.2), json!(30), json!(0.4)]), None);
    }

    #[test]
    fn a_bad_url_is_a_configuration_error() {
        let o = OmniParserOptions::default();
        assert!(matches!(
            OmniParserClient::new("not a url", o.clone()),
            Err(GroundingError::Config(_))
        ));
        assert!(matches!(
            OmniParserClient::new("file:///etc/passwd", o.clone()),
            Err(GroundingError::Config(_))
        ));
        let c = OmniParserClient::new("http://127.0.0.1:9/omni", o).unwrap();
        assert_eq!(c.parse_url.as_str(), "http://127.0.0.1:9/omni/parse/");
        assert_eq!(c.probe_url.as_str(), "http://127.0.0.1:9/omni/probe/");
    }
}
