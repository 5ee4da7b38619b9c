//! MeshConfig's traffic defaults: what a cluster or listener gets where no
//! DestinationRule or Sidecar says otherwise, and the `exportTo` an object
//! gets where it names none.
//!
//! Role: [`super::file`] reads these fields (`connectTimeout`,
//! `tcpKeepalive`, `h2UpgradePolicy`, `protocolDetectionTimeout`,
//! `dnsRefreshRate`, `inboundTrafficPolicy`, `outboundTrafficPolicy`,
//! `enableAutoMtls`, the three `default*ExportTo`) and refuses the values
//! istiod's mesh config validation refuses ([`check_connect_timeout`],
//! [`check_protocol_detection_timeout`]); the generators read
//! [`TrafficSettings`] from the snapshot's mesh config, and the push
//! indexes read [`ExportToDefaults`] where they resolve visibility.
//!
//! Invariant: the defaults here are Istio's (`DefaultMeshConfig()`), so a
//! mesh config that sets none of these fields generates what it did before
//! meshpush read them.

use serde::Serialize;

use crate::config::Duration;
use crate::config::istio::TcpKeepalive;

/// Istio's default `connectTimeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration(std::time::Duration::from_secs(10));
/// Istio's default `dnsRefreshRate`.
pub const DEFAULT_DNS_REFRESH_RATE: Duration = Duration(std::time::Duration::from_secs(60));

/// The longest connect timeout istiod accepts.
const MAX_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);
const MILLISECOND: std::time::Duration = std::time::Duration::from_millis(1);

/// MeshConfig's traffic defaults, with Istio's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficSettings {
    /// `connectTimeout`: every cluster's, unless a DestinationRule's
    /// `connectionPool.tcp.connectTimeout` sets the cluster's own.
    pub connect_timeout: Duration,
    /// `tcpKeepalive`: TCP keepalive on the connections of every cluster
    /// with a traffic policy (outbound, inbound, `PassthroughCluster`); a
    /// DestinationRule's overrides it attribute by attribute. `None`: none.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// `h2UpgradePolicy`: what HTTP/1.1 service clusters speak upstream
    /// when their DestinationRule does not say.
    pub h2_upgrade: H2UpgradePolicy,
    /// `protocolDetectionTimeout`: how long inbound listeners wait for
    /// their listener filters before going on without them; zero: no limit.
    pub protocol_detection_timeout: Duration,
    /// `dnsRefreshRate`: how often DNS clusters resolve their hosts again.
    pub dns_refresh_rate: Duration,
    /// `inboundTrafficPolicy.mode`: where sidecars hand inbound traffic to
    /// the application.
    pub inbound: InboundTrafficMode,
    /// `outboundTrafficPolicy.mode`: what sidecars do with traffic to
    /// destinations they do not know, where no Sidecar says.
    pub outbound: OutboundTrafficMode,
    /// `enableAutoMtls`: whether clusters without DestinationRule TLS
    /// originate mesh mTLS to endpoints whose sidecar terminates it.
    pub auto_mtls: bool,
}

impl Default for TrafficSettings {
    fn default() -> Self {
        TrafficSettings {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tcp_keepalive: None,
            h2_upgrade: H2UpgradePolicy::DoNotUpgrade,
            protocol_detection_timeout: Duration::default(),
            dns_refresh_rate: DEFAULT_DNS_REFRESH_RATE,
            inbound: InboundTrafficMode::Passthrough,
            outbound: OutboundTrafficMode::AllowAny,
            auto_mtls: true,
        }
    }
}

/// `meshConfig.h2UpgradePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum H2UpgradePolicy {
    /// HTTP/1.1 stays HTTP/1.1 upstream (Istio's default).
    DoNotUpgrade,
    /// HTTP/1.1 service ports are spoken to in HTTP/2.
    Upgrade,
}

impl std::str::FromStr for H2UpgradePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "DO_NOT_UPGRADE" => Ok(H2UpgradePolicy::DoNotUpgrade),
            "UPGRADE" => Ok(H2UpgradePolicy::Upgrade),
            _ => Err(format!("{s:?} is not an HTTP/2 upgrade policy: DO_NOT_UPGRADE or UPGRADE")),
        }
    }
}

/// `meshConfig.inboundTrafficPolicy.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InboundTrafficMode {
    /// To the address the client connected to (Istio's default): the
    /// application must listen on the Pod's address.
    Passthrough,
    /// To 127.0.0.1: the application may listen on loopback only.
    Localhost,
}

impl std::str::FromStr for InboundTrafficMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "PASSTHROUGH" => Ok(InboundTrafficMode::Passthrough),
            "LOCALHOST" => Ok(InboundTrafficMode::Localhost),
            _ => Err(format!("{s:?} is not an inbound traffic mode: PASSTHROUGH or LOCALHOST")),
        }
    }
}

