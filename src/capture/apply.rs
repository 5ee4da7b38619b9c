//! Writing the capture rules into the network namespace this process runs
//! in (the pod's, for an init container), finding them there, and taking
//! them out.
//!
//! How: the system's `iptables-restore --noflush` (and `ip6tables-restore`),
//! as istio-iptables does, rather than a netlink crate. The text is then
//! Istio's own and the rules read alike whoever wrote them; it works on
//! either iptables backend a host has (nf_tables or legacy), and the only
//! maintained Rust nftables crates either need the C libnftnl or are
//! GPL-3.0. The iptables front end chooses the backend (Debian's default
//! is nf_tables); Istio's probing for an older legacy rule set is not
//! copied.
//!
//! Invariants:
//! - **Once.** Rules a run finds already in place, exactly as this config
//!   writes them (Istio's chains, each with as many rules, and every rule
//!   there), are left alone: a rerun changes nothing. Istio's chains that
//!   differ are an error that says to clean first; nothing is half-written
//!   over them.
//! - **Clean leaves nothing.** [`clean`] removes every rule of this config
//!   in the built-in chains, every rule anywhere that jumps to an `ISTIO_`
//!   chain, and every `ISTIO_` chain, then checks that none is left; with
//!   TPROXY, the routing rule and table too.

use std::io::Write as _;
use std::process::{Command, Stdio};

use super::{CaptureConfig, InboundMode, Rules, Selection};

/// What a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The rules were written.
    Installed,
    /// The same rules were already in place: nothing was written.
    AlreadyInstalled,
}

/// Why the rules could not be written, checked or removed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A command failed.
    #[error("{command}: {why}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output, or why it could not run.
        why: String,
    },
    /// Istio's chains are there, and are not what this config writes.
    #[error(
        "the {family} rules already in place differ from what these flags write ({what}): remove them first \
         (`meshpush iptables clean` with the flags that wrote them)"
    )]
    Different {
        /// IPv4 or IPv6.
        family: &'static str,
        /// What differs.
        what: String,
    },
    /// Clean left something behind.
    #[error("{0}")]
    Left(String),
}

/// The commands of one IP version.
struct Family {
    name: &'static str,
    v6: bool,
    iptables: &'static str,
    save: &'static str,
    restore: &'static str,
    ip: &'static str,
    any: &'static str,
}

const V4: Family = Family {
    name: "IPv4",
    v6: false,
    iptables: "iptables",
    save: "iptables-save",
    restore: "iptables-restore",
    ip: "-4",
    any: "0.0.0.0/0",
};
const V6: Family = Family {
    name: "IPv6",
    v6: true,
    iptables: "ip6tables",
    save: "ip6tables-save",
    restore: "ip6tables-restore",
    ip: "-6",
    any: "::/0",
};

/// The IP versions `config` writes.
fn families(config: &CaptureConfig) -> Vec<&'static Family> {
    if config.ipv6 { vec![&V4, &V6] } else { vec![&V4] }
}

/// Writes `config`'s rules, unless they are in place already.
pub fn install(config: &CaptureConfig) -> Result<Outcome, CaptureError> {
    let mut in_place = Vec::new();
    for family in families(config) {
        let rules = config.rule_set(family.v6);
        let found = istio_chains(family)?;
        if found.is_empty() {
            in_place.push(false);
            continue;
        }
        if let Some(what) = difference(family, &rules, &found)? {
            return Err(CaptureError::Different { family: family.name, what });
        }
        in_place.push(true);
    }
    if in_place.iter().all(|placed| *placed) {
        routes(config)?;
        return Ok(Outcome::AlreadyInstalled);
    }
    for (family, placed) in families(config).into_iter().zip(in_place) {
        if !placed {
            run_with_input(family.restore, &["--noflush"], &config.rule_set(family.v6).render())?;
        }
    }
    routes(config)?;
    Ok(Outcome::Installed)
}

