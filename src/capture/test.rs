//! The rules against Istio's own: the golden files of istio-iptables'
//! tests (`tests/data/istio/tools/istio-iptables/pkg/capture/testdata/`,
//! Apache-2.0) for the cases that use the flags meshpush takes, each with
//! the config Istio's test gives it.

use super::*;

/// A golden file's restore input: its `iptables-save` lines are the test
/// stub's record of commands, not rules.
fn golden(name: &str) -> String {
    let path = format!(
        "{}/tests/data/istio/tools/istio-iptables/pkg/capture/testdata/{name}.golden",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().filter(|l| !l.ends_with("tables-save")).map(|l| format!("{l}\n")).collect()
}

fn rendered(config: &CaptureConfig) -> String {
    let (v4, v6) = config.restore_input();
    v4 + &v6.unwrap_or_default()
}

fn ports(list: &[u16]) -> Selection<u16> {
    Selection::Only(list.to_vec())
}

/// Istio's test cases, on the base config of its tests (no inbound and no
/// outbound capture unless a case sets it).
fn cases() -> Vec<(&'static str, CaptureConfig)> {
    let base = CaptureConfig::default();
    vec![
        ("empty", base.clone()),
        (
            "ipnets",
            CaptureConfig { outbound_ranges: Selection::Only(vec!["10.0.0.0/8".parse().unwrap()]), ..base.clone() },
        ),
        ("inbound-ports-include", CaptureConfig { inbound_ports: ports(&[32000, 31000]), ..base.clone() }),
        ("inbound-ports-wildcard", CaptureConfig { inbound_ports: Selection::All, ..base.clone() }),
        (
            "inbound-ports-tproxy",
            CaptureConfig { inbound_ports: ports(&[32000, 31000]), mode: InboundMode::Tproxy, ..base.clone() },
        ),
        (
            "inbound-ports-wildcard-tproxy",
            CaptureConfig { inbound_ports: Selection::All, mode: InboundMode::Tproxy, ..base.clone() },
        ),
        ("outbound-ports-include", CaptureConfig { outbound_ports_include: vec![32000, 31000], ..base.clone() }),
        ("ipv6-empty-inbound-ports", CaptureConfig { ipv6: true, ..base.clone() }),
        ("ipv6-inbound-ports", CaptureConfig { inbound_ports: ports(&[4000, 5000]), ipv6: true, ..base.clone() }),
        (
            "ipv6-outbound-ports",
            CaptureConfig { outbound_ports_include: vec![32000, 31000], ipv6: true, ..base.clone() },
        ),
        ("host-ipv4-loopback-cidr", CaptureConfig { loopback_v4: "127.0.0.1/8".parse().unwrap(), ..base }),
    ]
}

#[test]
fn the_rules_are_istios_rule_for_rule() {
    for (name, config) in cases() {
        assert_eq!(rendered(&config), golden(name), "{name}");
    }
}

#[test]
fn the_injectors_defaults_capture_everything_but_the_status_ports() {
    let config = CaptureConfig {
        inbound_ports: Selection::All,
        inbound_ports_exclude: vec![15090, 15021, 15020],
        outbound_ranges: Selection::All,
        ..Default::default()
    };
    let (v4, v6) = config.restore_input();
    assert_eq!(v6, None);
    let lines: Vec<&str> = v4.lines().collect();
    let at = |line: &str| lines.iter().position(|l| *l == line).unwrap_or_else(|| panic!("no {line:?} in\n{v4}"));
    // The status ports return before the catch-all redirect.
    for port in [15090, 15021, 15020] {
        assert!(
            at(&format!("-A ISTIO_INBOUND -p tcp --dport {port} -j RETURN"))
                < at("-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT")
        );
    }
    // Everything the proxy and loopback do returns before the catch-all outbound redirect, which is last.
    assert_eq!(lines[lines.len() - 2], "-A ISTIO_OUTPUT -j ISTIO_REDIRECT");
    assert!(at("-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN") < at("-A ISTIO_OUTPUT -j ISTIO_REDIRECT"));
}

#[test]
fn ranges_and_excluded_ports_go_to_their_own_ip_version_in_istios_order() {
    let config = CaptureConfig {
        outbound_ranges: Selection::Only(vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]),
        outbound_ranges_exclude: vec!["10.1.0.0/16".parse().unwrap()],
        outbound_ports_exclude: vec![3306],
        ipv6: true,
        ..Default::default()
    };
    let (v4, v6) = config.restore_input();
    let v6 = v6.expect("IPv6 rules");
    assert!(v4.contains("-A ISTIO_OUTPUT -d 10.1.0.0/16 -j RETURN\n-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT\n"));
    assert!(!v4.contains("fd00::/8") && !v6.contains("10.0.0.0/8") && !v6.contains("10.1.0.0/16"));
    assert!(v6.contains("-A ISTIO_OUTPUT -d fd00::/8 -j ISTIO_REDIRECT"));
    for text in [&v4, &v6] {
        // Excluded ports return first, for TCP and UDP.
        assert!(text.contains(
            "-A OUTPUT -j ISTIO_OUTPUT\n-A ISTIO_OUTPUT -p tcp --dport 3306 -j RETURN\n-A ISTIO_OUTPUT -p udp --dport 3306 -j RETURN\n"
        ));
    }
}

#[test]
fn a_loopback_range_captures_the_apps_loopback_traffic_too() {
    let config =
        CaptureConfig { outbound_ranges: Selection::Only(vec!["127.1.2.3/32".parse().unwrap()]), ..Default::default() };
    let (v4, _) = config.restore_input();
    assert!(!v4.contains("-o lo -m owner ! --uid-owner"), "{v4}");
    assert!(v4.contains("-A ISTIO_OUTPUT -d 127.1.2.3/32 -j ISTIO_REDIRECT"));
}

#[test]
fn cidrs_are_read_strictly() {
    assert_eq!("10.0.0.0/8".parse::<Cidr>().unwrap().to_string(), "10.0.0.0/8");
    assert!("10.0.0.0".parse::<Cidr>().unwrap_err().contains("not a CIDR"));
    assert!("10.0.0.0/33".parse::<Cidr>().unwrap_err().contains("0 to 32"));
    assert!("fd00::/129".parse::<Cidr>().unwrap_err().contains("0 to 128"));
    assert!("host/8".parse::<Cidr>().unwrap_err().contains("not an IP address"));
}
