//! Help documents → sections: Markdown (ATX headings), HTML (`<h1>`–`<h6>`; scripts refused), plain text
//! (paragraph groups) and GNOME Mallard `.page` files (the page, then each `<section>`).
//!
//! Every section is plain text (markup removed) of at most `max_chars` characters: a longer one is split
//! at line boundaries into parts that keep its title. Content that is not UTF-8 text, holds NUL or other
//! control characters, or is HTML with a `<script>` is refused as a whole.

use quick_xml::events::Event;
use ufo_proto::v1::DocumentFormat;

/// Why a document was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// Not UTF-8, or holds control characters: a binary file.
    #[error("the content is not text (binary files are refused): {0}")]
    Binary(&'static str),
    /// HTML with a script element or a `javascript:` URL.
    #[error("HTML with scripts is refused: remove <script> elements and javascript: URLs")]
    Script,
    /// The format could not be chosen from the file name.
    #[error("unknown document format for {0:?}: use .md, .markdown, .html, .htm, .txt or .page")]
    UnknownFormat(String),
    /// A Mallard page is not well-formed XML.
    #[error("malformed Mallard XML: {0}")]
    Xml(String),
    /// The document holds no text.
    #[error("the document holds no text")]
    Empty,
    /// More sections than allowed.
    #[error("the document has {0} sections; at most {1} are accepted")]
    TooManySections(usize, usize),
}

/// One section of a document: its heading and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The heading, with the page's title before a section's (`Page — Section`).
    pub title: String,
    /// The prose, markup removed.
    pub body: String,
    /// Example code and command lines (Markdown fences, HTML `<pre>`, Mallard `<code>`/`<screen>`):
    /// searched with a lower weight than the prose, since every page's examples share words.
    pub code: String,
}

/// The format a file name implies.
pub fn format_of(source: &str) -> Option<DocumentFormat> {
    let ext = source.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" | "markdown" => DocumentFormat::Markdown,
        "html" | "htm" | "xhtml" => DocumentFormat::Html,
        "txt" | "text" => DocumentFormat::Text,
        "page" => DocumentFormat::Mallard,
        _ => return None,
    })
}

/// Checks that `content` is text and returns it.
pub fn text(content: &[u8]) -> Result<&str, ParseError> {
    let text = std::str::from_utf8(content).map_err(|_| ParseError::Binary("not UTF-8"))?;
    if text.contains('\0') {
        return Err(ParseError::Binary("contains NUL"));
    }
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\u{c}'))
    {
        return Err(ParseError::Binary("contains control characters"));
    }
    Ok(text)
}

/// Splits a document into sections of at most `max_chars` characters, at most `max_sections` of them.
pub fn sections(
    format: DocumentFormat,
    source: &str,
    content: &[u8],
    max_chars: usize,
    max_sections: usize,
) -> Result<Vec<Section>, ParseError> {
    let format = match format {
        DocumentFormat::Unspecified => {
            format_of(source).ok_or_else(|| ParseError::UnknownFormat(source.to_owned()))?
        }
        known => known,
    };
    let text = text(content)?;
    let stem = file_stem(source);
    let raw = match format {
        DocumentFormat::Markdown => markdown(text, &stem),
        DocumentFormat::Html => html(text, &stem)?,
        DocumentFormat::Mallard => mallard(text, &stem)?,
        DocumentFormat::Text | DocumentFormat::Unspecified => plain(text, &stem),
    };
    let mut out = Vec::new();
    for section in raw {
        let body = tidy(&section.body);
        let code = code_lines(&section.code);
        if body.is_empty() && code.is_empty() {
            continue;
        }
        split_long(
            section.title.trim(),
            &body,
            &code,
            max_chars.max(64),
            &mut out,
        );
        if out.len() > max_sections {
            return Err(ParseError::TooManySections(out.len(), max_sections));
        }
    }
    if out.is_empty() {
        return Err(ParseError::Empty);
    }
    Ok(out)
}

fn file_stem(source: &str) -> String {
    let name = source.rsplit(['/', '\\']).next().unwrap_or(source);
    name.rsplit_once('.')
        .map_or(name, |(stem, _)| stem)
        .to_owned()
}

/// Collapses runs of spaces and blank lines; trims.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = false;
    for line in text.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank { "\n\n" } else { "\n" });
        }
        blank = false;
        out.push_str(&line);
    }
    out
}

