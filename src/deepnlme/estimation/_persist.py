"""Saving and loading fits: a folder with `fit.json` and `arrays.npz`, no pickle, checksummed.

The format is described in `docs/persistence.md`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import platform
import secrets
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data import DataWarning
from ..errors import DataError, ModelError, OptionError
from ..likelihood import method_from_record
from ..likelihood._from_model import model_problem
from ..model import load_model
from ..solve._ode import OdeOptions, solver_name, solver_names
from ._result import Fit

FORMAT = "deepnlme-fit"
SCHEMA_VERSION = 1
JSON_NAME = "fit.json"
ARRAYS_NAME = "arrays.npz"


# --------------------------------------------------------------------------- helpers


def _saved_options(payload: dict) -> dict | None:
    """A saved fit's options (None for older saved fits, which have none); JSON's null for
    no time limit is infinity again."""
    options = payload.get("options")
    if options is not None and options.get("time_limit", 0) is None:
        options = {**options, "time_limit": math.inf}
    return options


def _clean(value: Any) -> Any:
    """A JSON-safe copy: numpy scalars to Python, non-finite floats to None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _frame_to_json(df: pd.DataFrame) -> dict:
    cols = {}
    for c in df.columns:
        s = df[c]
        if pd.api.types.is_bool_dtype(s):
            cols[str(c)] = {"dtype": "bool", "values": [bool(v) for v in s]}
        elif pd.api.types.is_integer_dtype(s):
            cols[str(c)] = {"dtype": "int", "values": [int(v) for v in s]}
        elif pd.api.types.is_float_dtype(s):
            cols[str(c)] = {"dtype": "float", "values": _clean(s.to_numpy(dtype=float))}
        else:
            cols[str(c)] = {"dtype": "str", "values": [None if v is None else str(v) for v in s]}
    return {"columns": [str(c) for c in df.columns], "data": cols}


