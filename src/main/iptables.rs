//! `meshpush iptables`: istio-iptables' flags (those Istio's injector
//! passes to the `istio-init` container), read into a capture config, and
//! the rules written, printed or removed (`meshpush::capture`).

use std::process::ExitCode;

use meshpush::capture::apply::{self, Outcome};
use meshpush::capture::{CaptureConfig, Cidr, InboundMode, Selection};

/// The flags, as istio-iptables takes them.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CaptureArgs {
    /// Envoy's outbound listener, where captured outbound TCP goes.
    #[arg(short = 'p', long = "envoy-port", default_value_t = 15001)]
    envoy_port: u16,
    /// Envoy's inbound listener, where captured inbound TCP goes.
    #[arg(short = 'z', long = "inbound-capture-port", default_value_t = 15006)]
    inbound_capture_port: u16,
    /// The HBONE port, never captured.
    #[arg(short = 'e', long = "inbound-tunnel-port", default_value_t = 15008)]
    inbound_tunnel_port: u16,
    /// The proxy's user ids (comma-separated): its traffic is never captured.
    /// Default: the uid of user `istio-proxy`, else 1337.
    #[arg(short = 'u', long = "proxy-uid")]
    proxy_uid: Option<String>,
    /// The proxy's group ids (comma-separated). Default: the user ids.
    #[arg(short = 'g', long = "proxy-gid")]
    proxy_gid: Option<String>,
    /// How inbound connections are captured: REDIRECT (NAT) or TPROXY.
    #[arg(short = 'm', long = "istio-inbound-interception-mode", default_value = "REDIRECT")]
    mode: String,
    /// Inbound ports captured (comma-separated), `*` for all, empty for none.
    #[arg(short = 'b', long = "istio-inbound-ports", default_value = "")]
    inbound_ports: String,
    /// Inbound ports not captured when `-b` is `*`.
    #[arg(short = 'd', long = "istio-local-exclude-ports", default_value = "")]
    inbound_ports_exclude: String,
    /// Outbound address ranges captured (CIDRs, comma-separated), `*` for
    /// all, empty for none.
    #[arg(short = 'i', long = "istio-service-cidr", default_value = "")]
    outbound_ranges: String,
    /// Outbound address ranges never captured.
    #[arg(short = 'x', long = "istio-service-exclude-cidr", default_value = "")]
    outbound_ranges_exclude: String,
    /// Outbound ports captured whatever their address.
    #[arg(short = 'q', long = "istio-outbound-ports", default_value = "")]
    outbound_ports_include: String,
    /// Outbound ports never captured (TCP and UDP).
    #[arg(short = 'o', long = "istio-local-outbound-ports-exclude", default_value = "")]
    outbound_ports_exclude: String,
    /// The mark of TPROXY-captured packets.
    #[arg(short = 't', long = "istio-inbound-tproxy-mark", default_value_t = 1337)]
    tproxy_mark: u32,
    /// The routing table that delivers TPROXY-captured packets locally.
    #[arg(short = 'r', long = "istio-inbound-tproxy-route-table", default_value_t = 133)]
    tproxy_route_table: u32,
    /// Write IPv6 rules as well when the pod has both IPv4 and IPv6
    /// addresses (an IPv6-only pod always gets them).
    #[arg(long, env = "ISTIO_DUAL_STACK", num_args = 0..=1, default_value = "false",
          default_missing_value = "true", value_parser = meshpush::os::parse_switch)]
    dual_stack: bool,
    /// Print the rules (`iptables-restore` input, IPv4 then IPv6) and
    /// write nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// pilot-agent's log levels (`default:info`): the `default` scope's
    /// level becomes this command's log level.
    #[arg(long = "log_output_level")]
    log_output_level: Option<String>,
}

/// `meshpush iptables [clean]`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum CaptureAction {
    /// Remove the rules these flags write, every jump to one of Istio's
    /// chains and the chains themselves.
    Clean(CaptureArgs),
}

/// A comma-separated list, empty items dropped (as Istio splits it).
fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').filter(|s| !s.is_empty())
}

fn ports(flag: &str, list: &str) -> Result<Vec<u16>, String> {
    items(list).map(|p| p.parse().map_err(|_| format!("{flag} {list:?}: {p:?} is not a port"))).collect()
}

fn selection<T>(flag: &str, list: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Selection<T>, String> {
    match list {
        "" => Ok(Selection::None),
        "*" => Ok(Selection::All),
        _ => items(list)
            .map(|i| item(i).map_err(|e| format!("{flag}: {e}")))
            .collect::<Result<_, _>>()
            .map(Selection::Only),
    }
}

/// The uid of user `istio-proxy` in `/etc/passwd`, else Istio's 1337.
fn default_proxy_uid() -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"istio-proxy")).then(|| fields.get(2).map(|uid| uid.to_string())).flatten()
        })
        .unwrap_or_else(|| "1337".to_string())
}

