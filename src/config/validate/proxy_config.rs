//! Checks for `networking.istio.io` ProxyConfig, following Istio's
//! `ValidateProxyConfig`; and what happens to it in meshpush now.

use super::Checker;
use crate::config::istio::ProxyConfigObject;

/// When a ProxyConfig takes effect.
pub const NOT_INJECTED: &str = "a ProxyConfig is given to a proxy when its pod is injected (as in Istio, no running \
proxy's configuration reads it): pods injected before this change keep what they were given until they are re-created";

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
    if spec.image.as_ref().is_some_and(|i| !i.image_type.is_empty()) {
        check.warning(
            "spec.image.imageType",
            "not applied: meshpush injects its one proxy image, which has no debug or distroless variant",
        );
    }
    check.warning("spec", NOT_INJECTED);
}
