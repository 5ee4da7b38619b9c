//! `meshpush iptables` for real: the rules written into a network
//! namespace of the test's own (a pod, with an address on a veth) by
//! Debian's iptables (installed by `scripts/install-iptables.sh` when
//! missing), read back with `iptables -C` and `iptables-save`, written
//! once however often the command runs, and all gone after `clean`.

use std::path::Path;
use std::process::Command;

use crate::support::netns::NetNs;

/// The flags Istio's injector gives istio-init by default.
const INJECTOR_FLAGS: [&str; 16] = [
    "-p",
    "15001",
    "-z",
    "15006",
    "-u",
    "1337",
    "-m",
    "REDIRECT",
    "-i",
    "*",
    "-x",
    "",
    "-b",
    "*",
    "-d",
    "15090,15021,15020",
];

fn meshpush() -> &'static str {
    env!("CARGO_BIN_EXE_meshpush")
}

fn ensure_iptables() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-iptables.sh");
    let out = Command::new("bash").arg(&script).output().expect("run install-iptables.sh");
    assert!(out.status.success(), "no iptables for the capture tests: {}", String::from_utf8_lossy(&out.stderr));
}

/// `iptables-save` (or `ip6tables-save`) of the namespace, without its
/// comment lines (they carry the time).
fn saved(ns: &NetNs, program: &str) -> String {
    ns.ok(program, &[]).lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect()
}

/// Whether `iptables -t TABLE -C RULE…` finds the rule.
fn has(ns: &NetNs, table: &str, rule: &str) -> bool {
    let mut args = vec!["-t", table, "-C"];
    args.extend(rule.split_whitespace());
    ns.run("iptables", &args).status.success()
}

fn capture(ns: &NetNs, args: &[&str]) -> std::process::Output {
    let mut all = vec!["iptables"];
    all.extend_from_slice(args);
    ns.run(meshpush(), &all)
}

#[test]
fn the_injectors_rules_are_written_once_and_clean_leaves_nothing() {
    ensure_iptables();
    let ns = NetNs::new("capture", "198.18.0.2/24");
    let before = saved(&ns, "iptables-save");
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Inbound to any port but the status ports goes to 15006, outbound to 15001, the proxy's own never.
    for rule in [
        "PREROUTING -p tcp -j ISTIO_INBOUND",
        "ISTIO_INBOUND -p tcp --dport 15021 -j RETURN",
        "ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
        "ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
        "OUTPUT -j ISTIO_OUTPUT",
        "ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
        "ISTIO_OUTPUT -j ISTIO_REDIRECT",
        "ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
    ] {
        assert!(has(&ns, "nat", rule), "no `{rule}` in\n{}", saved(&ns, "iptables-save"));
    }
    // Exactly the rules `--dry-run` prints, no more.
    let mut dry = INJECTOR_FLAGS.to_vec();
    dry.push("--dry-run");
    let printed = String::from_utf8(capture(&ns, &dry).stdout).unwrap();
    let rules = |text: &str| text.lines().filter(|l| l.starts_with("-A ") || l.starts_with("-I ")).count();
    let installed = saved(&ns, "iptables-save");
    assert_eq!(rules(&installed), rules(&printed), "installed:\n{installed}\nprinted:\n{printed}");
    assert!(printed.starts_with("* nat\n-N ISTIO_INBOUND\n"), "{printed}");

    // Again: nothing changes.
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(saved(&ns, "iptables-save"), installed, "a second run wrote rules");

    // Other flags over them: refused, nothing touched.
    let mut other = INJECTOR_FLAGS.to_vec();
    other[15] = "15090";
    let out = capture(&ns, &other);
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("differ") && why.contains("meshpush iptables clean"), "{why}");
    assert_eq!(saved(&ns, "iptables-save"), installed);

    // Clean: back to what the namespace had; cleaning again is fine.
    let mut clean = vec!["clean"];
    clean.extend_from_slice(&INJECTOR_FLAGS);
    for _ in 0..2 {
        let out = capture(&ns, &clean);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let after = saved(&ns, "iptables-save");
    assert!(!after.contains("ISTIO"), "{after}");
    assert_eq!(rules(&after), rules(&before));
}

#[test]
fn tproxy_marks_and_routes_are_set_and_removed() {
    ensure_iptables();
    let ns = NetNs::new("tproxy", "198.18.0.2/24");
    let flags = ["-m", "TPROXY", "-b", "*", "-i", "*", "-d", "15090,15021,15020"];
    let out = capture(&ns, &flags);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(has(&ns, "mangle", "PREROUTING -p tcp -j ISTIO_INBOUND"));
    assert!(has(
        &ns,
        "mangle",
        "ISTIO_TPROXY ! -d 127.0.0.1/32 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006"
    ));
    assert!(has(&ns, "mangle", "OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark"));
    // Marked packets are delivered locally, through table 133.
    let rules = ns.ok("ip", &["rule", "show"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");
    assert!(ns.ok("ip", &["route", "show", "table", "133"]).contains("local default dev lo"));

    let mut clean = vec!["clean"];
    clean.extend_from_slice(&flags);
    let out = capture(&ns, &clean);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!saved(&ns, "iptables-save").contains("ISTIO"));
    assert!(!has(&ns, "mangle", "OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark"), "a mark left");
    assert!(!ns.ok("ip", &["rule", "show"]).contains("lookup 133"));
}

#[test]
fn an_ipv6_pod_gets_ip6tables_rules_too() {
    ensure_iptables();
    let ns = NetNs::new("ipv6", "fd00::2/64");
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v6 = saved(&ns, "ip6tables-save");
    assert!(v6.contains("-A ISTIO_OUTPUT -s ::6/128 -o lo -j RETURN"), "{v6}");
    assert!(v6.contains("-A ISTIO_OUTPUT -d ::1/128 -j RETURN"), "{v6}");
    assert!(saved(&ns, "iptables-save").contains("ISTIO_OUTPUT"), "IPv4 rules as well");
    // The proxy's inbound passthrough binds ::6.
    assert!(ns.ok("ip", &["-6", "addr", "show", "dev", "lo"]).contains("::6/128"));
    let mut clean = vec!["clean"];
    clean.extend_from_slice(&INJECTOR_FLAGS);
    assert!(capture(&ns, &clean).status.success());
    assert!(!saved(&ns, "ip6tables-save").contains("ISTIO"));
}

#[test]
fn bad_flags_are_refused_naming_them() {
    let cases: [(&[&str], &str); 4] = [
        (&["-m", "NONE", "--dry-run"], "-m \"NONE\""),
        (&["-b", "80,http", "--dry-run"], "\"http\" is not a port"),
        (&["-i", "10.0.0.0/40", "--dry-run"], "-i: \"10.0.0.0/40\" is not a CIDR"),
        (&["-x", "*", "--dry-run"], "-x \"*\""),
    ];
    for (flags, says) in cases {
        let mut args = vec!["iptables"];
        args.extend_from_slice(flags);
        let out = Command::new(meshpush()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains(says), "{flags:?}: {why}");
    }
}
