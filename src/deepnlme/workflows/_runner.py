"""Independent fits run on Dask workers, or one after the other in this process.

Bootstrap, multistart (and, later, cross-validation and tuning) are lists of fits that do not
depend on each other. Each is a `FitTask`: plain values a worker process can rebuild the fit
from (model text, method, options, start, and which subjects of the shared population to take),
never JAX objects. `run_tasks` runs a function of (task, population) over the tasks:

- ``workers=1``, or Dask not installed: in this process, in order;
- ``workers=n > 1``: on a `distributed.LocalCluster` of n processes (one thread each, JAX
  single-threaded, no dashboard), started for the call and closed after it;
- ``scheduler="tcp://host:port"``: on that running cluster.

Worker processes are started fresh (multiprocessing's spawn), and each imports the script that
started them: a script that runs a workflow with ``workers > 1`` keeps its work under
``if __name__ == "__main__":``, as any multiprocessing script does.

The results come back in task order whatever the number of workers, so a run with the same
seeds gives the same table on any executor. A worker process that dies is replaced by its nanny
and its task runs again (``retries``). The population is sent to each worker once; each worker
keeps its models by text (`_model`), so the fits of a worker that share a model and a population
share its bound problem and compiled programs. Its compiled programs also go to deepnlme's
program store (the cache folder, `DEEPNLME_CACHE_DIR`, as in the process that runs the
workflow), whose entries are keyed by the model and the data's shapes: the resampled
populations of one padded shape share them, across the workers of a run and across runs (a
second bootstrap of the model loads what the first compiled), and the run's JAX compilation
cache holds the workers' other programs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import OptionError
from ..model._compile import unknown_parameter_hint

# What a worker process gets in its environment before it imports JAX: XLA single-threaded
# (`_config`'s flag plus one intra-op thread), and the run's JAX cache for the programs that
# deepnlme's program store does not keep.
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

# From this many fits of one program, a workflow compiles it optimised (`fit(...,
# compile="optimised")`) unless told otherwise: the longer compilation, once per process, was
# repaid after about 20 fits of pheno and 5 of issue 25's multiple-dose design
# (benchmarks/RESULTS_workflows.md, "Many fits of one program").
MANY_FITS = 20


def build_for(n: int, options: Mapping[str, Any]) -> dict[str, Any]:
    """`{"compile": "optimised"}` for a workflow of `n` fits sharing a program, when its
    `options` do not choose; else nothing."""
    return {"compile": "optimised"} if n >= MANY_FITS and "compile" not in options else {}


@dataclasses.dataclass(frozen=True)
class FitTask:
    """One fit of a workflow, as plain values a worker process can rebuild it from.

    - `key`: the task's place in the results (replicate or start number, from 0).
    - `model_text`: the model's text (`str(model)`); a worker loads it once and keeps it.
    - `method`: the method object (a frozen dataclass: sent by value).
    - `options`: keyword options of `deepnlme.fit` (`max_iter`, `covariance`, ...).
    - `init`: the start, a dict of values by parameter name (None: the model's initial values).
    - `subjects`: None for the shared population as it is, or the IDs to take from it in order
      (an ID may repeat); the subjects taken are renumbered 1..n (`renumbered`).
    """

    key: int
    model_text: str
    method: Any
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    init: Mapping[str, Any] | None = None
    subjects: tuple | None = None


@dataclasses.dataclass(frozen=True)
class FitOutcome:
    """What a worker sends back of one fit: plain numbers, no JAX objects.

    `estimates`: parameter name -> value (float or numpy array, the declared scale); `error`:
    None, or the error that stopped the fit (``"SolveError: ..."``; the other fields are then
    NaN, False or empty). `seconds`: the fit's wall time on the worker (compilation included).
    """

    key: int
    ofv: float
    m2ll: float
    converged: bool
    message: str
    n_iter: int
    estimates: dict[str, Any]
    seconds: float
    error: str | None = None


# ------------------------------------------------------------------------ a journal

_JOURNAL_FORMAT = "deepnlme-journal"


def _plain_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"array": v.tolist(), "shape": list(v.shape)}
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    return v


def _outcome_json(outcome: FitOutcome) -> str:
    record = dataclasses.asdict(outcome)
    record["estimates"] = {k: _plain_value(v) for k, v in outcome.estimates.items()}
    return json.dumps(record)  # (NaN as NaN: Python's json reads it back)


def _outcome_of(record: dict) -> FitOutcome:
    est = {
        k: (np.asarray(v["array"], dtype=float).reshape(v["shape"]) if isinstance(v, dict) else v)
        for k, v in record["estimates"].items()
    }
    return FitOutcome(**{**record, "estimates": est})


def _short(text: str | None) -> str:
    """A signature entry as the journal's refusal shows it (a model's text cut short)."""
    if text is None:
        return "none"
    one = " ".join(str(text).split())
    return one if len(one) <= 40 else one[:37] + "..."


class Journal:
    """The finished fits of a workflow, one JSON line each, appended as each finishes, so
    that a run stopped part way (a killed job, a lost cluster, Ctrl-C) goes on from where it
    stopped: `run_tasks` skips the tasks whose outcomes the journal holds.

    The first line holds the run's `signature` (what makes an outcome valid for the run: the
    model, method, options, seed, start, data); a journal written for another signature is
    refused, naming what differs. A last line cut off by a stopped write is dropped."""

    def __init__(self, path: str | os.PathLike, signature: Mapping[str, Any], label: str):
        self.path, self.label = Path(path), label
        self.signature = {k: str(v) for k, v in signature.items()}
        self.done: dict[int, FitOutcome] = {}
        if self.path.exists():
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            head = {"format": _JOURNAL_FORMAT, "label": label, "signature": self.signature}
            self.path.write_text(json.dumps(head) + "\n", encoding="utf-8")

    def _read(self) -> None:
        text = self.path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # (the next line must start on a line of its own)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("\n")
        lines = text.splitlines()
        try:
            head = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            head = None
        if not isinstance(head, dict) or head.get("format") != _JOURNAL_FORMAT:
            raise OptionError(
                f"{self.label}: {str(self.path)!r} is not a journal of deepnlme's fits; give "
                "another checkpoint file, or remove this one"
            )
        theirs = head.get("signature", {})
        keys = list(dict.fromkeys([*self.signature, *theirs]))
        differ = [k for k in keys if theirs.get(k) != self.signature.get(k)]
        if differ or head.get("label") != self.label:
            what = (
                "; ".join(
                    f"{k}: {_short(theirs.get(k))} there, {_short(self.signature.get(k))} here"
                    for k in differ[:3]
                )
                or f"the workflow: {head.get('label')!r}"
            )
            raise OptionError(
                f"{self.label}: the journal {str(self.path)!r} was written by another run "
                f"({what}), so its fits do not belong to this one; give another checkpoint "
                "file (command line: another --out), or remove this one (--force) to start "
                "again"
            )
        for k, line in enumerate(lines[1:], 2):
            try:
                outcome = _outcome_of(json.loads(line))
            except (json.JSONDecodeError, TypeError, KeyError, ValueError):
                if k == len(lines):  # the last line, cut off by a stopped write: dropped
                    kept = "".join(x + "\n" for x in lines[:-1])
                    tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                    tmp.write_text(kept, encoding="utf-8")
                    os.replace(tmp, self.path)
                    break
                raise OptionError(
                    f"{self.label}: line {k} of the journal {str(self.path)!r} cannot be "
                    "read; remove the journal to start again"
                ) from None
            self.done[outcome.key] = outcome

    def write(self, outcome: FitOutcome) -> None:
        if outcome.key in self.done:
            return
        self.done[outcome.key] = outcome
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(_outcome_json(outcome) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


# ------------------------------------------------------------------------ on a worker

_MODELS: dict[str, Any] = {}
_RENUMBERED: dict[tuple, Any] = {}


def _model(text: str):
    """The `Model` of `text`, loaded once per process and kept (the cache of bound problems
    and compiled programs in `likelihood._from_model` lives on the model object)."""
    model = _MODELS.get(text)
    if model is None:
        from ..model import load_model

        model = _MODELS[text] = load_model(text)
    return model


def renumbered(population, ids: Sequence, widths: Mapping[str, int] | None = None):
    """The subjects `ids` of `population` in that order (an ID may repeat), with new IDs
    1..len(ids); `widths`: pad its arrays to these widths (`padded_widths` of the population
    they came from), so that every resample of one population has the same shapes."""
    pop = population.subset(list(ids), renumber=True)
    if widths is not None:
        _pad_arrays(pop, widths)
    return pop


def padded_widths(population) -> dict[str, int]:
    """The padded widths of `population`'s arrays: observations, doses, covariate changes."""
    a = population.arrays()
    return {"obs": a.obs_mask.shape[1], "dose": a.dose_mask.shape[1], "cov": a.cov_mask.shape[1]}


