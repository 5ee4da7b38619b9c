//! Headless Chromium for tests that look at a page as a person would.
//!
//! [`chromium_binary`] is the one place tests get the browser from: Debian's
//! `chromium` package, installed on first use by `scripts/install-chromium.sh`
//! (apt-get, as root). [`dump_dom`] loads a page and returns the DOM after its
//! scripts ran; [`screenshot`] saves a PNG. Each run gets a fresh profile
//! directory and the flags that keep Chromium off the network (no QUIC, no
//! background or component updates, no sync), and runs in its own session
//! under a [`ChildGuard`], so it is killed with all its helper processes when
//! it overruns or the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::process::{ChildGuard, POLL, logs, scratch_dir};

/// How long one page load may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The Chromium binary, installing it when missing. Panics with the
/// installer's output when that fails.
pub fn chromium_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-chromium.sh");
            let out =
                Command::new("bash").arg(&script).output().unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
            let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(
                out.status.success() && Path::new(&printed).is_file(),
                "{} failed ({}), so no browser for the tests\nstdout: {printed}\nstderr: {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr),
            );
            PathBuf::from(printed)
        })
        .clone()
}

/// Runs headless Chromium on `url` with `extra` flags, its stdout going to
/// `stdout` in its scratch directory; returns that directory's guard after
/// Chromium exited successfully.
fn run(url: &str, extra: &[String], name: &str) -> ChildGuard {
    let binary = chromium_binary();
    let dir = scratch_dir(name);
    let profile = dir.path().join("profile");
    let mut args: Vec<String> = vec![
        // `exec` keeps Chromium the session leader the guard kills; the shell only redirects stdout.
        "-c".into(),
        "exec \"$0\" \"$@\" > \"$STDOUT_FILE\"".into(),
        binary.display().to_string(),
    ];
    args.extend(
        [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--virtual-time-budget=2000",
        ]
        .map(String::from),
    );
    args.push(format!("--user-data-dir={}", profile.display()));
    args.extend(extra.iter().cloned());
    args.push(url.to_string());
    // `env NAME=VALUE bash -c …` hands the shell the output path without quoting it into the script.
    let stdout = dir.path().join("stdout");
    let mut shell_args = vec![format!("STDOUT_FILE={}", stdout.display()), "bash".into()];
    shell_args.extend(args);
    let mut child = ChildGuard::spawn(name, dir, Path::new("/usr/bin/env"), shell_args);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.exited() {
            assert!(status.success(), "chromium exited with {status} on {url}\n{}", logs(&[&child]));
            return child;
        }
        assert!(Instant::now() < deadline, "chromium did not finish {url} within {TIMEOUT:?}\n{}", logs(&[&child]));
        std::thread::sleep(POLL);
    }
}

/// The DOM of `url` once it loaded and its scripts ran.
pub fn dump_dom(url: &str) -> String {
    let child = run(url, &["--dump-dom".to_string()], "chromium-dom");
    std::fs::read_to_string(child.dir().join("stdout")).expect("chromium's --dump-dom output")
}

/// Saves a `width`×`height` screenshot of `url` to `png`.
pub fn screenshot(url: &str, png: &Path, width: u32, height: u32) {
    if let Some(parent) = png.parent() {
        std::fs::create_dir_all(parent).expect("create the screenshot's directory");
    }
    let _ = std::fs::remove_file(png);
    let child = run(
        url,
        &[format!("--screenshot={}", png.display()), format!("--window-size={width},{height}")],
        "chromium-screenshot",
    );
    assert!(png.is_file(), "chromium wrote no screenshot to {}\n{}", png.display(), logs(&[&child]));
}