def _frame_from_json(obj: dict) -> pd.DataFrame:
    out = {}
    for c in obj["columns"]:
        col = obj["data"][c]
        if col["dtype"] == "float":
            out[c] = np.array([np.nan if v is None else v for v in col["values"]], dtype=float)
        elif col["dtype"] == "int":
            out[c] = np.array(col["values"], dtype=np.int64)
        elif col["dtype"] == "bool":
            out[c] = np.array(col["values"], dtype=bool)
        else:
            out[c] = np.array(col["values"], dtype=object)
    return pd.DataFrame(out, columns=obj["columns"])


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _checksum(payload: dict, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the canonical JSON (without its checksum) and of every array's bytes."""
    h = hashlib.sha256()
    body = {k: v for k, v in payload.items() if k != "checksum"}
    h.update(_canonical(body))
    _hash_arrays(h, arrays)
    return h.hexdigest()


def _hash_arrays(h, arrays: dict[str, np.ndarray]) -> None:
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\n{name}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(a.tobytes())


def _arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the arrays alone (`fit.json`'s ``arrays_sha256``, inside the checksum): a
    checksum that fails then names the file that changed."""
    h = hashlib.sha256()
    _hash_arrays(h, arrays)
    return h.hexdigest()


def data_fingerprint(population, covariates: bool = True) -> str:
    """SHA-256 of the population's canonical NONMEM-layout table (`Population.to_dataframe`);
    without `covariates`, of its records alone (the covariate columns left out: what the
    objective values of models with and without a covariate share)."""
    df = population.to_dataframe()
    if not covariates:
        df = df.drop(columns=list(population.covariate_names))
    h = hashlib.sha256()
    for c in df.columns:
        h.update(f"\n{c}\n".encode())
        s = df[c]
        if pd.api.types.is_numeric_dtype(s):
            h.update(np.ascontiguousarray(s.to_numpy(dtype=np.float64)).tobytes())
        else:
            h.update("\x1f".join(str(v) for v in s).encode())
    return h.hexdigest()


def fit_provenance(fit) -> dict:
    """When `fit` was made and with which versions: its own record (a loaded fit's, or the one
    `deepnlme.fit` made), else now and this process's."""
    own = getattr(fit, "provenance", None) or {}
    return {
        "created": own.get("created")
        or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": own.get("versions") or _versions(),
    }


def _versions() -> dict[str, str]:
    import jax

    from .._version import __version__

    return {
        "deepnlme": __version__,
        "jax": jax.__version__,
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------- save


def _model_record(fit) -> dict:
    """The model text as the user wrote it and, for networks whose input scale was taken from
    the data, the text with that scale written in (what loading parses, so that the loaded
    networks are exactly the fitted ones)."""
    from ..nn import resolved_model

    record = {"source": fit.model.source}
    resolved = resolved_model(fit)
    if resolved is not fit.model:
        record["resolved"] = str(resolved)
    return record


def _ode_record(ode: OdeOptions) -> dict:
    """The ODE options as plain values, the solver by its shorthand (a solver without one
    cannot be saved by name)."""
    record = {f.name: getattr(ode, f.name) for f in dataclasses.fields(ode)}
    record["solver"] = solver_name(ode.solver)
    if record["solver"] is None:
        raise OptionError(
            f"save_fit: the fit's ODE solver {ode.solver!r} has no shorthand name, so the saved "
            f"fit could not name it; fit with one of the solvers {solver_names()} to save it"
        )
    return record


def save_fit(fit, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Save `fit` to the folder `path` (`fit.json` + `arrays.npz`; created if needed).

    The folder holds the model source, the data, the method and its options, every estimate,
    the EBEs, the statistics, the tables and the versions, with a SHA-256 checksum of the
    content. No pickle: `load_fit` runs no code from the files. Returns the folder's path.
    Format: `docs/persistence.md`.

    A folder that already holds a saved fit is replaced only with `overwrite=True`; no file
    is written through a symbolic link (`check_save_target`). Each file is written to a
    temporary file in the folder and then renamed over its name, so that a save interrupted
    while writing leaves the earlier fit as it was.
    """
    folder = _save_folder(fit, path, overwrite)
    arrays, estimate_kinds = _fit_arrays(fit)
    method = fit.method.record()
    payload = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        **fit_provenance(fit),
        "model": _model_record(fit),
        "method": {"name": method["name"], "options": _clean(method["options"])},
        "ode_options": _clean(_ode_record(fit.ode_options or OdeOptions())),
        "data": _data_record(fit.population, arrays),
        "statistics": _clean({k: getattr(fit, k) for k in _STATISTICS}),
        "nonfinite": sorted(k for k in _NONFINITE if not math.isfinite(getattr(fit, k))),
        "fixed": list(fit.fixed),
        "near_boundary": list(fit.near_boundary),
        "timings": _clean(fit.timings),
        "options": _clean(fit.options),
        "shrinkage": _clean(fit.shrinkage),
        "shrinkage_unit": "percent",
        "estimates": {
            "kinds": estimate_kinds,
            "values": _clean({k: np.asarray(v).tolist() for k, v in fit.estimates.items()}),
        },
        "ebes": {"labels": list(fit.ebes.columns), "ids": _clean(list(fit.ebes.index))},
        "history": {"columns": [str(c) for c in fit.history.columns]},
        "covariance": None
        if fit.covariance is None
        else {
            "index": [str(i) for i in fit.covariance.index],
            "columns": [str(c) for c in fit.covariance.columns],
        },
        "table": _frame_to_json(fit._table),
        "arrays_sha256": _arrays_sha256(arrays),
    }
    payload["checksum"] = {"algorithm": "sha256", "value": _checksum(payload, arrays)}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    text = json.dumps(payload, indent=1, allow_nan=False).encode()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        check_save_target(folder, overwrite=overwrite)  # again, now that the folder exists
        _write_files(folder, {ARRAYS_NAME: buf.getvalue(), JSON_NAME: text})
    except OSError as err:  # a folder that cannot be made or written: nothing saved
        raise OSError(
            err.errno,
            f"save_fit: the fit could not be saved to {str(folder)!r} ({err.strerror or err}"
            f"{': ' + repr(err.filename) if err.filename else ''}); give a folder you can "
            "write to",
        ) from err
    return folder


def check_save_target(
    path: str | os.PathLike,
    *,
    overwrite: bool = False,
    fix: str = "pass overwrite=True to replace it, or give another folder",
) -> Path:
    """The folder `path` as a `Path`, after checking that a fit may be saved there: neither
    the folder nor a file it would write is a symbolic link (a link could send the files
    anywhere), and it holds no saved fit unless `overwrite` (`fix`: how the message says to
    replace one; the command line names its own option)."""
    folder = Path(path)
    if folder.is_symlink():
        raise OptionError(
            f"save_fit: {str(folder)!r} is a symbolic link; a fit is saved only into a real "
            "folder (a link could send the files anywhere). Give the path of a real folder."
        )
    if folder.exists() and not folder.is_dir():
        raise OptionError(f"save_fit: {str(folder)!r} exists and is not a folder; give a folder")
    held = []
    for name in (JSON_NAME, ARRAYS_NAME):
        file = folder / name
        if file.is_symlink():
            raise OptionError(
                f"save_fit: {str(file)!r} is a symbolic link; save_fit writes no file through "
                "a link. Remove the link or give another folder: a fit is saved only as real "
                "files."
            )
        if file.exists():
            if not file.is_file():
                raise OptionError(
                    f"save_fit: {str(file)!r} exists and is not a file; remove it or give "
                    "another folder"
                )
            held.append(name)
    if held and not overwrite:
        raise OptionError(
            f"save_fit: {str(folder)!r} already holds a saved fit ({', '.join(held)}); {fix}"
        )
    return folder


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write `files` (name -> bytes) into `folder`: each to a new temporary file there first
    (created exclusively, never through a link), then renamed over its name (`os.replace`,
    atomic), the JSON last. A save interrupted before the renames leaves the folder as it was,
    and no temporary file behind."""
    temps: dict[str, Path] = {}
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        for name, data in files.items():
            tmp = folder / f".{name}.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, flags | getattr(os, "O_BINARY", 0), 0o666)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for name in files:
            os.replace(temps[name], folder / name)
            del temps[name]
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
    with contextlib.suppress(OSError):  # the renames, on disk (POSIX; elsewhere a no-op)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# the statistics a saved fit records, and those of them that may be non-finite
_STATISTICS = (
    "ofv",
    "m2ll",
    "aic",
    "bic",
    "converged",
    "message",
    "n_iter",
    "n_eval",
    "n_obs",
    "n_subjects",
    "n_params",
    "penalty",
    "inner_converged",
    "covariance_status",
)
_NONFINITE = ("ofv", "m2ll", "aic", "bic", "penalty")


def _save_folder(fit, path, overwrite: bool) -> Path:
    """The folder to save `fit` to, after checking that the fit can be saved there."""
    if not isinstance(fit, Fit):
        raise OptionError(f"save_fit: `fit` must be a Fit; got {type(fit).__name__}")
    if fit.model is None or fit.population is None:
        raise OptionError(
            "save_fit: this Fit has no model or population attached (it came from fit_problem); "
            "only fits made by deepnlme.fit(model, population, method) can be saved"
        )
    return check_save_target(path, overwrite=overwrite)


def _fit_arrays(fit) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The fit's arrays (`arrays.npz`), and whether each estimate is a float or an array."""
    arrays: dict[str, np.ndarray] = {
        "u": np.asarray(fit.u, dtype=np.float64),
        "ebes": fit.ebes.to_numpy(dtype=np.float64),
        "eta_cov": np.asarray(fit.eta_cov, dtype=np.float64),
        "history": fit.history.to_numpy(dtype=np.float64),
    }
    if fit.covariance_u is not None:
        arrays["covariance_u"] = np.asarray(fit.covariance_u, dtype=np.float64)
    if fit.covariance is not None:
        arrays["covariance"] = fit.covariance.to_numpy(dtype=np.float64)
    estimate_kinds = {}
    for name, v in fit.estimates.items():
        arrays[f"estimate/{name}"] = np.asarray(v, dtype=np.float64)
        estimate_kinds[name] = "float" if isinstance(v, float) else "array"
    return arrays, estimate_kinds


def _data_record(pop, arrays: dict[str, np.ndarray]) -> dict:
    """The population's table and settings; its numeric columns go into `arrays`."""
    data = pop.to_dataframe()
    data_cols = {}
    for c in data.columns:
        s = data[c]
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            arrays[f"data/{c}"] = s.to_numpy()
            data_cols[str(c)] = "array"
        else:
            data_cols[str(c)] = [str(v) for v in s]
    return {
        "columns": data_cols,
        "order": [str(c) for c in data.columns],
        "ids": _clean(list(pop.ids)),
        "covariates": list(pop.covariate_names),
        "covariate_rule": pop.covariate_rule,
        "filled": None if getattr(pop, "filled", None) is None else list(pop.filled),
        "endpoints": list(pop.endpoints),
        "endpoint_column": "DVID" if "DVID" in data.columns else None,
        "cens_column": "CENS" if "CENS" in data.columns else None,
        "fingerprint": data_fingerprint(pop),
        "source": str(getattr(pop, "_source_name", "") or ""),
    }


# --------------------------------------------------------------------------- load


# a saved fit's integers are counts, sizes and subject IDs
_MAX_INT_DIGITS = 100
_AGAIN = "Save the fit again, or restore the folder from a copy."


class _Damaged(Exception):
    """What is wrong with a file being read (`_damaged` names the file)."""


def _damaged(path: Path, what: str) -> DataError:
    return DataError(f"load_fit: {str(path)!r} is damaged: {what}. {_AGAIN}")


def _json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        raise _Damaged(f"it holds an integer of {digits} digits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Damaged(f"it holds the number {text[:40]}, too large for a float")
    return value


def _json_constant(name: str) -> None:
    raise _Damaged(f"it holds {name}, which save_fit never writes (non-finite numbers are null)")


def _read_json(jpath: Path) -> Any:
    """The JSON of `jpath`; `DataError` for text that is not UTF-8 or not JSON, integers of
    more than `_MAX_INT_DIGITS` digits, non-finite numbers and nesting deeper than Python's
    recursion limit."""
    data = jpath.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _damaged(jpath, f"it is not UTF-8 text (byte {err.start})") from None
    try:
        return json.loads(
            text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant
        )
    except _Damaged as err:
        raise _damaged(jpath, str(err)) from None
    except RecursionError:
        raise _damaged(jpath, "its JSON is nested too deeply") from None
    except ValueError as err:
        raise _damaged(jpath, f"it is not valid JSON ({err})") from None


def _read_arrays(apath: Path) -> dict[str, np.ndarray]:
    """The arrays of `apath`, an uncompressed `.npz` (as `np.savez` writes it) read without
    pickle. Each array's header is checked against the bytes it holds before anything is
    allocated (a damaged header can claim terabytes); `DataError` for anything amiss."""
    try:
        size = apath.stat().st_size
        arrays: dict[str, np.ndarray] = {}
        with zipfile.ZipFile(apath) as zf:
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                if name == info.filename or name in arrays:
                    raise _Damaged(f"its entry {info.filename!r} is not one array of save_fit's")
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                    raise _Damaged(
                        f"its entry {info.filename!r} is compressed or larger than the file "
                        "(save_fit writes uncompressed arrays)"
                    )
                arrays[name] = _npy_array(name, zf.read(info))
    except _Damaged as err:
        raise _damaged(apath, str(err)) from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, ValueError) as err:
        # (RuntimeError: an encrypted entry; ValueError: a malformed central directory)
        raise _damaged(apath, f"it is not a readable .npz archive ({err})") from None
    return arrays


def _npy_array(name: str, data: bytes) -> np.ndarray:
    """The array in the `.npy` bytes `data` (the entry `name` of an `.npz`)."""
    fp = io.BytesIO(data)
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fp)
        header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
        if version not in header:
            raise ValueError(f"NPY version {version}, which numpy.savez does not write")
        shape, fortran, dtype = header[version](fp)
    except Exception as err:  # noqa: BLE001 (parsing untrusted bytes: any failure is damage)
        raise _Damaged(f"its array {name!r} has a damaged header ({err})") from None
    if dtype.hasobject:
        raise _Damaged(
            f"its array {name!r} holds Python objects, which cannot be read without pickle "
            "(save_fit never writes them)"
        )
    if any(n < 0 for n in shape):
        raise _Damaged(f"its array {name!r} claims the shape {shape}")
    count = math.prod(shape)
    held = len(data) - fp.tell()
    if count * dtype.itemsize != held:
        raise _Damaged(
            f"its array {name!r} claims shape {shape} of {dtype} ({count * dtype.itemsize} "
            f"bytes) but holds {held}"
        )
    try:
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=fp.tell())
        return flat.reshape(shape, order="F" if fortran else "C").copy()
    except (ValueError, TypeError) as err:
        raise _Damaged(f"its array {name!r} cannot be read ({err})") from None


def _read(folder: Path) -> tuple[dict, dict[str, np.ndarray], Path]:
    """The payload of `fit.json`, the arrays and the path of `fit.json`, after checking the
    format, its version and the checksum of the content."""
    if folder.is_file() and folder.name == JSON_NAME:
        folder = folder.parent
    elif folder.is_file():
        raise DataError(
            f"load_fit: {str(folder)!r} is a file; give the folder written by Fit.save / "
            f"deepnlme.save_fit ({str(folder.parent)!r} if this file is in it), or its "
            f"{JSON_NAME}"
        )
    inner = folder / "fit"
    if not (folder / ARRAYS_NAME).exists() and (inner / JSON_NAME).is_file():
        folder = inner  # `deepnlme fit --out DIR`: its fit.json is the summary, DIR/fit the fit
    jpath, apath = folder / JSON_NAME, folder / ARRAYS_NAME
    for p in (jpath, apath):
        if p.exists() and not p.is_file():
            raise DataError(
                f"load_fit: {str(p)!r} is a folder, not the file of a saved fit; give the "
                "folder written by Fit.save / deepnlme.save_fit (it holds fit.json and "
                "arrays.npz)"
            )
        if not p.is_file():
            raise FileNotFoundError(
                f"load_fit: {str(p)!r} does not exist; give the folder written by Fit.save / "
                "deepnlme.save_fit (it holds fit.json and arrays.npz)"
            )
    payload = _read_json(jpath)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise DataError(f"load_fit: {str(jpath)!r} is not a saved deepnlme fit")
    version = payload.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DataError(
            f"load_fit: {str(jpath)!r} has schema version {version!r}; this deepnlme reads "
            f"version {SCHEMA_VERSION}"
        )
    arrays = _read_arrays(apath)
    rec = payload.get("checksum")
    if not isinstance(rec, dict):
        raise _damaged(jpath, f"its checksum is {rec!r:.40}, not a record of one")
    try:
        actual = _checksum(payload, arrays)
    except (ValueError, TypeError, RecursionError) as err:
        raise _damaged(jpath, f"its content cannot be checksummed ({err})") from None
    expected = rec.get("value")
    if rec.get("algorithm") != "sha256" or expected != actual:
        where = f"the content of {str(folder)!r}"
        own = payload.get("arrays_sha256")  # (saved fits before it was recorded: the folder)
        computed = _arrays_sha256(arrays) if isinstance(own, str) else None
        if isinstance(own, str) and own != computed:
            raise DataError(
                f"load_fit: {str(apath)!r} does not match the SHA-256 checksum {jpath.name} "
                f"records for it (recorded {own[:16]}..., computed "
                f"{computed[:16]}...): one of the two files was changed or "
                "damaged after saving, or they come from different saves. Save the fit again "
                "from its source."
            )
        if isinstance(own, str):
            where = f"{str(jpath)!r}"
        raise DataError(
            f"load_fit: {where} does not match its recorded SHA-256 checksum (recorded "
            f"{str(expected)[:16]}..., computed {actual[:16]}...): the file was changed or "
            "damaged after saving. Save the fit again from its source."
        )
    return payload, arrays, jpath


def _saved_model(payload: dict, jpath: Path):
    """The model of a saved fit, parsed from the text the file holds. Never read from a path:
    `load_model` reads a string without a newline as a file's path, and an edited file could
    name any file on disk."""
    rec = payload["model"]
    text = rec.get("resolved") or rec["source"]
    if not isinstance(text, str):
        raise DataError(f"load_fit: {str(jpath)!r}: its model text is {type(text).__name__}")
    try:
        model = load_model(text if "\n" in text else text + "\n")  # text, with a newline
    except ModelError as err:
        path = "" if "\n" in text else " (a saved fit holds its model text and reads no file)"
        raise DataError(
            f"load_fit: {str(jpath)!r}: the model text it holds does not parse{path} ({err}). "
            + _AGAIN
        ) from None
    return model if model.source == text else dataclasses.replace(model, source=text)


def _population(payload: dict, arrays: dict[str, np.ndarray]):
    from ..data import read_data

    d = payload["data"]
    cols = {}
    for c in d["order"]:
        spec = d["columns"][c]
        cols[c] = arrays[f"data/{c}"] if spec == "array" else np.array(spec, dtype=object)
    df = pd.DataFrame(cols, columns=d["order"])
    options: dict[str, Any] = {
        "covariates": list(d["covariates"]),
        "covariate_rule": d["covariate_rule"],
    }
    if d["endpoint_column"]:
        options["endpoint"] = d["endpoint_column"]
        options["endpoints"] = list(d["endpoints"])
    else:
        options["endpoint"] = False
    options["cens"] = d["cens_column"] or False  # (none: a BLQ column is not a flag then)
    # the data were read, and their warnings given, when the fit was made: read again from
    # the saved table, whose rows are not the file's, they would name other rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        pop = read_data(df, **options)
    if data_fingerprint(pop) != d["fingerprint"]:
        raise DataError(
            "load_fit: the data rebuilt from the saved fit does not match its recorded "
            "fingerprint: its data table was edited, or the file was written by an "
            "incompatible version"
        )
    pop = pop.with_filled(d.get("filled"))  # (how the data were read: kept with the fit)
    if d.get("source"):  # (the file it was read from: the report's Data section names it)
        pop = pop._replace(pop._records, pop._ids)
        pop._source_name = str(d["source"])
        # (a file of that name given to its report later is compared with the data, not
        # taken on its name: `interfaces.report._data_source`)
        pop._from_saved_fit = True
    return pop


def load_fit(path: str | os.PathLike):
    """Load a fit saved by `Fit.save` / `save_fit` (a folder, or its `fit.json`).

    Runs no code from the files (JSON and a NumPy `.npz` read without pickle) and refuses
    content that does not match its recorded SHA-256 checksum (`DataError`). The model is
    parsed again from the text saved in the file (never from a path the file names) and the
    data rebuilt from the saved table, so the loaded fit predicts exactly what the saved fit
    predicted. A damaged or inconsistent file is a `DataError` that names it and what is
    wrong, whatever the damage.
    """
    payload, arrays, jpath = _read(Path(path))
    try:
        return _loaded_fit(payload, arrays, jpath)
    except (
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as err:
        if isinstance(err, DataError) and str(err).startswith("load_fit:"):
            raise
        # content that passed the checksum but is not what save_fit writes: edited, with the
        # checksum recomputed, or written by another version
        raise DataError(
            f"load_fit: {str(jpath)!r} does not hold a consistent saved fit "
            f"({type(err).__name__}: {err}); it was edited or written by another version of "
            f"deepnlme. {_AGAIN}"
        ) from err


def _saved_shrinkage(payload: dict) -> dict[str, float]:
    """The eta-shrinkage of a saved fit in percent. Fits saved before `Fit.shrinkage` was in
    percent (no "shrinkage_unit" in the file) hold fractions: they are read as percent."""
    factor = 1.0 if payload.get("shrinkage_unit") == "percent" else 100.0
    return {
        str(k): (math.nan if v is None else factor * float(v))
        for k, v in payload["shrinkage"].items()
    }


def _loaded_fit(payload: dict, arrays: dict[str, np.ndarray], jpath: Path):
    """The `Fit` of a checked payload and arrays (`load_fit`)."""
    model = _saved_model(payload, jpath)
    population = _population(payload, arrays)
    method = method_from_record(payload["method"])
    ode = OdeOptions(**payload["ode_options"])
    problem, _ = model_problem(model, population, ode_options=ode)
    u = arrays["u"]
    if u.shape != (problem.n_unconstrained,):
        raise DataError(
            f"load_fit: the saved fit has {u.size} parameters but its model has "
            f"{problem.n_unconstrained}; the file is inconsistent"
        )
    stats = payload["statistics"]
    for k in payload.get("nonfinite", []):
        stats[k] = float(stats[k]) if stats[k] is not None else math.nan
    kinds = payload["estimates"]["kinds"]
    estimates = {
        k: float(arrays[f"estimate/{k}"]) if kinds[k] == "float" else arrays[f"estimate/{k}"]
        for k in kinds
    }
    ids = payload["ebes"]["ids"]
    ebes = pd.DataFrame(
        arrays["ebes"], columns=payload["ebes"]["labels"], index=pd.Index(ids, name="ID")
    )
    cov = None
    if payload["covariance"] is not None:
        cov = pd.DataFrame(
            arrays["covariance"],
            index=payload["covariance"]["index"],
            columns=payload["covariance"]["columns"],
        )
    table = _frame_from_json(payload["table"])
    return Fit(
        method=method,
        ofv=float(stats["ofv"]),
        m2ll=float(stats["m2ll"]),
        aic=float(stats["aic"]),
        bic=float(stats["bic"]),
        estimates=estimates,
        u=u,
        ebes=ebes,
        eta_cov=arrays["eta_cov"],
        shrinkage=_saved_shrinkage(payload),
        converged=bool(stats["converged"]),
        message=str(stats["message"]),
        n_iter=int(stats["n_iter"]),
        n_eval=int(stats["n_eval"]),
        history=_history(arrays["history"], payload["history"]["columns"]),
        timings={k: (math.nan if v is None else v) for k, v in payload["timings"].items()},
        covariance=cov,
        covariance_u=arrays.get("covariance_u"),
        covariance_status=str(stats["covariance_status"]),
        penalty=float(stats["penalty"]),
        n_obs=int(stats["n_obs"]),
        n_subjects=int(stats["n_subjects"]),
        n_params=int(stats["n_params"]),
        fixed=tuple(payload["fixed"]),
        near_boundary=tuple(payload.get("near_boundary", ())),
        options=_saved_options(payload),
        inner_converged=bool(stats["inner_converged"]),
        problem=problem,
        model=model,
        population=population,
        ode_options=ode,
        _table=table,
        provenance={"created": payload.get("created"), "versions": payload.get("versions")},
    )


def _history(values: np.ndarray, columns: list) -> pd.DataFrame:
    """The iteration history as saved (one float array), its `iter` column whole numbers
    again (it came back float64)."""
    frame = pd.DataFrame(values, columns=columns)
    if "iter" in frame and frame["iter"].notna().all():
        frame["iter"] = frame["iter"].astype(np.int64)
    return frame
