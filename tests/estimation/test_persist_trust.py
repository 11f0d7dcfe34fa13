"""Saved fits on a disk that is not to be trusted: links, earlier fits, damaged or edited files.

`save_fit` writes no file through a symbolic link, replaces a saved fit only when asked and
leaves the earlier fit whole when a save is interrupted; `load_fit` reads the model only from
the text inside the file, and a damaged file is a `DataError` naming it (the fuzzing at the
end: never another exception).
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deepnlme as dn
from deepnlme.data import DataWarning
from deepnlme.estimation import _persist

THEO = "examples/theophylline.model"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One small fit, saved once (each test copies the folder it damages)."""
    model = dn.load_model(THEO)
    fit = dn.fit(model, dn.datasets.load("theophylline"), dn.FO(), progress=False, max_iter=20)
    return fit, fit.save(tmp_path_factory.mktemp("fit") / "theo")


def _copy(folder: Path, dst: Path) -> Path:
    shutil.copytree(folder, dst)
    return dst


def _rewrite_json(folder: Path, edit) -> None:
    """Edit the fit.json of `folder` with `edit(payload)` and record a matching checksum (what
    someone who edits the file on purpose would do)."""
    payload = json.loads((folder / "fit.json").read_text())
    edit(payload)
    with np.load(folder / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    payload["checksum"] = {"algorithm": "sha256", "value": _persist._checksum(payload, arrays)}
    (folder / "fit.json").write_text(json.dumps(payload))


# ----------------------------------------------------------------------------- saving


def test_save_writes_no_file_through_a_link(saved, tmp_path):
    fit, _ = saved
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "fit.json").symlink_to(victim)
    with pytest.raises(dn.OptionError, match=r"fit\.json' is a symbolic link.*real file"):
        fit.save(folder, overwrite=True)
    assert victim.read_text() == "precious" and not (folder / "arrays.npz").exists()
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(dn.OptionError, match=r"'.*linked' is a symbolic link.*real folder"):
        fit.save(linked)
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_folder_in_place_of_a_file_and_an_unwritable_target_are_named(saved, tmp_path):
    fit, folder = saved
    odd = _copy(folder, tmp_path / "odd")
    (odd / "fit.json").unlink()
    (odd / "fit.json").mkdir()
    with pytest.raises(dn.DataError, match=r"fit\.json' is a folder, not the file of a saved"):
        dn.load_fit(odd)
    with pytest.raises(dn.DataError, match=r"arrays\.npz' is a file; give the folder written"):
        dn.load_fit(folder / "arrays.npz")
    assert dn.load_fit(folder / "fit.json").ofv == fit.ofv
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match=r"save_fit: the fit could not be saved to .*give a folder"):
        dn.save_fit(fit, tmp_path / "file" / "below")


def test_save_replaces_a_saved_fit_only_when_asked(saved, tmp_path):
    fit, _ = saved
    folder = fit.save(tmp_path / "theo")
    second = dataclasses.replace(fit, message="the second fit")
    with pytest.raises(dn.OptionError, match=r"already holds a saved fit.*overwrite=True"):
        second.save(folder)
    assert dn.load_fit(folder).message == fit.message
    assert dn.save_fit(second, folder, overwrite=True) == folder
    assert dn.load_fit(folder).message == "the second fit"
    assert sorted(p.name for p in folder.iterdir()) == ["arrays.npz", "fit.json"]


