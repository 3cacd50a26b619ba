//! Spans as the collector received them, and queries over a set of them: by service, name, attribute,
//! trace, and the parent/child structure (child of, descendant of, services sharing a trace).

use std::collections::{BTreeMap, BTreeSet};

/// One received span. Ids are lowercase hex as in a W3C `traceparent`.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectedSpan {
    /// `service.name` of the exporting process (e.g. `ufo-session`).
    pub service: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// The parent's span id; `None` for a root span.
    pub parent_span_id: Option<String>,
    /// Span name (for gRPC server spans, the `otel.name`, e.g. `/grpc.health.v1.Health/Check`).
    pub name: String,
    /// OTLP span kind (1 internal, 2 server, 3 client, 4 producer, 5 consumer).
    pub kind: i32,
    /// Start time, nanoseconds since the Unix epoch (the exporting process's clock).
    pub start_unix_nano: u64,
    /// End time, nanoseconds since the Unix epoch.
    pub end_unix_nano: u64,
    /// Attributes rendered as text.
    pub attributes: BTreeMap<String, String>,
}

impl CollectedSpan {
    /// The attribute `key` as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// How long the span lasted.
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.end_unix_nano.saturating_sub(self.start_unix_nano))
    }
}

/// A parent/child expectation that does not hold.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StructureError(String);

/// A snapshot of received spans.
#[derive(Debug, Clone, Default)]
pub struct SpanSet {
    spans: Vec<CollectedSpan>,
}

impl SpanSet {
    /// Wraps received spans.
    pub fn new(spans: Vec<CollectedSpan>) -> Self {
        Self { spans }
    }

    /// Every span, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &CollectedSpan> {
        self.spans.iter()
    }

    /// How many spans there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Spans exported by `service`.
    pub fn by_service<'a>(&'a self, service: &'a str) -> impl Iterator<Item = &'a CollectedSpan> {
        self.spans.iter().filter(move |s| s.service == service)
    }

    /// Spans named `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a CollectedSpan> {
        self.spans.iter().filter(move |s| s.name == name)
    }

    /// Spans of trace `trace_id`.
    pub fn in_trace<'a>(&'a self, trace_id: &'a str) -> impl Iterator<Item = &'a CollectedSpan> {
        self.spans.iter().filter(move |s| s.trace_id == trace_id)
    }

    /// The first span matching `matches`.
    pub fn find(&self, matches: impl Fn(&CollectedSpan) -> bool) -> Option<&CollectedSpan> {
        self.spans.iter().find(|s| matches(s))
    }

    /// The span with id `span_id` in trace `trace_id`.
    pub fn get(&self, trace_id: &str, span_id: &str) -> Option<&CollectedSpan> {
        self.spans
            .iter()
            .find(|s| s.trace_id == trace_id && s.span_id == span_id)
    }

    /// The direct parent of `span`, when it was received.
    pub fn parent_of(&self, span: &CollectedSpan) -> Option<&CollectedSpan> {
        span.parent_span_id
            .as_deref()
            .and_then(|p| self.get(&span.trace_id, p))
    }

    /// Direct children of `span`.
    pub fn children_of<'a>(
        &'a self,
        span: &'a CollectedSpan,
    ) -> impl Iterator<Item = &'a CollectedSpan> {
        self.spans.iter().filter(move |s| {
            s.trace_id == span.trace_id && s.parent_span_id.as_deref() == Some(&span.span_id)
        })
    }

    /// Whether `span` sits (at any depth) under `ancestor`, following received parents.
    pub fn is_descendant(&self, span: &CollectedSpan, ancestor: &CollectedSpan) -> bool {
        if span.trace_id != ancestor.trace_id {
            return false;
        }
        let mut current = span.parent_span_id.clone();
        // Bounded by the set's size so a malformed cycle cannot loop forever.
        for _ in 0..=self.spans.len() {
            match current {
                Some(id) if id == ancestor.span_id => return true,
                Some(id) => {
                    current = self
                        .get(&span.trace_id, &id)
                        .and_then(|p| p.parent_span_id.clone())
                }
                None => return false,
            }
        }
        false
    }

    /// Checks that `child` is a direct child of `parent` in the same trace.
    pub fn expect_child_of(
        &self,
        child: &CollectedSpan,
        parent: &CollectedSpan,
    ) -> Result<(), StructureError> {
        if child.trace_id == parent.trace_id
            && child.parent_span_id.as_deref() == Some(parent.span_id.as_str())
        {
            return Ok(());
        }
        Err(StructureError(format!(
            "span `{}` ({}, trace {}, parent {:?}) is not a child of `{}` ({}, trace {}, span {})\n{}",
            child.name,
            child.service,
            child.trace_id,
            child.parent_span_id,
            parent.name,
            parent.service,
            parent.trace_id,
            parent.span_id,
            self.describe()
        )))
    }

    /// The services that exported spans in trace `trace_id`.
    pub fn services_in_trace(&self, trace_id: &str) -> BTreeSet<&str> {
        self.spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .map(|s| s.service.as_str())
            .collect()
    }

    /// An indented tree per trace, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let traces: BTreeSet<&str> = self.spans.iter().map(|s| s.trace_id.as_str()).collect();
        for trace in traces {
            out.push_str(&format!("trace {trace}\n"));
            let roots = self.in_trace(trace).filter(|s| self.parent_of(s).is_none());
            for root in roots {
                self.describe_node(root, 1, &mut out);
            }
        }
        out
    }

    fn describe_node(&self, span: &CollectedSpan, depth: usize, out: &mut String) {
        out.push_str(&format!(
            "{}{} [{}] {}{}\n",
            "  ".repeat(depth),
            span.name,
            span.service,
            span.span_id,
            span.parent_span_id
                .as_deref()
                .map(|p| format!(" <- {p}"))
                .unwrap_or_default()
        ));
        if depth < 64 {
            for child in self.children_of(span) {
                self.describe_node(child, depth + 1, out);
            }
        }
    }
}
