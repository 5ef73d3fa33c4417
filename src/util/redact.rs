//! Secret values the daemon has read, and their removal from text on its way out.
//!
//! A value a handler's config takes from a Secret or an environment variable reaches the
//! plugin's `init` only. The plugin may still echo it: in a log line, an error it returns,
//! an outbound request that a shadow run or `replay` captures; a receiver may echo it back
//! in a response body the plugin quotes. Every such piece of text passes through [`redact`]
//! before the daemon logs, stores or serves it (the log writer redacts every line again, see
//! [`crate::logging`]), and each value remembered with [`remember`] is removed there.
//! Values once read are kept for the life of the process: an instance made before a
//! rotation still holds the old one.
//!
//! # Decision: every form, and every fragment of 8 characters
//!
//! A value rarely appears in text exactly as it was read. A value made with
//! `kubectl create secret --from-file` ends in a newline, which a URL parser or a header
//! drops; a plugin that logs its config as JSON escapes quotes, backslashes and line
//! breaks; a Rust error shows it `{:?}`-escaped; a URL carries it percent-encoded. So
//! [`remember`] derives each of those forms ([`forms`]) and all of them are removed.
//!
//! Exact forms are not enough either: an excerpt is cut without knowing what it cuts. The
//! SDK quotes the first 200 characters of a receiver's answer, a JavaScript plugin
//! `text.slice(0, 100)`, and a receiver that echoes the request (`path=/hooks/TOKEN`) puts
//! the value at any offset in that answer: the cut may fall inside it (`Bearer authTOK…`).
//! The guest cuts before the host sees the text, so "redact, then cut" cannot be enforced
//! there. Instead [`redact`] first removes every whole form, then every run of text made of
//! 8-byte windows that occur in some form of some value where a cut leaves one: at the
//! text's start or end, beside an ellipsis (`…`, `...`), or 16 bytes and longer. So no
//! fragment of [`FRAGMENT`] or more characters of a value survives an excerpt, wherever
//! the cut fell, on either side; while a short coincidence in the middle of ordinary text
//! (`/default` in `team-a/default-deny`, with a value ending in `/shop/default`) stays, as
//! it must for the daemon's log to stay readable. A long shared prefix (a Secret URL's
//! `https://hooks.example.com/`) is still removed from every text: that errs on the safe
//! side.
//! The host's own cuts (a log line over `log_line_max`) come after redaction.
//!
//! Values shorter than [`FRAGMENT`] (down to [`MIN_LEN`]) are removed only where they
//! appear whole.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::RwLock;

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The shortest value redacted: a shorter one (`1`, `on`) would blank out ordinary text
/// too, and is no secret.
pub const MIN_LEN: usize = 4;

/// The length of the fragments removed wherever they appear: no run of this many bytes of
/// any form of a value survives [`redact`].
pub const FRAGMENT: usize = 8;

/// The most values kept; the oldest go first beyond it (a Secret rotated every few
/// seconds for days).
const MAX_VALUES: usize = 4096;

/// A hasher for 8-byte windows, which are already well mixed by a multiplication.
#[derive(Default)]
struct WindowHasher(u64);

impl Hasher for WindowHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Windows = HashSet<u64, BuildHasherDefault<WindowHasher>>;

/// The remembered values, and what [`redact`] looks for.
struct Secrets {
    /// The values as read, oldest first.
    values: Vec<String>,
    /// Every form, longest first: removed wherever it appears whole.
    short: Vec<String>,
    /// Every 8-byte window of every longer form.
    windows: Windows,
}

impl Secrets {
    const fn new() -> Self {
        Self {
            values: Vec::new(),
            short: Vec::new(),
            windows: HashSet::with_hasher(BuildHasherDefault::new()),
        }
    }

    /// Derives `short` (every form) and `windows` from `values` again.
    fn rebuild(&mut self) {
        self.short.clear();
        self.windows.clear();
        for value in &self.values {
            for form in forms(value) {
                if form.len() < MIN_LEN {
                    continue;
                }
                for window in form.as_bytes().windows(FRAGMENT) {
                    self.windows.insert(window_key(window));
                }
                self.short.push(form);
            }
        }
        self.short.sort_by_key(|v| std::cmp::Reverse(v.len()));
        self.short.dedup();
    }
}

static SECRETS: RwLock<Secrets> = RwLock::new(Secrets::new());

