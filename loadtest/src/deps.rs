//! What a delta stream remembers of the resources it holds: which names
//! of the next type (EDS, RDS) each cluster or listener asks for, interned
//! so that streams of one scope share one record.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::track::{NameSet, NameSets, XdsType};
use crate::wire::DeltaResponse;

/// What a resource asks for of the next type, appended to `out`.
pub(crate) type Asks = for<'r> fn(&'r [u8], &mut Vec<&'r str>);

/// What the resources a stream holds of one type (CDS or LDS) ask for of
/// the next (EDS or RDS), as a delta stream must remember it.
#[derive(Debug)]
pub(crate) struct Deps {
    /// `(resource, a name it asks for)`, sorted; a resource that asks for
    /// nothing has no pair.
    pairs: Vec<(Box<str>, Box<str>)>,
    /// Every name asked for: the list the stream watches.
    pub(crate) wanted: Arc<NameSet>,
}

/// Interns [`Deps`] per type.
#[derive(Debug, Default)]
pub(crate) struct DepsTable {
    maps: [Mutex<HashMap<u64, Vec<Arc<Deps>>>>; 4],
}

impl DepsTable {
    /// `old` (none: nothing held yet) with a response of type `t` applied:
    /// every resource it carries replaces what that resource asked for
    /// (`asks` reads it), every resource it removes asks for nothing any more.
    pub(crate) fn apply(
        &self,
        names: &NameSets,
        t: XdsType,
        old: Option<&Deps>,
        response: &DeltaResponse<'_>,
        asks: Asks,
    ) -> Arc<Deps> {
        let mut touched: Vec<&str> =
            response.resources.iter().map(|r| r.name).chain(response.removed.iter().copied()).collect();
        touched.sort_unstable();
        let mut pairs: Vec<(&str, &str)> = match old {
            Some(old) => old
                .pairs
                .iter()
                .map(|(resource, name)| (&**resource, &**name))
                .filter(|(resource, _)| touched.binary_search(resource).is_err())
                .collect(),
            None => Vec::new(),
        };
        let mut asked = Vec::new();
        for resource in &response.resources {
            asked.clear();
            asks(resource.value, &mut asked);
            pairs.extend(asked.iter().map(|name| (resource.name, *name)));
        }
        pairs.sort_unstable();
        pairs.dedup();
        self.intern(names, t, &pairs)
    }

    /// The shared [`Deps`] of type `t` with these pairs (sorted, deduplicated).
    fn intern(&self, names: &NameSets, t: XdsType, pairs: &[(&str, &str)]) -> Arc<Deps> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        pairs.hash(&mut hasher);
        let hash = hasher.finish();
        let mut maps = self.maps[t as usize].lock();
        let bucket = maps.entry(hash).or_default();
        let same = |deps: &&Arc<Deps>| deps.pairs.iter().map(|(r, n)| (&**r, &**n)).eq(pairs.iter().copied());
        if let Some(found) = bucket.iter().find(same) {
            return found.clone();
        }
        let mut wanted: Vec<&str> = pairs.iter().map(|(_, name)| *name).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let next = if t == XdsType::Cluster { XdsType::Endpoint } else { XdsType::Route };
        let deps = Arc::new(Deps {
            pairs: pairs.iter().map(|(r, n)| (Box::from(*r), Box::from(*n))).collect(),
            wanted: names.intern(next, &wanted),
        });
        bucket.push(deps.clone());
        deps
    }
}
