"""The servers of the tests in this directory (fixtures the test modules import): nginx serving a temporary directory on a loopback
port (one process, configured and logging in a temporary directory of its own), and the S3
endpoint of the ``AWS_*`` environment. A test asked for fails when its server is not there."""

import datetime
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest


def nginx_binary() -> str:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not found:
        pytest.fail("HIPFILE_SERVER_TESTS names http, and nginx is not installed (apt-get install nginx-light)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """nginx serving ``root``; ``url(name)`` names a file in it."""

    def __init__(self, base):
        self.root = base / "root"
        self.root.mkdir()
        self.port = free_port()
        d = base
        conf = base / "nginx.conf"
        conf.write_text(
            f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n"
            f"error_log {d}/error.log;\nevents {{ worker_connections 1024; }}\nhttp {{\n"
            f"  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n"
            f"  scgi_temp_path {d}/scgi;\n  keepalive_requests 100000;\n"
            f"  server {{\n    listen 127.0.0.1:{self.port};\n    root {self.root};\n  }}\n}}\n"
        )
        self.log = base / "error.log"
        self.process = subprocess.Popen(
            [nginx_binary(), "-p", str(base), "-c", str(conf), "-e", str(self.log)],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None:
                    pytest.fail(f"nginx ended before listening: {self.log.read_text()}")
                if time.monotonic() > deadline:
                    pytest.fail("nginx did not listen within 10 s")
                time.sleep(0.02)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self):
        self.process.kill()
        self.process.wait()


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    server = Nginx(tmp_path_factory.mktemp("nginx"))
    yield server
    server.stop()


def create_bucket(endpoint: str, region: str, access: str, secret: str, bucket: str) -> None:
    """``PUT /bucket`` on a path-style endpoint, signed with AWS Signature Version 4."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(b"").hexdigest()
    host = urllib.parse.urlparse(endpoint).netloc
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        ["PUT", f"/{bucket}", "", "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), names, payload]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/{bucket}",
        data=b"",
        method="PUT",
        headers={
            "x-amz-content-sha256": payload,
            "x-amz-date": amz_date,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.status


@pytest.fixture(scope="module")
def s3_bucket():
    """A new bucket of the endpoint the ``AWS_*`` environment names, for one test module."""
    env = os.environ
    missing = [v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL") if not env.get(v)]
    if missing:
        pytest.fail(
            f"HIPFILE_SERVER_TESTS names s3, and {', '.join(missing)} is not set "
            "(cargo xtask ceph up, then source target/ceph/env)"
        )
    name = f"hipfile-py-{os.getpid()}-{time.time_ns()}"
    create_bucket(
        env["AWS_ENDPOINT_URL"],
        env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        env["AWS_ACCESS_KEY_ID"],
        env["AWS_SECRET_ACCESS_KEY"],
        name,
    )
    return name