fn window_key(window: &[u8]) -> u64 {
    let mut bytes = [0; FRAGMENT];
    bytes.copy_from_slice(window);
    u64::from_le_bytes(bytes)
}

/// Remembers `value` as a secret: from now on [`redact`] removes it in every form.
pub fn remember(value: &str) {
    if value.trim().len() < MIN_LEN {
        return;
    }
    let mut secrets = super::write(&SECRETS);
    if secrets.values.iter().any(|v| v == value) {
        return;
    }
    if secrets.values.len() == MAX_VALUES {
        secrets.values.remove(0);
    }
    secrets.values.push(value.to_string());
    secrets.rebuild();
}

/// The forms `value` may take in text the daemon writes: as it is and trimmed of
/// surrounding whitespace, each also JSON-escaped, `{:?}`-escaped (and those escaped for
/// JSON once more: an error quoted in a JSON log line) and percent-encoded as a URL's path,
/// query or form would carry it.
pub fn forms(value: &str) -> Vec<String> {
    let mut bases = vec![value.to_string()];
    if value.trim() != value {
        bases.push(value.trim().to_string());
    }
    let mut out = Vec::new();
    for base in &bases {
        let json = inner(&serde_json::to_string(base).unwrap_or_default());
        let debug = inner(&format!("{base:?}"));
        out.push(inner(&serde_json::to_string(&json).unwrap_or_default()));
        out.push(inner(&serde_json::to_string(&debug).unwrap_or_default()));
        out.extend([base.clone(), json, debug]);
        for set in [Set::Component, Set::Path, Set::Query, Set::Form] {
            let encoded = percent_encode(base, set);
            out.push(lower_hex(&encoded));
            out.push(encoded);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `text` without its first and last character (the quotes of a quoted form).
fn inner(quoted: &str) -> String {
    let mut chars = quoted.chars();
    chars.next();
    chars.next_back();
    chars.as_str().to_string()
}

/// Which characters a percent-encoding leaves as they are.
#[derive(Clone, Copy)]
enum Set {
    /// `encodeURIComponent`: only letters, digits and `-._~`.
    Component,
    /// A URL path as the WHATWG parser writes it.
    Path,
    /// A URL query likewise.
    Query,
    /// `application/x-www-form-urlencoded`: a space is `+`.
    Form,
}

fn percent_encode(text: &str, set: Set) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        let keep = match set {
            Set::Component | Set::Form => byte.is_ascii_alphanumeric() || b"-._~".contains(&byte),
            Set::Path => byte.is_ascii_graphic() && !b"\"#<>?`{}".contains(&byte),
            Set::Query => byte.is_ascii_graphic() && !b"\"#<>'".contains(&byte),
        };
        if keep {
            out.push(char::from(byte));
        } else if byte == b' ' && matches!(set, Set::Form) {
            out.push('+');
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Percent-encoded `text` with its hex digits in lower case (`%2f`), as some encoders write.
fn lower_hex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut left = 0;
    for c in text.chars() {
        if c == '%' {
            left = 2;
            out.push(c);
        } else if left > 0 {
            left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` with every remembered secret value, in any of its [`forms`], and every fragment
/// of [`FRAGMENT`] bytes or more of one replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = super::read(&SECRETS);
    let mut out = Cow::Borrowed(text);
    for value in &secrets.short {
        if out.contains(value.as_str()) {
            out = Cow::Owned(out.replace(value.as_str(), REDACTED));
        }
    }
    let mut ranges = covered(&out, &secrets.windows);
    ranges.retain(|&(start, end)| cut_fragment(&out, start, end));
    match ranges {
        ranges if ranges.is_empty() => out,
        ranges => Cow::Owned(replace_ranges(&out, &ranges)),
    }
}

/// Whether the run `start..end` of `text`, made of windows of some value, is what is left
/// of a value an excerpt cut: it reaches the text's start or end, or an ellipsis (`…`,
/// `...`) beside it, or it is long ([`FRAGMENT`] twice). A short run in the middle of
/// ordinary text (`/default` in `team-a/default-deny`, while a value ends in
/// `/shop/default`) is a coincidence and stays.
fn cut_fragment(text: &str, start: usize, end: usize) -> bool {
    let before = &text[..start];
    let after = &text[end..];
    let ellipsis = |s: &str, at_end: bool| {
        ["…", "..."].iter().any(|e| {
            if at_end {
                s.ends_with(e)
            } else {
                s.starts_with(e)
            }
        })
    };
    end - start >= 2 * FRAGMENT
        || before.is_empty()
        || after.is_empty()
        || ellipsis(before, true)
        || ellipsis(after, false)
}

/// The byte ranges of `text` made of windows in `windows`, merged, widened to character
/// boundaries.
fn covered(text: &str, windows: &Windows) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    if windows.is_empty() || bytes.len() < FRAGMENT {
        return ranges;
    }
    for (start, window) in bytes.windows(FRAGMENT).enumerate() {
        if !windows.contains(&window_key(window)) {
            continue;
        }
        let end = start + FRAGMENT;
        match ranges.last_mut() {
            Some(last) if last.1 >= start => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }
    for range in &mut ranges {
        while !text.is_char_boundary(range.0) {
            range.0 -= 1;
        }
        while !text.is_char_boundary(range.1) {
            range.1 += 1;
        }
    }
    ranges
}

fn replace_ranges(text: &str, ranges: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in ranges {
        if start < at {
            // Widened into the previous range: one replacement covers both.
            at = end;
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// [`redact`] for an owned string, which it returns as it is when it holds no secret.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_values_are_replaced_and_short_ones_ignored() {
        remember("s3cr3t-value-for-redact-test");
        remember("s3cr3t-value-for-redact-test-longer");
        remember("ab");
        remember("k3y!");
        assert_eq!(
            redact(
                "a s3cr3t-value-for-redact-test-longer and s3cr3t-value-for-redact-test, ab k3y!"
            ),
            "a <redacted> and <redacted>, ab <redacted>"
        );
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }

    /// Every fragment of 8 characters of `value` that `text` holds.
    fn fragments_in(value: &str, text: &str) -> Vec<String> {
        let chars: Vec<char> = value.chars().collect();
        chars
            .windows(FRAGMENT)
            .map(|w| w.iter().collect::<String>())
            .filter(|f| text.contains(f.as_str()))
            .collect()
    }

    #[test]
    fn a_value_is_redacted_escaped_trimmed_encoded_and_cut() {
        let value = "Tok\"en\\w1th %pieces/and-more\n";
        remember(value);
        let trimmed = value.trim();
        let outputs = [
            format!("config {}", serde_json::json!({ "token": value })),
            format!("invalid path in {:?}", format!("http://h/{value}")),
            format!("invalid path in {:?}", format!("http://h/{trimmed}")),
            format!(
                "GET /echo?t={}",
                lower_hex(&percent_encode(trimmed, Set::Component))
            ),
            format!("path=/hooks/{}", percent_encode(trimmed, Set::Path)),
            format!("{}", serde_json::json!(format!("{:?}", value))),
            // Cut in the middle, on either side, as an excerpt leaves it.
            format!("the receiver answered 400: Bearer {}…", &trimmed[..12]),
            format!("…{} was refused", &trimmed[9..]),
        ];
        for output in outputs {
            let redacted = redact(&output);
            assert!(redacted.contains(REDACTED), "{output} -> {redacted}");
            for form in forms(value) {
                let found = fragments_in(&form, &redacted);
                assert!(found.is_empty(), "{found:?} of {form:?} in {redacted}");
            }
        }
        assert_eq!(
            redact("the receiver answered 400: Bearer Tok\"en\\w1th…"),
            "the receiver answered 400: Bearer <redacted>…"
        );
        // Text around a value stays.
        assert_eq!(redact(&format!("a {trimmed} b")), "a <redacted> b");
    }

    /// Regression: with a Secret holding `http://.../shop/default`, every log line naming
    /// `team-a/default-deny` lost its `/default`.
    #[test]
    fn a_short_coincidence_in_the_middle_of_text_stays_and_a_cut_fragment_goes() {
        remember("http://127.0.0.1:5/shop/default-coincidence");
        let line = "NetworkPolicy team-a/default-deny was deleted";
        assert_eq!(redact(line), line);
        assert_eq!(
            redact("the receiver answered 400: path=/shop/default-coinc…"),
            "the receiver answered 400: path=<redacted>…"
        );
        assert_eq!(redact("echo: /shop/default-co"), "echo: <redacted>");
    }

    #[test]
    fn a_value_across_multibyte_characters_is_cut_on_character_boundaries() {
        remember("ünïcödé-sécrét-välüé");
        assert_eq!(redact("x ïcödé-sécrét y"), "x <redacted> y");
    }
}
