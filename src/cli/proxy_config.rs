//! `meshpush proxy-config clusters|listeners|routes|endpoints|secret PROXY`:
//! tables like `istioctl proxy-config`, read from the server's
//! `/debug/config_dump?proxyID=PROXY`; `-o json` prints that section of the
//! dump instead. The dump has private keys redacted already; the `secret`
//! table reads the certificates (public) for their serial and validity.

use serde_json::Value;

use super::table::Table;
use super::{CliError, admin_client};
use crate::generate::naming::{Direction, parse_cluster};

/// Which part of the configuration to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    /// CDS: clusters.
    Clusters,
    /// LDS: listeners (one row per filter chain).
    Listeners,
    /// RDS: routes (one row per route of each virtual host).
    Routes,
    /// EDS: endpoints of every cluster.
    Endpoints,
    /// SDS: certificates and CAs (private keys are never shown).
    Secret,
}

impl Section {
    /// The `@type` suffix of this section in a config dump.
    fn dump_type(self) -> &'static str {
        match self {
            Section::Clusters => "ClustersConfigDump",
            Section::Listeners => "ListenersConfigDump",
            Section::Routes => "RoutesConfigDump",
            Section::Endpoints => "EndpointsConfigDump",
            Section::Secret => "SecretsConfigDump",
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table.
    Short,
    /// The config dump section as JSON.
    Json,
}

/// The config dump of `proxy` from the admin address.
pub fn fetch(admin: &str, proxy: &str) -> Result<Value, CliError> {
    let path = format!("/debug/config_dump?proxyID={}", admin_client::encode_query(proxy));
    let body = admin_client::get(admin, &path)?;
    serde_json::from_str(&body)
        .map_err(|e| CliError::Admin { addr: admin.to_string(), reason: format!("{path} is not JSON: {e}") })
}

/// The section of a dump.
pub fn section(dump: &Value, which: Section) -> Value {
    dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["@type"].as_str().is_some_and(|t| t.ends_with(which.dump_type())))
        .cloned()
        .unwrap_or(Value::Null)
}

fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v[key].as_array().into_iter().flatten()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn clusters(section: &Value) -> Table {
    let mut t = Table::new(&["SERVICE FQDN", "PORT", "SUBSET", "DIRECTION", "TYPE"]);
    for c in items(section, "dynamic_active_clusters").map(|c| &c["cluster"]) {
        let name = text(&c["name"]);
        let kind = text(&c["type"]);
        let row = match parse_cluster(&name) {
            Some(n) => vec![
                if n.host.is_empty() { "-".into() } else { n.host.to_string() },
                n.port.to_string(),
                if n.subset.is_empty() { "-".into() } else { n.subset.to_string() },
                match n.direction {
                    Direction::Inbound => "inbound".into(),
                    Direction::Outbound => "outbound".into(),
                },
                kind,
            ],
            None => vec![name, "-".into(), "-".into(), "-".into(), kind],
        };
        t.row(row);
    }
    t
}

fn chain_match(m: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(p) = m["destination_port"].as_u64() {
        parts.push(format!("Port: {p}"));
    }
    let ranges: Vec<String> = items(m, "prefix_ranges")
        .map(|r| format!("{}/{}", text(&r["address_prefix"]), text(&r["prefix_len"])))
        .collect();
    if !ranges.is_empty() {
        parts.push(format!("Addr: {}", ranges.join(",")));
    }
    if let Some(t) = m["transport_protocol"].as_str() {
        parts.push(format!("Trans: {t}"));
    }
    let apps: Vec<String> = items(m, "application_protocols").map(text).collect();
    if !apps.is_empty() {
        parts.push(format!("App: {}", apps.join(",")));
    }
    if parts.is_empty() { "ALL".into() } else { parts.join("; ") }
}

