//! The layer rules of ARCHITECTURE.md, checked over the source tree: no
//! module imports a module of a layer above its own, or a peer of its own
//! layer, and only test code uses `meshpush::testing`. Beside them, the
//! size rule: no source file outside tests passes [`MAX_LINES`] lines
//! unless its module doc says why ([`LONG_FILE_REASON`]).
//!
//! The check reads `crate::` paths in code (comments and documentation are
//! skipped, and so is test code: `test.rs` files and `#[cfg(test)] mod`
//! blocks, which may reach for anything). It runs for meshpush's `src/`
//! and for the loadtest crate's `loadtest/src/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// meshpush's layers, bottom first: a module may use the modules of the
/// layers before its own.
const MESHPUSH: &[&[&str]] = &[
    &["resource", "text", "os", "envoy_api", "workload_api", "istio_api"],
    &["metrics"],
    &["config"],
    &["model"],
    &["push"],
    &["generate"],
    &["engine"],
    &["xds"],
    &["ca"],
    &["source"],
    &["admin"],
    &["cli", "bootstrap", "capture"],
    &["inject"],
    &["admission"],
    &["serve", "agent"],
];

/// The loadtest crate's layers, bottom first.
const LOADTEST: &[&[&str]] = &[
    &["wire"],
    &["track"],
    &["deps", "held"],
    &["fleet"],
    &["mesh", "registry", "server", "frames"],
    &["grpc"],
    &["envoy"],
    &["sotw", "delta"],
    &["ads"],
    &["report"],
    &["scenario"],
    &["run"],
];

/// The layers inside `xds`, bottom first (ARCHITECTURE.md: watch ← stream
/// ← sotw, delta, api ← server).
const XDS: &[&[&str]] = &[&["watch"], &["stream"], &["sotw", "delta", "api"], &["server"]];

/// The most lines a source file (test code aside) may have without a reason.
const MAX_LINES: usize = 700;

/// What opens the reason a file is longer, in its leading `//!` lines.
const LONG_FILE_REASON: &str = "Why this file is long:";

/// Modules outside the layers that only test code may use.
const TEST_ONLY: &[&str] = &["testing", "test"];

/// One broken rule: where, and which import.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
    why: &'static str,
}

/// The layer index of `module`, if it has one.
fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&module))
}

/// The code of `text` that is not test code, line by line (`None` for a
/// line that is a comment or test code).
fn code_lines(text: &str) -> Vec<Option<&str>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            out.push(None);
            // The item it guards: a `mod x;` declaration is skipped alone,
            // an inline `mod x {` holds the rest of the file (tests come last).
            let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or_default();
            if next.starts_with("mod ") && next.ends_with('{') {
                out.extend(std::iter::repeat_n(None, lines.len() - i - 1));
                break;
            }
            out.push(None);
            i += 2;
            continue;
        }
        out.push(if trimmed.starts_with("//") { None } else { Some(lines[i]) });
        i += 1;
    }
    out
}

/// The top-level modules a code line names through `crate::`, grouped
/// imports (`crate::{a, b::c}`) included; a group spanning lines is read
/// from `rest` (the lines after).
fn referenced(line: &str, rest: &[Option<&str>]) -> Vec<String> {
    let mut found = Vec::new();
    let mut text = line.to_string();
    if line.contains("crate::{") && !line.contains('}') {
        for next in rest.iter().flatten() {
            text.push_str(next);
            if next.contains('}') {
                break;
            }
        }
    }
    let mut from = 0;
    while let Some(at) = text[from..].find("crate::") {
        let start = from + at + "crate::".len();
        // `meshpush_crate::` or `some_crate::` are not this crate.
        let before = text[..from + at].chars().next_back();
        from = start;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let tail = &text[start..];
        if let Some(group) = tail.strip_prefix('{') {
            let mut depth = 1;
            let mut entry = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        found.extend(first_ident(&entry));
                        entry.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 1 {
                    entry.push(c);
                }
            }
            found.extend(first_ident(&entry));
        } else {
            found.extend(first_ident(tail));
        }
    }
    found
}

fn first_ident(text: &str) -> Option<String> {
    let ident: String = text.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!ident.is_empty() && ident != "self").then_some(ident)
}

/// The violations in one file of module `module`.
fn check_file(layers: &[&[&str]], file: &str, module: &str, text: &str) -> Vec<Violation> {
    let is_test_file = file.ends_with("/test.rs") || file.contains("/test/") || TEST_ONLY.contains(&module);
    if is_test_file {
        return Vec::new();
    }
    let own = layer_of(layers, module);
    let lines = code_lines(text);
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(line) = line else { continue };
        for to in referenced(line, &lines[i + 1..]) {
            if to == module {
                continue;
            }
            let why = if TEST_ONLY.contains(&to.as_str()) {
                Some("only test code may use it")
            } else {
                match (own, layer_of(layers, &to)) {
                    (Some(a), Some(b)) if b > a => Some("it is in a layer above"),
                    (Some(a), Some(b)) if b == a => Some("it is a peer in the same layer"),
                    (None, _) => Some("the importing module has no layer: add it to the table"),
                    (_, None) => Some("the imported module has no layer: add it to the table"),
                    _ => None,
                }
            };
            if let Some(why) = why {
                out.push(Violation { file: file.into(), line: i + 1, from: module.into(), to, why });
            }
        }
    }
    out
}

