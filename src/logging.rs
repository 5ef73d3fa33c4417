//! The daemon's own log: text for people or JSON for log collectors, always one line per
//! event, on standard error.
//!
//! One line per event matters more than it looks: a wasm trap carries a backtrace, a
//! rejected reload lists every config mistake on a line of its own, and a plugin may log
//! text with newlines. Collectors split on newlines, so each of those would become several
//! events (and a plugin could forge lines). Rather than remembering to flatten every message
//! where it is logged, the writer does it for every event: inner line breaks become ` | `
//! ([`OneLine`]). JSON escapes them already; the writer makes text do the same.
//!
//! The same writer removes secret values ([`crate::util::redact`]) from every line: what
//! the daemon's own code logs is redacted where it is made, but a dependency's line (the
//! HTTP stack's at TRACE, naming a request's path and authority) is not, and a line that
//! misses redaction once would keep the value in the log for good.

use std::io::{self, IsTerminal, Write};
use std::str::FromStr;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The environment variable that chooses the format when `--log-format` is not given.
pub const FORMAT_ENV: &str = "SWITCHYARD_LOG_FORMAT";

/// How log events are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `TIME LEVEL SPANS: TARGET: MESSAGE FIELDS`, coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's
    /// fields, and `spans` (each with its `name` and fields, such as `handler`, `route`,
    /// `object`).
    Json,
}

/// A format name that is neither `text` nor `json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format {0:?}: use text or json")]
pub struct UnknownFormat(pub String);

impl FromStr for LogFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(UnknownFormat(s.to_string())),
        }
    }
}

impl LogFormat {
    /// The format `flag` names, else the one [`FORMAT_ENV`] names, else text.
    pub fn choose(flag: Option<LogFormat>) -> Result<Self, UnknownFormat> {
        match flag {
            Some(format) => Ok(format),
            None => match std::env::var(FORMAT_ENV) {
                Ok(value) if !value.trim().is_empty() => value.parse(),
                _ => Ok(LogFormat::Text),
            },
        }
    }
}

/// Whether text logs may be coloured: standard error is a terminal and `NO_COLOR` is unset
/// or empty (<https://no-color.org>).
pub fn colour() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && io::stderr().is_terminal()
}

/// Installs the global subscriber: `format` on standard error, filtered by `RUST_LOG` or
/// else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(OneLine(io::stderr));
    match format {
        LogFormat::Text => builder.with_ansi(colour()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
}

/// A [`MakeWriter`] whose writers put each event on one line: line breaks inside what one
/// write is given (an event) become ` | `; the final newline stays.
#[derive(Debug, Clone)]
pub struct OneLine<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(self.0.make_writer())
    }
}

/// The writer [`OneLine`] makes.
#[derive(Debug)]
pub struct OneLineWriter<W>(W);

impl<W: Write> Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let redacted = crate::util::redact::redact(&text);
        self.0.write_all(&one_line(redacted.as_bytes()))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `event` with every inner line break (and the indentation after it) replaced by ` | `,
/// and trailing line breaks reduced to one.
pub fn one_line(event: &[u8]) -> Vec<u8> {
    let body_len = event
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    let (body, tail) = event.split_at(body_len);
    let mut out = Vec::with_capacity(event.len() + 8);
    let mut i = 0;
    while i < body.len() {
        if matches!(body[i], b'\n' | b'\r') {
            while i < body.len() && matches!(body[i], b'\n' | b'\r' | b' ' | b'\t') {
                i += 1;
            }
            while out.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
                out.pop();
            }
            out.extend_from_slice(b" | ");
        } else {
            out.push(body[i]);
            i += 1;
        }
    }
    if !tail.is_empty() {
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(text: &str) -> String {
        String::from_utf8(one_line(text.as_bytes())).unwrap()
    }

    #[test]
    fn inner_line_breaks_become_separators_and_the_last_newline_stays() {
        assert_eq!(flat("plain line\n"), "plain line\n");
        assert_eq!(
            flat("rejected:\nc.yaml:1:2: a\r\n  c.yaml:3:4: b\n"),
            "rejected: | c.yaml:1:2: a | c.yaml:3:4: b\n"
        );
        assert_eq!(flat("trap\n\n   0: frame\n\n"), "trap | 0: frame\n");
        assert_eq!(flat("no newline"), "no newline");
    }

    #[test]
    fn the_writer_flattens_each_write() {
        let mut out = Vec::new();
        let mut writer = OneLineWriter(&mut out);
        writer.write_all(b"a\nb\n").unwrap();
        writer.write_all(b"c\n").unwrap();
        assert_eq!(out, b"a | b\nc\n");
    }

    #[test]
    fn the_writer_redacts_secret_values_a_dependency_logs() {
        crate::util::redact::remember("logged-by-a-dependency-s3cret");
        let mut out = Vec::new();
        let mut writer = OneLineWriter(&mut out);
        writer
            .write_all(b"TRACE hyper: GET /hooks/logged-by-a-dependency-s3cret\n")
            .unwrap();
        assert_eq!(out, b"TRACE hyper: GET /hooks/<redacted>\n");
    }

    #[test]
    fn the_format_comes_from_the_flag_then_the_environment() {
        assert_eq!("JSON".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!(
            "yaml".parse::<LogFormat>(),
            Err(UnknownFormat("yaml".into()))
        );
        assert_eq!(
            LogFormat::choose(Some(LogFormat::Json)),
            Ok(LogFormat::Json)
        );
    }
}