/// With TPROXY and inbound capture: packets marked by the proxy are
/// delivered locally through their own routing table (`ip rule` and
/// `ip route`), as istio-iptables sets them up; and an IPv6 pod has `::6`
/// on loopback for the proxy's inbound passthrough to bind.
fn routes(config: &CaptureConfig) -> Result<(), CaptureError> {
    if config.ipv6 {
        // Already there is fine (the kernel says so with EEXIST).
        let _ = run("ip", &["-6", "addr", "add", "::6/128", "dev", "lo"]);
    }
    if config.mode != InboundMode::Tproxy || config.inbound_ports == Selection::None {
        return Ok(());
    }
    let (mark, table) = (config.tproxy_mark.to_string(), config.tproxy_route_table.to_string());
    for family in families(config) {
        let shown = run("ip", &[family.ip, "rule", "show", "fwmark", &mark, "lookup", &table])?;
        if shown.trim().is_empty() {
            run("ip", &[family.ip, "rule", "add", "fwmark", &mark, "lookup", &table])?;
        }
        run("ip", &[family.ip, "route", "replace", "local", family.any, "dev", "lo", "table", &table])?;
    }
    Ok(())
}

/// Removes what `config` writes, and every `ISTIO_` chain and jump to one;
/// an error when something is left.
pub fn clean(config: &CaptureConfig) -> Result<(), CaptureError> {
    let mut families = families(config);
    if !config.ipv6 && run(V6.save, &[]).is_ok_and(|saved| saved.contains(":ISTIO_")) {
        families.push(&V6);
    }
    for family in &families {
        let rules = config.rule_set(family.v6);
        // This config's rules in the built-in chains (TPROXY's marks are not jumps).
        for rule in rules.all().iter().rev().filter(|r| r.in_builtin_chain()) {
            let mut args = vec!["-t", rule.table, "-D", rule.chain];
            args.extend(rule.spec());
            let _ = run(family.iptables, &args);
        }
        let saved = run(family.save, &[])?;
        for (table, line) in jumps_to_istio(&saved) {
            let mut args = vec!["-t", table, "-D"];
            args.extend(line.split_whitespace().skip(1));
            run(family.iptables, &args)?;
        }
        let chains: Vec<(&str, &str)> = saved_chains(&saved).into_iter().map(|(t, c, _)| (t, c)).collect();
        for (table, chain) in &chains {
            run(family.iptables, &["-t", table, "-F", chain])?;
        }
        for (table, chain) in &chains {
            run(family.iptables, &["-t", table, "-X", chain])?;
        }
        let after = run(family.save, &[])?;
        let mut left: Vec<String> = after.lines().filter(|l| l.contains("ISTIO_")).map(str::to_string).collect();
        for rule in rules.all().iter().filter(|r| r.in_builtin_chain()) {
            let mut args = vec!["-t", rule.table, "-C", rule.chain];
            args.extend(rule.spec());
            if run(family.iptables, &args).is_ok() {
                left.push(rule.line.clone());
            }
        }
        if !left.is_empty() {
            return Err(CaptureError::Left(format!("{} rules left after cleaning: {}", family.name, left.join("; "))));
        }
        if config.mode == InboundMode::Tproxy {
            let (mark, table) = (config.tproxy_mark.to_string(), config.tproxy_route_table.to_string());
            while run("ip", &[family.ip, "rule", "del", "fwmark", &mark, "lookup", &table]).is_ok() {}
            let _ = run("ip", &[family.ip, "route", "flush", "table", &table]);
        }
    }
    Ok(())
}

/// Istio's chains in `family`'s tables: (table, chain, rules it holds).
fn istio_chains(family: &Family) -> Result<Vec<(String, String, usize)>, CaptureError> {
    let saved = run(family.save, &[])?;
    Ok(saved_chains(&saved).into_iter().map(|(t, c, n)| (t.to_string(), c.to_string(), n)).collect())
}