/// `meshConfig.outboundTrafficPolicy.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutboundTrafficMode {
    /// Only the registry's destinations: the rest go to `BlackHoleCluster`.
    /// Istio's enum value 0, so `outboundTrafficPolicy: {}` means this.
    RegistryOnly,
    /// Anything: unknown destinations go to `PassthroughCluster` (Istio's default).
    AllowAny,
}

/// The `outboundTrafficPolicy.mode` meshpush does not apply yet.
pub const ALLOW_ANY_DYNAMIC_DNS: &str = "ALLOW_ANY_DYNAMIC_DNS";

impl std::str::FromStr for OutboundTrafficMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "REGISTRY_ONLY" => Ok(OutboundTrafficMode::RegistryOnly),
            "ALLOW_ANY" => Ok(OutboundTrafficMode::AllowAny),
            _ => Err(format!(
                "{s:?} is not an outbound traffic mode: REGISTRY_ONLY, ALLOW_ANY or {ALLOW_ANY_DYNAMIC_DNS}"
            )),
        }
    }
}

/// The `exportTo` an object gets where it names none
/// (`defaultServiceExportTo`, `defaultVirtualServiceExportTo`,
/// `defaultDestinationRuleExportTo`); each `["*"]` unless set, and an
/// empty list is `["*"]` too, as istiod reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportToDefaults {
    /// Of Services and ServiceEntries.
    pub services: Vec<String>,
    /// Of VirtualServices.
    pub virtual_services: Vec<String>,
    /// Of DestinationRules: only `.` counts (private to the rule's
    /// namespace); anything else leaves them public, as in Istio.
    pub destination_rules: Vec<String>,
}

impl Default for ExportToDefaults {
    fn default() -> Self {
        let everywhere = || vec!["*".to_string()];
        ExportToDefaults { services: everywhere(), virtual_services: everywhere(), destination_rules: everywhere() }
    }
}

/// A `connectTimeout` as istiod's validation takes it: whole milliseconds,
/// from 1ms to 1h.
pub fn check_connect_timeout(timeout: Duration) -> Result<(), String> {
    let d = timeout.0;
    if d < MILLISECOND || d > MAX_CONNECT_TIMEOUT || !whole_millis(d) {
        return Err(format!("{d:?} is not a connect timeout: whole milliseconds from 1ms to 1h"));
    }
    Ok(())
}

/// A `protocolDetectionTimeout` as istiod's validation takes it: zero (no
/// limit) or whole milliseconds.
pub fn check_protocol_detection_timeout(timeout: Duration) -> Result<(), String> {
    if whole_millis(timeout.0) {
        Ok(())
    } else {
        Err(format!("{:?} is not a protocol detection timeout: 0s or whole milliseconds", timeout.0))
    }
}

/// A `dnsRefreshRate` Envoy takes: over 1ms (istiod does not check it, and
/// Envoy refuses every DNS cluster of a lower one).
pub fn check_dns_refresh_rate(rate: Duration) -> Result<(), String> {
    if rate.0 > MILLISECOND { Ok(()) } else { Err(format!("{:?} is not over 1ms, which Envoy requires", rate.0)) }
}

fn whole_millis(d: std::time::Duration) -> bool {
    d.subsec_nanos().is_multiple_of(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Duration {
        text.parse().unwrap()
    }

    #[test]
    fn a_connect_timeout_is_whole_milliseconds_from_1ms_to_1h() {
        for ok in ["1ms", "250ms", "10s", "1h"] {
            assert!(check_connect_timeout(d(ok)).is_ok(), "{ok}");
        }
        for bad in ["0s", "500us", "1.5ms", "61m"] {
            assert!(check_connect_timeout(d(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_protocol_detection_timeout_is_zero_or_whole_milliseconds() {
        assert!(check_protocol_detection_timeout(d("0s")).is_ok());
        assert!(check_protocol_detection_timeout(d("100ms")).is_ok());
        assert!(check_protocol_detection_timeout(d("1.5ms")).is_err());
    }

    #[test]
    fn modes_read_as_istio_spells_them() {
        assert_eq!("UPGRADE".parse(), Ok(H2UpgradePolicy::Upgrade));
        assert_eq!("LOCALHOST".parse(), Ok(InboundTrafficMode::Localhost));
        assert_eq!("REGISTRY_ONLY".parse(), Ok(OutboundTrafficMode::RegistryOnly));
        assert!("allow_any".parse::<OutboundTrafficMode>().is_err(), "enum names are exact, as in istiod");
    }
}
