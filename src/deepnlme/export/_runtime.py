# ruff: noqa: F821  (pre, dosing, init, rhs, derived and MODEL come before it in the module)
# The runtime of an exported Python module (`deepnlme.export`): read a NONMEM-layout CSV,
# expand its dose records, solve the model subject by subject from event to event and write
# PRED and IPRED. This file is copied verbatim into every exported module after the generated
# functions (pre, dosing, init, rhs, derived) and the fitted values (MODEL): it needs numpy
# and the standard library only, and never deepnlme.

import csv
import math
import sys
import warnings

import numpy as np

_NONMEM_ITEMS = ("ID", "TIME", "AMT", "DV", "EVID", "MDV", "CMT", "RATE", "II", "ADDL", "SS")


class ExportedModelError(ValueError):
    """A record or an option the exported module cannot handle; the message names it."""


# ----------------------------------------------------------------------------------------------
# data


def _number(text):
    text = (text or "").strip()
    if text in ("", "."):
        return math.nan
    return float(text)


def id_key(value):
    """The subject key of an ID value: ``1``, ``1.0`` and ``"1"`` are all ``"1"``."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value).strip()
    if math.isfinite(f) and f == int(f):
        return str(int(f))
    return repr(f)


def read_csv(path):
    """The columns of a CSV file by upper-case name (lists of strings), in file order.

    Rows whose first field starts with ``#`` are comments; so are rows whose first field
    starts with a letter or ``@`` where the first column is NONMEM's C column. Elsewhere a
    row whose first field is ``C`` alone or starts with ``@`` (a NONMEM comment row, which
    deepnlme's reader refuses too) is refused rather than read as data."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise ExportedModelError(f"{path}: the file is empty")
    head = [h.strip().upper() for h in rows[0]]
    body, numbers = [], []
    for k, r in enumerate(rows[1:], 2):
        first = r[0].strip() if r else ""
        if not r or first.startswith("#"):
            continue
        if head[0] == "C" and (first[:1].isalpha() or first.startswith("@")):
            continue
        if first == "C" or first.startswith("@"):
            raise ExportedModelError(
                f"{path}, row {k}: the first field is {first!r}, which NONMEM reads as a "
                "comment row; remove the row, or start it with #"
            )
        body.append(r)
        numbers.append(k)
    columns = {h: [r[k] if k < len(r) else "" for r in body] for k, h in enumerate(head)}
    columns["_ROW"] = numbers
    return columns


def _subjects(columns):
    """Records grouped by subject (order of appearance), numbers as floats; each subject's
    records contiguous and in time order, as deepnlme reads them."""
    if "ID" not in columns or "TIME" not in columns:
        raise ExportedModelError("the data need the columns ID and TIME")
    n = len(columns["ID"])
    rows = columns.get("_ROW") or list(range(2, n + 2))

    def col(name, default):
        if name in columns:
            out = []
            for k, v in enumerate(columns[name]):
                try:
                    out.append(_number(v))
                except ValueError:
                    raise ExportedModelError(
                        f"row {rows[k]}, column {name}: {v!r} is not a number"
                    ) from None
            return out
        return [default] * n

    # IDs written as text in a NONMEM export (numbered 1, 2, ... with SUBJECT beside them)
    ids = columns["SUBJECT"] if MODEL.get("text_ids") and "SUBJECT" in columns else columns["ID"]
    amt, evid_c, mdv = col("AMT", 0.0), col("EVID", math.nan), col("MDV", math.nan)
    items = {name: col(name, math.nan) for name in ("TIME", "AMT", "CMT", "RATE", "II", "ADDL",
                                                    "SS", "DVID")}  # fmt: skip
    covs = {name: col(name, math.nan) for name in MODEL["covariates"]}
    out = {}
    last = None
    for k in range(n):
        evid = evid_c[k]
        if math.isnan(evid):  # no EVID: a record with an amount is a dose
            evid = 1.0 if (amt[k] or 0.0) > 0 else (2.0 if mdv[k] == 1 else 0.0)
        rec = {"row": k, "line": rows[k], "ID": ids[k], "EVID": int(evid), "MDV": mdv[k]}
        for name, values in items.items():
            rec[name] = values[k]
        rec["cov"] = {name: values[k] for name, values in covs.items()}
        if math.isnan(rec["TIME"]):
            raise ExportedModelError(f"row {rows[k]}: TIME is missing; every record needs one")
        key = id_key(ids[k])
        if key != last and key in out:
            raise ExportedModelError(
                f"row {rows[k]}: ID {ids[k]} appears again after other subjects; deepnlme "
                "reads a subject's records together (NONMEM would read a new individual): "
                "give that subject a new ID, or sort the records by ID"
            )
        recs = out.setdefault(key, [])
        if recs and rec["TIME"] < recs[-1]["TIME"]:
            raise ExportedModelError(
                f"row {rows[k]}: time goes back within subject ID {ids[k]} (from "
                f"{recs[-1]['TIME']:g} to {rec['TIME']:g}); sort each subject's records by "
                "time (the exported module does not take a clock that restarts)"
            )
        recs.append(rec)
        last = key
    return out


def _warn_network_ranges(key, cov, warned):
    """Warn, once per network input (`warned`: those said already), where a covariate is
    beyond the range the network was scaled and fitted on (as deepnlme's `predict` and
    `simulate` do)."""
    for net, name, lo, hi in MODEL.get("network_ranges", ()):
        v = cov[MODEL["covariates"].index(name)]
        slack = 0.01 * max(hi - lo, abs(hi), abs(lo), 1e-12)
        if (v < lo - slack or v > hi + slack) and (net, name) not in warned:
            warned.add((net, name))
            warnings.warn(
                f"subject {key}: network {net}'s input {name} is {v:g}, beyond the range it was "
                f"scaled and fitted on ({lo:g} to {hi:g}): a network extrapolates with no shape "
                "of its own there, and its output can be far off",
                stacklevel=4,
            )


def _covariates(key, records):
    names = MODEL["covariates"]
    values = []
    for name in names:
        vals = [r["cov"][name] for r in records]
        if any(math.isnan(v) for v in vals):
            raise ExportedModelError(
                f"subject {key}: the covariate {name} is missing on some record; fill it in"
            )
        if any(v != vals[0] for v in vals):
            raise ExportedModelError(
                f"subject {key}: the covariate {name} changes with time; the exported module "
                "supports covariates constant within a subject only"
            )
        values.append(vals[0])
    return np.asarray(values, dtype=float)


# ----------------------------------------------------------------------------------------------
# dose records -> administrations


def _zero(v):
    return 0.0 if math.isnan(v) else v


def _administrations(key, records, dose_mod, n_states, ode):
    """The records' actions in time order: (time, priority, (record time, record order),
    kind, payload); a reset drops what comes from a record before it."""
    actions = []
    for order, r in enumerate(records):
        evid, t = r["EVID"], r["TIME"]
        if evid in (3, 4):
            actions.append((t, 1, (t, order), "reset", None))
        if evid not in (1, 4):
            continue
        cmt = int(_zero(r["CMT"])) or 1
        if not 1 <= cmt <= n_states:
            raise ExportedModelError(
                f"subject {key}, data row {r['line']}: CMT={cmt} is not a compartment of the "
                f"model (1..{n_states})"
            )
        col = cmt - 1
        lag, bio, m_rate, m_dur = (dose_mod[k][col] for k in ("lag", "bioav", "rate", "duration"))
        amount = bio * _zero(r["AMT"])
        rate_in, ss, ii = _zero(r["RATE"]), int(_zero(r["SS"])), _zero(r["II"])
        addl = int(_zero(r["ADDL"]))
        if addl > 0 and ii <= 0:
            raise ExportedModelError(
                f"subject {key}, data row {r['line']}: ADDL={addl} needs II > 0"
            )
        if rate_in == -1:
            rate = m_rate
        elif rate_in == -2:
            rate = amount / m_dur if m_dur > 0 else math.nan
        else:
            rate = rate_in
        if rate_in != 0 and not rate > 0:
            raise ExportedModelError(
                f"subject {key}, data row {r['line']}: RATE={rate_in:g} gives the rate "
                f"{rate} in compartment {cmt}; the model's rate or duration must be positive"
            )
        if ss > 0:
            if ode:
                raise ExportedModelError(
                    f"subject {key}, data row {r['line']}: steady-state dose records (SS > 0)"
                    " are not supported by the exported module of an ODE model; expand the "
                    "doses before steady state in the data (ADDL) instead"
                )
            if lag != 0:
                raise ExportedModelError(
                    f"subject {key}, data row {r['line']}: a steady-state dose (SS > 0) with "
                    "a lag time is not supported by the exported module"
                )
            const = rate_in != 0 and ii <= 0
            if rate_in == 0 and ii <= 0:
                raise ExportedModelError(
                    f"subject {key}, data row {r['line']}: a steady-state bolus needs II > 0"
                )
            if const:
                payload = ("const", col, bio * rate, 0.0, ii)
            elif rate_in != 0:
                dur = amount / rate
                if dur > ii:
                    raise ExportedModelError(
                        f"subject {key}, data row {r['line']}: a steady-state infusion "
                        f"longer ({dur:g}) than its interval II={ii:g}"
                    )
                payload = ("inf", col, rate, dur, ii)
            else:
                payload = ("bolus", col, amount, 0.0, ii)
            actions.append((t, 2, (t, order), "ss1" if ss == 1 else "ss2", payload))
            first = 1
        else:
            first = 0
        for k in range(first, addl + 1 if addl > 0 else 1):
            start = t + k * ii + lag
            if rate_in != 0:
                dur = amount / rate
                actions.append((start, 3, (t + k * ii, order), "infusion", (col, rate, dur)))
            else:
                actions.append((start, 3, (t + k * ii, order), "bolus", (col, amount)))
        if ss > 0 and rate_in != 0 and not payload[0] == "const":
            actions.append((t, 3, (t, order), "infusion", (col, payload[2], payload[3])))
        if ss > 0 and payload[0] == "const":
            actions.append((t, 3, (t, order), "infusion", (col, payload[2], math.inf)))
    actions.sort(key=lambda a: (a[0], a[1], a[2]))
    return actions


# ----------------------------------------------------------------------------------------------
# linear compartment models (closed forms)


def _k_matrix(kind, p):
    """The rate matrix K of x' = K x (amounts, CMT order) of a closed-form model."""
    ka = p.get("ka")
    if kind.startswith("One"):
        kd = np.array([[-p["cl"] / p["v"]]])
    elif kind.startswith("Two"):
        cl, v1, q, v2 = p["cl"], p["v1"], p["q"], p["v2"]
        kd = np.array([[-(cl + q) / v1, q / v2], [q / v1, -q / v2]])
    else:
        cl, v1, q2, v2, q3, v3 = (p[k] for k in ("cl", "v1", "q2", "v2", "q3", "v3"))
        kd = np.array(
            [
                [-(cl + q2 + q3) / v1, q2 / v2, q3 / v3],
                [q2 / v1, -q2 / v2, 0.0],
                [q3 / v1, 0.0, -q3 / v3],
            ]
        )
    if not kind.endswith("Oral"):
        return kd
    n = kd.shape[0] + 1
    k = np.zeros((n, n))
    k[1:, 1:] = kd
    k[0, 0], k[1, 0] = -ka, ka
    return k


def _psi(z):
    """expm1(z) / z, with its series near 0."""
    z = np.asarray(z, dtype=float)
    small = np.abs(z) < 1e-5
    zs = np.where(small, 1.0, z)
    return np.where(small, 1.0 + z / 2.0 + z * z / 6.0, np.expm1(zs) / zs)


class _Linear:
    """Exact propagation of x' = K x + r in the eigenbasis of K (real, distinct eigenvalues)."""

    def __init__(self, k):
        lam, vec = np.linalg.eig(k)
        if np.any(np.abs(np.imag(lam)) > 0):
            raise ExportedModelError("the rate matrix has complex eigenvalues")
        self.lam = np.real(lam)
        self.vec = np.real(vec)
        self.inv = np.linalg.inv(self.vec)

    def step(self, t0, t1, x, r):
        h = t1 - t0
        y = self.inv @ x
        q = self.inv @ r
        y = np.exp(self.lam * h) * y + h * _psi(self.lam * h) * q
        return self.vec @ y

    def steady(self, kind, col, value, dur, ii, n):
        """The amounts at the time of a steady-state dose (its own bolus included)."""
        e = np.zeros(n)
        e[col] = value
        b = self.inv @ e
        lam = self.lam
        if kind == "bolus":
            y = -b / np.expm1(lam * ii)
        elif kind == "inf":
            y = np.exp(lam * (ii - dur)) * dur * _psi(lam * dur) * b / -np.expm1(lam * ii)
        else:  # a constant infusion at steady state
            y = -b / lam
        return self.vec @ y


# ----------------------------------------------------------------------------------------------
# ODE models: Dormand-Prince 5(4) with an adaptive step, from event to event

_DP_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_DP_E = (
    71 / 57600,
    0.0,
    -71 / 16695,
    71 / 1920,
    -17253 / 339200,
    22 / 525,
    -1 / 40,
)


class _Ode:
    """x' = rhs(t, x) + r by Dormand-Prince 5(4) (error per step below atol + rtol |x|)."""

    def __init__(self, f, rtol, atol, max_steps):
        self.f, self.rtol, self.atol, self.max_steps = f, rtol, atol, max_steps
        self.h = None

    def step(self, t0, t1, x, r):
        span = t1 - t0
        if span <= 0:
            return x

        def f(t, y):
            return self.f(t, y) + r

        t, y = t0, np.array(x, dtype=float)
        k1 = f(t, y)
        h = self.h or min(span, 0.01 * max(span, 1.0))
        for _ in range(self.max_steps):
            if t >= t1:
                return y
            h = min(h, t1 - t)
            ks = [k1]
            for i in range(1, 7):
                yi = y + h * sum(a * k for a, k in zip(_DP_A[i], ks))
                ks.append(f(t + _DP_C[i] * h, yi))
            y_new = y + h * sum(b * k for b, k in zip(_DP_B, ks) if b)
            err = h * sum(e * k for e, k in zip(_DP_E, ks) if e)
            scale = self.atol + self.rtol * np.maximum(np.abs(y), np.abs(y_new))
            norm = float(np.sqrt(np.mean((err / scale) ** 2))) if err.size else 0.0
            if norm <= 1.0:
                t = t1 if t1 - (t + h) <= 1e-14 * max(1.0, abs(t1)) else t + h
                y = y_new
                k1 = ks[6]  # first same as last
                self.h = h
            factor = 5.0 if norm == 0 else min(5.0, max(0.2, 0.9 * norm**-0.2))
            h = h * factor
        raise ExportedModelError(
            f"the ODE solve needed more than {self.max_steps} steps between times {t0:g} and "
            f"{t1:g}; pass a larger max_steps (or looser rtol/atol)"
        )


# ----------------------------------------------------------------------------------------------
# one subject


def _row(v):
    return np.asarray(v, dtype=float)[None, :]


def _subject_predictions(key, records, eta, cov, rtol, atol, max_steps):
    """The observation records of one subject, the prediction at each and the amounts."""
    theta = np.zeros((1, 0))
    ind = pre(theta, _row(eta), _row(cov))
    names = MODEL["states"]
    n = len(names)
    dose_mod = {k: [1.0 if k == "bioav" else 0.0] * n for k in ("lag", "bioav", "rate")}
    dose_mod["duration"] = [0.0] * n
    if MODEL["dosing"]:
        vals = dosing(theta, _row(eta), _row(cov), ind)[0]
        for label, v in zip(MODEL["dosing"], vals):
            kind, state = label[:-1].split("[")
            dose_mod[kind][names.index(state)] = float(v)
    ind_row = ind[0]
    obs = [r for r in records if r["EVID"] == 0 and r["MDV"] != 1]
    if not obs:
        return obs, np.zeros(0), np.zeros((0, n))
    cf = MODEL["closed_form"]
    if cf is not None:
        p = dict(zip(MODEL["ind"], (float(v) for v in ind_row)))
        solver = _Linear(_k_matrix(cf, p))
    else:

        def f(t, y):
            return rhs(np.array([[t]]), y[None, :], theta, _row(eta), _row(cov), ind)[0]

        solver = _Ode(f, rtol, atol, max_steps)
    actions = _administrations(key, records, dose_mod, n, cf is None)
    times = sorted(
        {r["TIME"] for r in obs}
        | {a[0] for a in actions}
        | {a[0] + a[4][2] for a in actions if a[3] == "infusion" and math.isfinite(a[4][2])}
    )
    record_times = [r["TIME"] for r in records if r["EVID"] in (0, 1, 3, 4)]
    t_cur = min([*record_times, *times])
    x = np.zeros(n)
    if MODEL["init"]:
        vals = init(theta, _row(eta), _row(cov), ind)[0]
        for state, v in zip(MODEL["init"], vals):
            x[names.index(state)] = float(v)
    infusions = []  # (start, end, col, rate, order)
    seen, done = {}, {}  # the amounts at t before, and after, the actions at t
    ai = 0
    for t in times:
        if t > t_cur:
            r = np.zeros(n)
            for start, end, col, rate, _ in infusions:
                if start <= t_cur and end > t_cur:
                    r[col] += rate
            x = solver.step(t_cur, t, x, r)
            t_cur = t
        seen[t] = x.copy()
        while ai < len(actions) and actions[ai][0] == t:
            _, _, order, kind, payload = actions[ai]
            ai += 1
            if kind in ("reset", "ss1"):
                x = np.zeros(n)
                infusions = [i for i in infusions if i[4] >= order]
                actions[ai:] = [a for a in actions[ai:] if a[2] >= order]  # later records only
            if kind in ("ss1", "ss2"):
                x = x + solver.steady(payload[0], payload[1], payload[2], payload[3], payload[4], n)
            elif kind == "bolus":
                x = x.copy()
                x[payload[0]] += payload[1]
            elif kind == "infusion":
                col, rate, dur = payload
                infusions.append((t, t + dur, col, rate, order))
        done[t] = x.copy()
        infusions = [i for i in infusions if i[1] > t]
    t_obs = np.asarray([r["TIME"] for r in obs], dtype=float)
    # an observation whose record follows a dose or reset record at its time sees the actions
    # at that time (deepnlme's rule, NONMEM's for one record before it); else it comes first
    acts = [(r["TIME"], r["row"]) for r in records if r["EVID"] in (1, 3, 4)]
    xs = np.stack(
        [
            done[r["TIME"]]
            if any(t == r["TIME"] and k < r["row"] for t, k in acts)
            else seen[r["TIME"]]
            for r in obs
        ]
    )
    m = len(obs)
    out = derived(
        t_obs[:, None],
        xs,
        np.zeros((m, 0)),
        np.repeat(_row(eta), m, axis=0),
        np.repeat(_row(cov), m, axis=0),
        np.repeat(ind, m, axis=0),
    )
    return obs, out[:, MODEL["pred"]], xs


# ----------------------------------------------------------------------------------------------
# the public functions of the module


def _fitted_ebe(key, cov, ebes):
    """The random effects IPRED uses for subject `key`, or None (with the reason); `ebes`:
    the caller's, by subject key (None: the fitted ones)."""
    if ebes is not None:
        if key not in ebes:
            return None, None
        eta = np.asarray(ebes[key], dtype=float).reshape(-1)
        if eta.shape != (len(MODEL["eta"]),):
            raise ExportedModelError(
                f"ebes[{key!r}] has {eta.size} values; the model has {len(MODEL['eta'])} "
                f"random effects ({', '.join(MODEL['eta'])})"
            )
        return eta, None
    if key not in MODEL["ebes"]:
        return None, None
    fitted = MODEL.get("ebe_covariates", {}).get(key)
    if fitted is not None:
        for name, a, b in zip(MODEL["covariates"], cov, fitted):
            if not (a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))):
                return None, (
                    f"subject {key}: {name} is {a:g} in these data and {b:g} in the fit's data "
                    "for that ID, so it is taken for another subject and its IPRED is nan "
                    "(the fitted EBE belongs to the fit's subject); give new subjects IDs that "
                    "are not in the fit's data, or pass ebes=..."
                )
    return np.asarray(MODEL["ebes"][key], dtype=float), None


