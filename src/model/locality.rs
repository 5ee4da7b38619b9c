//! `Locality`: where a proxy or an endpoint runs — `region/zone/subzone`.
//!
//! Endpoints carry theirs from a WorkloadEntry, a ServiceEntry endpoint or
//! their Pod (its Node's topology labels); proxies from their Pod, else
//! Envoy's `node.locality`. Locality
//! load balancing compares the two as Istio does: [`Locality::priority_of`]
//! ranks an endpoint's locality by how much of it the proxy shares, and
//! [`Locality::matches`] reads the `from`/`to` patterns of a
//! DestinationRule (`us-east/*`, `*`).

use std::fmt;

use serde::Serialize;

/// A region, zone and subzone; any may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Subzone.
    pub subzone: String,
}

impl Locality {
    /// Reads `region/zone/subzone` (missing parts are empty).
    pub fn parse(text: &str) -> Locality {
        let mut parts = text.splitn(3, '/');
        let mut next = || parts.next().unwrap_or("").to_string();
        Locality { region: next(), zone: next(), subzone: next() }
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty() && self.zone.is_empty() && self.subzone.is_empty()
    }

    /// Istio's `LbPriority`: 0 when region, zone and subzone are the
    /// proxy's, 1 when region and zone are, 2 when the region is, 3 otherwise.
    pub fn priority_of(&self, endpoint: &Locality) -> u32 {
        match (self.region == endpoint.region, self.zone == endpoint.zone, self.subzone == endpoint.subzone) {
            (true, true, true) => 0,
            (true, true, false) => 1,
            (true, false, _) => 2,
            (false, _, _) => 3,
        }
    }

    /// Istio's `LocalityMatch`: a `region/zone/subzone` pattern where `*`
    /// matches anything and a missing zone or subzone matches any.
    pub fn matches(&self, pattern: &str) -> bool {
        let rule = Locality::parse(pattern);
        (rule.region == "*" || rule.region == self.region)
            && (rule.zone.is_empty() || rule.zone == "*" || rule.zone == self.zone)
            && (rule.subzone.is_empty() || rule.subzone == "*" || rule.subzone == self.subzone)
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.region, self.zone, self.subzone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_patterns_follow_istio() {
        let proxy = Locality::parse("us-east/zone-a/rack-1");
        assert_eq!(proxy.priority_of(&Locality::parse("us-east/zone-a/rack-1")), 0);
        assert_eq!(proxy.priority_of(&Locality::parse("us-east/zone-a/rack-2")), 1);
        assert_eq!(proxy.priority_of(&Locality::parse("us-east/zone-b")), 2);
        assert_eq!(proxy.priority_of(&Locality::parse("eu-west/zone-a/rack-1")), 3);
        assert!(proxy.matches("us-east/*") && proxy.matches("us-east") && proxy.matches("*"));
        assert!(proxy.matches("us-east/zone-a/*") && !proxy.matches("us-east/zone-b/*"));
        assert!(!proxy.matches("eu-west/*"));
        assert_eq!(Locality::parse("us-east").to_string(), "us-east//");
    }
}