# how a padding entry is filled (data.PopulationArrays): masks False, times, covariates and
# sequence numbers as the entry before it, CMT and EVID 1, everything else 0
_EDGE = {"obs_time", "obs_cov", "obs_seq", "dose_time", "dose_cov", "dose_seq"}
_EDGE |= {"cov_time", "cov_value"}
_ONE = {"dose_cmt", "dose_evid"}


def _pad_arrays(pop, widths: Mapping[str, int]) -> None:
    """Widen `pop`'s padded arrays (computed here, before anything else reads them) to
    `widths`, filling as the data layer fills its padding."""
    a = pop.arrays()
    out = {}
    for field in a._fields:
        x = getattr(a, field)
        extra = widths[field.split("_")[0]] - x.shape[1]
        if extra < 0:  # a resample never has more events per subject than its population
            raise AssertionError(f"{field}: width {x.shape[1]} above {widths}")
        if extra:
            pad = [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)
            if field in _EDGE:
                x = np.pad(x, pad, mode="edge")
            else:
                x = np.pad(x, pad, constant_values=1 if field in _ONE else 0)
            x.flags.writeable = False
        out[field] = x
    pop._arrays = type(a)(**out)


def _population_of(task: FitTask, population, widths):
    if task.subjects is None:
        return population
    # the same resample asked for twice on one worker (a retry): the same object, so its
    # bound problem is found again
    key = (id(population), task.subjects)
    hit = _RENUMBERED.get(key)
    if hit is None:
        _RENUMBERED.clear()
        hit = _RENUMBERED[key] = renumbered(population, task.subjects, widths)
    return hit