def _predict(data, ebes, rtol, atol, max_steps):
    columns = (
        read_csv(data)
        if isinstance(data, str)
        else {str(k).upper(): [str(v) for v in vs] for k, vs in data.items()}
    )
    given = None if ebes is None else {id_key(k): v for k, v in ebes.items()}
    warned = set()
    missing = [c for c in MODEL["covariates"] if c not in columns]
    if missing:
        raise ExportedModelError(f"the data have no column {missing[0]} (a model covariate)")
    out = {"ID": [], "TIME": [], "DVID": [], "PRED": [], "IPRED": [], "row": []}
    n_eta = len(MODEL["eta"])
    with_ebe, others = [], []
    for key, records in _subjects(columns).items():
        cov = _covariates(key, records)
        _warn_network_ranges(key, cov, warned)
        obs, pred, _ = _subject_predictions(
            key, records, np.zeros(n_eta), cov, rtol, atol, max_steps
        )
        ebe, why_not = _fitted_ebe(key, cov, given)
        if why_not is not None:
            warnings.warn(why_not, stacklevel=3)
        if ebe is not None:
            _, ipred, _ = _subject_predictions(key, records, ebe, cov, rtol, atol, max_steps)
            with_ebe.append(key)
        else:
            ipred = np.full(len(obs), np.nan)
            others.append(key)
        for r, a, b in zip(obs, pred, ipred):
            out["ID"].append(r["ID"])
            out["TIME"].append(r["TIME"])
            out["DVID"].append(1 if math.isnan(r["DVID"]) else int(r["DVID"]))
            out["PRED"].append(float(a))
            out["IPRED"].append(float(b))
            out["row"].append(r["row"])
    order = sorted(range(len(out["row"])), key=lambda k: out["row"][k])
    table = {k: [v[i] for i in order] for k, v in out.items() if k != "row"}
    return table, with_ebe, others


