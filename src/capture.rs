//! Traffic capture: the iptables rules that send a pod's traffic through
//! its Envoy, as Istio's `istio-iptables` (the `istio-init` container)
//! writes them.
//!
//! Role: [`CaptureConfig`] holds what istio-iptables' flags say (the ones
//! Istio's injector passes: `-p -z -u -g -m -i -x -b -d -o -q`), and
//! [`CaptureConfig::restore_input`] renders the rules as the text
//! `iptables-restore --noflush` (and `ip6tables-restore`) takes, chain by
//! chain in Istio's order:
//! - `nat` `ISTIO_INBOUND`, entered from `PREROUTING`: inbound TCP to the
//!   captured ports goes to `ISTIO_IN_REDIRECT`, a REDIRECT to Envoy's
//!   inbound listener (15006). Envoy's HBONE port (15008) is never captured.
//! - `nat` `ISTIO_OUTPUT`, entered from `OUTPUT`: the proxy's own traffic
//!   (its uid and gid), traffic Envoy sends from 127.0.0.6 to the app, and
//!   traffic to 127.0.0.1 return untouched; the proxy calling its own pod
//!   over loopback is sent to the inbound listener, so inbound policy
//!   applies; the rest, to the captured ranges and ports, goes to
//!   `ISTIO_REDIRECT`, a REDIRECT to Envoy's outbound listener (15001).
//! - With `TPROXY`, inbound moves to `mangle`: `ISTIO_TPROXY` hands
//!   connections to 15006 keeping their original destination and source,
//!   marked 1337, and `ISTIO_DIVERT` keeps established ones on the proxy.
//!
//! The text is Istio's own, rule for rule (its tests' golden files are
//! this module's test oracles), so a rule set written by either reads the
//! same in `iptables-save`.
//!
//! Invariants: every chain the text appends to is created (`-N`) before
//! its rules, in the order Istio creates them; a CIDR goes only to the
//! rules of its own IP version, `*` to both; rendering is a pure function
//! of the config.

use std::fmt::Write as _;
use std::net::IpAddr;

/// The source address Envoy's inbound passthrough binds, so that its
/// connections to the app are never captured again.
const INBOUND_PASSTHROUGH_V4: &str = "127.0.0.6/32";
const INBOUND_PASSTHROUGH_V6: &str = "::6/128";
/// The IPv6 loopback Istio never captures.
const LOOPBACK_V6: &str = "::1/128";
/// The mark of a TPROXY-captured connection's packets that leave the
/// proxy toward its own pod over loopback (Istio's `OutboundMark`).
const OUTBOUND_MARK: u32 = 1338;
/// Chains every table has.
const BUILTIN_CHAINS: [&str; 5] = ["INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"];

/// How inbound connections are captured (`-m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InboundMode {
    /// NAT REDIRECT to the inbound listener: the app sees the connection
    /// come from 127.0.0.6.
    #[default]
    Redirect,
    /// TPROXY: the original source and destination are kept.
    Tproxy,
}

/// Which ports or address ranges are captured: none (an empty flag), all
/// (`*`), or a list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Selection<T> {
    /// Nothing is captured.
    #[default]
    None,
    /// Everything is.
    All,
    /// These are.
    Only(Vec<T>),
}