def test_an_interrupted_save_leaves_the_earlier_fit_whole(saved, tmp_path, monkeypatch):
    fit, _ = saved
    folder = fit.save(tmp_path / "theo")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real_dumps = json.dumps

    def interrupted(*args, **kwargs):
        if isinstance(args[0], dict) and "checksum" in args[0]:
            raise KeyboardInterrupt  # the save of the whole payload, cut short
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(json, "dumps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dataclasses.replace(fit, u=fit.u + 1e-3).save(folder, overwrite=True)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # no temporary left
    assert dn.load_fit(folder).message == fit.message


# ----------------------------------------------------------------------------- loading


@pytest.mark.parametrize("field", ["source", "resolved"])
def test_load_never_reads_a_model_from_a_path_in_the_file(saved, tmp_path, field):
    _, folder = saved
    other = tmp_path / "elsewhere.model"
    other.write_text(Path(THEO).read_text().replace("init=0.45", "init=0.55"))
    dst = _copy(folder, tmp_path / "copy")
    _rewrite_json(dst, lambda p: p["model"].__setitem__(field, str(other)))
    with pytest.raises(dn.DataError, match=r"fit\.json'.*model text.*does not parse"):
        dn.load_fit(dst)


def _npz_entry(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(name, data)
    return buf.getvalue()


def _npy(header: str, body: bytes = b"") -> bytes:
    head = header.encode().ljust(118) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + body


def _flip(data: bytes, where: float) -> bytes:
    out = bytearray(data)
    out[int(where * len(out))] ^= 0x10
    return bytes(out)


ARRAYS_DAMAGE = {
    "truncated": (lambda b: b[: len(b) // 2], "not a readable .npz archive"),
    "garbage": (lambda b: b"\x00garbage" * 100, "not a readable .npz archive"),
    "a flipped bit in the data": (lambda b: _flip(b, 0.5), "Bad CRC-32"),
    "a header that claims 8 TB": (
        lambda b: _npz_entry(
            "u.npy", _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }")
        ),
        "claims shape (1000000000000,) of float64 (8000000000000 bytes) but holds 0",
    ),
    "an array of a negative size": (
        lambda b: _npz_entry(
            "u.npy", _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }")
        ),
        "array 'u'",
    ),
    "a header that is not a header": (
        lambda b: _npz_entry("u.npy", _npy("{'descr': __import__('os'), }")),
        "array 'u'",
    ),
}


@pytest.mark.parametrize("damage", list(ARRAYS_DAMAGE))
def test_a_damaged_arrays_file_is_a_clear_error(saved, tmp_path, damage):
    _, folder = saved
    dst = _copy(folder, tmp_path / "copy")
    change, message = ARRAYS_DAMAGE[damage]
    (dst / "arrays.npz").write_bytes(change((dst / "arrays.npz").read_bytes()))
    with pytest.raises(dn.DataError, match=r"load_fit: '.*arrays\.npz' is damaged") as err:
        dn.load_fit(dst)
    assert message in str(err.value)


JSON_DAMAGE = {
    "nested 100000 deep": (
        lambda t: t.replace('"fixed": [', '"fixed": ' + "[" * 100_000 + "]" * 100_000 + ", [", 1),
        "nested too deeply",
    ),
    "an integer of 5000 digits": (
        lambda t: t.replace('"n_iter": ', '"n_iter": ' + "9" * 5000 + ', "x": ', 1),
        "an integer of 5000 digits",
    ),
    "NaN": (lambda t: t.replace('"n_iter": ', '"n_iter": NaN, "x": ', 1), "NaN"),
    "1e999": (lambda t: t.replace('"n_iter": ', '"n_iter": 1e999, "x": ', 1), "1e999"),
    "a checksum that is not a record": (
        lambda t: t[: t.index('"checksum"')] + '"checksum": [1, 2]}',
        "checksum",
    ),
    "not UTF-8": (lambda t: t.replace('"format"', '"f\udcffrmat"', 1), "not UTF-8"),
}


@pytest.mark.parametrize("damage", list(JSON_DAMAGE))
def test_a_damaged_json_file_is_a_clear_error(saved, tmp_path, damage):
    _, folder = saved
    dst = _copy(folder, tmp_path / "copy")
    change, message = JSON_DAMAGE[damage]
    text = change((dst / "fit.json").read_text())
    (dst / "fit.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(dn.DataError, match=r"load_fit: '.*fit\.json'") as err:
        dn.load_fit(dst)
    assert message in str(err.value)


# ----------------------------------------------------------------------------- fuzzing

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=8,
)

ARRAY_VALUES = st.sampled_from(
    [
        np.zeros(0),
        np.zeros((2, 3)),
        np.arange(5),
        np.array(["a", "b"]),
        np.array([True, False]),
        np.full(7, np.nan),
        np.zeros((12, 3), dtype=np.float32),
        np.array(1.5),
    ]
)


def _draw_path(data, payload) -> list:
    """A path (keys and indices) into `payload`, walked down at random from its top."""
    path, node = [], payload
    while isinstance(node, (dict, list)) and node:
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys))
        path.append(key)
        node = node[key]
        if data.draw(st.booleans()):
            break
    return path


def _at(payload, path):
    for key in path[:-1]:
        payload = payload[key]
    return payload


def _edit_json(data, payload) -> None:
    """One edit of the payload: a value replaced, a key or element dropped, or a value nested
    in lists."""
    path = _draw_path(data, payload)
    if not path:
        return
    parent, key = _at(payload, path), path[-1]
    edit = data.draw(st.sampled_from(["replace", "drop", "nest"]))
    if edit == "replace":
        parent[key] = data.draw(JSON_VALUES)
    elif edit == "drop":
        del parent[key]
    else:
        for _ in range(data.draw(st.integers(1, 300))):
            parent[key] = [parent[key]]


