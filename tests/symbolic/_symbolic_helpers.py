"""Running generated code in the tests: the Python module through exec, the C file through the
system gcc and ctypes."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import numpy as np
import pytest


def run_python(text: str) -> dict:
    ns: dict = {}
    exec(compile(text, "<generated>", "exec"), ns)  # noqa: S102 (our own generated module)
    return ns


def compile_c(text: str, tmp_path) -> ctypes.CDLL:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on this machine")
    src = tmp_path / "generated.c"
    lib = tmp_path / "generated.so"
    src.write_text(text)
    subprocess.run(
        [
            gcc,
            "-std=c99",
            "-O1",
            "-Wall",
            "-Werror",
            "-Wno-unused-variable",
            "-shared",
            "-fPIC",
            str(src),
            "-o",
            str(lib),
            "-lm",
        ],
        check=True,
        capture_output=True,
    )
    return ctypes.CDLL(str(lib))


def call_c(lib, name: str, arrays, shape, dtype=np.float64) -> np.ndarray:
    """Call the generated ``name`` (``name_f32`` for float32) on `arrays` (batched ``[n, k]``
    or shared ``[k]``); the result ``[n, *shape]``."""
    single = np.dtype(dtype) == np.float32
    fn = getattr(lib, name + ("_f32" if single else ""))
    ctype = ctypes.c_float if single else ctypes.c_double
    ptr = ctypes.POINTER(ctype)
    arrs = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    n = next(a.shape[0] for a in arrs if a.ndim == 2)
    out = np.empty((n, math.prod(shape)), dtype=dtype)
    fn.argtypes = [ctypes.c_long] + [ptr] * (len(arrs) + 1)
    fn.restype = None
    fn(n, *[a.ctypes.data_as(ptr) for a in arrs], out.ctypes.data_as(ptr))
    return out.reshape((n, *shape))