def predict(data, *, ebes=None, rtol=1e-10, atol=1e-12, max_steps=100000):
    """PRED (random effects 0) and IPRED (at the subjects' EBEs) at every observation record.

    `data`: a CSV path or a dict of columns (upper-case names -> lists of strings or
    numbers). Returns a dict of columns ID, TIME, DVID, PRED, IPRED (one entry per
    observation record, in data order). IPRED is computed at the fitted EBE of a subject
    whose ID is in the fit's data and whose covariates equal the fit's for that ID (new
    doses or sampling times for that subject are fine); a subject whose covariates differ
    is taken for another one (a warning names it) and, like a subject without an EBE, gets
    IPRED nan. `ebes`: a dict ID -> random effects (in the order of MODEL["eta"]) to use
    instead of the fitted ones (``{}``: none). `rtol`, `atol`, `max_steps`: the ODE
    solver's (ODE models only).
    """
    return _predict(data, ebes, rtol, atol, max_steps)[0]


def write_csv(table, path):
    """Write `predict`'s columns to a CSV file (17 significant digits)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["ID", "TIME", "DVID", "PRED", "IPRED"])
        for row in zip(*(table[k] for k in ("ID", "TIME", "DVID", "PRED", "IPRED"))):
            w.writerow([row[0], repr(row[1]), row[2], repr(row[3]), repr(row[4])])


def main(argv=None):
    """``python model.py DATA.csv OUT.csv``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python model.py DATA.csv OUT.csv", file=sys.stderr)
        return 2
    try:
        table, with_ebe, others = _predict(argv[0], None, 1e-10, 1e-12, 100000)
        write_csv(table, argv[1])
    except (ExportedModelError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    n = len(with_ebe) + len(others)
    note = f"IPRED at the fitted EBEs for {len(with_ebe)} of {n} subjects"
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        note += f"; IPRED nan for {len(others)} without one (ID {shown})"
    print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