_ID_MENTION = re.compile(r"\bIDs? '?(\d+(?:'?, '?\d+)*)")


def with_data_ids(message: str, subjects: Sequence | None) -> str:
    """`message` of a fit on renumbered subjects (`renumbered`: ID k is the k-th of
    `subjects`), with the data's IDs of the subjects it names: a failed bootstrap replicate
    named 'subject ID 2' for the data's subject 5, drawn second."""
    if subjects is None:
        return message
    named: list[int] = []
    for m in _ID_MENTION.finditer(message):
        for part in m.group(1).replace("'", "").split(", "):
            k = int(part)
            if 1 <= k <= len(subjects) and k not in named:
                named.append(k)
    if not named:
        return message

    def shown(x):
        return int(x) if isinstance(x, (float, np.floating)) and float(x).is_integer() else x

    pairs = ", ".join(f"ID {k} is the data's ID {shown(subjects[k - 1])!r}" for k in named)
    return f"{message} [the subjects of this fit are renumbered 1..n: {pairs}]"


def run_fit(task: FitTask, population, widths: Mapping[str, int] | None = None) -> FitOutcome:
    """Run one `FitTask` on `population` (in whatever process this is) and return its
    outcome; an error of the fit (a failed solve, ...) is returned as the outcome's `error`."""
    return fit_task(task, population, widths)[1]


