//! `meshpush inject`: a manifest's pods with the sidecar, as `istioctl
//! kube-inject` prints them (`meshpush::inject::workload`).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use meshpush::config::mesh::MeshSettings;
use meshpush::inject::{Injector, InjectorSettings};

/// The flags of `meshpush inject`.
#[derive(Debug, clap::Args)]
pub(crate) struct InjectArgs {
    /// The manifest (`-` for standard input).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Where to write the result (default: standard output).
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Istio's mesh config (its `defaultConfig` is each proxy's ProxyConfig).
    #[arg(long, alias = "meshConfigFile")]
    mesh_config: Option<PathBuf>,
    /// The injector's settings (image, policy, selectors, defaults).
    #[arg(long)]
    injector_config: Option<PathBuf>,
}

pub(crate) fn run(args: &InjectArgs) -> ExitCode {
    match inject(args) {
        Ok(warnings) => {
            for warning in warnings {
                eprintln!("meshpush inject: warning: {warning}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("meshpush inject: {e}");
            ExitCode::FAILURE
        }
    }
}

fn inject(args: &InjectArgs) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    let mesh = match &args.mesh_config {
        Some(path) => {
            let settings = MeshSettings::read(path).map_err(|e| format!("--mesh-config {e}"))?;
            warnings.extend(settings.problems.iter().map(|p| format!("{}: {}: {}", path.display(), p.path, p.message)));
            settings.mesh_config()
        }
        None => Default::default(),
    };
    let settings = match &args.injector_config {
        Some(path) => InjectorSettings::read(path).map_err(|e| format!("--injector-config {e}"))?,
        None => InjectorSettings::default(),
    };
    let text = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("standard input: {e}"))?;
        text
    } else {
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?
    };
    let injector = Injector { mesh, settings };
    let injected = meshpush::inject::workload::inject_manifest(&injector, &text)
        .map_err(|e| format!("{}: {e}", args.file.display()))?;
    match &args.output {
        Some(path) => std::fs::write(path, &injected.text).map_err(|e| format!("{}: {e}", path.display()))?,
        None => print!("{}", injected.text),
    }
    warnings.extend(injected.warnings);
    Ok(warnings)
}
