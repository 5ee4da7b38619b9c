//! Just enough protobuf to act as Envoy on an ADS stream, without decoding
//! whole resources.
//!
//! A simulated Envoy must learn, from every response, the version, nonce and
//! type, the names of the resources, the EDS names clusters ask for and the
//! RDS names listeners ask for. Decoding complete `Cluster`s and
//! `Listener`s with prost for thousands of streams would make the harness,
//! not the server, the bottleneck on a 2-core machine; walking the wire
//! format and reading only those fields costs a fraction. Requests are
//! assembled from pre-encoded parts: the node and the `resource_names` list
//! of a stream are encoded once and reused, yet every request carries both,
//! byte for byte what prost would write for the same `DiscoveryRequest`.
//!
//! Both protocols are here: SotW's `DiscoveryRequest`/`DiscoveryResponse`
//! and delta's `DeltaDiscoveryRequest`/`DeltaDiscoveryResponse` (field
//! numbers as in envoy-types 0.7's `envoy.service.discovery.v3`). A delta
//! request's `resource_names_subscribe` is field 3, like SotW's
//! `resource_names`, so one encoded name list serves both.

use bytes::{BufMut, Bytes, BytesMut};

/// `DiscoveryRequest`/`DiscoveryResponse` type URLs of the four xDS types.
pub(crate) const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub(crate) const ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub(crate) const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub(crate) const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";
const HTTP_CONNECTION_MANAGER: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// One field as read off the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed32/fixed64: skipped, never needed here.
    Fixed,
}

/// Iterates the top-level fields of one encoded message. Stops (returns
/// `None`) at the end or at the first malformed byte.
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields { buf }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.buf.split_first()?;
            self.buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(value);
            }
        }
        None
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Field<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let key = self.varint()?;
        let number = (key >> 3) as u32;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.buf = self.buf.get(8..)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                let (value, rest) = (self.buf.get(..len)?, &self.buf[len..]);
                self.buf = rest;
                Field::Bytes(value)
            }
            5 => {
                self.buf = self.buf.get(4..)?;
                Field::Fixed
            }
            _ => {
                self.buf = &[];
                return None;
            }
        };
        Some((number, field))
    }
}

/// The bytes of every length-delimited field `number` of a message.
fn bytes_fields(message: &[u8], number: u32) -> impl Iterator<Item = &[u8]> {
    Fields::new(message).filter_map(move |(n, f)| match f {
        Field::Bytes(b) if n == number => Some(b),
        _ => None,
    })
}

/// The last length-delimited field `number` of a message (protobuf's "last wins").
fn bytes_field(message: &[u8], number: u32) -> Option<&[u8]> {
    bytes_fields(message, number).last()
}

fn str_field(message: &[u8], number: u32) -> &str {
    bytes_field(message, number).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
}

/// A `DiscoveryResponse`, borrowed from the received message.
#[derive(Debug)]
pub(crate) struct Response<'a> {
    pub(crate) version: &'a str,
    pub(crate) type_url: &'a str,
    pub(crate) nonce: &'a str,
    /// The encoded resources (the `Any.value`s, unwrapped from
    /// `envoy.service.discovery.v3.Resource` when the server wraps them).
    pub(crate) resources: Vec<&'a [u8]>,
}

impl<'a> Response<'a> {
    /// Reads a `DiscoveryResponse`: version_info 1, resources 2, type_url 4, nonce 5.
    pub(crate) fn parse(message: &'a [u8]) -> Response<'a> {
        let mut response = Response { version: "", type_url: "", nonce: "", resources: Vec::new() };
        for (number, field) in Fields::new(message) {
            let Field::Bytes(bytes) = field else { continue };
            match number {
                1 => response.version = std::str::from_utf8(bytes).unwrap_or(""),
                2 => response.resources.push(any_value(bytes)),
                4 => response.type_url = std::str::from_utf8(bytes).unwrap_or(""),
                5 => response.nonce = std::str::from_utf8(bytes).unwrap_or(""),
                _ => {}
            }
        }
        response
    }
}

/// One resource of a `DeltaDiscoveryResponse`, borrowed from the received message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeltaResource<'a> {
    /// `Resource.name` (3), or when a server leaves it empty the name in
    /// the resource itself, as Envoy reads it then.
    pub(crate) name: &'a str,
    /// `Resource.version` (1): what Envoy sends back for it in
    /// `initial_resource_versions` when it reconnects.
    pub(crate) version: &'a str,
    /// The encoded resource: the `Any.value` of `Resource.resource` (2).
    pub(crate) value: &'a [u8],
}

