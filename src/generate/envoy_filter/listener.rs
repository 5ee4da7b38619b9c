//! Listener patches: LISTENER, LISTENER_FILTER, FILTER_CHAIN,
//! NETWORK_FILTER and HTTP_FILTER (`docs/envoyfilter.md` §2.2–§2.4,
//! §3.1–§3.6).
//!
//! Per listener, in istiod's order: its LISTENER patches (a REMOVE ends
//! there), its LISTENER_FILTER patches, then per filter chain (and the
//! default chain) the FILTER_CHAIN patches, the NETWORK_FILTER list
//! operations, and per network filter its MERGEs and, inside a connection
//! manager, the HTTP_FILTER list operations then MERGEs; then the chains
//! ADDed to the listener. Listeners ADDed come last. At every level list
//! operations run before merges whatever their order in the filter, and
//! what a LISTENER or FILTER_CHAIN ADD brings is not patched further.
//!
//! A filter list a patch would leave as Envoy refuses it — a filter after
//! the terminal one (the router, the connection manager, tcp_proxy), or
//! without a terminal one — is kept as it was for that patch, which is
//! reported.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{address, socket_address};
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, Listener, ListenerFilter, filter, listener_filter,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, http_connection_manager::RouteSpecifier, http_filter,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::{Context, Record, TypedMerge, is_merge, merge_into, merge_typed, of_kind, route, value};
use crate::config::istio::envoy_filter::{ApplyTo, ListenerMatch, Operation};
use crate::generate::naming::{VIRTUAL_INBOUND, VIRTUAL_OUTBOUND};
use crate::generate::proto::HTTP_CONNECTION_MANAGER;
use crate::push::index::envoy_filter::ResolvedPatch;

/// The listener patch kinds.
const KINDS: [ApplyTo; 5] =
    [ApplyTo::Listener, ApplyTo::ListenerFilter, ApplyTo::FilterChain, ApplyTo::NetworkFilter, ApplyTo::HttpFilter];

/// Patches `listeners` (one side of a proxy, in `context`).
pub fn patch(patches: &[Arc<ResolvedPatch>], context: Context, listeners: &mut Vec<Listener>, record: &mut Record) {
    let mut any = false;
    for kind in KINDS {
        for p in of_kind(patches, kind, context) {
            record.considered(p);
            any = true;
        }
    }
    if !any {
        return;
    }
    let mut kept = Vec::with_capacity(listeners.len());
    for mut l in listeners.drain(..) {
        if patch_listener(patches, context, &mut l, record) {
            kept.push(l);
        }
    }
    for p in of_kind(patches, ApplyTo::Listener, context) {
        if p.operation == Operation::Add
            && context.takes_add(p)
            && let Some(added) = value::<Listener>(p)
        {
            kept.push(added);
            record.applied(p);
        }
    }
    *listeners = kept;
}

/// Applies the SIDECAR_INBOUND route patches to the route configurations
/// inlined in `listeners`' connection managers.
pub fn patch_inline_routes(patches: &[Arc<ResolvedPatch>], listeners: &mut [Listener], record: &mut Record) {
    let kinds = [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute];
    if !kinds.iter().any(|k| of_kind(patches, *k, Context::SidecarInbound).next().is_some()) {
        return;
    }
    let ports = route::GatewayPorts::default();
    for l in listeners {
        for chain in l.filter_chains.iter_mut().chain(l.default_filter_chain.as_mut()) {
            for f in &mut chain.filters {
                with_connection_manager(f, |hcm| {
                    if let Some(RouteSpecifier::RouteConfig(rc)) = &mut hcm.route_specifier {
                        route::patch_one(patches, Context::SidecarInbound, rc, &ports, record);
                    }
                });
            }
        }
    }
}