/// Whether IPv6 rules are written, from the pod's addresses as Istio
/// decides: the first address that is neither loopback nor link-local is
/// IPv6, or (with `--dual-stack`) any is; an error when there is none.
fn ipv6(dual_stack: bool) -> Result<bool, String> {
    let output = std::process::Command::new("ip")
        .args(["-o", "addr", "show"])
        .output()
        .map_err(|e| format!("listing the pod's addresses (ip -o addr show): {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let addresses: Vec<std::net::IpAddr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().skip_while(|w| *w != "inet" && *w != "inet6");
            words.next()?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .filter(|addr: &std::net::IpAddr| {
            !addr.is_loopback()
                && match addr {
                    std::net::IpAddr::V4(v4) => !v4.is_link_local(),
                    std::net::IpAddr::V6(v6) => !v6.is_unicast_link_local(),
                }
        })
        .collect();
    let first = addresses.first().ok_or("no valid local IP address found: the pod has no address to capture for")?;
    Ok(first.is_ipv6() || (dual_stack && addresses.iter().any(|a| a.is_ipv6())))
}

impl CaptureArgs {
    /// The log level `--log_output_level` sets, if any.
    pub(crate) fn log_level(&self) -> Option<String> {
        let levels = self.log_output_level.as_deref()?;
        let default = levels.split(',').find_map(|scope| scope.strip_prefix("default:"));
        default.map(|level| if level == "none" { "off".to_string() } else { level.to_string() })
    }

    /// The capture config the flags give.
    fn config(&self) -> Result<CaptureConfig, String> {
        let mode = match self.mode.as_str() {
            "REDIRECT" => InboundMode::Redirect,
            "TPROXY" => InboundMode::Tproxy,
            other => return Err(format!("-m {other:?}: the interception mode is REDIRECT or TPROXY")),
        };
        if self.outbound_ranges_exclude == "*" {
            return Err("-x \"*\": every range cannot be excluded; leave -i empty to capture nothing".into());
        }
        let uids = self.proxy_uid.clone().unwrap_or_else(default_proxy_uid);
        let gids = self.proxy_gid.clone().unwrap_or_else(|| uids.clone());
        let cidr = |c: &str| c.parse::<Cidr>();
        Ok(CaptureConfig {
            proxy_port: self.envoy_port,
            inbound_capture_port: self.inbound_capture_port,
            inbound_tunnel_port: self.inbound_tunnel_port,
            proxy_uids: items(&uids).map(str::to_string).collect(),
            proxy_gids: items(&gids).map(str::to_string).collect(),
            mode,
            inbound_ports: selection("-b", &self.inbound_ports, |p| {
                p.parse().map_err(|_| format!("{p:?} is not a port"))
            })?,
            inbound_ports_exclude: ports("-d", &self.inbound_ports_exclude)?,
            outbound_ranges: selection("-i", &self.outbound_ranges, cidr)?,
            outbound_ranges_exclude: items(&self.outbound_ranges_exclude)
                .map(|c| cidr(c).map_err(|e| format!("-x: {e}")))
                .collect::<Result<_, _>>()?,
            outbound_ports_include: ports("-q", &self.outbound_ports_include)?,
            outbound_ports_exclude: ports("-o", &self.outbound_ports_exclude)?,
            tproxy_mark: self.tproxy_mark,
            tproxy_route_table: self.tproxy_route_table,
            ipv6: ipv6(self.dual_stack)?,
            ..Default::default()
        })
    }
}

/// Writes (or prints, or with `clean` removes) the rules.
pub(crate) fn run(args: &CaptureArgs, clean: bool) -> ExitCode {
    let command = if clean { "meshpush iptables clean" } else { "meshpush iptables" };
    let config = match args.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{command}: {e}");
            return ExitCode::from(2);
        }
    };
    if std::env::var("ISTIO_META_DNS_CAPTURE").is_ok_and(|v| meshpush::os::parse_switch(&v) == Ok(true)) {
        tracing::warn!(
            "ISTIO_META_DNS_CAPTURE is set: DNS is not captured, as meshpush's agent has no DNS proxy to send it to"
        );
    }
    if args.dry_run {
        let (v4, v6) = config.restore_input();
        print!("{v4}{}", v6.unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let done = if clean {
        apply::clean(&config).map(|()| "removed")
    } else {
        apply::install(&config).map(|outcome| match outcome {
            Outcome::Installed => "installed",
            Outcome::AlreadyInstalled => "already in place: nothing written",
        })
    };
    match done {
        Ok(what) => {
            tracing::info!("capture rules {what}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{command}: {e}");
            ExitCode::FAILURE
        }
    }
}
