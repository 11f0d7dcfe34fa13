"""The methods' registry: names in any case, records for saved fits, clear errors."""

from __future__ import annotations

import pytest

import deepnlme as dn
from deepnlme.errors import DataError, OptionError
from deepnlme.likelihood import method_from_record, method_named, method_names


def test_every_method_is_found_by_its_name_in_any_case():
    assert set(method_names()) == {"FO", "FOCE", "FOCEI", "LaplaceI", "JointMAP", "NaivePooled"}
    for name in method_names():
        assert method_named(name).name == name
        assert method_named(name.lower()) is method_named(name.upper())
    assert method_named("focei") is dn.FOCEI
    with pytest.raises(OptionError, match="unknown estimation method 'FOCEE'.*'FOCEI'"):
        method_named("FOCEE")


@pytest.mark.parametrize(
    "method",
    [
        dn.FO(),
        dn.FOCE(inner=dn.InnerOptions(max_iter=7, multistart=True)),
        dn.FOCEI(),
        dn.LaplaceI(inner=dn.InnerOptions(tol=1e-10)),
        dn.JointMAP(fix_omega=False),
        dn.NaivePooled(),
    ],
)
def test_a_method_record_gives_back_the_method(method):
    assert method_from_record(method.record()) == method


def test_records_of_older_versions_and_bad_records():
    # the Adam learning rate was an option of JointMAP and NaivePooled before it moved to Adam
    old = {"name": "JointMAP", "options": {"fix_omega": True, "learning_rate": 0.01}}
    assert method_from_record(old) == dn.JointMAP()
    with pytest.raises(DataError, match="method FOCE has no option\\(s\\) \\['tol'\\]"):
        method_from_record({"name": "FOCE", "options": {"tol": 1.0}})
    with pytest.raises(DataError, match="unknown method 'SAEM'"):
        method_from_record({"name": "SAEM", "options": {}})