/// A `DeltaDiscoveryResponse`, borrowed from the received message.
#[derive(Debug)]
pub(crate) struct DeltaResponse<'a> {
    pub(crate) type_url: &'a str,
    pub(crate) nonce: &'a str,
    /// The resources added or changed.
    pub(crate) resources: Vec<DeltaResource<'a>>,
    /// Names the client must drop (or, just subscribed, that do not exist).
    pub(crate) removed: Vec<&'a str>,
}

impl<'a> DeltaResponse<'a> {
    /// Reads a `DeltaDiscoveryResponse`: resources 2 (`Resource`: version
    /// 1, resource 2, name 3), type_url 4, nonce 5, removed_resources 6.
    /// `system_version_info` (1) is for debugging only and not read.
    pub(crate) fn parse(message: &'a [u8]) -> DeltaResponse<'a> {
        let mut response = DeltaResponse { type_url: "", nonce: "", resources: Vec::new(), removed: Vec::new() };
        for (number, field) in Fields::new(message) {
            let Field::Bytes(bytes) = field else { continue };
            match number {
                2 => response.resources.push(DeltaResource::parse(bytes)),
                4 => response.type_url = std::str::from_utf8(bytes).unwrap_or(""),
                5 => response.nonce = std::str::from_utf8(bytes).unwrap_or(""),
                6 => response.removed.push(std::str::from_utf8(bytes).unwrap_or("")),
                _ => {}
            }
        }
        response
    }
}

impl<'a> DeltaResource<'a> {
    fn parse(resource: &'a [u8]) -> DeltaResource<'a> {
        let value = bytes_field(resource, 2).map(any_value).unwrap_or(&[]);
        let name = match str_field(resource, 3) {
            "" => resource_name(value),
            name => name,
        };
        DeltaResource { name, version: str_field(resource, 1), value }
    }
}

/// The payload of an `Any` (type_url 1, value 2), looking through the
/// `Resource` wrapper (its `resource` is field 2, itself an `Any`).
fn any_value(any: &[u8]) -> &[u8] {
    let value = bytes_field(any, 2).unwrap_or(&[]);
    if str_field(any, 1) == RESOURCE_WRAPPER {
        return bytes_field(value, 2).map(any_value).unwrap_or(&[]);
    }
    value
}

/// The name of a resource of type `type_url`: field 1 for all four types
/// (`Cluster.name`, `ClusterLoadAssignment.cluster_name`, `Listener.name`,
/// `RouteConfiguration.name`).
pub(crate) fn resource_name(resource: &[u8]) -> &str {
    str_field(resource, 1)
}

/// The EDS resource a cluster asks for, if it is an EDS cluster: its
/// `eds_cluster_config.service_name` (3.2), else its name. `type` is field 2
/// (EDS = 3).
pub(crate) fn eds_name(cluster: &[u8]) -> Option<&str> {
    let mut name = "";
    let mut eds = false;
    let mut service_name = "";
    for (number, field) in Fields::new(cluster) {
        match (number, field) {
            (1, Field::Bytes(b)) => name = std::str::from_utf8(b).unwrap_or(""),
            (2, Field::Varint(t)) => eds = t == 3,
            (3, Field::Bytes(config)) => service_name = str_field(config, 2),
            _ => {}
        }
    }
    eds.then_some(if service_name.is_empty() { name } else { service_name })
}

/// The RouteConfiguration names a listener's HTTP connection managers ask
/// for over RDS: `filter_chains` (3) and `default_filter_chain` (25) →
/// `filters` (3) → `typed_config` (4) → `HttpConnectionManager.rds` (3) →
/// `route_config_name` (2).
pub(crate) fn rds_names<'a>(listener: &'a [u8], out: &mut Vec<&'a str>) {
    for (number, field) in Fields::new(listener) {
        let (3 | 25, Field::Bytes(chain)) = (number, field) else { continue };
        for filter in bytes_fields(chain, 3) {
            let Some(typed) = bytes_field(filter, 4) else { continue };
            if str_field(typed, 1) != HTTP_CONNECTION_MANAGER {
                continue;
            }
            let Some(hcm) = bytes_field(typed, 2) else { continue };
            if let Some(rds) = bytes_field(hcm, 3) {
                let name = str_field(rds, 2);
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
    }
}

/// Writes a varint.
fn put_varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Writes field `number` as a length-delimited value.
fn put_bytes(out: &mut BytesMut, number: u32, value: &[u8]) {
    put_varint(out, u64::from(number) << 3 | 2);
    put_varint(out, value.len() as u64);
    out.put_slice(value);
}

/// A string field as protobuf writes it when the value is `token`, without
/// its key: the length, then the bytes. Searching a resource for this finds
/// a string field equal to `token` (not merely containing it).
pub(crate) fn encoded_string(token: &str) -> Vec<u8> {
    let mut out = BytesMut::with_capacity(token.len() + 2);
    put_varint(&mut out, token.len() as u64);
    out.put_slice(token.as_bytes());
    out.to_vec()
}

/// `resource_names` (field 3) of a request, encoded once per distinct list;
/// in a delta request the same bytes are `resource_names_subscribe`.
pub(crate) fn encode_names<S: AsRef<str>>(names: &[S]) -> Bytes {
    let mut out = BytesMut::with_capacity(names.iter().map(|n| n.as_ref().len() + 3).sum());
    put_repeated(&mut out, 3, names);
    out.freeze()
}

/// Writes a repeated string field `number`.
fn put_repeated<S: AsRef<str>>(out: &mut BytesMut, number: u32, names: &[S]) {
    for name in names {
        put_bytes(out, number, name.as_ref().as_bytes());
    }
}

/// `initial_resource_versions` (field 5 of a `DeltaDiscoveryRequest`, a
/// `map<string, string>`): one entry message (key 1, value 2) per resource.
pub(crate) fn encode_initial_versions<'a>(versions: impl IntoIterator<Item = (&'a str, &'a str)>) -> Bytes {
    let mut out = BytesMut::new();
    let mut entry = BytesMut::new();
    for (name, version) in versions {
        entry.clear();
        put_bytes(&mut entry, 1, name.as_bytes());
        put_bytes(&mut entry, 2, version.as_bytes());
        put_bytes(&mut out, 5, &entry);
    }
    out.freeze()
}

/// `DiscoveryRequest.node`.
pub(crate) const SOTW_NODE_FIELD: u32 = 2;
/// `DeltaDiscoveryRequest.node`.
pub(crate) const DELTA_NODE_FIELD: u32 = 1;

/// The `node` field of every request of one stream: the fields that
/// differ per stream (id, cluster, metadata), then the fields every
/// simulated Envoy shares (user agent, the extension list), kept once.
/// Protobuf allows a message's fields in any order, so the two parts
/// together are one `Node`.
#[derive(Debug, Clone)]
pub(crate) struct EncodedNode {
    /// Field key, length, and the per-stream fields.
    head: Bytes,
    /// The shared fields.
    common: Bytes,
}

impl EncodedNode {
    /// No node: the field is left out of the request.
    pub(crate) fn absent() -> EncodedNode {
        EncodedNode { head: Bytes::new(), common: Bytes::new() }
    }

