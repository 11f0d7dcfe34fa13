"""A misspelt keyword of `fit`, a method or `InnerOptions` is an OptionError that suggests the
right one, not Python's TypeError; the signatures stay what the dataclasses write."""

import inspect
from pathlib import Path

import pytest

import deepnlme as dn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_fit_misspelt_keyword():
    model = dn.load_model(EXAMPLES / "theophylline.model")
    pop = dn.read_data(dn.datasets.path("theophylline"))
    with pytest.raises(
        dn.OptionError,
        match=r"fit: unknown option `maxiter`\. Did you mean "
        r"`max_iter`\?.*`ode_options`.*`covariance`",
    ):
        dn.fit(model, pop, dn.FOCE(), maxiter=10)
    with pytest.raises(dn.OptionError, match="unknown option `odeoptions`.*`ode_options`"):
        dn.fit(model, pop, dn.FOCE(), odeoptions=None)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (
            lambda: dn.InnerOptions(maxiter=3),
            "InnerOptions: unknown option `maxiter`. Did you mean `max_iter`?",
        ),
        (
            lambda: dn.FOCE(maxiter=3),
            "FOCE: unknown option `maxiter`. Did you mean `inner=InnerOptions(max_iter=...)`?",
        ),
        (lambda: dn.LaplaceI(multistart=True), "`inner=InnerOptions(multistart=...)`"),
        (lambda: dn.JointMAP(fixomega=False), "Did you mean `fix_omega`?"),
        (
            lambda: dn.FO(inner=dn.InnerOptions()),
            "FO: unknown option `inner`. FO takes no options.",
        ),
    ],
)
def test_option_class_misspelt_keyword(make, fragment):
    with pytest.raises(dn.OptionError) as info:
        make()
    assert fragment in str(info.value)


def test_every_method_rejects_an_unknown_keyword():
    for name in dn.method_names():
        with pytest.raises(dn.OptionError, match=f"{name}: unknown option `no_such_option`"):
            dn.method_named(name)(no_such_option=1)


def test_signatures_and_values_are_kept():
    assert list(inspect.signature(dn.FOCE).parameters) == ["inner"]
    assert list(inspect.signature(dn.InnerOptions).parameters) == [
        "max_iter",
        "tol",
        "multistart",
        "hessian",
    ]
    with pytest.raises(dn.OptionError, match="`hessian` must be 'auto', 'exact' or 'fisher'"):
        dn.InnerOptions(hessian="bfgs")
    m = dn.FOCE(inner=dn.InnerOptions(max_iter=7))
    assert m.inner.max_iter == 7 and m == dn.FOCE(dn.InnerOptions(7))
    assert dn.JointMAP(fix_omega=False).fix_omega is False
