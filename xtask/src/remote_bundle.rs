//! The remote-read figures' part of the GPU bundle: a real HTTP server that honours Range
//! requests, carried as a binary (the GPU machine reaches no package registry), and the script
//! that measures our remote reads against KvikIO's `RemoteFile` and the server's own loopback
//! ceiling (`hipfile-remote/bench/figures.py`, run by `run.sh --remote-figures`).
//!
//! The server is Debian's nginx from the build machine (`/usr/sbin/nginx`, or the file
//! `$HIPFILE_NGINX` names) with the shared libraries `ldd` resolves for it, except the C
//! library's, the loader and OpenSSL's, which the GPU machine has: the bundle's
//! `remote/nginx/lib` goes on nginx's `LD_LIBRARY_PATH` only. Without nginx the bundle is made without it and says so; the figures
//! then fail at their first step, clearly.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The figures script: (file in the repo, place in the bundle).
pub const FIGURES: (&str, &str) = ("hipfile-remote/bench/figures.py", "remote/figures.py");

/// Where nginx is looked for unless `$HIPFILE_NGINX` names a file.
const DEFAULT_NGINX: &str = "/usr/sbin/nginx";

/// The libraries the GPU machine has without the bundle: its C library's, and OpenSSL's, which
/// curl (the figures' ceiling) needs there anyway (4.8 MiB the bundle does not carry).
fn on_the_gpu_machine(name: &str) -> bool {
    [
        "linux-vdso",
        "libc.so",
        "ld-linux",
        "libm.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libssl.so",
        "libcrypto.so",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// The paths `ldd` resolves, but those the GPU machine has.
pub fn carried_libraries(ldd_output: &str) -> Vec<PathBuf> {
    ldd_output
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once(" => ")?;
            let path = rest.split(" (").next()?.trim();
            (!on_the_gpu_machine(name) && path.starts_with('/')).then(|| PathBuf::from(path))
        })
        .collect()
}

/// nginx and its libraries, when the build machine has them.
#[derive(Debug)]
pub struct RemoteExtras {
    nginx: Option<(PathBuf, Vec<PathBuf>)>,
}

impl RemoteExtras {
    pub fn find(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<RemoteExtras, String> {
        let nginx = match var("HIPFILE_NGINX") {
            Some(file) => {
                let file = PathBuf::from(file);
                if !file.is_file() {
                    return Err(format!("HIPFILE_NGINX={}: no such file", file.display()));
                }
                Some(file)
            }
            None => Some(PathBuf::from(DEFAULT_NGINX)).filter(|p| p.is_file()),
        };
        let Some(nginx) = nginx else {
            println!(
                "gpu-bundle: no nginx ({DEFAULT_NGINX}, or $HIPFILE_NGINX): the remote figures \
                 are left out (apt-get install nginx-light)"
            );
            return Ok(RemoteExtras { nginx: None });
        };
        let ldd = Command::new("ldd")
            .arg(&nginx)
            .output()
            .map_err(|e| format!("cannot run ldd: {e}"))?;
        if !ldd.status.success() {
            return Err(format!("ldd {} failed", nginx.display()));
        }
        let libs = carried_libraries(&String::from_utf8_lossy(&ldd.stdout));
        Ok(RemoteExtras {
            nginx: Some((nginx, libs)),
        })
    }

    /// Copies the script, nginx and its libraries into `out`; returns their places.
    pub fn install(
        &self,
        root: &Path,
        out: &Path,
        copy: impl Fn(&Path, &Path) -> Result<(), String>,
    ) -> Result<Vec<String>, String> {
        let mut placed = Vec::new();
        let (from, to) = FIGURES;
        copy(&root.join(from), &out.join(to))?;
        placed.push(to.to_string());
        if let Some((nginx, libs)) = &self.nginx {
            copy(nginx, &out.join("remote/nginx/nginx"))?;
            placed.push("remote/nginx/nginx".to_string());
            for lib in libs {
                let name = lib.file_name().unwrap_or_default().to_string_lossy();
                let place = format!("remote/nginx/lib/{name}");
                copy(lib, &out.join(&place))?;
                placed.push(place);
            }
        }
        Ok(placed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carries_what_ldd_resolves_but_the_c_library() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibcrypt.so.1 => /lib/x86_64-linux-gnu/libcrypt.so.1 (0x00007f)\n\
                   \tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f)\n\
                   \tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\
                   \tlibmissing.so.1 => not found\n";
        assert_eq!(
            carried_libraries(ldd),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libcrypt.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libpcre2-8.so.0"),
            ]
        );
    }

    #[test]
    fn a_named_nginx_must_exist() {
        let err = RemoteExtras::find(|name| {
            (name == "HIPFILE_NGINX").then(|| "/nonexistent/nginx".into())
        })
        .unwrap_err();
        assert!(err.contains("/nonexistent/nginx"), "{err}");
    }

    /// `--remote-figures` runs the script from where the bundle puts it, and the script is there
    /// to be put.
    #[test]
    fn run_sh_runs_the_shipped_figures() {
        let run_sh = include_str!("../bundle/run.sh");
        assert!(
            run_sh.contains("--remote-figures)"),
            "run.sh lacks --remote-figures"
        );
        let (from, to) = FIGURES;
        assert!(
            run_sh.contains(&format!("\"$BUNDLE/{to}\"")),
            "run.sh does not run {to}"
        );
        assert!(
            crate::workspace::root().join(from).is_file(),
            "{from} is missing"
        );
    }
}
