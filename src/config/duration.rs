//! Durations as Istio and Kubernetes write them: `10s`, `0.5s`, `250ms`, `1m30s`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration parsed from Go/protobuf-style text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration (expected forms like 10s, 0.5s, 250ms, 1m30s)")]
pub struct DurationError(pub String);

impl FromStr for Duration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || DurationError(text.to_string());
        let s = text.trim();
        if s.is_empty() {
            return Err(err());
        }
        let mut rest = s;
        let mut total = 0f64;
        while !rest.is_empty() {
            let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
            if num_len == 0 {
                return Err(err());
            }
            let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
            rest = &rest[num_len..];
            let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
            let scale = match &rest[..unit_len] {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 1e-3,
                "us" | "µs" => 1e-6,
                "ns" => 1e-9,
                _ => return Err(err()),
            };
            total += value * scale;
            rest = &rest[unit_len..];
        }
        if !total.is_finite() || total > 1e12 {
            return Err(err());
        }
        Ok(Duration(std::time::Duration::from_secs_f64(total)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) { write!(f, "{}s", ms / 1000) } else { write!(f, "{ms}ms") }
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Duration {
    /// As a protobuf `Duration`.
    pub fn to_proto(self) -> envoy_types::pb::google::protobuf::Duration {
        envoy_types::pb::google::protobuf::Duration {
            seconds: self.0.as_secs() as i64,
            nanos: self.0.subsec_nanos() as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_istio_forms() {
        let d = |s: &str| s.parse::<Duration>().unwrap().0;
        assert_eq!(d("10s"), std::time::Duration::from_secs(10));
        assert_eq!(d("0.5s"), std::time::Duration::from_millis(500));
        assert_eq!(d("250ms"), std::time::Duration::from_millis(250));
        assert_eq!(d("1m30s"), std::time::Duration::from_secs(90));
        assert_eq!(d("2h"), std::time::Duration::from_secs(7200));
    }

    #[test]
    fn refuses_garbage() {
        for bad in ["", "10", "s", "-1s", "1x", "1.2.3s"] {
            assert!(bad.parse::<Duration>().is_err(), "{bad:?} was accepted");
        }
    }
}