def fit_task(task: FitTask, population, widths: Mapping[str, int] | None = None):
    """`run_fit`, and the `Fit` itself (None where the fit failed)."""
    from ..estimation import fit

    t0 = time.perf_counter()
    try:
        pop = _population_of(task, population, widths)
        init = None if task.init is None else dict(task.init)
        f = fit(_model(task.model_text), pop, task.method, init=init, **dict(task.options))
    except Exception as err:  # noqa: BLE001  (one failed fit is a result of the workflow)
        return None, FitOutcome(
            task.key, np.nan, np.nan, False, "", 0, {}, time.perf_counter() - t0,
            error=with_data_ids(f"{type(err).__name__}: {err}", task.subjects),
        )  # fmt: skip
    if not np.isfinite(f.ofv):  # a fit that could not start: an error, not its start values
        return None, FitOutcome(
            task.key, np.nan, np.nan, False, str(f.message), 0, {}, time.perf_counter() - t0,
            error=with_data_ids(f"the fit did not start: {f.message}", task.subjects),
        )  # fmt: skip
    estimates = {k: _plain(v) for k, v in f.estimates.items()}
    return f, FitOutcome(
        task.key,
        float(f.ofv),
        float(f.m2ll),
        bool(f.converged),
        str(f.message),
        int(f.n_iter),
        estimates,
        time.perf_counter() - t0,
    )


def _plain(v: Any) -> Any:
    a = np.asarray(v, dtype=np.float64)
    return float(a) if a.ndim == 0 else a.copy()


def _prepare_worker(cache: str | None) -> None:
    """Settings of a worker process, made before its first fit: JAX's compilation cache in
    the run's folder (shared by the workers: a program one compiled, the others load) for the
    programs deepnlme's own store does not keep (the store, keyed by the model and the data's
    shapes, serves the resamples of one padded shape as it is). On a cluster of our own the
    environment was set before JAX started (`_worker_env`); on another cluster this is all
    that is done."""
    if os.environ.get("DEEPNLME_WORKER_READY") == (cache or ""):
        return
    os.environ["DEEPNLME_WORKER_READY"] = cache or ""
    if cache is None:
        return
    import jax

    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _on_worker(task: FitTask, population, widths, cache: str | None, fn: Callable) -> Any:
    _prepare_worker(cache)
    return fn(task, population, widths)


# ------------------------------------------------------------------------ progress


class FitCounter:
    """A count of finished fits on `stream`: on a terminal one line updated in place (a
    carriage return), in a log or a pipe a line per finished fit."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        journal: Journal | None = None,
    ):
        self.label, self.total, self.enabled = label, total, enabled
        self.journal = journal  # (where each finished fit is written, if given)
        self.stream = sys.stdout if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        try:
            self.live = bool(enabled and callable(isatty) and isatty())
        except (ValueError, OSError):
            self.live = False
        self.done = 0
        self.t0 = time.perf_counter()

    def finished(self, outcome: Any) -> None:
        if self.journal is not None:
            self.journal.write(outcome)
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        text = f"{self.label}: {self.done}/{self.total} fits finished ({elapsed:.1f} s)"
        if self.live:
            self.stream.write("\r" + text + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(text + _note(outcome) + "\n")
        self.stream.flush()


def _note(outcome: Any) -> str:
    held = getattr(outcome, "held_out_m2ll", None)  # (a cross-validation fold)
    if held is not None:
        if outcome.error:
            return f"; #{outcome.key}: failed ({outcome.error.split(':')[0]})"
        return f"; #{outcome.key}: held-out -2LL {held:.3f}"
    if not isinstance(outcome, FitOutcome):
        return ""
    if outcome.error:
        return f"; #{outcome.key}: failed ({outcome.error.split(':')[0]})"
    state = "converged" if outcome.converged else "not converged"
    return f"; #{outcome.key}: OFV {outcome.ofv:.3f}, {state}"


# ------------------------------------------------------------------------ the executor


def check_workers(owner: str, workers: int | None, scheduler: str | None) -> int:
    """The number of worker processes `workers` asks for (None: one per core)."""
    if workers is None:
        return max(1, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int | np.integer) or workers < 1:
        raise OptionError(
            f"{owner}: `workers` must be a whole number of processes >= 1 (1 runs the fits in "
            f"this process), or None for one per core; got {workers!r}"
        )
    if scheduler is not None and workers != 1:
        raise OptionError(
            f"{owner}: give `workers` or `scheduler`, not both: the cluster at {scheduler!r} "
            f"has its own workers; got workers={workers}"
        )
    return int(workers)


def check_method(owner: str, method):
    """The estimation method `method` stands for: an object (FO(), FOCE(), ...), or as
    `fit` takes it, a method's class or name with its default options."""
    from ..likelihood import as_method

    return as_method(method, f"{owner}: `method`")