/// Code as written, trailing spaces and blank-line runs removed.
fn code_lines(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for line in code.lines().map(str::trim_end) {
        if line.is_empty() && (out.is_empty() || out.ends_with("\n\n")) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_end().to_owned()
}

/// Appends `body` and `code` under `title`: one section when they fit in `max` characters together, else
/// parts of at most `max` characters cut at line (else word) ends — the prose first, then the code — each
/// keeping the title.
fn split_long(title: &str, body: &str, code: &str, max: usize, out: &mut Vec<Section>) {
    if body.chars().count() + code.chars().count() <= max {
        out.push(Section {
            title: title.to_owned(),
            body: body.to_owned(),
            code: code.to_owned(),
        });
        return;
    }
    let parts: Vec<(String, String)> = pieces(body, max)
        .into_iter()
        .map(|b| (b, String::new()))
        .chain(pieces(code, max).into_iter().map(|c| (String::new(), c)))
        .collect();
    let n = parts.len();
    for (i, (body, code)) in parts.into_iter().enumerate() {
        out.push(Section {
            title: if i == 0 {
                title.to_owned()
            } else {
                format!("{title} (part {} of {n})", i + 1)
            },
            body,
            code,
        });
    }
}

/// `text` in pieces of at most `max` characters, cut at line (else word, else character) ends.
fn pieces(text: &str, max: usize) -> Vec<String> {
    let mut part = String::new();
    let mut parts = Vec::new();
    for piece in text.split_inclusive(['\n', ' ']) {
        if part.chars().count() + piece.chars().count() > max && !part.is_empty() {
            parts.push(std::mem::take(&mut part));
        }
        if piece.chars().count() > max {
            // A single giant word: cut it by characters.
            let chars: Vec<char> = piece.chars().collect();
            for cut in chars.chunks(max) {
                parts.push(cut.iter().collect());
            }
            continue;
        }
        part.push_str(piece);
    }
    parts.push(part);
    parts
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Markdown: a section per ATX heading (`#`…`######`) outside fenced code; the title is the heading path.
fn markdown(text: &str, stem: &str) -> Vec<Section> {
    let mut out = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut current = Section {
        title: stem.to_owned(),
        body: String::new(),
        code: String::new(),
    };
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            } else {
                current.code.push_str(line);
                current.code.push('\n');
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        let is_heading = (1..=6).contains(&level)
            && trimmed[level..].starts_with([' ', '\t'])
            && line.len() - trimmed.len() < 4;
        if is_heading {
            let heading = trimmed[level..]
                .trim()
                .trim_end_matches('#')
                .trim()
                .to_owned();
            out.push(std::mem::replace(
                &mut current,
                Section {
                    title: String::new(),
                    body: String::new(),
                    code: String::new(),
                },
            ));
            path.truncate(level - 1);
            while path.len() < level - 1 {
                path.push(String::new());
            }
            path.push(heading);
            current.title = path
                .iter()
                .filter(|p| !p.is_empty())
                .cloned()
                .collect::<Vec<_>>()
                .join(" — ");
            continue;
        }
        current.body.push_str(line);
        current.body.push('\n');
    }
    out.push(current);
    out
}

/// Plain text: one titled section (split by size later), the first line as its title when short.
fn plain(text: &str, stem: &str) -> Vec<Section> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let title = if first.chars().count() <= 80 && !first.is_empty() {
        first.trim().to_owned()
    } else {
        stem.to_owned()
    };
    vec![Section {
        title,
        body: text.to_owned(),
        code: String::new(),
    }]
}

