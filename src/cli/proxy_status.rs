//! `meshpush proxy-status`: one row per connected proxy with its sync state
//! per type, as `istioctl proxy-status` prints it.
//!
//! Read from `/debug/syncz`. The states mean what they mean in Istio:
//! SYNCED (the last response sent was ACKed), NOT SENT (nothing sent),
//! STALE (sent, not ACKed yet), ERROR (the last response was NACKed).

use super::table::Table;
use super::{CliError, admin_client};
use crate::admin::debug::ProxySync;

/// The proxies as `/debug/syncz` reports them.
pub fn fetch(admin: &str) -> Result<Vec<ProxySync>, CliError> {
    let body = admin_client::get(admin, "/debug/syncz")?;
    serde_json::from_str(&body).map_err(|e| CliError::Admin {
        addr: admin.to_string(),
        reason: format!("/debug/syncz is not syncz JSON: {e}"),
    })
}

/// The name istioctl shows: `POD.NAMESPACE` from a node id, else the whole id.
pub fn short_name(node_id: &str) -> &str {
    node_id.split('~').nth(2).filter(|w| !w.is_empty()).unwrap_or(node_id)
}

/// The table.
pub fn render(proxies: &[ProxySync]) -> String {
    let mut table = Table::new(&["NAME", "CLUSTER", "CDS", "LDS", "EDS", "RDS", "ISTIOD", "VERSION"]);
    for p in proxies {
        let state = |t: &str| p.state(t).map(|s| s.status.clone()).unwrap_or_else(|| "NOT SENT".into());
        table.row(vec![
            short_name(&p.proxy).to_string(),
            p.cluster_id.clone(),
            state("cds"),
            state("lds"),
            state("eds"),
            state("rds"),
            format!("meshpush-{}", p.meshpush_version),
            p.proxy_version.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table.render()
}

/// Runs the command: the table, or an error.
pub fn run(admin: &str) -> Result<String, CliError> {
    Ok(render(&fetch(admin)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_column_is_the_proxys_cluster_id() {
        let proxy = ProxySync {
            proxy: "sidecar~10.0.0.1~reviews-v1.default~default.svc.cluster.local".into(),
            conn_id: 1,
            cluster: "reviews.default".into(),
            cluster_id: "cluster2".into(),
            proxy_version: None,
            meshpush_version: "0".into(),
            types: Vec::new(),
        };
        let table = render(&[proxy]);
        let row = table.lines().nth(1).unwrap();
        assert!(row.contains("cluster2") && !row.contains("reviews.default "), "{table}");
    }

    #[test]
    fn short_names_are_pod_dot_namespace() {
        assert_eq!(short_name("sidecar~10.0.0.1~reviews-v1.default~default.svc.cluster.local"), "reviews-v1.default");
        assert_eq!(short_name("odd"), "odd");
    }
}