/// Patches one listener; `false` when a patch removed it.
fn patch_listener(patches: &[Arc<ResolvedPatch>], context: Context, l: &mut Listener, record: &mut Record) -> bool {
    for p in of_kind(patches, ApplyTo::Listener, context) {
        if !listener_match(l, p) {
            continue;
        }
        match p.operation {
            Operation::Remove => {
                record.applied(p);
                return false;
            }
            _ if is_merge(p) => match merge_into(l, p) {
                Ok(()) => record.applied(p),
                Err(e) => record.failed(p, &format!("listener {}", l.name), e),
            },
            _ => {}
        }
    }
    patch_listener_filters(patches, context, l, record);
    let name = l.name.clone();
    let mut chains = std::mem::take(&mut l.filter_chains);
    chains.retain_mut(|chain| patch_chain(patches, context, &name, port_of(l), chain, record));
    if let Some(mut chain) = l.default_filter_chain.take()
        && patch_chain(patches, context, &name, port_of(l), &mut chain, record)
    {
        l.default_filter_chain = Some(chain);
    }
    for p in of_kind(patches, ApplyTo::FilterChain, context) {
        if p.operation == Operation::Add
            && listener_match(l, p)
            && let Some(added) = value::<FilterChain>(p)
        {
            chains.push(added);
            record.applied(p);
        }
    }
    l.filter_chains = chains;
    true
}

/// The port a listener binds, when it binds a socket address.
fn port_of(l: &Listener) -> Option<u32> {
    match l.address.as_ref()?.address.as_ref()? {
        address::Address::SocketAddress(s) => match s.port_specifier {
            Some(socket_address::PortSpecifier::PortValue(port)) => Some(port),
            _ => None,
        },
        _ => None,
    }
}

fn is_virtual(name: &str) -> bool {
    name == VIRTUAL_INBOUND || name == VIRTUAL_OUTBOUND
}

fn listener_of(p: &ResolvedPatch) -> Option<&ListenerMatch> {
    p.matches.listener.as_ref()
}

/// istiod's `listenerMatch`: name, then port (deferred to the chains of a
/// virtual listener for anything but a LISTENER patch). `portName` is not
/// compared (istiod does not implement it; validation reports it).
fn listener_match(l: &Listener, p: &ResolvedPatch) -> bool {
    let Some(m) = listener_of(p) else { return true };
    if !m.name.is_empty() && m.name != l.name {
        return false;
    }
    if is_virtual(&l.name) && p.apply_to != ApplyTo::Listener {
        return true;
    }
    m.port_number == 0 || port_of(l) == Some(m.port_number)
}

/// istiod's `filterChainMatch` (the listener already matched).
fn chain_match(listener: &str, chain: &FilterChain, p: &ResolvedPatch) -> bool {
    let Some(m) = listener_of(p) else { return true };
    let fcm = chain.filter_chain_match.as_ref();
    let destination_port = fcm.and_then(|f| f.destination_port.as_ref()).map(|v| v.value);
    if is_virtual(listener) && m.port_number > 0 && destination_port != Some(m.port_number) {
        return false;
    }
    let Some(want) = &m.filter_chain else { return true };
    if !want.name.is_empty() && want.name != chain.name {
        return false;
    }
    if !want.sni.is_empty() && !fcm.is_some_and(|f| f.server_names.contains(&want.sni)) {
        return false;
    }
    if !want.transport_protocol.is_empty() && fcm.is_none_or(|f| f.transport_protocol != want.transport_protocol) {
        return false;
    }
    if !want.application_protocols.is_empty() {
        let Some(f) = fcm else { return false };
        if !want.application_protocols.split(',').all(|a| f.application_protocols.iter().any(|have| have == a)) {
            return false;
        }
    }
    want.destination_port == 0 || destination_port == Some(want.destination_port)
}

/// The network filter a patch names (empty: none).
fn filter_name(p: &ResolvedPatch) -> &str {
    listener_of(p).and_then(|m| m.filter_chain.as_ref()).and_then(|c| c.filter.as_ref()).map_or("", |f| &f.name)
}

/// The HTTP filter a patch names (empty: none).
fn sub_filter_name(p: &ResolvedPatch) -> &str {
    listener_of(p)
        .and_then(|m| m.filter_chain.as_ref())
        .and_then(|c| c.filter.as_ref())
        .and_then(|f| f.sub_filter.as_ref())
        .map_or("", |s| &s.name)
}

