"""The type stubs shipped in the wheel name exactly what the native module has, and every
public name has a docstring."""

import ast
import os

import hipfile
import hipfile._hipfile as native

DUNDERS = {"__enter__", "__exit__", "__dlpack__", "__dlpack_device__", "__cuda_array_interface__", "__len__"}


def stub_tree():
    path = os.path.join(os.path.dirname(hipfile.__file__), "_hipfile.pyi")
    with open(path) as f:
        return ast.parse(f.read())


def test_stubs_match_the_native_module():
    tree = stub_tree()
    assert os.path.exists(os.path.join(os.path.dirname(hipfile.__file__), "py.typed"))
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stubbed |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {n for n in dir(native) if not n.startswith("_")} | {"__version__"}
    assert public == stubbed
    for node in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name != "HipFileError"):
        members = {f.name for f in node.body if isinstance(f, ast.FunctionDef)} - {"__init__"}
        real = {a for a in dir(getattr(native, node.name)) if not a.startswith("_") or a in DUNDERS}
        assert real == members, node.name


def test_everything_public_has_a_docstring():
    for name in hipfile.__all__:
        obj = getattr(hipfile, name)
        if isinstance(obj, (str, tuple)):
            # Values (the versions): documented in the module docstring and the stubs.
            continue
        assert obj.__doc__, name
        if isinstance(obj, type) and obj is not hipfile.HipFileError:
            for attr in dir(obj):
                if not attr.startswith("_") or attr in DUNDERS - {"__enter__", "__exit__", "__len__"}:
                    assert getattr(obj, attr).__doc__, f"{name}.{attr}"
