//! `Nonce`: the nonce of a response meshpush sent.
//!
//! A stream numbers its responses itself (one sequence over every type),
//! and a response's nonce is that number written as eight lowercase hex
//! digits (`0000002a`). The client echoes it in `response_nonce` to say
//! which response a request answers.
//!
//! A stream keeps nonces as the number, not the text: four bytes, compared
//! without touching the heap, per type and in the admin endpoints' copy of
//! every stream. The text form is made only where it is shown or written.
//!
//! Invariant: `Nonce::parse` accepts exactly the text `Display` writes,
//! so a client's `response_nonce` names one of our responses if and only
//! if it parses to that response's number.

use std::fmt;

use serde::{Serialize, Serializer};

/// A response's number in its stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce(pub u32);

impl Nonce {
    /// The nonce `text` names, if it is one meshpush could have sent: eight
    /// lowercase hex digits, nothing else.
    pub fn parse(text: &str) -> Option<Nonce> {
        let digits = text.as_bytes();
        if digits.len() != 8 || !digits.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        u32::from_str_radix(text, 16).ok().map(Nonce)
    }
}

impl fmt::Display for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// As the text on the wire, so the admin endpoints' JSON reads as before.
impl Serialize for Nonce {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_reads_back_from_its_text_and_from_nothing_else() {
        for n in [0, 1, 0x2a, 0xdead_beef, u32::MAX] {
            let text = Nonce(n).to_string();
            assert_eq!(text.len(), 8);
            assert_eq!(Nonce::parse(&text), Some(Nonce(n)), "{text}");
        }
        for foreign in ["", "2a", "0000002A", "+000002a", "00000002a", "0000002g", " 000002a", "１２３４５６７８"]
        {
            assert_eq!(Nonce::parse(foreign), None, "{foreign:?}");
        }
        assert_eq!(serde_json::to_string(&Nonce(0x2a)).unwrap(), "\"0000002a\"");
    }
}