def check_seed(owner: str, seed) -> None:
    """`seed` is a whole number >= 0 (the workflows derive every draw from it)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise OptionError(f"{owner}: `seed` must be an integer >= 0; got {seed!r}")


def check_init(owner: str, model, init) -> dict | None:
    """A workflow's `init` (the start of each fit) as a dict of values by parameter name (a
    `Fit`: its estimates), checked once before any fit runs: names and values against the
    model's parameters and their domains (every fold failed alike with the same error in its
    row, and no exception)."""
    if init is None:
        return None
    from ..estimation import Fit

    if isinstance(init, Fit):  # as `fit(init=...)` takes it: its estimates
        init = init.estimates
    if not isinstance(init, Mapping):
        raise OptionError(
            f"{owner}: option `init` must be a dict of values by parameter name or a fit; got "
            f"{type(init).__name__}"
        )
    init = dict(init)
    model.compiled.checked_values(init, f"{owner}: option `init`")
    return init


def check_fit_options(owner: str, model, method, options: Mapping[str, Any]) -> None:
    """The fit options a workflow passes to each of its fits, checked once before any fit
    runs, as `fit` checks them: a bad value otherwise failed every replicate alike, each
    with the same error in its row, and no exception."""
    import math

    from ..estimation._covariance import resolve_covariance
    from ..estimation._optimizers import resolve_optimizer
    from ..estimation._options import check_build, check_stopping
    from ..solve import OdeOptions

    def named(err: OptionError) -> OptionError:
        text = str(err)
        return OptionError(f"{owner}: {text[5:] if text.startswith('fit: ') else text}")

    try:
        check_stopping(
            options.get("max_iter", 500), options.get("time_limit", math.inf),
            options.get("gtol", 1e-3), options.get("ftol", 1e-10), options.get("xtol", 1e-8),
            False,
        )  # fmt: skip
        check_build(options.get("compile", "auto"))
        optimizer = options.get("optimizer")
        optimizer = resolve_optimizer(method.default_optimizer if optimizer is None else optimizer)
        method.check_optimizer(optimizer)
        resolve_covariance(options.get("covariance"))
    except OptionError as err:
        raise named(err) from None
    ode = options.get("ode_options")
    if ode is not None and not isinstance(ode, OdeOptions):
        raise OptionError(
            f"{owner}: option `ode_options` must be a deepnlme.OdeOptions; got {type(ode).__name__}"
        )
    fixed = options.get("fixed")
    if fixed is not None:
        names = {p.name for p in model.compiled.params}
        given = list(fixed.keys()) if isinstance(fixed, Mapping) else list(fixed)
        unknown = [str(n) for n in given if n not in names]
        if unknown:
            raise OptionError(
                f"{owner}: option `fixed` names unknown parameter '{unknown[0]}'"
                + unknown_parameter_hint(unknown[0], names)
                + f"; the model's parameters are {', '.join(sorted(names))}"
            )
        if isinstance(fixed, Mapping):
            model.compiled.checked_values(fixed, f"{owner}: option `fixed`")


def check_stratify(owner: str, population, stratify: str | None) -> None:
    """`stratify` is None or a covariate of `population`."""
    if stratify is not None and stratify not in population.covariate_names:
        raise OptionError(
            f"{owner}: `stratify` must name a covariate of the population; got {stratify!r}; "
            f"the covariates are: {', '.join(population.covariate_names) or '(none)'}"
        )


def _dask_available() -> bool:
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def run_tasks(
    tasks: Sequence[FitTask],
    population,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    label: str = "fits",
    retries: int = 2,
    widths: Mapping[str, int] | None = None,
    fn: Callable[..., Any] = run_fit,
    stream: TextIO | None = None,
    journal: Journal | None = None,
) -> list[Any]:
    """``fn(task, population, widths)`` for every task, on workers or in this process, in
    task order (see the module's description). `fn` must be a function of a module the
    workers can import (the default, `run_fit`, returns a `FitOutcome`). `journal`: the
    outcomes of tasks finished by an earlier run (not run again) and where each new one is
    written as it finishes."""
    n = check_workers(label, workers, scheduler)
    _refuse_in_a_starting_worker(label)
    done = journal.done if journal is not None else {}
    results = {t.key: done[t.key] for t in tasks if t.key in done}
    todo = [t for t in tasks if t.key not in results]
    if results and progress:
        (stream or sys.stdout).write(
            f"{label}: {len(results)} of {len(tasks)} fits taken from {journal.path}\n"
        )
    counter = FitCounter(label, len(todo), enabled=progress, stream=stream, journal=journal)
    fresh = _run_tasks(todo, population, n, scheduler, counter, retries, widths, fn)
    if not results:
        return fresh
    results.update({o.key: o for o in fresh})
    return [results[t.key] for t in tasks]


def _run_tasks(tasks, population, n, scheduler, counter, retries, widths, fn) -> list[Any]:
    label = counter.label
    if not tasks:
        return []
    if (scheduler is None and (n == 1 or len(tasks) <= 1)) or not _dask_available():
        if scheduler is not None:
            raise ImportError(
                f"{label}: `scheduler` needs dask.distributed, which is not installed; "
                "pip install 'deepnlme[many]', or leave `scheduler` out to run in this process"
            )
        results = []
        for task in tasks:
            results.append(fn(task, population, widths))
            counter.finished(results[-1])
        return results
    return _run_on_dask(
        tasks, population, min(n, len(tasks)), scheduler, counter, retries, widths, fn
    )


_NO_GUARD = (
    "a script that runs a workflow with `workers` > 1 keeps its work under `if __name__ == "
    "'__main__':`, as any multiprocessing script does (each worker process imports the "
    "script), or runs it with workers=1"
)


def _refuse_in_a_starting_worker(label: str) -> None:
    """Refuse a workflow started while a worker process imports the user's script (a script
    without the `__main__` guard): Python's error came out of every worker, 475 lines of
    tracebacks that named neither the guard nor deepnlme, after each worker had run the
    script's own fits first."""
    import multiprocessing

    # (the test multiprocessing's own "bootstrapping phase" error makes, before it spawns)
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"{label}: called while a worker process was importing the script that started "
            f"the workflow: {_NO_GUARD}"
        )