/// An address range, `ADDRESS/PREFIX`, printed as given (as Istio prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl Cidr {
    fn is_v6(&self) -> bool {
        self.addr.is_ipv6()
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = s.split_once('/').ok_or_else(|| format!("{s:?} is not a CIDR (ADDRESS/PREFIX)"))?;
        let addr: IpAddr = addr.parse().map_err(|_| format!("{s:?} is not a CIDR: {addr:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("{s:?} is not a CIDR: the prefix is not 0 to {max}"))?;
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What istio-iptables is told, with its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// `-p`: Envoy's outbound listener.
    pub proxy_port: u16,
    /// `-z`: Envoy's inbound listener.
    pub inbound_capture_port: u16,
    /// `-e`: the HBONE port, never captured.
    pub inbound_tunnel_port: u16,
    /// `-u`: the proxy's users, whose traffic is never captured.
    pub proxy_uids: Vec<String>,
    /// `-g`: the proxy's groups (Istio: the users' ids when not given).
    pub proxy_gids: Vec<String>,
    /// `-m`.
    pub mode: InboundMode,
    /// `-b`: the inbound ports captured.
    pub inbound_ports: Selection<u16>,
    /// `-d`: the ports not captured when every inbound port is.
    pub inbound_ports_exclude: Vec<u16>,
    /// `-i`: the outbound ranges captured.
    pub outbound_ranges: Selection<Cidr>,
    /// `-x`: the outbound ranges never captured.
    pub outbound_ranges_exclude: Vec<Cidr>,
    /// `-q`: outbound ports captured whatever their address.
    pub outbound_ports_include: Vec<u16>,
    /// `-o`: outbound ports never captured (TCP and UDP).
    pub outbound_ports_exclude: Vec<u16>,
    /// `-t`: the mark of TPROXY-captured packets.
    pub tproxy_mark: u32,
    /// `-r`: the routing table that delivers them to the proxy locally.
    pub tproxy_route_table: u32,
    /// Whether IPv6 rules are written too (Istio: when the pod has an IPv6 address).
    pub ipv6: bool,
    /// The IPv4 loopback range never captured (Istio's
    /// `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR`, `127.0.0.1/32`).
    pub loopback_v4: Cidr,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            proxy_port: 15001,
            inbound_capture_port: 15006,
            inbound_tunnel_port: 15008,
            proxy_uids: vec!["1337".into()],
            proxy_gids: vec!["1337".into()],
            mode: InboundMode::Redirect,
            inbound_ports: Selection::None,
            inbound_ports_exclude: Vec::new(),
            outbound_ranges: Selection::None,
            outbound_ranges_exclude: Vec::new(),
            outbound_ports_include: Vec::new(),
            outbound_ports_exclude: Vec::new(),
            tproxy_mark: 1337,
            tproxy_route_table: 133,
            ipv6: false,
            loopback_v4: Cidr { addr: IpAddr::from([127, 0, 0, 1]), prefix: 32 },
        }
    }
}

/// One rule: its table, its chain and the `iptables-restore` line
/// (`-A CHAIN …` or `-I CHAIN N …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The table.
    pub table: &'static str,
    /// The chain.
    pub chain: &'static str,
    /// The restore line.
    pub line: String,
}

impl Rule {
    /// The rule's match and target, without the `-A CHAIN` or `-I CHAIN N`
    /// that place it: what `iptables -C CHAIN` and `-D CHAIN` take, word
    /// by word (no word of a rule holds a space).
    pub fn spec(&self) -> Vec<&str> {
        let words: Vec<&str> = self.line.split_whitespace().collect();
        let skip = if words[0] == "-I" { 3 } else { 2 };
        words[skip..].to_vec()
    }

    /// Whether it is in a chain every table has (not one of Istio's own).
    pub fn in_builtin_chain(&self) -> bool {
        BUILTIN_CHAINS.contains(&self.chain)
    }
}

/// The rules of one IP version, in the order they are written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rules(Vec<Rule>);

impl Rules {
    /// Every rule, in the order written.
    pub fn all(&self) -> &[Rule] {
        &self.0
    }

    /// The chains of Istio's the rules create in `table`, each with how
    /// many rules it holds.
    pub fn chains(&self, table: &str) -> Vec<(&'static str, usize)> {
        let mut out: Vec<(&'static str, usize)> = Vec::new();
        for rule in self.0.iter().filter(|r| r.table == table && !r.in_builtin_chain()) {
            match out.iter_mut().find(|(c, _)| *c == rule.chain) {
                Some((_, n)) => *n += 1,
                None => out.push((rule.chain, 1)),
            }
        }
        out
    }

    /// The tables the rules write to, by name.
    pub fn tables(&self) -> Vec<&'static str> {
        let mut tables: Vec<&'static str> = self.0.iter().map(|r| r.table).collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    fn append(&mut self, table: &'static str, chain: &'static str, spec: impl std::fmt::Display) {
        self.0.push(Rule { table, chain, line: format!("-A {chain} {spec}") });
    }

    fn insert(&mut self, table: &'static str, chain: &'static str, at: u32, spec: impl std::fmt::Display) {
        self.0.push(Rule { table, chain, line: format!("-I {chain} {at} {spec}") });
    }

