//! nginx serving a directory on a loopback port, for as long as the value lives: one process
//! (`master_process off`, so no worker switches user and the temporary directory stays
//! readable), configured and logging in a temporary directory of its own.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx; killed when dropped.
pub struct Nginx {
    child: Child,
    port: u16,
    /// The directory served.
    pub root: PathBuf,
    _dir: tempfile::TempDir,
}

/// Where nginx is: on PATH, or Debian's /usr/sbin (not on a user's PATH).
fn nginx_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

impl Nginx {
    /// Start nginx serving a new, empty directory; panics (the test fails) when nginx is not
    /// installed or does not start.
    pub fn start() -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), &root, port)).unwrap();
        let binary = nginx_binary();
        let child = Command::new(&binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "these tests need nginx ({}: {e}); on Debian: apt-get install nginx-light",
                    binary.display()
                )
            });
        let mut nginx = Nginx {
            child,
            port,
            root,
            _dir: dir,
        };
        nginx.wait_until_listening();
        nginx
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    std::fs::read_to_string(self._dir.path().join("error.log")).unwrap_or_default();
                panic!("nginx ended with {status} before listening:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not listen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The URL of `name` in the directory served.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, root: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 1024; }}\nhttp {{\n  \
         access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n  keepalive_requests 100000;\n  server {{\n    \
         listen 127.0.0.1:{port};\n    root {};\n  }}\n}}\n",
        root.display()
    )
}
