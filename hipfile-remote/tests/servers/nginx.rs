//! Reads from nginx, a static file server that honours Range as servers in the wild do.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hipfile::AsDeviceMut;
use hipfile_remote::{RemoteError, RemoteFile, RemoteOptions};

use crate::{driver, random_bytes};

/// nginx serving `root` on a loopback port, its `/norange/` location with byte ranges off
/// (`max_ranges 0`: every GET is answered 200 with the whole file); stopped on drop.
struct Nginx {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

fn nginx_binary() -> PathBuf {
    for candidate in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("nginx is not installed (apt-get install nginx-light): these tests need it");
}

impl Nginx {
    fn serve(files: &[(&str, &[u8])]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("www");
        for (name, bytes) in files {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log;\nevents {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n sendfile on;\n\
             server {{\n  listen 127.0.0.1:{port};\n  root {d}/www;\n\
             location /norange/ {{ max_ranges 0; }}\n }}\n}}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting nginx");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx did not listen on port {port}: {}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MIB: usize = 1 << 20;

#[test]
fn a_64_mib_object_reads_into_device_memory_at_several_offsets_and_sizes() {
    let object = random_bytes(64 * MIB, 0x5eed);
    let nginx = Nginx::serve(&[("data/object.bin", &object)]);
    let driver = driver();
    let options = RemoteOptions {
        request_size: 4 * MIB,
        connections: 8,
        ..RemoteOptions::default()
    };
    let file = RemoteFile::open(&driver, &nginx.url("data/object.bin"), options).unwrap();
    assert_eq!(file.nbytes(), object.len() as u64);
    let mut dst = driver.alloc(object.len()).unwrap();
    let cases: [(usize, usize, usize); 6] = [
        // (offset, length asked, length read)
        (0, 64 * MIB, 64 * MIB),
        (1, 64 * MIB, 64 * MIB - 1),
        (13 * MIB + 17, 5 * MIB + 3, 5 * MIB + 3),
        (4 * MIB - 1, 2, 2),
        (64 * MIB - 100, 4096, 100),
        (64 * MIB, 4096, 0),
    ];
    for (offset, asked, read) in cases {
        dst.fill(0xA5).unwrap();
        let n = file
            .read(dst.slice_mut(..asked).unwrap(), offset as u64)
            .unwrap();
        assert_eq!(n, read, "offset {offset}");
        let got = dst.to_vec().unwrap();
        assert!(
            got[..read] == object[offset..offset + read],
            "bytes of {offset}+{read}"
        );
        assert!(
            got[read..].iter().all(|&b| b == 0xA5),
            "nothing written past {read} at offset {offset}"
        );
    }
    let mut host = vec![0u8; 64 * MIB];
    assert_eq!(file.read_host(&mut host, 0).unwrap(), 64 * MIB);
    assert!(host == object);
    let counts = file.counts();
    assert_eq!(counts.errors, 0);
    assert_eq!(counts.retries, 0);
}

#[test]
fn a_missing_object_is_not_found() {
    let nginx = Nginx::serve(&[("present", b"x")]);
    let e =
        RemoteFile::open(&driver(), &nginx.url("absent"), RemoteOptions::default()).unwrap_err();
    assert!(matches!(e, RemoteError::NotFound { .. }), "{e}");
}

#[test]
fn a_read_from_the_end_on_is_zero_bytes_and_an_empty_object_has_size_zero() {
    let nginx = Nginx::serve(&[("small", b"0123456789"), ("empty", b"")]);
    let driver = driver();
    let file = RemoteFile::open(&driver, &nginx.url("small"), RemoteOptions::default()).unwrap();
    let mut dst = driver.alloc(64).unwrap();
    assert_eq!(file.read(&mut dst, 10).unwrap(), 0);
    assert_eq!(file.read(&mut dst, 1 << 40).unwrap(), 0);
    assert_eq!(file.read(&mut dst, 4).unwrap(), 6);
    assert_eq!(dst.to_vec().unwrap()[..6], *b"456789");
    let empty = RemoteFile::open(&driver, &nginx.url("empty"), RemoteOptions::default()).unwrap();
    assert_eq!(empty.nbytes(), 0);
    assert_eq!(empty.read(&mut dst, 0).unwrap(), 0);
}

#[test]
fn a_location_that_ignores_range_fails_reads_with_range_ignored() {
    let object = random_bytes(3 * MIB, 7);
    let nginx = Nginx::serve(&[("norange/object.bin", &object)]);
    let driver = driver();
    let file = RemoteFile::open(
        &driver,
        &nginx.url("norange/object.bin"),
        RemoteOptions::default(),
    )
    .unwrap();
    let mut dst = driver.alloc(MIB).unwrap();
    let e = file.read(&mut dst, MIB as u64).unwrap_err();
    assert!(
        matches!(e, RemoteError::RangeIgnored { status: 200, .. }),
        "{e}"
    );
    let mut host = vec![0u8; MIB];
    let e = file.read_host(&mut host, 0).unwrap_err();
    assert!(matches!(e, RemoteError::RangeIgnored { .. }), "{e}");
}
