"""``hipfile.RemoteFile`` and ``hipfile.RemoteWriter`` without a server: URLs of the wrong kind,
bad names and bad settings are refused before any request, and a server that is not there is an
``OSError``. The reads and writes themselves are in ``tests/server`` (``HIPFILE_SERVER_TESTS``)."""

import socket

import pytest

from hipfile import HipFileError, RemoteFile, RemoteWriter


def invalid_value(call, *args, **kwargs) -> str:
    with pytest.raises(HipFileError) as e:
        call(*args, **kwargs)
    assert e.value.hipfile_name == "hipFileInvalidValue", e.value
    return str(e.value)


def test_each_opener_takes_its_own_kind_of_url():
    assert "open_http takes a http:// or https:// URL" in invalid_value(
        RemoteFile.open_http, "s3://bucket/key"
    )
    assert "open_s3_url takes a s3:// URL" in invalid_value(RemoteFile.open_s3_url, "http://h/k")
    assert "create_s3_url takes a s3:// URL" in invalid_value(
        RemoteWriter.create_s3_url, "https://h/k"
    )
    invalid_value(RemoteFile.open, "ftp://host/key")
    invalid_value(RemoteFile.open, "/a/local/path")


def test_bucket_and_key_must_name_an_object():
    assert "invalid bucket name" in invalid_value(RemoteFile.open_s3, "", "key")
    assert "invalid bucket name" in invalid_value(RemoteFile.open_s3, "a/b", "key")
    assert "empty object key" in invalid_value(RemoteFile.open_s3, "bucket", "")
    assert "empty object key" in invalid_value(RemoteWriter.create_s3, "bucket", "")


def test_settings_no_request_can_run_with_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="connections"):
        RemoteFile.open_http("http://127.0.0.1:9/x", connections=0)
    with pytest.raises(ValueError, match="request_size"):
        RemoteFile.open_http("http://127.0.0.1:9/x", request_size=0)
    monkeypatch.setenv("HIPFILE_REMOTE_CONNECTIONS", "lots")
    assert "HIPFILE_REMOTE_CONNECTIONS" in invalid_value(RemoteFile.open_http, "http://127.0.0.1:9/x")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_not_there_is_a_connection_error(monkeypatch):
    monkeypatch.setenv("HIPFILE_REMOTE_RETRIES", "0")
    url = f"http://127.0.0.1:{closed_port()}/object"
    with pytest.raises(ConnectionError) as e:
        RemoteFile.open_http(url)
    assert url in str(e.value)