/// The module path of a file below `src` (`xds/sotw/connection.rs` →
/// `[xds, sotw, connection]`; a `mod.rs` is its directory's module).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// The modules of `xds` a line of the file at `path` (a module path below
/// `src`) names, through `crate::xds::` or a chain of `super::`.
fn xds_references(path: &[String], line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::xds::") {
        found.extend(first_ident(&rest[at + "crate::xds::".len()..]));
        rest = &rest[at + 1..];
    }
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().next_back();
        let chain = &rest[at..];
        rest = &rest[at + "super::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // `super::super::x` splits into ["", "", "x"]: one empty part per `super`.
        let ups = chain.split("super::").take_while(|p| p.is_empty()).count();
        let name = first_ident(&chain["super::".len() * ups..]);
        if let (Some(name), Some(base)) = (name, path.len().checked_sub(ups)) {
            let mut target: Vec<String> = path[..base].to_vec();
            target.push(name);
            if target.len() >= 2 && target[0] == "xds" {
                found.push(target[1].clone());
            }
        }
    }
    found
}

/// The violations of the layers inside `xds` in one file of it.
fn check_xds_file(file: &str, path: &[String], text: &str) -> Vec<Violation> {
    let Some(own) = path.get(1).filter(|own| !TEST_ONLY.contains(&own.as_str())) else { return Vec::new() };
    if file.ends_with("/test.rs") || file.contains("/test/") {
        return Vec::new();
    }
    let own_layer = layer_of(XDS, own);
    let mut out = Vec::new();
    for (i, line) in code_lines(text).iter().enumerate() {
        let Some(line) = line else { continue };
        for to in xds_references(path, line) {
            if &to == own || TEST_ONLY.contains(&to.as_str()) {
                continue;
            }
            let why = match (own_layer, layer_of(XDS, &to)) {
                (Some(a), Some(b)) if b > a => Some("it is in a layer above, inside xds"),
                (Some(a), Some(b)) if b == a => Some("it is a peer in the same layer, inside xds"),
                (None, _) | (_, None) => Some("an xds module without a layer: add it to the table"),
                _ => None,
            };
            if let Some(why) = why {
                out.push(Violation { file: file.into(), line: i + 1, from: format!("xds::{own}"), to, why });
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every violation in the crate rooted at `src` (crate roots — `lib.rs`,
/// `main.rs` — only declare and re-export, and are skipped); `inner` names
/// the module whose own layers ([`XDS`]) are checked too.
fn check_crate(layers: &[&[&str]], src: &Path, inner: Option<&str>) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let relative = path.strip_prefix(src).expect("under src");
        let first = relative.components().next().expect("a path").as_os_str().to_string_lossy().into_owned();
        let module = first.trim_end_matches(".rs");
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        out.extend(check_file(layers, &path.display().to_string(), module, &text));
        if inner == Some(module) {
            out.extend(check_xds_file(&path.display().to_string(), &module_path(relative), &text));
        }
    }
    out
}

/// Whether `file` is test code: a `test.rs`, a file under a `test/` folder,
/// or the integration tests under `tests/`.
fn is_test_path(file: &str) -> bool {
    file.ends_with("/test.rs") || file.contains("/test/") || file.contains("/tests/")
}

/// Whether the leading `//!` lines of `text` give a reason for its length.
fn says_why_it_is_long(text: &str) -> bool {
    text.lines()
        .take_while(|l| l.trim_start().starts_with("//!"))
        .any(|l| l.trim_start().trim_start_matches("//!").trim_start().starts_with(LONG_FILE_REASON))
}

/// The source files below `dirs` (test code aside) over [`MAX_LINES`]
/// lines without a reason: each with its length.
fn long_files(dirs: &[PathBuf]) -> Vec<(String, usize)> {
    let mut long = Vec::new();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        files.sort();
        for path in files {
            // Judged below the scanned folder, wherever the checkout lives.
            let relative = format!("/{}", path.strip_prefix(dir).expect("under dir").display());
            if is_test_path(&relative) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable source");
            let lines = text.lines().count();
            if lines > MAX_LINES && !says_why_it_is_long(&text) {
                long.push((path.display().to_string(), lines));
            }
        }
    }
    long
}

fn report(violations: &[Violation]) -> String {
    violations.iter().map(|v| format!("{}:{}: {} uses {}: {}\n", v.file, v.line, v.from, v.to, v.why)).collect()
}

#[test]
fn no_meshpush_module_imports_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let violations = check_crate(MESHPUSH, &src, Some("xds"));
    assert!(violations.is_empty(), "layer rules broken (ARCHITECTURE.md, \"Layers\"):\n{}", report(&violations));
}

#[test]
fn no_loadtest_module_imports_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("loadtest/src");
    let violations = check_crate(LOADTEST, &src, None);
    assert!(violations.is_empty(), "loadtest layer rules broken:\n{}", report(&violations));
}

