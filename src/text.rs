//! `Shown`: a client-supplied string made safe to show — in a log line, a
//! gRPC status message, a debug endpoint or a CLI table.
//!
//! Anything a client sends (a node id, a NACK's message, a nonce, label
//! values) may be huge or hold control characters. Shown, control
//! characters are escaped (`\n`, `\u{1b}`) and what is shown is cut at
//! [`MAX_SHOWN`] bytes, escapes included, followed by `…(N bytes)` (the
//! original's length), so one client can neither flood a log nor forge
//! lines in it.
//!
//! Invariant: showing never allocates for a short, clean string, and a
//! shown string is at most `MAX_SHOWN` bytes plus the suffix.

use std::borrow::Cow;
use std::fmt;

/// Bytes of a client string shown at most.
pub const MAX_SHOWN: usize = 256;

/// A string displayed bounded and escaped (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(self.0))
    }
}

/// An error with its causes, outermost first, as one line
/// (`connecting: tcp connect error: Connection refused`): hyper's and
/// tonic's own text is only the outermost. A peer's words may be in it, so
/// where one may be, show it [`shown`].
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The empty text, shared: one allocation for every empty locality,
/// network and the like, however many hold one.
pub fn empty() -> std::sync::Arc<str> {
    static EMPTY: std::sync::LazyLock<std::sync::Arc<str>> = std::sync::LazyLock::new(|| std::sync::Arc::from(""));
    EMPTY.clone()
}

/// The string as [`Shown`] displays it.
pub fn shown(text: &str) -> Cow<'_, str> {
    let clean = !text.chars().any(char::is_control);
    if clean && text.len() <= MAX_SHOWN {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(MAX_SHOWN + 24);
    // Bytes of `text` shown: up to MAX_SHOWN bytes of output, escapes counted.
    let mut taken = 0;
    for (at, c) in text.char_indices() {
        let len = if c.is_control() { c.escape_default().count() } else { c.len_utf8() };
        if out.len() + len > MAX_SHOWN {
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        taken = at + c.len_utf8();
    }
    if taken < text.len() {
        out.push_str(&format!("…({} bytes)", text.len()));
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_are_cut_and_control_characters_escaped() {
        assert!(matches!(shown("sidecar~10.0.0.1~a.b~b.svc"), Cow::Borrowed(_)));
        let long = "x".repeat(1 << 20);
        let out = shown(&long);
        assert!(out.len() < MAX_SHOWN + 32, "{}", out.len());
        assert!(out.ends_with("…(1048576 bytes)"), "{out}");
        assert_eq!(shown("a\nWARN forged\r\u{1b}[31m"), "a\\nWARN forged\\r\\u{1b}[31m");
        let multibyte = "é".repeat(200);
        assert!(shown(&multibyte).starts_with("éé"), "cut on a character boundary");
        let controls = "\u{1f}".repeat(200);
        let out = shown(&controls);
        assert!(out.len() <= MAX_SHOWN + 32, "escapes count against the bound: {} bytes", out.len());
        assert!(out.starts_with("\\u{1f}") && out.ends_with("…(200 bytes)"), "{out}");
        assert_eq!(Shown("ok").to_string(), "ok");
    }
}
