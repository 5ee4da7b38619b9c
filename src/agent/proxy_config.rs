//! The ProxyConfig the agent runs Envoy by, layered as pilot-agent layers
//! it, lowest first:
//!
//! 1. Istio's defaults (`DefaultProxyConfig`);
//! 2. `defaultConfig` of the mesh config file (`--mesh-config`, by default
//!    `./etc/istio/config/mesh` when it exists, where Istio mounts the
//!    `istio` ConfigMap), whose `trustDomain` is also the agent's;
//! 3. the `PROXY_CONFIG` environment variable (YAML or JSON), which Istio's
//!    injector sets;
//! 4. the pod's `proxy.istio.io/config` annotation, read from the
//!    downward-API file (`--pod-annotations`, by default
//!    `./etc/istio/pod/annotations` when it exists);
//! 5. `ISTIO_CPU_LIMIT` for a concurrency no layer set; then the
//!    annotations `status.sidecar.istio.io/port`,
//!    `sidecar.istio.io/discoveryAddress` and
//!    `sidecar.istio.io/statsInclusion{Prefixes,Suffixes,Regexps}` (each
//!    list replacing the ProxyConfig's), and last the agent's own flags.
//!
//! Each layer replaces the fields it sets and merges `proxyMetadata` by key
//! ([`ProxyConfig::over`]). A field a layer sets that meshpush does not
//! model is logged with its path and what happens instead (istiod skips such
//! fields without a word); a value of the wrong type stops the agent with
//! the layer and path, as pilot-agent's validation does.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::mesh::MeshSettings;
use crate::config::mesh::proxy_config::ProxyConfig;
use crate::text::Shown;

/// The pod annotation naming the agent's status port.
pub const STATUS_PORT_ANNOTATION: &str = "status.sidecar.istio.io/port";
/// The pod annotation holding a ProxyConfig.
pub const PROXY_CONFIG_ANNOTATION: &str = "proxy.istio.io/config";

/// What the agent was given besides its flags.
#[derive(Debug, Default)]
pub struct Sources<'a> {
    /// The mesh config file, if there is one.
    pub mesh_config: Option<&'a Path>,
    /// `PROXY_CONFIG`.
    pub env_proxy_config: Option<String>,
    /// The downward-API annotations file, if there is one.
    pub pod_annotations: Option<&'a Path>,
    /// `ISTIO_CPU_LIMIT`.
    pub cpu_limit: Option<String>,
}

/// The layered result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layered {
    /// The ProxyConfig.
    pub config: ProxyConfig,
    /// The mesh config's `trustDomain`, if it sets one.
    pub trust_domain: Option<String>,
    /// What was set and not applied, each with its layer and path.
    pub unapplied: Vec<String>,
    /// The status port: the pod's `status.sidecar.istio.io/port` (0: none),
    /// else the ProxyConfig's `statusPort`.
    pub status_port: u16,
}

/// Layers `sources` over Istio's defaults.
pub fn layered(sources: &Sources<'_>) -> Result<Layered, String> {
    let mut config = ProxyConfig::istio_default();
    let mut unapplied = Vec::new();
    let mut trust_domain = None;
    if let Some(path) = sources.mesh_config {
        let settings = MeshSettings::read(path)?;
        for problem in settings.problems.iter().filter(|p| p.path.starts_with("defaultConfig")) {
            unapplied.push(format!("{}: {}: {}", path.display(), problem.path, problem.message));
        }
        if let Some(own) = &settings.default_config {
            config = config.over(own);
        }
        trust_domain = settings.trust_domain;
    }
    if let Some(text) = sources.env_proxy_config.as_deref().filter(|t| !t.trim().is_empty()) {
        config = layer(config, "PROXY_CONFIG", text, &mut unapplied)?;
    }
    let annotations = match sources.pod_annotations {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
            parse_annotations(&text)
        }
        None => BTreeMap::new(),
    };
    if let Some(text) = annotations.get(PROXY_CONFIG_ANNOTATION) {
        config = layer(config, &format!("annotation {PROXY_CONFIG_ANNOTATION}"), text, &mut unapplied)?;
    }
    if config.concurrency.is_none()
        && let Some(limit) = sources.cpu_limit.as_deref().and_then(|l| l.trim().parse::<i32>().ok())
        && limit > 0
    {
        config.concurrency = Some(limit);
    }
    if let Some(address) = annotations.get("sidecar.istio.io/discoveryAddress").filter(|a| !a.is_empty()) {
        config.discovery_address = Some(address.clone());
    }
    let list = |name: &str| {
        annotations.get(name).filter(|v| !v.is_empty()).map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
    };
    let (prefixes, suffixes, regexps) = (
        list("sidecar.istio.io/statsInclusionPrefixes"),
        list("sidecar.istio.io/statsInclusionSuffixes"),
        list("sidecar.istio.io/statsInclusionRegexps"),
    );
    if prefixes.is_some() || suffixes.is_some() || regexps.is_some() {
        let matcher = config.proxy_stats_matcher.get_or_insert_with(Default::default);
        matcher.inclusion_prefixes = prefixes.unwrap_or_else(|| std::mem::take(&mut matcher.inclusion_prefixes));
        matcher.inclusion_suffixes = suffixes.unwrap_or_else(|| std::mem::take(&mut matcher.inclusion_suffixes));
        matcher.inclusion_regexps = regexps.unwrap_or_else(|| std::mem::take(&mut matcher.inclusion_regexps));
    }
    config.check().map_err(|(path, why)| format!("the layered ProxyConfig: {path}: {why}"))?;
    let status_port = match annotations.get(STATUS_PORT_ANNOTATION) {
        Some(port) => port
            .trim()
            .parse()
            .map_err(|_| format!("annotation {STATUS_PORT_ANNOTATION}: {:?} is not a port", Shown(port).to_string()))?,
        None => config.status_port(),
    };
    Ok(Layered { config, trust_domain, unapplied, status_port })
}

