//! The checks of `extensionProviders` and `defaultProviders` the mesh
//! config reader makes: what istiod's validation warns about a provider,
//! and what a default names that gives nothing. Each is a warning with its
//! path; nothing here refuses the file.

use super::ext_authz;
use super::providers::{self, DefaultProvidersPatch, ExtensionProvider, ProviderUse};
use super::warning;
use crate::config::Problem;

/// What is wrong with extension providers, as istiod's validation warns
/// (a provider it cannot use is ignored, and said to be): one without a
/// name, one a later one of the same name replaces, a kind that makes
/// nothing, a collector without a service or port, what a provider sets
/// that is not sent; and an external authorizer istiod's builder cannot
/// use (and its fields that do not do what they say, `ext_authz::issues`).
pub(super) fn provider_problems(file: &str, all: &[ExtensionProvider]) -> Vec<Problem> {
    let warn = |path: String, message: String| warning(file, &path, message);
    let mut out = Vec::new();
    for (i, p) in all.iter().enumerate() {
        let path = format!("extensionProviders[{i}]");
        if p.name.is_empty() {
            out.push(warn(format!("{path}.name"), "is empty: no Telemetry can name this provider".into()));
        } else if let Some(later) = all[i + 1..].iter().position(|q| q.name == p.name) {
            let message = format!(
                "is ignored: extensionProviders[{}] has the same name {:?} and replaces it, as in Istio",
                i + 1 + later,
                p.name
            );
            out.push(warn(path.clone(), message));
        }
        // Parsed so that a Telemetry naming them is told why they give
        // nothing; istiod generates nothing for either any more.
        if p.lightstep.is_some() {
            out.push(warn(
                format!("{path}.lightstep"),
                "Istio no longer generates a Lightstep tracer: this provider has no effect (in Istio either)".into(),
            ));
        }
        if p.stackdriver.is_some() {
            out.push(warn(
                format!("{path}.stackdriver"),
                "Istio no longer generates anything for Stackdriver: this provider has no effect (in Istio either)"
                    .into(),
            ));
        }
        if p.prometheus.is_some() {
            out.push(warn(
                format!("{path}.prometheus"),
                crate::config::problem::not_supported(Some(providers::METRICS_INSTEAD)),
            ));
        }
        if p.skywalking.as_ref().is_some_and(|s| s.access_token.as_deref().is_some_and(|t| !t.is_empty())) {
            out.push(warn(
                format!("{path}.skywalking.accessToken"),
                "is not sent: Istio's SkyWalking tracer names only the collector, and so does meshpush's (ignored)"
                    .into(),
            ));
        }
        if let Some(authorizer) = p.authorizer() {
            for issue in ext_authz::issues(&p.name, authorizer) {
                let field = match issue.field.as_str() {
                    "" => format!("{path}.name"),
                    field => format!("{path}.{}.{field}", authorizer.key()),
                };
                let message = match issue.kind {
                    ext_authz::IssueKind::Fault => format!("{}: {}", issue.message, ext_authz::DENIES),
                    ext_authz::IssueKind::Note => issue.message,
                };
                out.push(warn(field, message));
            }
        }
        if let Some((service, port)) = p.collector() {
            if service.is_empty() {
                out.push(warn(path.clone(), "names no collector service: it is not used".into()));
            }
            if port == 0 || port > 65535 {
                out.push(warn(path.clone(), format!("port {port} is not a port: it is not used")));
            }
        }
    }
    out
}

/// What `defaultProviders` names that gives nothing, among the providers
/// the mesh serves (`all`: the built-ins and the file's): a name no
/// provider has or one of the wrong kind, a tracer after the first (istiod
/// uses the first), and any metrics provider (meshpush makes no request
/// metrics).
pub(super) fn default_provider_problems(
    file: &str,
    defaults: &DefaultProvidersPatch,
    all: &[ExtensionProvider],
) -> Vec<Problem> {
    let mut out = Vec::new();
    for (i, name) in defaults.tracing.iter().flatten().enumerate() {
        let path = format!("defaultProviders.tracing[{i}]");
        if i > 0 {
            out.push(warning(file, &path, "is not used: only the first tracing provider is, as in Istio".into()));
        } else if let Some(why) = providers::unusable(all, name, ProviderUse::Tracing) {
            let message = format!("{why}: where no Telemetry names a tracer, nothing is traced (as in Istio)");
            out.push(warning(file, &path, message));
        }
    }
    for (i, name) in defaults.access_logging.iter().flatten().enumerate() {
        if let Some(why) = providers::unusable(all, name, ProviderUse::AccessLog) {
            let path = format!("defaultProviders.accessLogging[{i}]");
            out.push(warning(file, &path, format!("{why}: ignored, as in Istio")));
        }
    }
    if defaults.metrics.as_ref().is_some_and(|m| !m.is_empty()) {
        let message = crate::config::problem::not_supported(Some(providers::METRICS_INSTEAD));
        out.push(warning(file, "defaultProviders.metrics", message));
    }
    out
}