fn chain_destination(chain: &Value) -> String {
    let mut out = Vec::new();
    for f in items(chain, "filters") {
        let tc = &f["typed_config"];
        if let Some(name) = tc["rds"]["route_config_name"].as_str() {
            out.push(format!("Route: {name}"));
        } else if tc["route_config"].is_object() {
            out.push("Inline Route".to_string());
        } else if let Some(c) = tc["cluster"].as_str() {
            out.push(format!("Cluster: {c}"));
        } else if tc["weighted_clusters"].is_object() {
            out.push("Weighted Clusters".to_string());
        }
    }
    if out.is_empty() { "Non-HTTP/Non-TCP".into() } else { out.join("; ") }
}

fn listeners(section: &Value) -> Table {
    let mut t = Table::new(&["NAME", "ADDRESSES", "PORT", "MATCH", "DESTINATION"]);
    for l in items(section, "dynamic_listeners") {
        let listener = &l["active_state"]["listener"];
        let sa = &listener["address"]["socket_address"];
        let (addr, port) = (text(&sa["address"]), text(&sa["port_value"]));
        let chains: Vec<&Value> =
            items(listener, "filter_chains").chain(listener.get("default_filter_chain")).collect();
        if chains.is_empty() {
            t.row(vec![text(&l["name"]), addr.clone(), port.clone(), "ALL".into(), "-".into()]);
        }
        for chain in chains {
            t.row(vec![
                text(&l["name"]),
                addr.clone(),
                port.clone(),
                chain_match(&chain["filter_chain_match"]),
                chain_destination(chain),
            ]);
        }
    }
    t
}

fn route_match(m: &Value) -> String {
    let path = if let Some(p) = m["prefix"].as_str() {
        if p == "/" { "/*".to_string() } else { format!("{p}*") }
    } else if let Some(p) = m["path"].as_str() {
        p.to_string()
    } else if let Some(r) = m["safe_regex"]["regex"].as_str() {
        format!("regex {r}")
    } else {
        "/*".to_string()
    };
    let headers: Vec<String> = items(m, "headers").map(|h| text(&h["name"])).collect();
    if headers.is_empty() { path } else { format!("{path} (headers: {})", headers.join(",")) }
}

fn domains(vh: &Value) -> String {
    let all: Vec<String> = items(vh, "domains").map(text).collect();
    match all.len() {
        0..=2 => all.join(", "),
        n => format!("{}, {} + {} more...", all[0], all[1], n - 2),
    }
}

fn route_destination(r: &Value) -> String {
    let route = &r["route"];
    if let Some(c) = route["cluster"].as_str() {
        c.to_string()
    } else if route["weighted_clusters"].is_object() {
        items(&route["weighted_clusters"], "clusters")
            .map(|c| format!("{} ({})", text(&c["name"]), text(&c["weight"])))
            .collect::<Vec<_>>()
            .join(", ")
    } else if r["direct_response"].is_object() {
        format!("direct response {}", text(&r["direct_response"]["status"]))
    } else if r["redirect"].is_object() {
        "redirect".into()
    } else {
        "-".into()
    }
}

fn routes(section: &Value) -> Table {
    let mut t = Table::new(&["NAME", "VHOST NAME", "DOMAINS", "MATCH", "DESTINATION"]);
    for rc in items(section, "dynamic_route_configs").map(|r| &r["route_config"]) {
        for vh in items(rc, "virtual_hosts") {
            for r in items(vh, "routes") {
                t.row(vec![
                    text(&rc["name"]),
                    text(&vh["name"]),
                    domains(vh),
                    route_match(&r["match"]),
                    route_destination(r),
                ]);
            }
        }
    }
    t
}

fn endpoints(section: &Value) -> Table {
    let mut t = Table::new(&["ENDPOINT", "STATUS", "CLUSTER"]);
    for cla in items(section, "dynamic_endpoint_configs").map(|e| &e["endpoint_config"]) {
        for locality in items(cla, "endpoints") {
            for e in items(locality, "lb_endpoints") {
                let sa = &e["endpoint"]["address"]["socket_address"];
                t.row(vec![
                    format!("{}:{}", text(&sa["address"]), text(&sa["port_value"])),
                    e["health_status"].as_str().unwrap_or("UNKNOWN").to_string(),
                    text(&cla["cluster_name"]),
                ]);
            }
        }
    }
    t
}