/// Patches one chain; `false` when a patch removed it.
fn patch_chain(
    patches: &[Arc<ResolvedPatch>],
    context: Context,
    listener: &str,
    port: Option<u32>,
    chain: &mut FilterChain,
    record: &mut Record,
) -> bool {
    let applies = |p: &&ResolvedPatch, chain: &FilterChain| {
        listener_matches(listener, port, p) && chain_match(listener, chain, p)
    };
    for p in of_kind(patches, ApplyTo::FilterChain, context) {
        if !applies(&p, chain) {
            continue;
        }
        match p.operation {
            Operation::Remove => {
                record.applied(p);
                return false;
            }
            _ if is_merge(p) => merge_chain(chain, p, record),
            _ => {}
        }
    }
    let network: Vec<&ResolvedPatch> =
        of_kind(patches, ApplyTo::NetworkFilter, context).filter(|p| applies(p, chain)).collect();
    let http: Vec<&ResolvedPatch> =
        of_kind(patches, ApplyTo::HttpFilter, context).filter(|p| applies(p, chain)).collect();
    let what = format!("listener {listener} chain {:?}", chain.name);
    for p in network.iter().filter(|p| !is_merge(p)) {
        list_op(&mut chain.filters, p, filter_name(p), &what, NETWORK_TERMINALS, record);
    }
    for f in &mut chain.filters {
        // MERGE_AND_REPLACE_LIST does nothing to a filter, as in istiod.
        for p in network.iter().filter(|p| p.operation == Operation::Merge) {
            let name = filter_name(p);
            if name.is_empty() || name == f.name {
                merge_filter(f, p, !name.is_empty(), true, &what, record);
            }
        }
        if f.name == HTTP_CONNECTION_MANAGER {
            let ours: Vec<&ResolvedPatch> =
                http.iter().copied().filter(|p| filter_name(p).is_empty() || filter_name(p) == f.name).collect();
            if !ours.is_empty() {
                with_connection_manager(f, |hcm| patch_http_filters(&ours, hcm, &what, record));
            }
        }
    }
    true
}

/// [`listener_match`] for a listener known by name and port.
fn listener_matches(name: &str, port: Option<u32>, p: &ResolvedPatch) -> bool {
    let Some(m) = listener_of(p) else { return true };
    if !m.name.is_empty() && m.name != name {
        return false;
    }
    is_virtual(name) || m.port_number == 0 || port == Some(m.port_number)
}

/// A FILTER_CHAIN MERGE: a transport socket of the same name as the
/// chain's is merged into it alone (the rest of the patch is not read, as
/// in istiod); anything else merges the whole chain.
fn merge_chain(chain: &mut FilterChain, p: &ResolvedPatch, record: &mut Record) {
    let Some(patch) = value::<FilterChain>(p) else { return };
    if let (Some(theirs), Some(ours)) = (patch.transport_socket.as_ref(), chain.transport_socket.as_mut())
        && theirs.name == ours.name
    {
        use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
        if let (Some(ConfigType::TypedConfig(t)), Some(ConfigType::TypedConfig(o))) =
            (theirs.config_type.as_ref(), ours.config_type.as_mut())
        {
            match merge_typed(o, t) {
                Ok(()) => record.applied(p),
                Err(TypedMerge::Mismatch(e) | TypedMerge::Failed(e)) => {
                    record.failed(p, &format!("chain {:?} transport socket", chain.name), e)
                }
            }
        }
        return;
    }
    match merge_into(chain, p) {
        Ok(()) => record.applied(p),
        Err(e) => record.failed(p, &format!("chain {:?}", chain.name), e),
    }
}

/// Runs `f` on the connection manager a network filter holds, and writes
/// it back (a filter of another kind, or one that does not read, is left).
fn with_connection_manager(filter: &mut Filter, f: impl FnOnce(&mut HttpConnectionManager)) {
    if filter.name != HTTP_CONNECTION_MANAGER {
        return;
    }
    let Some(filter::ConfigType::TypedConfig(any)) = &mut filter.config_type else { return };
    let Ok(mut hcm) = HttpConnectionManager::decode(any.value.as_slice()) else { return };
    f(&mut hcm);
    any.value = hcm.encode_to_vec();
}