def _edit_bytes(data, blob: bytes) -> bytes:
    """Bytes flipped, or the bytes cut short."""
    if data.draw(st.booleans()):
        return blob[: data.draw(st.integers(0, len(blob) - 1))]
    out = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(out) - 1))
        out[where] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(out)


@pytest.fixture(scope="module")
def fuzz_folder(saved, tmp_path_factory):
    """The saved fit's bytes, parsed payload and arrays, and a folder each example rewrites."""
    _, folder = saved
    text = (folder / "fit.json").read_bytes()
    blob = (folder / "arrays.npz").read_bytes()
    with np.load(folder / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return text, blob, arrays, tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_load_fit_of_a_mangled_fit_loads_or_is_a_data_error(fuzz_folder, data):
    """Whatever is done to fit.json or arrays.npz (with the checksum recomputed, or not),
    load_fit loads a Fit or raises DataError: no other exception, no crash."""
    text, blob, arrays, root = fuzz_folder
    target = data.draw(
        st.sampled_from(["json bytes", "json edit", "arrays bytes", "array edit", "both bytes"])
    )
    payload = json.loads(text)
    new_arrays = dict(arrays)
    json_bytes, array_bytes = text, blob
    if target in ("json bytes", "both bytes"):
        json_bytes = _edit_bytes(data, text)
    if target in ("arrays bytes", "both bytes"):
        array_bytes = _edit_bytes(data, blob)
    if target in ("json edit", "array edit"):
        if target == "json edit":
            _edit_json(data, payload)
        else:
            name = data.draw(st.sampled_from(sorted(arrays)))
            if data.draw(st.booleans()):
                del new_arrays[name]
            else:
                new_arrays[name] = data.draw(ARRAY_VALUES)
        buf = io.BytesIO()
        np.savez(buf, **new_arrays)
        array_bytes = buf.getvalue()
        if isinstance(payload, dict):  # a checksum that matches the edited content
            value = _persist._checksum(payload, new_arrays)
            payload["checksum"] = {"algorithm": "sha256", "value": value}
        json_bytes = json.dumps(payload).encode()
    with tempfile.TemporaryDirectory(dir=root) as where:
        folder = Path(where)
        (folder / "fit.json").write_bytes(json_bytes)
        (folder / "arrays.npz").write_bytes(array_bytes)
        try:
            loaded = dn.load_fit(folder)
        except dn.DataError as err:
            assert str(err).startswith("load_fit: ")
        else:
            assert isinstance(loaded, dn.Fit)


def test_loading_a_fit_does_not_repeat_the_data_warnings_with_other_rows(tmp_path):
    # the saved table's rows are not the file's: "row 12" for a file of 6 rows; the warnings
    # were given when the data were read
    import warnings

    import pandas as pd

    df = pd.DataFrame(
        {
            "ID": [1, 1, 1, 2, 2, 3],
            "TIME": [0, 2, 40, 0, 3, 0],
            "AMT": [100, 0, 0, 100, 0, 100],
            "II": [12, 0, 0, 12, 0, 12],
            "ADDL": [3, 0, 0, 3, 0, 3],
            "DV": [np.nan, 8.0, 4.0, np.nan, 7.0, np.nan],
            "MDV": [1, 0, 0, 1, 0, 1],
            "BLQ": [0, 0, 0, 0, 0, 0],
        }
    )
    with pytest.warns(DataWarning, match=r"ID 3 \(row 6 \(DataFrame index label 5\)\)"):
        pop = dn.read_data(df, cens=False)
    model = dn.load_model(
        "param:\n    tcl = Real(init=0)\n    tv = Real(init=2.3)\n"
        "    omega = PDiag(init=[0.1])\n    sigma = Positive(init=0.5)\n"
        "random:\n    eta ~ MvNormal(omega)\npre:\n    cl = exp(tcl + eta[0])\n"
        "    v = exp(tv)\ndynamics: OneCompartment\nderived:\n"
        "    DV ~ Additive(Central / v, sigma)\n"
    )
    fit = dn.fit(model, pop, dn.FO(), max_iter=2, progress=False, covariance=None)
    fit.save(tmp_path / "fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = dn.load_fit(tmp_path / "fit")
    assert again.population == pop  # (cens=False kept: the BLQ column is not a flag)