/// `(valid now, serial, not after, not before)` of the first certificate of
/// a PEM, given base64 as the dump holds inline bytes.
fn certificate_facts(inline: &Value) -> Option<(bool, String, String, String)> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD.decode(inline.as_str()?).ok()?;
    let block = x509_parser::pem::Pem::iter_from_buffer(&pem).next()?.ok()?;
    let cert = block.parse_x509().ok()?;
    let validity = cert.validity();
    let serial = cert.raw_serial_as_string().replace(':', "");
    Some((validity.is_valid(), serial, validity.not_after.to_string(), validity.not_before.to_string()))
}

fn secrets(section: &Value) -> Table {
    let mut t = Table::new(&["RESOURCE NAME", "TYPE", "VALID CERT", "SERIAL NUMBER", "NOT AFTER", "NOT BEFORE"]);
    for s in items(section, "dynamic_active_secrets").map(|s| &s["secret"]) {
        let (kind, inline) = if s["tls_certificate"].is_object() {
            ("Cert Chain", &s["tls_certificate"]["certificate_chain"]["inline_bytes"])
        } else {
            ("CA", &s["validation_context"]["trusted_ca"]["inline_bytes"])
        };
        let row = match certificate_facts(inline) {
            Some((valid, serial, not_after, not_before)) => {
                vec![text(&s["name"]), kind.into(), valid.to_string(), serial, not_after, not_before]
            }
            None => vec![text(&s["name"]), kind.into(), "false".into(), "-".into(), "-".into(), "-".into()],
        };
        t.row(row);
    }
    t
}

/// The table (or JSON) for `which` of a config dump.
pub fn render(dump: &Value, which: Section, output: Output) -> String {
    let section = section(dump, which);
    match output {
        Output::Json => {
            let mut s = serde_json::to_string_pretty(&section).unwrap_or_default();
            s.push('\n');
            s
        }
        Output::Short => match which {
            Section::Clusters => clusters(&section),
            Section::Listeners => listeners(&section),
            Section::Routes => routes(&section),
            Section::Endpoints => endpoints(&section),
            Section::Secret => secrets(&section),
        }
        .render(),
    }
}

/// Runs the command.
pub fn run(admin: &str, which: Section, proxy: &str, output: Output) -> Result<String, CliError> {
    Ok(render(&fetch(admin, proxy)?, which, output))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cluster_rows_take_names_apart() {
        let dump = json!({ "configs": [{
            "@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
            "dynamic_active_clusters": [
                { "cluster": { "name": "outbound|9080|v1|reviews.default.svc.cluster.local", "type": "EDS" } },
                { "cluster": { "name": "BlackHoleCluster", "type": "STATIC" } },
            ],
        }]});
        let out = render(&dump, Section::Clusters, Output::Short);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("SERVICE FQDN"));
        assert!(lines[1].starts_with("reviews.default.svc.cluster.local") && lines[1].contains("v1"), "{out}");
        assert!(lines[1].contains("outbound") && lines[1].ends_with("EDS"), "{out}");
        assert!(lines[2].starts_with("BlackHoleCluster"), "{out}");
    }

    #[test]
    fn an_endpoint_without_a_health_status_is_unknown_as_envoy_s_json_leaves_it_out() {
        let dump = json!({ "configs": [{
            "@type": "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
            "dynamic_endpoint_configs": [{ "endpoint_config": {
                "cluster_name": "c",
                "endpoints": [{ "lb_endpoints": [
                    { "endpoint": { "address": { "socket_address": { "address": "10.0.0.1", "port_value": 80 } } } },
                    { "endpoint": { "address": { "socket_address": { "address": "10.0.0.2", "port_value": 80 } } },
                      "health_status": "HEALTHY" },
                ]}],
            }}],
        }]});
        let out = render(&dump, Section::Endpoints, Output::Short);
        let rows: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows, [vec!["10.0.0.1:80", "UNKNOWN", "c"], vec!["10.0.0.2:80", "HEALTHY", "c"]], "{out}");
    }
}
