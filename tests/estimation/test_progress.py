"""The progress display: phases with their times, one line per iteration in a log, a live line
updated in place on a terminal."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from deepnlme.estimation._optimizers import BFGS, Progress, seconds

A = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
B = np.array([0.3, -0.2, 0.1])
HEADER = "  iter                 OFV     max|grad|     elapsed"
ITERATION = re.compile(r"^ +\d+ +-?\d+\.\d{6} +\d\.\d{4}e[+-]\d\d +\d+\.\d\ds$")


def _quadratic(x):
    return 0.5 * x @ A @ x - B @ x, A @ x - B


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_iterations_are_one_flushed_line_each(capsys):
    res = BFGS().minimize(_quadratic, np.zeros(3), gtol=1e-10, progress=True)
    lines = capsys.readouterr().out.split("\n")
    assert lines[0] == HEADER and lines[-1] == ""
    body = lines[1:-1]
    assert len(body) == res.n_iter + 1  # the start and every iteration
    assert all(ITERATION.match(line) for line in body)
    assert [int(line.split()[0]) for line in body] == list(range(res.n_iter + 1))
    assert "\r" not in "".join(lines)


def test_piped_phase_is_a_line_at_its_start_and_one_with_its_time_at_its_end():
    out = io.StringIO()
    with Progress(out) as display:
        display.start("compiling the FOCEI objective")
        assert out.getvalue() == "compiling the FOCEI objective ...\n"  # written at once
        took = display.end()
    first, second, rest = out.getvalue().split("\n")
    assert first == "compiling the FOCEI objective ..." and rest == ""
    assert second == f"compiling the FOCEI objective ... {seconds(took)}"
    assert re.fullmatch(r"compiling the FOCEI objective \.\.\. \d+\.\d\d? s", second)


def test_the_first_evaluation_ends_an_open_phase_before_the_iterations():
    out = io.StringIO()
    with Progress(out) as display:
        display.start("compiling the FOCEI objective")
        res = BFGS().minimize(_quadratic, np.zeros(3), gtol=1e-10, progress=display)
    lines = out.getvalue().split("\n")
    assert lines[0] == "compiling the FOCEI objective ..."
    assert lines[1].startswith("compiling the FOCEI objective ... ") and lines[1].endswith(" s")
    assert lines[2] == HEADER and len(lines) == 3 + res.n_iter + 1 + 1


def _compile_lines(monkeypatch, clock, splits) -> list[str]:
    """The finished phase lines of `Progress` for phases timed by the `clock` readings (a
    start and an end each) and ended by `end_split(*split)` of each of `splits`."""
    import deepnlme.estimation._optimizers as opt

    readings = iter(clock)
    monkeypatch.setattr(opt.time, "perf_counter", lambda: next(readings))
    out = io.StringIO()
    with Progress(out) as display:
        for split in splits:
            display.start("compiling the FOCE objective")
            display.end_split(*split)
    return out.getvalue().split("\n")[1::2]


def test_a_long_first_evaluation_is_noted_in_the_compile_line(monkeypatch):
    # the phase's clock: 130 s in all, 21 s of them compilation; then 0.5 s of 5 (noted not)
    lines = _compile_lines(
        monkeypatch,
        [100.0, 230.0, 300.0, 305.0],
        [(21.0, "the first evaluation"), (4.5, "the first evaluation")],
    )
    assert lines[0] == (
        "compiling the FOCE objective ... 2 min 10 s (of which the first evaluation 1 min 49 s)"
    )
    assert lines[1] == "compiling the FOCE objective ... 5.0 s"


def test_a_note_follows_the_phase_time(monkeypatch):
    stored = "loaded from the program store"
    lines = _compile_lines(
        monkeypatch,
        [10.0, 10.25, 20.0, 90.0],
        [(0.2, "the first evaluation", stored), (1.0, "the first evaluation", stored)],
    )
    assert lines[0] == "compiling the FOCE objective ... 0.25 s (loaded from the program store)"
    assert lines[1] == (
        "compiling the FOCE objective ... 1 min 10 s (of which the first evaluation 1 min 09 s)"
        " (loaded from the program store)"
    )


def test_on_a_terminal_iterations_update_one_live_line():
    term = _Terminal()
    with Progress(term) as display:
        display.start("compiling the FOCEI objective")
        assert term.getvalue() == "compiling the FOCEI objective ..."  # no newline yet
        res = BFGS().minimize(_quadratic, np.zeros(3), gtol=1e-10, progress=display)
    text = term.getvalue()
    lines = text.split("\n")
    assert re.fullmatch(r"compiling the FOCEI objective \.\.\. \d+\.\d\d? s", lines[0])
    assert lines[1] == HEADER and lines[3] == "" and len(lines) == 4
    live = lines[2].split("\r")  # one line, rewritten once per iteration
    assert len(live) == res.n_iter + 1
    assert all(ITERATION.match(part) for part in live)


def test_a_shorter_live_line_is_padded_over_the_longer_one():
    term = _Terminal()
    with Progress(term) as display:
        display.count("simulated data sets:", 9, 10)
        display.count("simulated data sets:", 10, 10)
    first, second = term.getvalue().rstrip("\n").split("\r")
    assert first == "simulated data sets: 9/10"
    assert second == "simulated data sets: 10/10"
    assert term.getvalue().endswith("10/10\n")
    term = _Terminal()
    with Progress(term) as display:
        display._live("a longer line")
        display._live("short")
    assert term.getvalue() == "a longer line\rshort        \n"


def test_counts_in_a_log_are_the_first_the_last_and_every_tenth():
    out = io.StringIO()
    with Progress(out) as display:
        for k in range(1, 1001):
            display.count("replicates:", k, 1000)
    lines = out.getvalue().splitlines()
    assert lines == ["replicates: 1/1000"] + [
        f"replicates: {k}/1000" for k in range(100, 1001, 100)
    ]
    out = io.StringIO()
    with Progress(out) as display:
        for k in range(1, 4):
            display.count("simulated data sets:", k, 3)
    assert out.getvalue().splitlines() == [f"simulated data sets: {k}/3" for k in (1, 2, 3)]


def test_an_error_inside_a_phase_says_failed_and_ends_the_line():
    term = _Terminal()
    with pytest.raises(RuntimeError), Progress(term) as display:
        display.start("compiling the FOCEI objective")
        raise RuntimeError("boom")
    assert term.getvalue() == "compiling the FOCEI objective ... failed\n"
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress(out) as display:
        display.start("covariance step (Sandwich)")
        raise RuntimeError("boom")
    assert out.getvalue().splitlines() == [
        "covariance step (Sandwich) ...",
        "covariance step (Sandwich) ... failed",
    ]


def test_disabled_shows_nothing(capsys):
    out = _Terminal()
    with Progress(out, enabled=False) as display:
        display.start("compiling")
        display.end()
        display.header()
        display.iteration(0, 1.0, 1.0, 0.0)
        display.count("x", 1, 1)
    assert out.getvalue() == ""
    BFGS().minimize(_quadratic, np.zeros(3), gtol=1e-10, progress=False)
    assert capsys.readouterr().out == ""
    assert Progress(out, enabled=False).live is False


def test_seconds():
    assert seconds(0.123) == "0.12 s"
    assert seconds(12.34) == "12.3 s"
    assert seconds(125.2) == "2 min 05 s"


def test_iterations_do_not_count_again_the_compilation_their_phase_showed():
    """A fit's first evaluation waits for its compilation, which the phase's line shows; the
    iterations' elapsed time counted it again (iteration 0 at 1.6 s after 'compiling ... 3.9
    s'). It counts from the end of that phase; the time limit still from the start."""
    import time

    calls = []

    def slow_first(x):
        if not calls:
            time.sleep(0.3)  # (the compilation a first call waits for)
        calls.append(1)
        return _quadratic(x)

    out = io.StringIO()
    display = Progress(out)
    t0 = time.perf_counter()
    display.start("compiling the objective")
    res = BFGS().minimize(slow_first, np.zeros(3), gtol=1e-10, progress=display, t_start=t0)
    lines = out.getvalue().split("\n")
    assert lines[1].startswith("compiling the objective ... 0.3")  # (piped: start, end lines)
    assert res.history[0][3] < 0.05 and res.history[-1][3] < 0.25