    /// The node as field `field` of a request ([`SOTW_NODE_FIELD`] or [`DELTA_NODE_FIELD`]).
    pub(crate) fn new(field: u32, per_stream: &[u8], common: &Bytes) -> EncodedNode {
        let mut head = BytesMut::with_capacity(per_stream.len() + 8);
        put_varint(&mut head, u64::from(field) << 3 | 2);
        put_varint(&mut head, (per_stream.len() + common.len()) as u64);
        head.put_slice(per_stream);
        EncodedNode { head: head.freeze(), common: common.clone() }
    }
}

/// An encoded `DiscoveryRequest` or `DeltaDiscoveryRequest` in parts that
/// share the big pieces (node, name list) between requests: the codec
/// copies each part once into the stream's buffer.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    parts: [Bytes; 5],
}

impl Request {
    /// Its parts, in order.
    pub(crate) fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The whole message in one buffer.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.parts.iter().for_each(|p| out.put_slice(p));
        out.freeze()
    }
}

/// A `DiscoveryRequest`: version_info 1, node 2, resource_names 3, type_url
/// 4, response_nonce 5, in field order as prost writes them. `node` must be
/// encoded as field 2 ([`SOTW_NODE_FIELD`]).
pub(crate) fn encode_request(node: &EncodedNode, names: &Bytes, type_url: &str, version: &str, nonce: &str) -> Request {
    let mut first = BytesMut::new();
    if !version.is_empty() {
        put_bytes(&mut first, 1, version.as_bytes());
    }
    let mut last = BytesMut::with_capacity(type_url.len() + nonce.len() + 6);
    put_bytes(&mut last, 4, type_url.as_bytes());
    if !nonce.is_empty() {
        put_bytes(&mut last, 5, nonce.as_bytes());
    }
    Request { parts: [first.freeze(), node.head.clone(), node.common.clone(), names.clone(), last.freeze()] }
}

