//! `FieldFilter`: copies a protobuf message as it arrives in pieces,
//! leaving out one top-level field.
//!
//! Envoy repeats its node (60 KB with Envoy 1.40's extension list) in every
//! request, and a stream reads it only in the first; later requests are
//! copied without it, so an ACK costs a copy of its names. The filter keeps
//! only a key or length that a piece cut in two, so pieces may end anywhere.

use bytes::{BufMut, BytesMut};
use prost::encoding;

/// Copies a protobuf message's bytes as they arrive, in pieces, without
/// the first occurrence of one top-level length-delimited field; the rest
/// after it is copied in bulk (a repeat of the field, which no encoder
/// writes for a message field, would be kept: readers after the first
/// request skip the node anyway). Keys and lengths are held until they are
/// whole, so a piece may end anywhere. Anything it does not expect (an
/// overlong varint, a group) is copied verbatim from there on, for the
/// decoder to judge.
#[derive(Debug, Default)]
pub(super) struct FieldFilter {
    /// The key and length bytes of the field being read (not yet copied).
    head: [u8; 20],
    head_len: u8,
    /// The length-delimited field whose key is in `head` (its length is next).
    key_field: Option<(u32, u8)>,
    state: FilterState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum FilterState {
    /// At a field's key or length.
    #[default]
    Head,
    /// Inside a value: this many bytes to copy.
    Copy(usize),
    /// Inside the left-out field's value: this many bytes to pass.
    Skip(usize),
    /// Inside a varint value: copy up to its last byte.
    Varint,
    /// Copying the rest as it is.
    Verbatim,
}

impl FieldFilter {
    /// Copies `input`, the next bytes of the message, into `out`, without
    /// field `leave_out`.
    pub(super) fn copy(&mut self, leave_out: u32, mut input: &[u8], out: &mut BytesMut) {
        while !input.is_empty() {
            match self.state {
                FilterState::Verbatim => {
                    out.extend_from_slice(input);
                    return;
                }
                FilterState::Copy(n) | FilterState::Skip(n) => {
                    let k = n.min(input.len());
                    if matches!(self.state, FilterState::Copy(_)) {
                        out.extend_from_slice(&input[..k]);
                    }
                    input = &input[k..];
                    self.state = match (self.state, n - k) {
                        (FilterState::Copy(_), 0) => FilterState::Head,
                        (FilterState::Copy(_), left) => FilterState::Copy(left),
                        // Past the field: the rest is copied in bulk.
                        (_, 0) => FilterState::Verbatim,
                        (_, left) => FilterState::Skip(left),
                    };
                }
                FilterState::Varint => {
                    let last = input.iter().position(|b| b & 0x80 == 0);
                    let k = last.map_or(input.len(), |i| i + 1);
                    out.extend_from_slice(&input[..k]);
                    input = &input[k..];
                    if last.is_some() {
                        self.state = FilterState::Head;
                    }
                }
                FilterState::Head => {
                    let byte = input[0];
                    input = &input[1..];
                    if usize::from(self.head_len) == self.head.len() {
                        self.verbatim(out);
                        out.put_u8(byte);
                        continue;
                    }
                    self.head[usize::from(self.head_len)] = byte;
                    self.head_len += 1;
                    if byte & 0x80 != 0 {
                        continue;
                    }
                    self.varint_ended(leave_out, out);
                }
            }
        }
    }

    /// A varint in `head` is complete: a key, or a length after one.
    fn varint_ended(&mut self, leave_out: u32, out: &mut BytesMut) {
        let head = &self.head[..usize::from(self.head_len)];
        match self.key_field {
            None => {
                let Ok(key) = encoding::decode_varint(&mut &head[..]) else { return self.verbatim(out) };
                let field = u32::try_from(key >> 3).unwrap_or(u32::MAX);
                match key & 7 {
                    2 => self.key_field = Some((field, self.head_len)),
                    0 => self.flush_head(out, FilterState::Varint),
                    1 => self.flush_head(out, FilterState::Copy(8)),
                    5 => self.flush_head(out, FilterState::Copy(4)),
                    _ => self.verbatim(out),
                }
            }
            Some((field, key_len)) => {
                let Ok(len) = encoding::decode_varint(&mut &head[usize::from(key_len)..]) else {
                    return self.verbatim(out);
                };
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                self.key_field = None;
                if field == leave_out {
                    self.head_len = 0;
                    self.state = if len == 0 { FilterState::Verbatim } else { FilterState::Skip(len) };
                } else {
                    self.flush_head(out, if len == 0 { FilterState::Head } else { FilterState::Copy(len) });
                }
            }
        }
    }

    fn flush_head(&mut self, out: &mut BytesMut, next: FilterState) {
        out.extend_from_slice(&self.head[..usize::from(self.head_len)]);
        self.head_len = 0;
        self.state = next;
    }

    fn verbatim(&mut self, out: &mut BytesMut) {
        self.key_field = None;
        self.flush_head(out, FilterState::Verbatim);
    }

    /// Whether the bytes so far end where a field ends (or were copied
    /// verbatim, for the decoder to judge).
    pub(super) fn at_boundary(&self) -> bool {
        match self.state {
            FilterState::Head => self.head_len == 0,
            FilterState::Verbatim => true,
            _ => false,
        }
    }
}
