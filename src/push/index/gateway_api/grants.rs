//! The ReferenceGrants of a snapshot, read once per translation: a
//! listener asks them before it serves another namespace's Secret, a route
//! before it sends requests to another namespace's Service.
//!
//! It owns nothing but borrowed grants. Invariant: a reference across
//! namespaces is allowed only by a grant in the namespace referred to, so
//! that the owner of a Secret or Service, not the referrer, decides.

use crate::config::gateway_api as api;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

/// The ReferenceGrants of a snapshot.
pub(super) struct Grants<'a>(Vec<&'a api::ReferenceGrant>);

impl<'a> Grants<'a> {
    /// The grants `store` holds.
    pub(super) fn of(store: &'a StoreSnapshot) -> Grants<'a> {
        Grants(
            store
                .kind(ConfigKind::ReferenceGrant)
                .values()
                .filter_map(|s| match &*s.object {
                    ConfigObject::ReferenceGrant(g) => Some(&**g),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Whether a `from_kind` of the Gateway API in `from_namespace` may
    /// refer to `to` (group, kind, namespace, name).
    pub(super) fn allow(&self, from_kind: &str, from_namespace: &str, to: (&str, &str, &str, &str)) -> bool {
        let (group, kind, namespace, name) = to;
        self.0.iter().any(|g| {
            g.metadata.namespace() == namespace
                && g.allows((api::GROUP, from_kind, from_namespace), (group, kind, name))
        })
    }
}