def _one_program(tasks: Sequence[FitTask], widths: Mapping[str, int] | None) -> bool:
    """Whether the fits of `tasks` (two or more) share one compiled program: one model,
    method and options, on the population as it is or on resamples padded to `widths` (one
    shape; the starts may differ: they are arguments of the program). Their first fit then
    runs alone: 20 pheno bootstrap replicates on two workers from an empty program store took
    6.6 s with both workers compiling at once, 5.5-5.8 s with the first fit alone
    (benchmarks/RESULTS_workflows.md)."""
    if len(tasks) < 2:
        return False
    first = tasks[0]
    try:
        same = all(
            t.model_text == first.model_text and t.method == first.method
            and t.options == first.options
            for t in tasks
        )  # fmt: skip
    except (TypeError, ValueError):  # options holding arrays: not compared, not assumed
        return False
    return bool(same) and (widths is not None or all(t.subjects is None for t in tasks))


def _worker_env(cache: str) -> dict[str, str]:
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        flags = (flags + " " + WORKER_XLA_FLAGS).strip()
    return {
        "XLA_FLAGS": flags,
        "JAX_COMPILATION_CACHE_DIR": cache,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }


# dask's note that making its scratch folders took more than a second: only a note, but one
# that a warnings filter set to "error" (pytest's, a cautious user's) turns into the failure
# of the cluster's start (CI: 8.8 s on a busy machine; the bootstrap then failed)
_DASK_SLOW_SCRATCH = "Creating scratch directories is taking a surprisingly long time"