    /// The `iptables-restore` input: per table, by name, its chains
    /// created in the order they are first written to, then its rules.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for table in self.tables() {
            let rules: Vec<&Rule> = self.0.iter().filter(|r| r.table == table).collect();
            let _ = writeln!(out, "* {table}");
            let mut created: Vec<&str> = Vec::new();
            for rule in &rules {
                if !BUILTIN_CHAINS.contains(&rule.chain) && !created.contains(&rule.chain) {
                    created.push(rule.chain);
                }
            }
            for chain in created {
                let _ = writeln!(out, "-N {chain}");
            }
            for rule in rules {
                let _ = writeln!(out, "{}", rule.line);
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

/// The addresses that differ between the IP versions.
struct Family {
    v6: bool,
    loopback: String,
    passthrough: &'static str,
}

impl CaptureConfig {
    /// The `iptables-restore` input for IPv4, and for IPv6 when the config
    /// asks for it.
    pub fn restore_input(&self) -> (String, Option<String>) {
        (self.rule_set(false).render(), self.ipv6.then(|| self.rule_set(true).render()))
    }

    /// The rules of IPv6 (`v6`) or IPv4, in Istio's order.
    pub fn rule_set(&self, v6: bool) -> Rules {
        let family = if v6 {
            Family { v6: true, loopback: LOOPBACK_V6.to_string(), passthrough: INBOUND_PASSTHROUGH_V6 }
        } else {
            Family { v6: false, loopback: self.loopback_v4.to_string(), passthrough: INBOUND_PASSTHROUGH_V4 }
        };
        self.rules(&family)
    }

    /// The rules of one IP version, in Istio's order.
    fn rules(&self, family: &Family) -> Rules {
        let mut r = Rules::default();
        let lo = &family.loopback;
        r.append("nat", "ISTIO_INBOUND", format_args!("-p tcp --dport {} -j RETURN", self.inbound_tunnel_port));
        r.append("nat", "ISTIO_REDIRECT", format_args!("-p tcp -j REDIRECT --to-ports {}", self.proxy_port));
        r.append(
            "nat",
            "ISTIO_IN_REDIRECT",
            format_args!("-p tcp -j REDIRECT --to-ports {}", self.inbound_capture_port),
        );
        self.inbound(&mut r, lo);
        r.append("nat", "OUTPUT", "-j ISTIO_OUTPUT");
        for port in &self.outbound_ports_exclude {
            r.append("nat", "ISTIO_OUTPUT", format_args!("-p tcp --dport {port} -j RETURN"));
            r.append("nat", "ISTIO_OUTPUT", format_args!("-p udp --dport {port} -j RETURN"));
        }
        r.append("nat", "ISTIO_OUTPUT", format_args!("-o lo -s {} -j RETURN", family.passthrough));
        // An included range on loopback: the app's own loopback traffic to it is captured too.
        let loopback_included = match &self.outbound_ranges {
            Selection::Only(ranges) => ranges.iter().any(|c| c.addr.is_loopback()),
            _ => false,
        };
        for (owner, ids) in [("uid", &self.proxy_uids), ("gid", &self.proxy_gids)] {
            for id in ids {
                r.append(
                    "nat",
                    "ISTIO_OUTPUT",
                    format_args!(
                        "-o lo ! -d {lo} -p tcp ! --dport {} -m owner --{owner}-owner {id} -j ISTIO_IN_REDIRECT",
                        self.inbound_tunnel_port
                    ),
                );
                if !loopback_included {
                    r.append("nat", "ISTIO_OUTPUT", format_args!("-o lo -m owner ! --{owner}-owner {id} -j RETURN"));
                }
                r.append("nat", "ISTIO_OUTPUT", format_args!("-m owner --{owner}-owner {id} -j RETURN"));
            }
        }
        r.append("nat", "ISTIO_OUTPUT", format_args!("-d {lo} -j RETURN"));
        for cidr in self.outbound_ranges_exclude.iter().filter(|c| c.is_v6() == family.v6) {
            r.append("nat", "ISTIO_OUTPUT", format_args!("-d {cidr} -j RETURN"));
        }
        for port in &self.outbound_ports_include {
            r.append("nat", "ISTIO_OUTPUT", format_args!("-p tcp --dport {port} -j ISTIO_REDIRECT"));
        }
        match &self.outbound_ranges {
            Selection::None => {}
            Selection::All => r.append("nat", "ISTIO_OUTPUT", "-j ISTIO_REDIRECT"),
            Selection::Only(ranges) => {
                for cidr in ranges.iter().filter(|c| c.is_v6() == family.v6) {
                    r.append("nat", "ISTIO_OUTPUT", format_args!("-d {cidr} -j ISTIO_REDIRECT"));
                }
            }
        }
        if self.mode == InboundMode::Tproxy {
            self.tproxy_marks(&mut r, lo, family.passthrough);
        }
        r
    }

    /// The inbound capture: `nat` REDIRECT, or `mangle` TPROXY.
    fn inbound(&self, r: &mut Rules, lo: &str) {
        if self.inbound_ports == Selection::None {
            return;
        }
        let tproxy = self.mode == InboundMode::Tproxy;
        let table = if tproxy { "mangle" } else { "nat" };
        if tproxy {
            let mark = self.tproxy_mark;
            r.append("mangle", "ISTIO_DIVERT", format_args!("-j MARK --set-mark {mark}"));
            r.append("mangle", "ISTIO_DIVERT", "-j ACCEPT");
            r.append(
                "mangle",
                "ISTIO_TPROXY",
                format_args!(
                    "! -d {lo} -p tcp -j TPROXY --tproxy-mark {mark}/0xffffffff --on-port {}",
                    self.inbound_capture_port
                ),
            );
        }
        r.append(table, "PREROUTING", "-p tcp -j ISTIO_INBOUND");
        let capture = |r: &mut Rules, port: Option<u16>| {
            let dport = port.map(|p| format!(" --dport {p}")).unwrap_or_default();
            if tproxy {
                r.append(
                    "mangle",
                    "ISTIO_INBOUND",
                    format_args!("-p tcp{dport} -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT"),
                );
                r.append("mangle", "ISTIO_INBOUND", format_args!("-p tcp{dport} -j ISTIO_TPROXY"));
            } else {
                r.append("nat", "ISTIO_INBOUND", format_args!("-p tcp{dport} -j ISTIO_IN_REDIRECT"));
            }
        };
        match &self.inbound_ports {
            Selection::None => {}
            Selection::All => {
                for port in &self.inbound_ports_exclude {
                    r.append(table, "ISTIO_INBOUND", format_args!("-p tcp --dport {port} -j RETURN"));
                }
                capture(r, None);
            }
            Selection::Only(ports) => {
                for port in ports {
                    capture(r, Some(*port));
                }
            }
        }
    }

    /// TPROXY's marks: connections the proxy accepted keep their mark, so
    /// their replies route back through it, and the proxy's own loopback
    /// calls to its pod are told apart from them.
    fn tproxy_marks(&self, r: &mut Rules, lo: &str, passthrough: &str) {
        let mark = self.tproxy_mark;
        r.append("mangle", "PREROUTING", format_args!("-p tcp -m mark --mark {mark} -j CONNMARK --save-mark"));
        r.append("mangle", "OUTPUT", format_args!("-p tcp -o lo -m mark --mark {mark} -j RETURN"));
        for (owner, ids) in [("uid", &self.proxy_uids), ("gid", &self.proxy_gids)] {
            for id in ids {
                r.append(
                    "mangle",
                    "OUTPUT",
                    format_args!(
                        "! -d {lo} -p tcp -o lo -m owner --{owner}-owner {id} -j MARK --set-mark {OUTBOUND_MARK}"
                    ),
                );
            }
        }
        r.append("mangle", "OUTPUT", format_args!("-p tcp -m connmark --mark {mark} -j CONNMARK --restore-mark"));
        r.insert("mangle", "ISTIO_INBOUND", 1, format_args!("-p tcp -m mark --mark {mark} -j RETURN"));
        r.insert("mangle", "ISTIO_INBOUND", 2, format_args!("-p tcp -s {passthrough} -i lo -j RETURN"));
        r.insert("mangle", "ISTIO_INBOUND", 3, format_args!("-p tcp -i lo -m mark ! --mark {OUTBOUND_MARK} -j RETURN"));
    }
}

pub mod apply;

#[cfg(test)]
mod test;
