"""Regularisers of a network domain (``reg=L2(1.0)``): L1, L2 and a smoothness penalty.

Each is a frozen value read from the model text; the penalties themselves are computed by
`MLP.penalty`. All are on the -2LL scale and opt-in; a strength of 0 adds nothing at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model._domains import ConstCall, DomainError, Symbol


def _strength(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
        raise DomainError(f"the strength of {what} must be a number >= 0, got {v!r}")
    return float(v)


def _switch(v, what: str) -> bool:
    if not isinstance(v, bool):
        raise DomainError(f"{what} must be True or False, got {v!r}")
    return v


@dataclass(frozen=True)
class L2:
    """``L2(strength, input=True, output=True, effective=True)``: strength * sum of squared weights.

    `input` / `output` switch the first / last layer's weights in or out (biases are never
    penalised); `effective` folds the input scale into the first layer (see `MLP.penalty`).
    """

    strength: float
    input: bool = True
    output: bool = True
    effective: bool = True

    def __str__(self) -> str:
        return _text(self)


@dataclass(frozen=True)
class L1:
    """``L1(strength, input=True, output=True, effective=True)``: strength * sum of |weights|."""

    strength: float
    input: bool = True
    output: bool = True
    effective: bool = True

    def __str__(self) -> str:
        return _text(self)


@dataclass(frozen=True)
class Smooth:
    """``Smooth(strength, points=21)``: strength * integral of the squared second derivative of
    each output along each standardised input over its observed range (others at their centre),
    by second differences on `points` grid points."""

    strength: float
    points: int = 21

    def __str__(self) -> str:
        s = f"Smooth({self.strength!r}"
        return s + (f", points={self.points})" if self.points != 21 else ")")


def _text(r) -> str:
    parts = [repr(r.strength)]
    for k in ("input", "output", "effective"):
        if not getattr(r, k):
            parts.append(f"{k}=False")
    return f"{type(r).__name__}({', '.join(parts)})"


_REGS = {"L1": L1, "L2": L2, "Smooth": Smooth}


def parse_regularisers(reg) -> tuple:
    """`reg=` of an MLP declaration (None, one call or a list of calls) -> regulariser values."""
    if reg is None:
        return ()
    items = list(reg) if isinstance(reg, list | tuple) else [reg]
    out = []
    for item in items:
        if isinstance(item, L1 | L2 | Smooth):
            out.append(item)
            continue
        if isinstance(item, Symbol) and item.name in _REGS:
            raise DomainError(f"{item.name} needs a strength, e.g. reg={item.name}(1.0)")
        if not isinstance(item, ConstCall) or item.name not in _REGS:
            raise DomainError(
                f"reg must be L1(strength), L2(strength), Smooth(strength) or a list of them, "
                f"got {item}"
            )
        kw = dict(item.kwargs)
        cls = _REGS[item.name]
        names = ("strength", "points") if cls is Smooth else ("strength", *_SWITCHES)
        if len(item.args) > 1 and cls is not Smooth:
            raise DomainError(
                f"{item.name} takes one positional argument (the strength) and the switches "
                f"input=, output=, effective= by name; got {item}"
            )
        args = dict(zip(names, item.args))
        for k in kw:
            if k not in names or k in args:
                raise DomainError(
                    f"{item.name} has no argument '{k}' (or got it twice); its arguments are "
                    f"{', '.join(names)}"
                )
        args.update(kw)
        if "strength" not in args:
            raise DomainError(f"{item.name} needs a strength, e.g. {item.name}(1.0)")
        args["strength"] = _strength(args["strength"], item.name)
        if cls is Smooth:
            p = args.get("points", 21)
            if isinstance(p, bool) or not isinstance(p, int) or p < 3:
                raise DomainError(f"Smooth points must be a whole number >= 3, got {p!r}")
        else:
            for k in _SWITCHES:
                if k in args:
                    args[k] = _switch(args[k], f"{item.name} {k}")
        out.append(cls(**args))
    return tuple(out)


_SWITCHES = ("input", "output", "effective")
