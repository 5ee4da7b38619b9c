//! Checks for `networking.istio.io` ProxyConfig, following Istio's
//! `ValidateProxyConfig`; and what happens to it in meshpush now.

use super::Checker;
use crate::config::istio::ProxyConfigObject;

/// What a ProxyConfig does while meshpush injects no pods.
pub const NOT_INJECTED: &str = "a ProxyConfig is given to a proxy when its pod is injected (as in Istio, no running \
proxy's configuration reads it); meshpush does not inject sidecars yet, so it is not used by any proxy: give the agent \
PROXY_CONFIG or the pod's proxy.istio.io/config annotation instead";

pub(super) fn proxy_config(check: &mut Checker, object: &ProxyConfigObject) {
    let spec = &object.spec;
    if let Some(n) = spec.concurrency.filter(|n| *n < 0) {
        check.error("spec.concurrency", format!("{n} is negative: 0 means one worker per hardware thread"));
    }
    if let Some(selector) = &spec.selector {
        for key in selector.match_labels.keys().filter(|k| k.is_empty()) {
            check.error(format!("spec.selector.matchLabels.{key}"), "a label key must not be empty");
        }
    }
    check.warning("spec", NOT_INJECTED);
}
