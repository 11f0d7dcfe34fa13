"""`Program`: an ordered list of assignments and the outputs computed from them.

Every symbolic form of this package is a `Program`: a network layer by layer, a block of a
model, a derivative. Nothing is inlined unless asked (`Program.inline`), so a deep network's
form and its derivatives grow linearly with depth. All symbols are real (``real=True``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sympy as sp

from ._errors import SymbolicError


def real_symbol(name: str) -> sp.Symbol:
    """The real SymPy symbol `name` (every symbol of this package is real)."""
    return sp.Symbol(name, real=True)


def real_symbols(names: Iterable[str]) -> tuple[sp.Symbol, ...]:
    return tuple(real_symbol(n) for n in names)


@dataclass(frozen=True, eq=False)
class Program:
    """Ordered assignments ``symbol = expression`` and the outputs computed from them.

    **Fields**

    - `assignments`: ``((symbol, expression), ...)``; an expression uses only free symbols
      and symbols assigned before it.
    - `outputs`: the output expressions, flattened row-major when `shape` has two axes.
    - `names`: a label per output (e.g. ``"y_1"``, ``"dy_1/dx_2"``).
    - `args`: the argument groups of a generated function, ``(("x", (x_1, x_2)), ("w",
      (...)))``: each free symbol belongs to one group. Empty: one group ``"args"`` holding
      the free symbols sorted by name.
    - `shape`: the shape of the outputs (``(len(outputs),)`` by default).

    Example:
        >>> x = real_symbol("x")
        >>> h = real_symbol("h")
        >>> p = Program(((h, sp.tanh(x)),), (2 * h,), ("y",), (("x", (x,)),))
        >>> p.inline().outputs
        (2*tanh(x),)
    """

    assignments: tuple[tuple[sp.Symbol, sp.Expr], ...]
    outputs: tuple[sp.Expr, ...]
    names: tuple[str, ...] = ()
    args: tuple[tuple[str, tuple[sp.Symbol, ...]], ...] = ()
    shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "assignments", tuple((s, sp.sympify(e)) for s, e in self.assignments)
        )
        object.__setattr__(self, "outputs", tuple(sp.sympify(e) for e in self.outputs))
        if not self.names:
            object.__setattr__(self, "names", tuple(f"out_{k}" for k in range(len(self.outputs))))
        if len(self.names) != len(self.outputs):
            raise SymbolicError(
                f"Program: {len(self.names)} names for {len(self.outputs)} outputs; give one "
                "name per output"
            )
        shape = tuple(self.shape) or (len(self.outputs),)
        size = 1
        for d in shape:
            size *= d
        if size != len(self.outputs):
            raise SymbolicError(
                f"Program: shape {shape} holds {size} values but there are "
                f"{len(self.outputs)} outputs"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "args", tuple((n, tuple(s)) for n, s in self.args))
        seen: set[sp.Symbol] = set()
        for s, _ in self.assignments:
            if not isinstance(s, sp.Symbol):
                raise SymbolicError(f"Program: an assignment target must be a Symbol, got {s!r}")
            if s in seen:
                raise SymbolicError(
                    f"Program: '{s}' is assigned twice; give each intermediate its own name"
                )
            seen.add(s)

    # ------------------------------------------------------------------ structure
    @property
    def assigned(self) -> tuple[sp.Symbol, ...]:
        """The assigned symbols, in order."""
        return tuple(s for s, _ in self.assignments)

    @property
    def free_symbols(self) -> tuple[sp.Symbol, ...]:
        """The symbols used but not assigned (the inputs), sorted by name."""
        assigned = set(self.assigned)
        free: set[sp.Symbol] = set()
        for _, e in self.assignments:
            free |= e.free_symbols
        for e in self.outputs:
            free |= e.free_symbols
        return tuple(sorted(free - assigned, key=lambda s: s.name))

    @property
    def arg_groups(self) -> tuple[tuple[str, tuple[sp.Symbol, ...]], ...]:
        """`args`, or one group ``"args"`` of the free symbols when `args` is empty."""
        return self.args or (("args", self.free_symbols),)

    @property
    def symbols(self) -> dict[str, sp.Symbol]:
        """Every symbol of the program (free and assigned) by name."""
        out = {s.name: s for s in self.free_symbols}
        out.update({s.name: s for s in self.assigned})
        for _, group in self.args:
            out.update({s.name: s for s in group})
        return out

    def count_ops(self) -> int:
        """The size of the program: `sympy.count_ops` summed over every expression."""
        exprs = [e for _, e in self.assignments] + list(self.outputs)
        return int(sum(sp.count_ops(e) for e in exprs))

    # ------------------------------------------------------------------ transformations
    def inline(self) -> Program:
        """The same outputs with every assignment substituted (no intermediates left)."""
        env: dict[sp.Symbol, sp.Expr] = {}
        for s, e in self.assignments:
            env[s] = e.xreplace(env)
        return Program(
            (), tuple(e.xreplace(env) for e in self.outputs), self.names, self.args, self.shape
        )

    def substitute(self, values: Mapping[sp.Symbol | str, float]) -> Program:
        """Free symbols replaced by numbers (or expressions); dropped from `args`."""
        by = self.symbols
        sub: dict[sp.Symbol, sp.Expr] = {}
        for k, v in values.items():
            s = by.get(k) if isinstance(k, str) else k
            if s is None:
                raise SymbolicError(f"substitute: the program has no symbol '{k}'")
            sub[s] = sp.Float(v) if isinstance(v, float | int) else sp.sympify(v)
        args = tuple((n, tuple(s for s in g if s not in sub)) for n, g in self.args)
        return Program(
            tuple((s, e.xreplace(sub)) for s, e in self.assignments),
            tuple(e.xreplace(sub) for e in self.outputs),
            self.names,
            args,
            self.shape,
        )

    def rename(self, names: Mapping[str, str]) -> Program:
        """Symbols renamed (free and assigned): ``{"exp": "exp_"}``; the fix for a name the
        generated code reserves."""
        by = self.symbols
        sub = {}
        for old, new in names.items():
            if old not in by:
                raise SymbolicError(f"rename: the program has no symbol '{old}'")
            sub[by[old]] = real_symbol(new)
        args = tuple((n, tuple(sub.get(s, s) for s in g)) for n, g in self.args)
        return Program(
            tuple((sub.get(s, s), e.xreplace(sub)) for s, e in self.assignments),
            tuple(e.xreplace(sub) for e in self.outputs),
            self.names,
            args,
            self.shape,
        )

    def latex(self) -> str:
        """The assignments and outputs as a LaTeX ``aligned`` block (`sympy.latex`)."""
        rows = [f"{sp.latex(s)} &= {sp.latex(e)}" for s, e in self.assignments]
        for name, e in zip(self.names, self.outputs):
            if isinstance(e, sp.Symbol) and e.name == name:
                continue
            rows.append(f"\\mathrm{{{_latex_label(name)}}} &= {sp.latex(e)}")
        return "\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}"

    def __str__(self) -> str:
        lines = [f"{s} = {e}" for s, e in self.assignments]
        lines += [
            f"{n} := {e}"
            for n, e in zip(self.names, self.outputs)
            if not (isinstance(e, sp.Symbol) and e.name == n)
        ]
        return "\n".join(lines)


def _latex_label(name: str) -> str:
    return name.replace("_", r"\_")


def _by_name(expr: sp.Expr, prog: Program) -> sp.Expr:
    """`expr` with every symbol that has the name of one of `prog`'s symbols replaced by it
    (so a loss written with plain ``sympy.Symbol("y_1")`` refers to the program's real one)."""
    by = prog.symbols
    sub = {s: by[s.name] for s in expr.free_symbols if s.name in by and by[s.name] != s}
    return expr.xreplace(sub)


def _resolve(wrt: Sequence[sp.Symbol | str], prog: Program) -> tuple[sp.Symbol, ...]:
    by = prog.symbols
    out = []
    for v in wrt:
        name = v if isinstance(v, str) else v.name
        if name not in by:
            raise SymbolicError(
                f"derivative: the program has no symbol '{name}' to differentiate by; its free "
                f"symbols are {', '.join(s.name for s in prog.free_symbols)}"
            )
        s = by[name]
        if s in set(prog.assigned):
            raise SymbolicError(
                f"derivative: '{name}' is an intermediate of the program; differentiate by its "
                "inputs (free symbols)"
            )
        out.append(s)
    return tuple(out)


def _reuse(prog: Program) -> dict[sp.Expr, sp.Symbol]:
    """Each compound right-hand side mapped to its symbol, so that a derivative that
    recomputes it (``1 - tanh(a)**2``) refers to the named intermediate instead."""
    return {e: s for s, e in prog.assignments if not e.is_Atom}


def _diff(e: sp.Expr, v: sp.Symbol, reuse: Mapping[sp.Expr, sp.Symbol]) -> sp.Expr:
    d = sp.diff(e, v)
    return d.xreplace(reuse) if reuse else d


def _add_arg(args, name: str, symbols: tuple[sp.Symbol, ...]):
    taken = {n for n, _ in args}
    base, k = name, 2
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return (*args, (name, symbols))


def jacobian(prog: Program, wrt: Sequence[sp.Symbol | str], *, prefix: str = "d") -> Program:
    """The Jacobian of `prog`'s outputs in `wrt` by forward mode through the intermediates.

    For each intermediate ``s`` that depends on an input ``v`` of `wrt`, a new intermediate
    ``d{s}_d{v}`` = sum over the intermediates ``u`` that ``s``'s expression uses of
    ``∂s/∂u · d{u}_d{v}``, plus ``∂s/∂v``; each is one assignment, so the size grows with the
    number of edges of the program (linearly with a network's depth). Outputs: ``[n_out,
    len(wrt)]``, row-major, named ``"d{out}/d{v}"``; the forward assignments come first.
    """
    wrt = _resolve(wrt, prog)
    reuse = _reuse(prog)
    assigned = set(prog.assigned)
    tangent: dict[tuple[sp.Symbol, sp.Symbol], sp.Symbol] = {}
    new: list[tuple[sp.Symbol, sp.Expr]] = list(prog.assignments)

    def total(e: sp.Expr, v: sp.Symbol) -> sp.Expr:
        acc = sp.S.Zero
        for u in sorted(e.free_symbols, key=lambda s: s.name):
            if u == v:
                acc += _diff(e, v, reuse)
            elif u in assigned and (u, v) in tangent:
                acc += _diff(e, u, reuse) * tangent[(u, v)]
        return acc

    for s, e in prog.assignments:
        for v in wrt:
            d = total(e, v)
            if d != 0:
                t = real_symbol(f"{prefix}{s.name}_{prefix}{v.name}")
                new.append((t, d))
                tangent[(s, v)] = t
    outs, names = [], []
    for name, e in zip(prog.names, prog.outputs):
        for v in wrt:
            outs.append(total(e, v))
            names.append(f"d{name}/d{v.name}")
    shape = (*prog.shape, len(wrt)) if len(prog.shape) == 1 else (len(prog.outputs), len(wrt))
    return Program(tuple(new), tuple(outs), tuple(names), prog.args, shape)


def gradient(
    prog: Program,
    loss: sp.Expr,
    wrt: Sequence[sp.Symbol | str],
    *,
    extra_args: Sequence[tuple[str, Sequence[sp.Symbol]]] = (),
    prefix: str = "bar_",
) -> Program:
    """The gradient of a scalar `loss` (an expression in `prog`'s symbols, e.g. its outputs
    ``y_1``) in `wrt`, by reverse mode through the intermediates.

    The adjoint of each intermediate ``s`` that the loss depends on is one assignment
    ``bar_{s}`` = sum over the intermediates ``u`` using ``s`` of ``bar_{u} · ∂u/∂s`` (plus
    ``∂loss/∂s``), emitted from the last intermediate back to the first; the gradient in an
    input ``v`` sums ``bar_{u} · ∂u/∂v``. Outputs: ``[len(wrt)]`` named ``"dloss/d{v}"``.
    New free symbols of `loss` (targets, cotangents) need an argument group: `extra_args`
    (else they join a group ``"extra"``).
    """
    loss = _by_name(sp.sympify(loss), prog)
    wrt = _resolve(wrt, prog)
    reuse = _reuse(prog)
    assigned = set(prog.assigned)
    rhs = dict(prog.assignments)
    # which intermediates the loss reaches
    live: set[sp.Symbol] = set()
    stack = [u for u in loss.free_symbols if u in assigned]
    while stack:
        u = stack.pop()
        if u in live:
            continue
        live.add(u)
        stack.extend(w for w in rhs[u].free_symbols if w in assigned)
    contrib: dict[sp.Symbol, list[sp.Expr]] = {}
    for u in sorted(loss.free_symbols, key=lambda s: s.name):
        if u in assigned or u in wrt:
            contrib.setdefault(u, []).append(_diff(loss, u, reuse))
    new = [(s, e) for s, e in prog.assignments if s in live]
    for s, e in reversed(prog.assignments):
        if s not in live or s not in contrib:
            continue
        total = sp.Add(*contrib.pop(s))
        if total == 0:
            continue
        bar = real_symbol(f"{prefix}{s.name}")
        new.append((bar, total))
        for u in sorted(e.free_symbols, key=lambda x: x.name):
            if u in assigned or u in wrt:
                d = _diff(e, u, reuse)
                if d != 0:
                    contrib.setdefault(u, []).append(bar * d)
    outs = tuple(sp.Add(*contrib.get(v, [])) for v in wrt)
    names = tuple(f"dloss/d{v.name}" for v in wrt)
    args = prog.args
    known = {s for _, g in args for s in g} | assigned
    extra_args = [(n, tuple(_by_name(s, prog) for s in g)) for n, g in extra_args]
    for n, g in extra_args:
        args = _add_arg(args, n, g)
        known |= set(g)
    rest = tuple(sorted((s for s in loss.free_symbols if s not in known), key=lambda s: s.name))
    if args and rest:
        args = _add_arg(args, "extra", rest)
    return Program(tuple(new), outs, names, args, (len(wrt),))


def pullback(
    prog: Program, wrt: Sequence[sp.Symbol | str], *, cotangent: str = "v", prefix: str = "bar_"
) -> Program:
    """The pullback (vector-Jacobian product) ``v ↦ vᵀ ∂outputs/∂wrt``: the gradient of
    ``sum_k v_k · out_k`` with cotangent symbols ``v_1 ... v_m`` (a new argument group named
    `cotangent`), by reverse mode through the intermediates (`gradient`)."""
    vs = real_symbols(f"{cotangent}_{k}" for k in range(1, len(prog.outputs) + 1))
    clash = [v.name for v in vs if v.name in prog.symbols]
    if clash:
        raise SymbolicError(
            f"pullback: the cotangent symbol '{clash[0]}' is already a symbol of the program; "
            "pass another `cotangent` prefix"
        )
    loss = sp.Add(*(v * e for v, e in zip(vs, prog.outputs)))
    g = gradient(prog, loss, wrt, extra_args=[(cotangent, vs)], prefix=prefix)
    names = tuple(f"vjp/d{v}" for v in _resolve(wrt, prog))
    return Program(g.assignments, g.outputs, names, g.args, g.shape)
