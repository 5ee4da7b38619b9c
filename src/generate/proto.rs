//! Small Envoy message constructors every generator shares: the ADS config
//! source, socket addresses, CIDR ranges, wrapper values, `Any` packing and
//! the well-known extension names.
//!
//! Kept here so that each shape is written once: a cluster's EDS source and a
//! listener's RDS source are the same `{ads: {}, resource_api_version: V3}`.

use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiVersion, CidrRange, ConfigSource, SocketAddress, address,
    config_source::ConfigSourceSpecifier, socket_address::PortSpecifier,
};
use envoy_types::pb::google::protobuf::{Any, BoolValue, Duration, UInt32Value};

/// Network filter: HTTP connection manager.
pub const HTTP_CONNECTION_MANAGER: &str = "envoy.filters.network.http_connection_manager";
/// Network filter: TCP proxy.
pub const TCP_PROXY: &str = "envoy.filters.network.tcp_proxy";
/// HTTP filter: fault injection (configured per route).
pub const FAULT: &str = "envoy.filters.http.fault";
/// HTTP filter: CORS (configured per route).
pub const CORS: &str = "envoy.filters.http.cors";
/// HTTP filter: router (always last).
pub const ROUTER: &str = "envoy.filters.http.router";
/// Listener filter: restores the original destination of a redirected connection.
pub const ORIGINAL_DST: &str = "envoy.filters.listener.original_dst";
/// Listener filter: the upstream connection takes the downstream's source
/// address (TPROXY inbound).
pub const ORIGINAL_SRC: &str = "envoy.filters.listener.original_src";
/// The mark of the proxy's own packets under TPROXY (Istio's 1337), which
/// capture routes back to the proxy.
pub const PROXY_MARK: u32 = 1337;
/// Key of a cluster's upstream HTTP protocol options.
pub const HTTP_PROTOCOL_OPTIONS: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";
/// Retry priority spreading retries over localities not tried yet.
pub const PREVIOUS_PRIORITIES: &str = "envoy.retry_priorities.previous_priorities";
/// Retry host predicate preferring hosts not tried yet.
pub const PREVIOUS_HOSTS: &str = "envoy.retry_host_predicates.previous_hosts";

/// An HTTP filter `name` configured by `config`.
pub fn http_filter(
    name: &str,
    config: Any,
) -> envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter {
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        HttpFilter, http_filter::ConfigType,
    };
    HttpFilter { name: name.to_string(), config_type: Some(ConfigType::TypedConfig(config)), ..Default::default() }
}

/// `{ads: {}, resource_api_version: V3}`: fetch over the ADS stream.
pub fn ads_config_source() -> ConfigSource {
    ConfigSource {
        resource_api_version: ApiVersion::V3 as i32,
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    }
}

/// A TCP socket address.
pub fn socket_address(ip: &str, port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: ip.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

/// A Unix domain socket address.
pub fn pipe_address(path: &str) -> Address {
    Address {
        address: Some(address::Address::Pipe(envoy_types::pb::envoy::config::core::v3::Pipe {
            path: path.to_string(),
            mode: 0,
        })),
    }
}

/// A CIDR range from an address (`10.0.0.1` → /32, `fd00::1` → /128) or a
/// range (`10.0.0.0/24`); `None` for anything else (host names).
pub fn cidr_range(text: &str) -> Option<CidrRange> {
    let (ip, len) = match text.split_once('/') {
        Some((ip, len)) => (ip, Some(len.parse::<u32>().ok()?)),
        None => (text, None),
    };
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then(|| CidrRange { address_prefix: ip.to_string(), prefix_len: Some(u32_value(len)) })
}

/// Whether the range `outer` (`10.0.0.0/8`, or an address) holds all of
/// `inner` (an address or a range); `false` when either is not an IP form
/// or they are of different families.
pub fn cidr_contains(outer: &str, inner: &str) -> bool {
    fn parse(text: &str) -> Option<(std::net::IpAddr, u32)> {
        let range = cidr_range(text)?;
        Some((range.address_prefix.parse().ok()?, range.prefix_len.map_or(0, |l| l.value)))
    }
    let (Some((o, olen)), Some((i, ilen))) = (parse(outer), parse(inner)) else { return false };
    if ilen < olen {
        return false;
    }
    match (o, i) {
        (std::net::IpAddr::V4(o), std::net::IpAddr::V4(i)) => {
            let mask = if olen == 0 { 0 } else { u32::MAX << (32 - olen) };
            u32::from(o) & mask == u32::from(i) & mask
        }
        (std::net::IpAddr::V6(o), std::net::IpAddr::V6(i)) => {
            let mask = if olen == 0 { 0 } else { u128::MAX << (128 - olen) };
            u128::from(o) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

/// Whether `text` is an IP address (not a host name, not a range).
pub fn is_ip(text: &str) -> bool {
    text.parse::<std::net::IpAddr>().is_ok()
}

/// Packs a message into `Any`.
pub fn any<T: prost::Name>(message: &T) -> Any {
    Any { type_url: T::type_url(), value: message.encode_to_vec() }
}

/// `google.protobuf.UInt32Value`.
pub fn u32_value(value: u32) -> UInt32Value {
    UInt32Value { value }
}

/// `google.protobuf.BoolValue`.
pub fn bool_value(value: bool) -> BoolValue {
    BoolValue { value }
}

/// A protobuf duration of whole milliseconds.
pub fn millis(millis: u64) -> Duration {
    Duration { seconds: (millis / 1000) as i64, nanos: ((millis % 1000) * 1_000_000) as i32 }
}

/// A protobuf duration of whole seconds.
pub fn seconds(seconds: i64) -> Duration {
    Duration { seconds, nanos: 0 }
}

/// Clamps a non-negative config integer into a `u32`; `None` for zero or
/// negative values, which Istio treats as "not set".
pub fn positive_u32(value: i64) -> Option<u32> {
    (value > 0).then(|| value.min(i64::from(u32::MAX)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_ranges_from_addresses_and_ranges() {
        let r = cidr_range("10.0.0.7").unwrap();
        assert_eq!((r.address_prefix.as_str(), r.prefix_len.unwrap().value), ("10.0.0.7", 32));
        assert_eq!(cidr_range("fd00::1").unwrap().prefix_len.unwrap().value, 128);
        assert_eq!(cidr_range("10.1.0.0/16").unwrap().prefix_len.unwrap().value, 16);
        assert!(cidr_range("api.example.com").is_none());
        assert!(cidr_range("10.0.0.0/40").is_none());
    }

    #[test]
    fn ranges_contain_addresses_and_narrower_ranges() {
        assert!(cidr_contains("10.0.0.0/8", "10.20.0.3"));
        assert!(cidr_contains("10.20.0.3/32", "10.20.0.3"));
        assert!(cidr_contains("10.0.0.0/8", "10.20.0.0/16"));
        assert!(!cidr_contains("10.20.0.0/16", "10.0.0.0/8"));
        assert!(!cidr_contains("10.0.0.0/8", "11.0.0.1"));
        assert!(cidr_contains("fd00::/8", "fd00::1"));
        assert!(!cidr_contains("10.0.0.0/8", "fd00::1"));
        assert!(!cidr_contains("10.0.0.0/8", "db.example"));
    }
}