/// Decodes the common HTML character references.
fn entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let end = rest.find(';').filter(|e| *e <= 10);
        let decoded = end.and_then(|e| {
            let name = &rest[1..e];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some(' '),
                _ => name
                    .strip_prefix("#x")
                    .or_else(|| name.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// HTML: a section per `<h1>`–`<h6>`; tags removed, `<style>` and comments skipped; scripts refused.
fn html(text: &str, stem: &str) -> Result<Vec<Section>, ParseError> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("<script") || lower.contains("javascript:") {
        return Err(ParseError::Script);
    }
    let mut out = Vec::new();
    let mut current = Section {
        title: stem.to_owned(),
        body: String::new(),
        code: String::new(),
    };
    let mut heading: Option<String> = None;
    let mut page_title: Option<String> = None;
    let mut in_title = false;
    let mut in_pre = false;
    let mut rest = text;
    while !rest.is_empty() {
        let text = rest.find('<').map_or(rest, |open| &rest[..open]);
        if in_title {
            page_title.get_or_insert_with(String::new).push_str(text);
        } else if let Some(h) = heading.as_mut() {
            h.push_str(text);
        } else if in_pre {
            current.code.push_str(text);
        } else {
            current.body.push_str(text);
        }
        let Some(open) = rest.find('<') else {
            break;
        };
        rest = &rest[open..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |e| &rest[e + 3..]);
            continue;
        }
        let close = rest.find('>').map_or(rest.len(), |e| e + 1);
        let tag = rest[1..close.saturating_sub(1).max(1)]
            .trim()
            .to_ascii_lowercase();
        rest = &rest[close..];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        let closing = tag.starts_with('/');
        if in_pre && name != "pre" {
            continue;
        }
        match (name.as_str(), closing) {
            ("style", false) => {
                rest = rest
                    .to_ascii_lowercase()
                    .find("</style")
                    .map_or("", |e| &rest[e..]);
            }
            ("title", false) => in_title = true,
            ("title", true) => in_title = false,
            ("pre", closing_tag) => {
                in_pre = !closing_tag;
                current.code.push('\n');
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", false) => heading = Some(String::new()),
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => {
                if let Some(h) = heading.take() {
                    let title = entities(&h)
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ");
                    out.push(std::mem::replace(
                        &mut current,
                        Section {
                            title,
                            body: String::new(),
                            code: String::new(),
                        },
                    ));
                }
            }
            ("p" | "br" | "div" | "li" | "tr" | "dt" | "dd" | "table" | "ul" | "ol", _) => {
                current.body.push('\n');
            }
            _ => current.body.push(' '),
        }
    }
    out.push(current);
    if let (Some(title), Some(first)) = (page_title, out.first_mut())
        && first.title == stem
    {
        first.title = title.trim().to_owned();
    }
    for s in &mut out {
        s.body = entities(&s.body);
        s.code = entities(&s.code);
    }
    Ok(out)
}

/// Mallard: the page (its `<title>` and `<desc>`, then its text) and each `<section>` as its own
/// section, titled `Page — Section`. `<info>` other than `<desc>` is skipped.
fn mallard(text: &str, stem: &str) -> Result<Vec<Section>, ParseError> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut out: Vec<Section> = Vec::new();
    // Open sections: their index in `out`.
    let mut stack: Vec<usize> = Vec::new();
    let mut page_title = String::new();
    // Depth inside <info> (skipped) and whether the text goes to a title or a desc.
    let mut info = 0usize;
    let mut in_desc = false;
    // Depth inside <code>/<screen> (examples).
    let mut code = 0usize;
    // The page's <desc>: its one-line summary, searched with the title.
    let mut desc = String::new();
    let mut title_of: Option<usize> = None;
    let mut title_depth = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| ParseError::Xml(e.to_string()))?;
        let piece: Option<String> = match &event {
            Event::Start(e) => {
                let name = e.local_name().as_ref().to_vec();
                match name.as_slice() {
                    b"page" | b"section" => {
                        out.push(Section {
                            title: String::new(),
                            body: String::new(),
                            code: String::new(),
                        });
                        stack.push(out.len() - 1);
                    }
                    b"info" => info += 1,
                    b"code" | b"screen" => code += 1,
                    b"desc" if info > 0 => in_desc = true,
                    b"title" if info == 0 => {
                        if title_of.is_none()
                            && let Some(&top) = stack.last()
                            && out[top].title.is_empty()
                        {
                            title_of = Some(top);
                            title_depth = 0;
                        } else if title_of.is_some() {
                            title_depth += 1;
                        }
                    }
                    _ => {}
                }
                block_break(&name, &stack, &mut out, info);
                None
            }
            Event::End(e) => {
                let name = e.local_name().as_ref().to_vec();
                match name.as_slice() {
                    b"page" | b"section" => {
                        stack.pop();
                    }
                    b"info" => info = info.saturating_sub(1),
                    b"code" | b"screen" => code = code.saturating_sub(1),
                    b"desc" => in_desc = false,
                    b"title" if title_of.is_some() => {
                        if title_depth == 0 {
                            title_of = None;
                        } else {
                            title_depth -= 1;
                        }
                    }
                    _ => {}
                }
                block_break(&name, &stack, &mut out, info);
                None
            }
            Event::Text(t) => Some(
                t.decode()
                    .map_err(|e| ParseError::Xml(e.to_string()))?
                    .into_owned(),
            ),
            Event::CData(t) => Some(String::from_utf8_lossy(t.as_ref()).into_owned()),
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| ParseError::Xml(e.to_string()))?;
                match r.resolve_char_ref() {
                    Ok(Some(c)) => Some(c.to_string()),
                    _ => quick_xml::escape::resolve_predefined_entity(&name).map(str::to_owned),
                }
            }
            Event::Eof => break,
            _ => None,
        };
        let Some(piece) = piece else { continue };
        let Some(&top) = stack.last() else { continue };
        if let Some(target) = title_of {
            out[target].title.push_str(&piece);
        } else if info > 0 {
            if in_desc && top == 0 {
                desc.push_str(&piece);
            }
        } else if code > 0 {
            out[top].code.push_str(&piece);
        } else {
            out[top].body.push_str(&piece);
        }
    }
    if let Some(first) = out.first_mut() {
        first.title = first.title.split_whitespace().collect::<Vec<_>>().join(" ");
        if first.title.is_empty() {
            first.title = stem.to_owned();
        }
        page_title.clone_from(&first.title);
        let desc = desc.split_whitespace().collect::<Vec<_>>().join(" ");
        if !desc.is_empty() {
            first.title = format!("{page_title}: {desc}");
        }
    }
    for s in out.iter_mut().skip(1) {
        let own = s.title.split_whitespace().collect::<Vec<_>>().join(" ");
        s.title = if own.is_empty() {
            page_title.clone()
        } else {
            format!("{page_title} — {own}")
        };
    }
    Ok(out)
}

