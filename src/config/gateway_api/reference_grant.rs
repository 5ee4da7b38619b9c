//! `ReferenceGrant`: lets objects of other namespaces refer to objects of
//! this one (a route to a Service, a Gateway to a Secret).

use serde::{Deserialize, Serialize};

use crate::config::ObjectMeta;

/// `ReferenceGrant`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrant {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: ReferenceGrantSpec,
}

/// `ReferenceGrant.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantSpec {
    /// Who may refer: kinds in namespaces.
    pub from: Vec<ReferenceGrantFrom>,
    /// What they may refer to, in the grant's namespace.
    pub to: Vec<ReferenceGrantTo>,
}

/// One `from` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantFrom {
    /// The referrer's group.
    pub group: String,
    /// The referrer's kind.
    pub kind: String,
    /// The referrer's namespace.
    pub namespace: String,
}

/// One `to` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReferenceGrantTo {
    /// The target's group (`""` for core).
    pub group: String,
    /// The target's kind.
    pub kind: String,
    /// One object, or every object of the kind when absent.
    pub name: Option<String>,
}

impl ReferenceGrant {
    /// Whether the grant lets a `from_kind` of `from_group` in
    /// `from_namespace` refer to the `to_kind` named `to_name` of
    /// `to_group` in the grant's namespace.
    pub fn allows(&self, from: (&str, &str, &str), to: (&str, &str, &str)) -> bool {
        let (from_group, from_kind, from_namespace) = from;
        let (to_group, to_kind, to_name) = to;
        self.spec.from.iter().any(|f| f.group == from_group && f.kind == from_kind && f.namespace == from_namespace)
            && self.spec.to.iter().any(|t| {
                t.group == to_group
                    && t.kind == to_kind
                    && t.name.as_deref().is_none_or(|n| n.is_empty() || n == to_name)
            })
    }
}