/// A `DeltaDiscoveryRequest`: node 1, type_url 2, resource_names_subscribe
/// 3, resource_names_unsubscribe 4, response_nonce 6, in field order as
/// prost writes them. `node` must be encoded as field 1
/// ([`DELTA_NODE_FIELD`]); `subscribe` is field 3 as [`encode_names`] writes
/// it (a stream's first subscription of a type is a whole interned list).
/// `initial_resource_versions` (5) is sent only on a stream's first request
/// of a type after a reconnect ([`encode_delta_reconnect`]); `error_detail`
/// (7) only in a NACK.
pub(crate) fn encode_delta_request<S: AsRef<str>>(
    node: &EncodedNode,
    type_url: &str,
    subscribe: &Bytes,
    unsubscribe: &[S],
    nonce: &str,
) -> Request {
    let mut kind = BytesMut::with_capacity(type_url.len() + 2);
    put_bytes(&mut kind, 2, type_url.as_bytes());
    let mut last =
        BytesMut::with_capacity(unsubscribe.iter().map(|n| n.as_ref().len() + 3).sum::<usize>() + nonce.len() + 2);
    put_repeated(&mut last, 4, unsubscribe);
    if !nonce.is_empty() {
        put_bytes(&mut last, 6, nonce.as_bytes());
    }
    Request { parts: [node.head.clone(), node.common.clone(), kind.freeze(), subscribe.clone(), last.freeze()] }
}

/// The first `DeltaDiscoveryRequest` of a type on a reconnected stream, as
/// Envoy sends it: the names it is subscribed to (`subscribe`, field 3;
/// empty for a legacy wildcard type) and every resource it holds with its
/// version (`versions`, field 5 as [`encode_initial_versions`] writes it),
/// no nonce.
pub(crate) fn encode_delta_reconnect(
    node: &EncodedNode,
    type_url: &str,
    subscribe: &Bytes,
    versions: &Bytes,
) -> Request {
    let mut kind = BytesMut::with_capacity(type_url.len() + 2);
    put_bytes(&mut kind, 2, type_url.as_bytes());
    Request { parts: [node.head.clone(), node.common.clone(), kind.freeze(), subscribe.clone(), versions.clone()] }
}