/// Block elements end a line, so words of adjacent paragraphs do not run together.
fn block_break(name: &[u8], stack: &[usize], out: &mut [Section], info: usize) {
    if matches!(
        name,
        b"p" | b"item"
            | b"title"
            | b"desc"
            | b"td"
            | b"tr"
            | b"note"
            | b"list"
            | b"terms"
            | b"steps"
            | b"table"
    ) && let Some(&top) = stack.last()
        && (info == 0 || name == b"desc")
    {
        out[top].body.push('\n');
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn markdown_sections_follow_headings_outside_code() {
        let doc = "Intro text\n# Install\nrun it\n```sh\n# not a heading\n```\n## Linux\napt\n";
        let s = sections(
            DocumentFormat::Markdown,
            "guide.md",
            doc.as_bytes(),
            1000,
            10,
        )
        .unwrap();
        let titles: Vec<_> = s.iter().map(|s| s.title.as_str()).collect();
        assert_eq!(titles, ["guide", "Install", "Install — Linux"]);
        assert_eq!(s[1].code, "# not a heading");
        assert_eq!(s[1].body, "run it");
    }

    #[test]
    fn html_scripts_are_refused_and_tags_removed() {
        let bad = b"<html><body><script>alert(1)</script></body></html>";
        assert_eq!(
            sections(DocumentFormat::Html, "a.html", bad, 1000, 10),
            Err(ParseError::Script)
        );
        let good = b"<title>Doc</title><h1>Save &amp; quit</h1><p>Press <b>Ctrl</b>+S</p>";
        let s = sections(DocumentFormat::Unspecified, "a.html", good, 1000, 10).unwrap();
        assert_eq!(s.last().unwrap().title, "Save & quit");
        assert_eq!(s.last().unwrap().body, "Press Ctrl +S");
    }

    #[test]
    fn binary_and_nul_are_refused() {
        assert!(matches!(text(&[0xff, 0xfe, 0]), Err(ParseError::Binary(_))));
        assert!(matches!(text(b"a\0b"), Err(ParseError::Binary(_))));
        assert!(matches!(text(b"a\x01b"), Err(ParseError::Binary(_))));
        assert!(matches!(
            sections(DocumentFormat::Unspecified, "a.exe", b"x", 100, 10),
            Err(ParseError::UnknownFormat(_))
        ));
    }

    #[test]
    fn mallard_page_and_sections() {
        let page = r#"<page xmlns="http://projectmallard.org/1.0/" id="x">
          <info><desc>Use the <cmd>--x</cmd> option.</desc><credit><name>Someone</name></credit></info>
          <title>X Dialog</title><p>Body &amp; more.</p>
          <section id="s"><title>Options</title><p>Set <var>y</var>.</p></section></page>"#;
        let s = sections(DocumentFormat::Mallard, "x.page", page.as_bytes(), 1000, 10).unwrap();
        assert_eq!(s[0].title, "X Dialog: Use the --x option.");
        assert!(s[0].body.contains("Body & more."));
        assert!(!s[0].body.contains("Someone"));
        assert_eq!(s[1].title, "X Dialog — Options");
        assert_eq!(s[1].body, "Set y.");
    }

    #[test]
    fn long_sections_are_split_with_their_title() {
        let body = "word ".repeat(100);
        let s = sections(DocumentFormat::Text, "a.txt", body.as_bytes(), 100, 100).unwrap();
        assert!(s.len() >= 5);
        assert!(s.iter().all(|s| s.body.chars().count() <= 100));
        assert!(s[1].title.contains("part 2"));
        assert_eq!(
            sections(DocumentFormat::Text, "a.txt", body.as_bytes(), 100, 2),
            Err(ParseError::TooManySections(5, 2))
        );
    }
}
