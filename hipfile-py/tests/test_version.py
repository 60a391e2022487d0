"""The two versions: ``hipfile.__version__`` is the package's (hipfile-rs's release),
``hipfile.API_VERSION`` / ``get_version()`` the hipFile C API it implements (upstream's
``hipFileGetVersion``, the ``HIPFILE_VERSION_*`` of ``include/hipfile.h``)."""

import importlib.metadata
import pathlib
import re

import hipfile

HERE = pathlib.Path(__file__).resolve().parent
#: Where the C header lies: in the repository (hipfile-py/tests), and in the GPU bundle
#: (python/tests beside include/).
HEADERS = [HERE.parent.parent / "hipfile/include/hipfile.h", HERE.parent.parent / "include/hipfile.h"]


def header_version():
    header = next(p for p in HEADERS if p.is_file()).read_text()
    return tuple(
        int(re.search(rf"#define HIPFILE_VERSION_{part} (\d+)", header).group(1))
        for part in ("MAJOR", "MINOR", "PATCH")
    )


def test_the_api_version_is_the_c_headers():
    assert hipfile.API_VERSION == hipfile.get_version() == header_version()
    assert all(isinstance(n, int) for n in hipfile.API_VERSION)


def test_the_package_version_is_the_installed_distributions():
    assert hipfile.__version__ == importlib.metadata.version("hipfile")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", hipfile.__version__)


def test_the_docs_tell_the_two_apart():
    for doc in (hipfile.get_version.__doc__, hipfile.__doc__):
        assert "API_VERSION" in doc and "__version__" in doc