/// HTTP_FILTER list operations, then MERGEs, on one connection manager.
fn patch_http_filters(patches: &[&ResolvedPatch], hcm: &mut HttpConnectionManager, what: &str, record: &mut Record) {
    for p in patches.iter().filter(|p| !is_merge(p)) {
        list_op(&mut hcm.http_filters, p, sub_filter_name(p), what, HTTP_TERMINALS, record);
    }
    for f in &mut hcm.http_filters {
        for p in patches.iter().filter(|p| p.operation == Operation::Merge) {
            let name = sub_filter_name(p);
            if name.is_empty() || name == f.name {
                merge_filter(f, p, !name.is_empty(), true, what, record);
            }
        }
    }
}

/// LISTENER_FILTER patches on one listener.
fn patch_listener_filters(patches: &[Arc<ResolvedPatch>], context: Context, l: &mut Listener, record: &mut Record) {
    let what = format!("listener {}", l.name);
    for p in of_kind(patches, ApplyTo::ListenerFilter, context) {
        if !listener_match(l, p) {
            continue;
        }
        let name = listener_of(p).map_or("", |m| &m.listener_filter);
        match p.operation {
            // istiod merges into every listener filter with a typed config
            // (it does not compare names); meshpush into those of the
            // patch's type, which is the same wherever istiod does not panic.
            Operation::Merge if !name.is_empty() => {
                for f in &mut l.listener_filters {
                    merge_filter(f, p, false, false, &what, record);
                }
            }
            Operation::Merge | Operation::MergeAndReplaceList => {}
            _ => list_op(&mut l.listener_filters, p, name, &what, &[], record),
        }
    }
}

/// The type names of the network filters that end a chain.
const NETWORK_TERMINALS: &[&str] = &[
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    "envoy.extensions.filters.network.direct_response.v3.Config",
    "envoy.extensions.filters.network.echo.v3.Echo",
    "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
    "envoy.extensions.filters.network.thrift_proxy.v3.ThriftProxy",
    "envoy.extensions.filters.network.dubbo_proxy.v3.DubboProxy",
    "envoy.extensions.filters.network.generic_proxy.v3.GenericProxy",
];

/// The type names of the HTTP filters that end a connection manager's list.
const HTTP_TERMINALS: &[&str] = &["envoy.extensions.filters.http.router.v3.Router"];

/// A filter of a list: listener, network or HTTP.
pub(super) trait FilterItem: Message + Default + Clone {
    fn name(&self) -> &str;
    fn rename(&mut self, name: &str);
    fn typed_config(&self) -> Option<&Any>;
    fn typed_config_mut(&mut self) -> Option<&mut Any>;
}

macro_rules! filter_item {
    ($t:ty, $config:path) => {
        impl FilterItem for $t {
            fn name(&self) -> &str {
                &self.name
            }
            fn rename(&mut self, name: &str) {
                self.name = name.to_string();
            }
            fn typed_config(&self) -> Option<&Any> {
                match &self.config_type {
                    Some($config(any)) => Some(any),
                    _ => None,
                }
            }
            fn typed_config_mut(&mut self) -> Option<&mut Any> {
                match &mut self.config_type {
                    Some($config(any)) => Some(any),
                    _ => None,
                }
            }
        }
    };
}

filter_item!(Filter, filter::ConfigType::TypedConfig);
filter_item!(HttpFilter, http_filter::ConfigType::TypedConfig);
filter_item!(ListenerFilter, listener_filter::ConfigType::TypedConfig);