/// The `ISTIO_` chains of `iptables-save` output, with their rule counts.
fn saved_chains(saved: &str) -> Vec<(&str, &str, usize)> {
    let mut out: Vec<(&str, &str, usize)> = Vec::new();
    let mut table = "";
    for line in saved.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.trim();
        } else if let Some(chain) = line.strip_prefix(":ISTIO_") {
            let name = &line[1..1 + "ISTIO_".len() + chain.split_whitespace().next().unwrap_or("").len()];
            out.push((table, name, 0));
        } else if let Some(rest) = line.strip_prefix("-A ISTIO_") {
            let name = &line[3..3 + "ISTIO_".len() + rest.split_whitespace().next().unwrap_or("").len()];
            if let Some(entry) = out.iter_mut().find(|(t, c, _)| *t == table && *c == name) {
                entry.2 += 1;
            }
        }
    }
    out
}

/// The rules of built-in chains that jump to an `ISTIO_` chain, as saved.
fn jumps_to_istio(saved: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut table = "";
    for line in saved.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.trim();
        } else if line.starts_with("-A ") && !line.starts_with("-A ISTIO_") && line.contains(" -j ISTIO_") {
            out.push((table, line));
        }
    }
    out
}

/// What differs between the rules and Istio's chains `found`, if anything.
fn difference(
    family: &Family,
    rules: &Rules,
    found: &[(String, String, usize)],
) -> Result<Option<String>, CaptureError> {
    let mut expected: Vec<(&str, &str, usize)> = Vec::new();
    for table in rules.tables() {
        expected.extend(rules.chains(table).into_iter().map(|(c, n)| (table, c, n)));
    }
    for (table, chain, count) in found {
        match expected.iter().find(|(t, c, _)| t == table && c == chain) {
            None => return Ok(Some(format!("{table} has {chain}, which these flags do not write"))),
            Some((_, _, n)) if n != count => {
                return Ok(Some(format!("{table} {chain} holds {count} rules, these flags write {n}")));
            }
            Some(_) => {}
        }
    }
    for (table, chain, _) in &expected {
        if !found.iter().any(|(t, c, _)| t == table && c == chain) {
            return Ok(Some(format!("{table} has no {chain}")));
        }
    }
    for rule in rules.all() {
        let mut args = vec!["-t", rule.table, "-C", rule.chain];
        args.extend(rule.spec());
        if run(family.iptables, &args).is_err() {
            return Ok(Some(format!("{table} lacks `{line}`", table = rule.table, line = rule.line)));
        }
    }
    Ok(None)
}

/// Runs `program` with `args`; its standard output, or why it failed.
fn run(program: &str, args: &[&str]) -> Result<String, CaptureError> {
    let output = Command::new(program).args(args).output().map_err(|e| command_error(program, args, e.to_string()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(command_error(program, args, String::from_utf8_lossy(&output.stderr).trim().to_string()))
    }
}

/// Runs `program` with `args`, `input` on its standard input.
fn run_with_input(program: &str, args: &[&str], input: &str) -> Result<(), CaptureError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| command_error(program, args, e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(|e| command_error(program, args, e.to_string()))?;
    }
    let output = child.wait_with_output().map_err(|e| command_error(program, args, e.to_string()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(command_error(program, args, String::from_utf8_lossy(&output.stderr).trim().to_string()))
    }
}

fn command_error(program: &str, args: &[&str], why: String) -> CaptureError {
    CaptureError::Command { command: format!("{program} {}", args.join(" ")), why }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVED: &str = "# Generated by iptables-save v1.8.9 (nf_tables)
*mangle
:PREROUTING ACCEPT [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ISTIO_INBOUND - [0:0]
:ISTIO_OUTPUT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
";

    #[test]
    fn saved_chains_are_counted_per_table() {
        assert_eq!(saved_chains(SAVED), [("nat", "ISTIO_INBOUND", 2), ("nat", "ISTIO_OUTPUT", 1)]);
    }

    #[test]
    fn jumps_from_builtin_chains_are_found_as_saved() {
        assert_eq!(
            jumps_to_istio(SAVED),
            [("nat", "-A PREROUTING -p tcp -j ISTIO_INBOUND"), ("nat", "-A OUTPUT -j ISTIO_OUTPUT")]
        );
    }
}
