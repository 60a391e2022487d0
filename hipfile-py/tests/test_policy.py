"""The hipfile-rs extensions: a file's IO policy (fall back, or direct only and fail closed) and
the driver's allowed direct (P2P) mechanisms."""

import hipfile
from conftest import pattern


def error_of(call):
    """The exception `call` raises, as ``(type, hipfile_code)`` (the code only for
    ``HipFileError``); ``None`` when it raises nothing. Caught with ``except``, which drops the
    exception (and the frames it holds) on leaving, so nothing a test made outlives it."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test compares the type
        return type(e), getattr(e, "hipfile_code", None)
    return None


NOT_SUPPORTED = (hipfile.HipFileError, 5008)


def set_policy(f, policy):
    f.policy = policy


def set_mechanisms(d, names):
    d.p2p_mechanisms = names


def test_a_direct_only_file_refuses_what_the_direct_path_declines(make_file):
    data = pattern(64 * 1024)
    path = make_file(data)
    buf = hipfile.to_device(b"\xee" * 4096)
    with hipfile.open(path, "r") as f:
        assert f.policy == "fallback"
        f.policy = "direct_only"
        assert f.policy == "direct_only"
        # 1000 bytes at offset 1: off every direct IO alignment.
        assert error_of(lambda: f.raw_read(buf, 1000, 1)) == NOT_SUPPORTED
        assert buf.tobytes() == b"\xee" * 4096, "nothing was read"
        f.policy = "fallback"
        assert f.raw_read(buf, 1000, 1) == 1000
        assert buf.tobytes()[:1000] == data[1:1001]
        assert error_of(lambda: set_policy(f, "sometimes")) == (ValueError, None)
        assert f.policy == "fallback"
    assert error_of(lambda: f.policy) == (ValueError, None)
    with hipfile.FileHandle(path, "r") as fh:
        fh.policy = "direct_only"
        assert fh.policy == "direct_only"
        assert error_of(lambda: fh.read(buf, 1000, 1)) == NOT_SUPPORTED


def test_without_an_allowed_mechanism_a_direct_only_file_fails_every_request(make_file):
    data = pattern(64 * 1024, seed=2)
    path = make_file(data)
    buf = hipfile.to_device(b"\xee" * 8192)
    every = ["amd_kfd", "nvidia_fs", "sim"]
    with hipfile.Driver() as d:
        assert sorted(d.p2p_mechanisms) == every
        assert error_of(lambda: set_mechanisms(d, ["sim", "gds"])) == (ValueError, None)
        assert sorted(d.p2p_mechanisms) == every, "a refused list changes nothing"
        d.p2p_mechanisms = []
        try:
            assert d.p2p_mechanisms == []
            with hipfile.open(path, "r") as f:
                f.policy = "direct_only"
                assert error_of(lambda: f.raw_read(buf, 8192, 0)) == NOT_SUPPORTED
                assert buf.tobytes() == b"\xee" * 8192
                f.policy = "fallback"
                assert f.raw_read(buf, 8192, 0) == 8192
                assert buf.tobytes() == data[:8192]
        finally:
            d.p2p_mechanisms = every
        assert sorted(d.p2p_mechanisms) == every