/// The message type a typed config holds; a `TypedStruct`'s inner type.
fn config_type(any: &Any) -> String {
    let name = crate::envoy_api::json::type_name(&any.type_url);
    if matches!(name, "udpa.type.v1.TypedStruct" | "xds.type.v3.TypedStruct")
        && let Some(desc) = crate::envoy_api::message(name)
        && let Ok(inner) = prost_reflect::DynamicMessage::decode(desc, any.value.as_slice())
        && let Some(url) = inner.get_field_by_name("type_url").and_then(|v| v.as_str().map(str::to_string))
    {
        return crate::envoy_api::json::type_name(&url).to_string();
    }
    name.to_string()
}

/// Whether Envoy takes the list as it ends: its last filter terminal, and
/// no terminal filter before it (no check where nothing is terminal).
fn well_ended<T: FilterItem>(list: &[T], terminals: &[&str]) -> bool {
    if terminals.is_empty() {
        return true;
    }
    let terminal = |f: &T| f.typed_config().is_some_and(|a| terminals.contains(&config_type(a).as_str()));
    match list.split_last() {
        None => false,
        Some((last, rest)) => terminal(last) && !rest.iter().any(terminal),
    }
}

/// ADD, INSERT_FIRST, INSERT_BEFORE, INSERT_AFTER, REPLACE or REMOVE on
/// one list; `name` is the filter the patch names (empty: none).
fn list_op<T: FilterItem>(
    list: &mut Vec<T>,
    p: &ResolvedPatch,
    name: &str,
    what: &str,
    terminals: &[&str],
    record: &mut Record,
) {
    let before = well_ended(list, terminals).then(|| list.clone());
    let position = (!name.is_empty()).then(|| list.iter().position(|f| f.name() == name)).flatten();
    let item = || value::<T>(p);
    let changed = match (p.operation, position) {
        (Operation::Add, _) => item().map(|i| list.push(i)).is_some(),
        (Operation::InsertFirst, _) => item().map(|i| list.insert(0, i)).is_some(),
        (Operation::InsertAfter, _) if name.is_empty() => item().map(|i| list.push(i)).is_some(),
        (Operation::InsertBefore, _) if name.is_empty() => item().map(|i| list.insert(0, i)).is_some(),
        (Operation::InsertAfter, Some(at)) => item().map(|i| list.insert(at + 1, i)).is_some(),
        (Operation::InsertBefore, Some(at)) => item().map(|i| list.insert(at, i)).is_some(),
        (Operation::Replace, Some(at)) => item().map(|i| list[at] = i).is_some(),
        (Operation::Remove, Some(_)) => {
            list.retain(|f| f.name() != name);
            true
        }
        _ => false,
    };
    if !changed {
        return;
    }
    if let Some(before) = before
        && !well_ended(list, terminals)
    {
        *list = before;
        let reason = match p.operation {
            Operation::Remove => format!("removing {name} leaves no terminal filter last, which Envoy refuses"),
            _ => "would leave a filter after the terminal one (or none last), which Envoy refuses".to_string(),
        };
        record.failed(p, what, reason);
        return;
    }
    record.applied(p);
}

/// A filter MERGE: the patch's typed config merged into the filter's (of
/// the same type), and (`rename`: network and HTTP filters, not listener
/// filters, as in istiod) the filter renamed when the patch names it anew.
/// A filter without a typed config is not merged. `named`: the patch named
/// this filter — a type mismatch is then reported; otherwise (a MERGE that
/// visits every filter) a filter of another type is passed over.
fn merge_filter<T: FilterItem>(
    f: &mut T,
    p: &ResolvedPatch,
    named: bool,
    rename: bool,
    what: &str,
    record: &mut Record,
) {
    let Some(patch) = value::<T>(p) else { return };
    let Some(target) = f.typed_config_mut() else { return };
    if let Some(theirs) = patch.typed_config() {
        match merge_typed(target, theirs) {
            Ok(()) => {}
            Err(TypedMerge::Mismatch(_)) if !named => return,
            Err(TypedMerge::Mismatch(e) | TypedMerge::Failed(e)) => {
                record.failed(p, &format!("{what} filter {}", f.name()), e);
                return;
            }
        }
    }
    if rename && !patch.name().is_empty() {
        f.rename(patch.name());
    }
    record.applied(p);
}