#[test]
fn no_source_file_passes_the_line_limit_without_a_reason() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs: Vec<PathBuf> =
        ["src", "loadtest/src", "benches", "examples", "fuzz/fuzz_targets"].iter().map(|d| root.join(d)).collect();
    let long = long_files(&dirs);
    let listed: String = long.iter().map(|(f, n)| format!("{f}: {n} lines\n")).collect();
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines without a reason (split them by concern, or open a line \
         \"{LONG_FILE_REASON} …\" in the module doc):\n{listed}"
    );
}

#[test]
fn the_size_rule_finds_a_long_file_and_accepts_a_reason_and_tests() {
    let dir = tempfile::TempDir::new().unwrap();
    let body = "fn f() {}\n".repeat(MAX_LINES);
    std::fs::write(dir.path().join("long.rs"), format!("//! A part.\n{body}")).unwrap();
    std::fs::write(dir.path().join("fits.rs"), "//! A part.\n".to_string() + &"fn f() {}\n".repeat(MAX_LINES - 1))
        .unwrap();
    std::fs::write(dir.path().join("said.rs"), format!("//! A part.\n//!\n//! {LONG_FILE_REASON} one table.\n{body}"))
        .unwrap();
    std::fs::write(dir.path().join("late.rs"), format!("//! A part.\n{body}// {LONG_FILE_REASON} too late\n")).unwrap();
    std::fs::create_dir(dir.path().join("x")).unwrap();
    std::fs::write(dir.path().join("x/test.rs"), &body).unwrap();
    let found: Vec<String> = long_files(&[dir.path().to_path_buf()])
        .into_iter()
        .map(|(f, n)| format!("{}:{n}", Path::new(&f).file_name().unwrap().to_string_lossy()))
        .collect();
    assert_eq!(found, vec![format!("late.rs:{}", MAX_LINES + 2), format!("long.rs:{}", MAX_LINES + 1)]);
}

#[test]
fn inside_xds_the_protocols_sit_on_the_shared_machinery_and_under_the_server() {
    let path = |p: &str| module_path(Path::new(p));
    let up =
        "use super::super::server::AdsService;\nuse crate::xds::delta::DeltaConnection;\nuse super::codec::body;\n";
    let found: Vec<(usize, String)> = check_xds_file("src/xds/sotw/connection.rs", &path("xds/sotw/connection.rs"), up)
        .into_iter()
        .map(|v| (v.line, v.to))
        .collect();
    assert_eq!(found, vec![(1, "server".to_string()), (2, "delta".to_string())], "its own codec is fine");
    let down = "use super::stream::body::Framed;\nuse super::sotw::Connection;\n";
    assert!(check_xds_file("src/xds/server.rs", &path("xds/server.rs"), down).is_empty());
    let watch_up = "use crate::xds::stream::placement::Placement;\n";
    assert_eq!(check_xds_file("src/xds/watch/mod.rs", &path("xds/watch/mod.rs"), watch_up).len(), 1);
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let missing: Vec<&&str> =
        declared.iter().filter(|m| layer_of(MESHPUSH, m).is_none() && !TEST_ONLY.contains(m)).collect();
    assert!(missing.is_empty(), "modules without a layer in the table: {missing:?}");
}

#[test]
fn the_check_finds_an_upward_import_a_peer_and_test_helpers_in_server_code() {
    let file = "src/push/queue.rs";
    let text = "//! docs may name crate::xds freely\n\
                use crate::model::Proxy;\n\
                use crate::{resource::TypeSet, xds::status::StreamStatus};\n\
                fn f() { crate::testing::wait::POLL; }\n\
                #[cfg(test)]\n\
                mod tests {\n\
                    use crate::xds::AdsService;\n\
                }\n";
    let found: Vec<(usize, String, &str)> =
        check_file(MESHPUSH, file, "push", text).into_iter().map(|v| (v.line, v.to, v.why)).collect();
    assert_eq!(
        found,
        vec![(3, "xds".to_string(), "it is in a layer above"), (4, "testing".to_string(), "only test code may use it")]
    );
    let peer = check_file(MESHPUSH, "src/cli/mod.rs", "cli", "use crate::bootstrap::Bootstrap;\n");
    assert_eq!(peer.len(), 1, "{peer:?}");
    assert_eq!(peer[0].why, "it is a peer in the same layer");
    let grouped = "use crate::{\n    generate::cache::ScopedCache,\n    model::Proxy,\n};\n";
    let up = check_file(MESHPUSH, "src/push/x.rs", "push", grouped);
    assert_eq!(up.iter().map(|v| v.to.as_str()).collect::<Vec<_>>(), vec!["generate"], "{up:?}");
}
