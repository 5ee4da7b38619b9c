//! Header operations (`headers.request` / `headers.response`) as Envoy's
//! header mutations, as Istio translates them.
//!
//! `set` overwrites (`OVERWRITE_IF_EXISTS_OR_ADD`), `add` appends
//! (`APPEND_IF_EXISTS_OR_ADD`), `remove` removes. Setting `:authority` or
//! `host` rewrites the authority instead (a `set` wins over an `add`);
//! pseudo-headers are never mutated (validation reports such entries).
//! Output is sorted by header name within `set`, then `add`.

use envoy_types::pb::envoy::config::core::v3::{
    HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction,
};

use crate::config::istio::Headers;

/// The Envoy side of one `headers` block.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HeaderMutations {
    /// Request headers to set or add.
    pub request_add: Vec<HeaderValueOption>,
    /// Request headers to remove.
    pub request_remove: Vec<String>,
    /// Response headers to set or add.
    pub response_add: Vec<HeaderValueOption>,
    /// Response headers to remove.
    pub response_remove: Vec<String>,
    /// The authority to rewrite requests to, when `:authority` or `host` is set.
    pub authority: Option<String>,
}

/// Translates a `headers` block.
pub fn mutations(headers: &Headers) -> HeaderMutations {
    let mut out = HeaderMutations::default();
    if let Some(request) = &headers.request {
        let (set, set_authority) = options(request.set.iter(), HeaderAppendAction::OverwriteIfExistsOrAdd);
        let (add, add_authority) = options(request.add.iter(), HeaderAppendAction::AppendIfExistsOrAdd);
        out.request_add = set.into_iter().chain(add).collect();
        out.request_remove = removable(&request.remove);
        out.authority = set_authority.or(add_authority);
    }
    if let Some(response) = &headers.response {
        let (set, _) = options(response.set.iter(), HeaderAppendAction::OverwriteIfExistsOrAdd);
        let (add, _) = options(response.add.iter(), HeaderAppendAction::AppendIfExistsOrAdd);
        out.response_add = set.into_iter().chain(add).collect();
        out.response_remove = removable(&response.remove);
    }
    out
}

/// Whether a header names the authority (`:authority` or `host`).
pub fn is_authority(name: &str) -> bool {
    name.eq_ignore_ascii_case(":authority") || name.eq_ignore_ascii_case("host")
}

/// Whether Envoy refuses to mutate a header: pseudo-headers and `host`.
pub fn is_internal(name: &str) -> bool {
    name.starts_with(':') || name.eq_ignore_ascii_case("host")
}

fn options<'a>(
    entries: impl Iterator<Item = (&'a String, &'a String)>,
    action: HeaderAppendAction,
) -> (Vec<HeaderValueOption>, Option<String>) {
    let mut authority = None;
    // The map is a BTreeMap: entries come sorted by name.
    let list = entries
        .filter(|(name, value)| {
            if is_authority(name) {
                authority = Some((*value).clone());
            }
            !is_internal(name)
        })
        .map(|(name, value)| HeaderValueOption {
            header: Some(HeaderValue { key: name.clone(), value: value.clone(), ..Default::default() }),
            append_action: action as i32,
            ..Default::default()
        })
        .collect();
    (list, authority)
}

fn removable(names: &[String]) -> Vec<String> {
    names.iter().filter(|n| !is_internal(n)).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::istio::HeaderOperations;

    #[test]
    fn set_overwrites_add_appends_and_the_authority_becomes_a_rewrite() {
        let ops = |set: &[(&str, &str)], add: &[(&str, &str)], remove: &[&str]| HeaderOperations {
            set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            add: add.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            remove: remove.iter().map(|r| r.to_string()).collect(),
        };
        let headers = Headers {
            request: Some(ops(
                &[("x-b", "2"), ("x-a", "1"), ("host", "set.example")],
                &[(":authority", "add.example"), ("x-c", "3")],
                &["x-d", ":path"],
            )),
            response: Some(ops(&[], &[("x-e", "5")], &["server"])),
        };
        let m = mutations(&headers);
        let keys: Vec<(&str, i32)> =
            m.request_add.iter().map(|o| (o.header.as_ref().unwrap().key.as_str(), o.append_action)).collect();
        let (over, append) =
            (HeaderAppendAction::OverwriteIfExistsOrAdd as i32, HeaderAppendAction::AppendIfExistsOrAdd as i32);
        assert_eq!(keys, vec![("x-a", over), ("x-b", over), ("x-c", append)]);
        assert_eq!(m.request_remove, vec!["x-d".to_string()]);
        assert_eq!(m.authority.as_deref(), Some("set.example"), "a set authority wins over an added one");
        assert_eq!(m.response_add[0].header.as_ref().unwrap().key, "x-e");
        assert_eq!(m.response_remove, vec!["server".to_string()]);
    }
}