def _local_cluster(label: str, local_cluster, **options):
    """`distributed.LocalCluster(**options)`, its failure to start its workers said with
    the likely cause (a script without the `__main__` guard)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DASK_SLOW_SCRATCH, category=UserWarning)
            return local_cluster(**options)
    except RuntimeError as e:
        if "failed to start" not in str(e):
            raise
        raise RuntimeError(
            f"{label}: the Dask worker processes did not start ({e}). Where the workers' "
            "errors above say that they were importing the script (or speak of a "
            f"'bootstrapping phase'), {_NO_GUARD}"
        ) from e


def _lost(client, future) -> bool:
    """Whether the scattered data `future` is gone: no worker holds it, or the scheduler has
    forgotten it (the worker that held it died before it was copied to the others)."""
    from concurrent.futures import CancelledError

    if future.status != "finished":  # cancelled, lost or errored
        return True
    try:
        return not client.who_has(future).get(future.key)
    except CancelledError:
        return True


def _run_on_dask(tasks, population, n, scheduler, counter, retries, widths, fn) -> list[Any]:
    import contextlib
    import uuid
    from concurrent.futures import CancelledError

    from distributed import Client, LocalCluster, as_completed, wait

    from .._config import cache_dir

    run = uuid.uuid4().hex[:8]
    with contextlib.ExitStack() as stack:
        cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="deepnlme-workers-"))
        if scheduler is None:
            cluster = stack.enter_context(
                _local_cluster(
                    counter.label,
                    LocalCluster,
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # the scheduler's HTTP routes still listen; on a free port, not 8787,
                    # which another cluster on this machine (or another call) may hold
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0", "local_directory": cache},
                    host="127.0.0.1",
                    env=_worker_env(cache),
                    local_directory=cache,  # (a new, empty folder: no old scratch to sweep)
                    silence_logs=40,
                )
            )
            client = stack.enter_context(Client(cluster))
            worker_cache = cache
        else:
            try:
                client = stack.enter_context(Client(scheduler))
            except OSError as e:  # (dask waits its connect timeout, then raises this)
                raise OptionError(
                    f"{counter.label}: no Dask scheduler answered at {scheduler!r} ({e}): "
                    "start one there (dask scheduler, with workers), check the address, or "
                    "leave `scheduler` out to use a local cluster (`workers=`)"
                ) from None
            worker_cache = None  # not a folder of theirs: each worker keeps its own store
        shared = client.scatter(population, broadcast=True, hash=False)

        def submit(i, attempt=0):
            key = f"deepnlme-{counter.label}-{run}-{tasks[i].key}" + (
                f"-{attempt}" if attempt else ""
            )
            return client.submit(
                _on_worker, tasks[i], shared, widths, worker_cache, fn,
                key=key, retries=retries, pure=False,
            )  # fmt: skip

        lead = []
        if scheduler is None and _one_program(tasks, widths) and cache_dir() is not None:
            # the first fit alone: its worker compiles and stores the program, which the
            # others then load from the store instead of all compiling it at once
            lead = [submit(0)]
            wait(lead)
        futures = lead + [submit(i) for i in range(len(lead), len(tasks))]
        place = {f.key: (i, 0) for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(tasks)
        pending = as_completed(futures)
        for future in pending:
            i, attempt = place[future.key]
            try:
                results[i] = future.result()
            except CancelledError:
                # a worker's death can make the scheduler forget a task that was waiting
                # for it ("already forgotten"): submitted again, `retries` times at most
                if attempt >= retries:
                    raise
                if _lost(client, shared):
                    shared = client.scatter(population, broadcast=True, hash=False)
                again = submit(i, attempt + 1)
                place[again.key] = (i, attempt + 1)
                pending.add(again)
                continue
            counter.finished(results[i])
        return results