/// `config` with the ProxyConfig document `text` of `origin` over it.
fn layer(config: ProxyConfig, origin: &str, text: &str, unapplied: &mut Vec<String>) -> Result<ProxyConfig, String> {
    let (own, ignored) = ProxyConfig::parse(origin, text)?;
    for path in ignored {
        let message = crate::config::mesh::proxy_config::unapplied_message(&path);
        unapplied.push(format!("{origin}: {}: {message}", Shown(&path)));
    }
    Ok(config.over(&own))
}

/// The annotations of a downward-API file: a `KEY="VALUE"` line each, the
/// value quoted as Go quotes strings. A line that is not one is skipped.
pub fn parse_annotations(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            Some((key.trim().to_string(), unquote(value.trim())?))
        })
        .collect()
}

/// A Go double-quoted string's value (`\"`, `\\`, `\n`, `\t`, `\r`,
/// `\uXXXX` and `\xXX` escapes).
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let hex = |chars: &mut std::str::Chars<'_>, n: usize| {
            let digits: String = chars.by_ref().take(n).collect();
            u32::from_str_radix(&digits, 16).ok().and_then(char::from_u32)
        };
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'u' => out.push(hex(&mut chars, 4)?),
            'U' => out.push(hex(&mut chars, 8)?),
            'x' => out.push(hex(&mut chars, 2)?),
            other => out.push(other),
        }
    }
    Some(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn annotations_are_read_as_the_downward_api_writes_them() {
        let text = "app=\"reviews\"\nproxy.istio.io/config=\"concurrency: 3\\nproxyMetadata:\\n  A: \\\"quoted\\\"\\n\"\n\
                    broken line\nsidecar.istio.io/statsInclusionPrefixes=\"upstream_cx,http.{pod_ip}_\"\n";
        let annotations = parse_annotations(text);
        assert_eq!(annotations["app"], "reviews");
        assert_eq!(annotations[PROXY_CONFIG_ANNOTATION], "concurrency: 3\nproxyMetadata:\n  A: \"quoted\"\n");
        assert_eq!(annotations.len(), 3, "{annotations:?}");
    }

    #[test]
    fn layers_apply_lowest_first_and_the_annotation_wins() {
        let dir = tempfile::tempdir().unwrap();
        let mesh = dir.path().join("mesh");
        std::fs::write(
            &mesh,
            "trustDomain: example.org\ndefaultConfig:\n  concurrency: 1\n  proxyMetadata: {A: mesh, B: mesh}\n  \
             runtimeValues: {a: b}\n",
        )
        .unwrap();
        let annotations = dir.path().join("annotations");
        std::fs::write(
            &annotations,
            "proxy.istio.io/config=\"concurrency: 4\\nproxyMetadata: {C: pod}\\n\"\n\
             sidecar.istio.io/statsInclusionSuffixes=\"upstream_rq_timeout\"\n",
        )
        .unwrap();
        let all = layered(&Sources {
            mesh_config: Some(&mesh),
            env_proxy_config: Some("{\"concurrency\": 2, \"proxyMetadata\": {\"B\": \"env\"}, \"sds\": {}}".into()),
            pod_annotations: Some(&annotations),
            cpu_limit: Some("8".into()),
        })
        .unwrap();
        let config = &all.config;
        assert_eq!(config.concurrency, Some(4), "the annotation is the top layer");
        let metadata: Vec<(&str, &str)> = config.proxy_metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(metadata, [("A", "mesh"), ("B", "env"), ("C", "pod")]);
        assert_eq!(config.drain_duration.map(|d| d.0.as_secs()), Some(45), "Istio's default stays");
        assert_eq!(config.proxy_stats_matcher.as_ref().unwrap().inclusion_suffixes, ["upstream_rq_timeout"]);
        assert_eq!(all.trust_domain.as_deref(), Some("example.org"));
        assert_eq!(all.unapplied.len(), 2, "{:?}", all.unapplied);
        assert!(all.unapplied[0].contains("defaultConfig.runtimeValues"));
        assert!(all.unapplied[1].starts_with("PROXY_CONFIG: sds: "), "{:?}", all.unapplied);

        // ISTIO_CPU_LIMIT fills a concurrency no layer set.
        let from_limit = layered_or_panic(Sources { cpu_limit: Some("3".into()), ..Sources::default() });
        assert_eq!(from_limit.config.concurrency, Some(3));
        assert_eq!(layered_or_panic(Sources::default()).config, ProxyConfig::istio_default());
        // A bad value stops the agent, saying which layer and where.
        let err =
            layered(&Sources { env_proxy_config: Some("concurrency: many".into()), ..Sources::default() }).unwrap_err();
        assert!(err.starts_with("PROXY_CONFIG: concurrency: "), "{err}");
    }

    fn layered_or_panic(sources: Sources<'_>) -> Layered {
        layered(&sources).unwrap()
    }
}
