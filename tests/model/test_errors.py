"""Every ModelError case: the message names the line, column, what is wrong and a fix."""

import pathlib
import re

import pytest
from _model_texts import BASE  # noqa: E402

import deepnlme
from deepnlme.model import load_model


def _sub(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def _closed_form() -> str:
    """BASE with its dynamics the closed form OneCompartmentOral (derived: on line 15)."""
    return _sub(
        "dynamics:\n    Depot'   = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n",
        "dynamics: OneCompartmentOral\n",
    )


# (id, model text, line, column, fragments that must appear in the message)
CASES = [
    ("syntax", _sub("-ka * Depot", "-ka * * Depot"), 15, None, ["syntax error"]),
    ("unclosed", _sub("exp(tv + eta[2])", "exp(tv + eta[2]"), 13, None, ["syntax error"]),
    (
        "undefined-suggest",
        _sub("exp(tcl + eta[1])", "exp(tlc + eta[1])"),
        12,
        14,
        ["undefined name 'tlc'", "Did you mean 'tcl'?"],
    ),
    (
        "undefined-nosuggest",
        _sub("exp(tv + eta[2])", "exp(tv + eta[2] + zzzq)"),
        13,
        28,
        ["undefined name 'zzzq'", "Declare it in 'param:'"],
    ),
    (
        "assigned-twice",
        _sub("    v  = exp(tv + eta[2])\n", "    v  = exp(tv + eta[2])\n    ka = 2\n"),
        14,
        5,
        ["'ka' is assigned twice (first on line 11", "new name"],
    ),
    (
        "assigned-twice-across-blocks",
        _sub("conc = Central / v", "cl = Central / v"),
        18,
        5,
        ["'cl' is assigned twice", "in 'pre:'"],
    ),
    (
        "used-before-assigned",
        _sub("ka = exp(tka + eta[0])", "ka = exp(tka + eta[0]) + v"),
        11,
        30,
        ["'v' is used before it is assigned (on line 13)", "Move that assignment above"],
    ),
    (
        "later-block",
        _sub("v  = exp(tv + eta[2])", "v  = exp(tv + eta[2]) * conc"),
        13,
        29,
        ["'conc' is assigned in 'derived:'", "not visible in 'pre:'"],
    ),
    (
        "state-in-pre",
        _sub("v  = exp(tv + eta[2])", "v  = exp(tv + eta[2]) + Depot"),
        13,
        29,
        ["'Depot' is a state", "only in 'dynamics:' and 'derived:'"],
    ),
    (
        "time-in-pre",
        _sub("v  = exp(tv + eta[2])", "v  = exp(tv + eta[2]) + t"),
        13,
        29,
        ["the time 't' is not available in 'pre:'"],
    ),
    (
        "output-in-expr",
        _sub("    DV ~ Normal(conc, sigma)\n", "    DV ~ Normal(conc, sigma)\n    x = DV + 1\n"),
        20,
        9,
        ["'DV' is an observed output"],
    ),
    (
        "import",
        _sub("    conc = Central / v\n", "    import os\n    conc = Central / v\n"),
        18,
        5,
        ["imports are not allowed", "never executed"],
    ),
    (
        "for-loop",
        _sub("    conc = Central / v\n", "    for i in range(3): x = i\n    conc = Central / v\n"),
        18,
        5,
        ["loops are not allowed"],
    ),
    (
        "if-statement",
        _sub("    conc = Central / v\n", "    if WT > 70: x = 1\n    conc = Central / v\n"),
        18,
        5,
        ["'if' statements are not allowed", "a if cond else b"],
    ),
    (
        "augassign",
        _sub("    conc = Central / v\n", "    conc = Central / v\n    conc += 1\n"),
        19,
        5,
        ["augmented assignment"],
    ),
    (
        "attribute",
        _sub("exp(tka + eta[0])", "np.exp(tka + eta[0])"),
        11,
        10,
        ["attribute access", "exp(x) rather than np.exp(x)"],
    ),
    ("lambda", _sub("Central / v", "(lambda z: z)(v)"), 18, 13, ["lambda"]),
    (
        "comprehension",
        _sub("Central / v", "[z for z in eta]"),
        18,
        12,
        ["comprehensions are not allowed"],
    ),
    ("fstring", _sub("Central / v", "f'{v}'"), 18, 12, ["f-strings"]),
    ("string", _sub("Central / v", "'abc'"), 18, 12, ["strings are not allowed"]),
    (
        "arbitrary-call",
        _sub("exp(tka + eta[0])", "eval(tka + eta[0])"),
        11,
        10,
        ["unknown function 'eval'", "Allowed functions: exp, log"],
    ),
    (
        "unknown-function-suggest",
        _sub("exp(tka + eta[0])", "expp(tka + eta[0])"),
        11,
        10,
        ["unknown function 'expp'", "Did you mean 'exp'?"],
    ),
    (
        "builtin-arity",
        _sub("exp(tka + eta[0])", "exp(tka, eta[0])"),
        11,
        10,
        ["exp() takes 1 argument, got 2", "The signature is exp(x)."],
    ),
    (
        "pow-arity",
        _sub("exp(tka + eta[0])", "pow(tka)"),
        11,
        10,
        ["pow() takes 2 arguments, got 1", "pow(x, y)"],
    ),
    (
        "max-arity",
        _sub("exp(tka + eta[0])", "max(tka)"),
        11,
        10,
        ["max() takes at least 2 arguments, got 1"],
    ),
    (
        "dist-arity",
        _sub("Normal(conc, sigma)", "Normal(conc)"),
        19,
        10,
        ["Normal takes 2 arguments, got 1", "Normal(mean, sd)"],
    ),
    (
        "dist-too-many",
        _sub("Normal(conc, sigma)", "Normal(conc, sigma, 1)"),
        19,
        10,
        ["Normal takes 2 arguments, got 3"],
    ),
    (
        "dist-bad-keyword",
        _sub("Normal(conc, sigma)", "Normal(conc, sdd=sigma)"),
        19,
        27,
        ["Normal has no argument 'sdd'", "Did you mean 'sd'?"],
    ),
    (
        "dist-unknown",
        _sub("Normal(conc, sigma)", "Normall(conc, sigma)"),
        19,
        10,
        ["unknown observation distribution 'Normall'", "Did you mean 'Normal'?"],
    ),
    (
        "dist-in-expr",
        _sub("Central / v", "Normal(Central, v)"),
        18,
        12,
        ["can only appear after '~'"],
    ),
    (
        "mvnormal-no-cov",
        _sub("MvNormal(omega)", "MvNormal()"),
        8,
        11,
        ["random effect 'eta' has no covariance", "PDiag"],
    ),
    (
        "mvnormal-undeclared",
        _sub("MvNormal(omega)", "MvNormal(omga)"),
        8,
        20,
        ["has no covariance: 'omga' is not a declared parameter", "Did you mean 'omega'?"],
    ),
    (
        "mvnormal-not-matrix",
        _sub("MvNormal(omega)", "MvNormal(sigma)"),
        8,
        20,
        ["'sigma' is not a covariance matrix", "PDiag(init=[...])"],
    ),
    (
        "normal-no-sd",
        _sub("eta ~ MvNormal(omega)", "eta ~ MvNormal(omega)\n    e2 ~ Normal(0)"),
        9,
        10,
        ["random effect 'e2' has no standard deviation"],
    ),
    (
        "normal-nonzero-mean",
        _sub("eta ~ MvNormal(omega)", "eta ~ MvNormal(omega)\n    e2 ~ Normal(1, sigma)"),
        9,
        17,
        ["the mean of a random effect must be 0"],
    ),
    (
        "random-unknown-dist",
        _sub("MvNormal(omega)", "MvNormall(omega)"),
        8,
        11,
        ["unknown random-effect distribution 'MvNormall'", "Did you mean 'MvNormal'?"],
    ),
    (
        "index-range",
        _sub("eta[2]", "eta[3]"),
        13,
        23,
        ["index 3 is out of range for 'eta', which has 3 elements", "from 0 to 2"],
    ),
    ("index-negative", _sub("eta[2]", "eta[-1]"), 13, 23, ["index -1 is out of range"]),
    ("index-nonconstant", _sub("eta[2]", "eta[tv]"), 13, 23, ["must be a whole number"]),
    (
        "index-scalar",
        _sub("exp(tv + eta[2])", "exp(tv[0] + eta[2])"),
        13,
        14,
        ["'tv' is a number and cannot be indexed"],
    ),
    (
        "vector-unindexed",
        _sub("exp(tv + eta[2])", "exp(tv + eta)"),
        13,
        19,
        ["'eta' is a vector of shape (3,)", "e.g. eta[0]"],
    ),
    (
        "matrix-in-expr",
        _sub("exp(tv + eta[2])", "exp(tv + omega)"),
        13,
        19,
        ["'omega' is a matrix"],
    ),
    (
        "unknown-block",
        _sub("derived:", "derive:"),
        17,
        1,
        ["unknown block 'derive:'", "Did you mean 'derived'?"],
    ),
    (
        "duplicate-block",
        BASE + "pre:\n    z = 1\n",
        20,
        1,
        ["block 'pre:' appears twice (first on line 10)"],
    ),
    ("not-indented", _sub("    conc = Central / v", "conc = Central / v"), 18, 1, ["not indented"]),
    ("outside-block", "    x = 1\n" + BASE, 1, 5, ["not inside a block"]),
    (
        "unknown-domain",
        _sub("Real(init=1.0)", "Reall(init=1.0)"),
        3,
        13,
        ["unknown parameter domain 'Reall'", "Did you mean 'Real'?"],
    ),
    (
        "domain-bad-kwarg",
        _sub("Real(init=1.0)", "Real(int=1.0)"),
        3,
        13,
        ["wrong arguments for Real", "Did you mean 'init'?", "The signature is Real(init=None"],
    ),
    (
        "domain-init-outside",
        _sub("Real(lower=0, init=0.7)", "Real(lower=0, init=-1)"),
        6,
        13,
        ["must be strictly above lower=0", "inside the bounds"],
    ),
    (
        "domain-bare-number",
        _sub("Real(init=1.0)", "1.0"),
        3,
        13,
        ["a parameter needs a domain", "Real(init=1.0)", "Fixed(1.0)"],
    ),
    (
        "domain-nonmem-theta-bounds",
        _sub("Real(init=1.0)", "(0.1, 1.0, 20)"),
        3,
        13,
        ["a parameter needs a domain", "Real(init=1.0, lower=0.1, upper=20)"],
    ),
    (
        "pdiag-negative",
        _sub("[0.4, 0.07, 0.02]", "[0.4, -0.07, 0.02]"),
        5,
        13,
        ["must all be positive"],
    ),
    (
        "psd-not-pd",
        _sub("PDiag(init=[0.4, 0.07, 0.02])", "PSD(init=[[1, 2, 0], [2, 1, 0], [0, 0, 1]])"),
        5,
        13,
        ["positive definite"],
    ),
    (
        "init-not-state",
        BASE.replace("dynamics:", "init:\n    Centrl = 1\ndynamics:"),
        15,
        5,
        ["'Centrl' is not a state", "Did you mean 'Central'?"],
    ),
    (
        "dosing-unknown-kind",
        BASE.replace("dynamics:", "dosing:\n    lagg[Depot] = 1\ndynamics:"),
        15,
        5,
        ["unknown dosing parameter 'lagg'", "Did you mean 'lag'?"],
    ),
    (
        "dosing-unknown-state",
        BASE.replace("dynamics:", "dosing:\n    lag[Dept] = 1\ndynamics:"),
        15,
        9,
        ["'Dept' is not a state", "Did you mean 'Depot'?"],
    ),
    (
        "dosing-number",
        BASE.replace("dynamics:", "dosing:\n    lag[1] = 1\ndynamics:"),
        15,
        9,
        ["needs a state name", "CMT 1 is Depot"],
    ),
    (
        "closed-form-unknown",
        _sub(
            "dynamics:\n    Depot'   = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n",
            "dynamics: OneCompartmentOrl\n",
        ),
        14,
        11,
        ["unknown closed-form model 'OneCompartmentOrl'", "Did you mean 'OneCompartmentOral'?"],
    ),
    (
        "closed-form-missing-param",
        _sub(
            "dynamics:\n    Depot'   = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n",
            "dynamics: TwoCompartmentOral\n",
        ),
        14,
        11,
        ["TwoCompartmentOral needs the individual parameter 'v1' assigned in 'pre:'"],
    ),
    (
        "closed-form-case",
        _sub("v  = exp", "V  = exp")
        .replace(
            "dynamics:\n    Depot'   = -ka * Depot\n    Central' = ka * Depot - cl / v * Central\n",
            "dynamics: OneCompartmentOral\n",
        )
        .replace("Central / v", "Central / V"),
        14,
        11,
        ["needs the individual parameter 'v'", "Found 'V'"],
    ),
    (
        "deriv-in-pre",
        _sub("    ka = exp(tka + eta[0])", "    ka' = exp(tka + eta[0])"),
        11,
        5,
        ["does not belong in 'pre:'"],
    ),
    (
        "tilde-in-pre",
        _sub("    ka = exp(tka + eta[0])", "    ka ~ Normal(0, 1)"),
        11,
        5,
        ["does not belong in 'pre:'"],
    ),
    ("assign-t", _sub("conc = Central / v", "t = Central / v"), 18, 5, ["'t' is reserved"]),
    (
        "assign-function",
        _sub("conc = Central / v", "exp = Central / v"),
        18,
        5,
        ["'exp' is a built-in function"],
    ),
    ("floordiv", _sub("Central / v", "Central // v"), 18, 20, ["'//' (floor division)"]),
    # the caret at the operator, past the left operand's brackets
    ("caret-power", _sub("(WT / 70) ** 0.75", "(WT / 70)^0.75"), 12, 39, ["Use '**' for powers"]),
    # other tools' syntax and Python statements, named with their translation
    (
        "if-statement",
        _sub("    v  = exp(tv + eta[2])\n", "    if WT > 70:\n        v = exp(tv)\n"),
        13,
        5,
        ["'if' statements are not allowed", "x = a if cond else b"],
    ),
    (
        "nlmixr2-ddt",
        _sub("Depot'   = -ka * Depot", "d/dt(Depot) = -ka * Depot"),
        15,
        5,
        ["'d/dt(Depot)' (nlmixr2's derivative) is written Depot' = ... here"],
    ),
    (
        "pumas-colon-equals",
        _sub("ka = exp(", "ka := exp("),
        11,
        5,
        ["':=' is not an assignment here", "Write name = expression."],
    ),
    (
        "backslash",
        _sub("* (WT / 70) ** 0.75", "\\\n        * (WT / 70) ** 0.75"),
        12,
        5,
        ["a backslash does not continue a line here", "inside brackets"],
    ),
    ("pumas-block", "@param begin\n" + BASE, 1, 1, ["'@param' is Pumas's block syntax", "param:"]),
    (
        "continuation-not-deeper",
        _sub("cl = exp(tcl + eta[1])", "cl = exp(tcl +\n    eta[1])"),
        12,
        13,
        ["'(' was never closed", "indent that line deeper than line 12"],
    ),
    (
        "missing-state-equation",
        _sub("    Depot'   = -ka * Depot\n", ""),
        15,
        21,
        ["undefined name 'Depot'", "If 'Depot' is a compartment, give it an equation"],
    ),
    ("walrus", _sub("Central / v", "(z := v)"), 18, 13, ["walrus"]),
    (
        "chained-assign",
        _sub("conc = Central / v", "conc = c2 = Central / v"),
        18,
        12,
        ["chained assignment"],
    ),
    (
        "tuple-assign",
        _sub("conc = Central / v", "conc, c2 = Central, v"),
        18,
        5,
        ["several names at once"],
    ),
    (
        "keyword-to-function",
        _sub("exp(tka + eta[0])", "exp(x=tka)"),
        11,
        16,
        ["takes no keyword arguments"],
    ),
    ("call-a-value", _sub("exp(tka + eta[0])", "tka(1)"), 11, 10, ["'tka' is not a function"]),
    (
        "function-as-value",
        _sub("exp(tka + eta[0])", "exp + tka"),
        11,
        10,
        ["'exp' is a function, not a value"],
    ),
    ("invert", _sub("Central / v", "~v"), 18, 12, ["'~' is allowed only"]),
    (
        "is-compare",
        _sub("Central / v", "1 if v is 1 else 0"),
        18,
        17,
        ["comparison 'Is' is not supported"],
    ),
    (
        "two-statements",
        _sub("conc = Central / v", "conc = Central / v; c2 = 1"),
        18,
        25,
        ["one statement per line"],
    ),
    (
        "closed-and-ode",
        _sub("dynamics:\n", "dynamics:\n    OneCompartment\n"),
        15,
        5,
        ["must be the only statement"],
    ),
    (
        "expr-statement",
        _sub("conc = Central / v", "Central / v"),
        18,
        5,
        ["does not belong in 'derived:'"],
    ),
    (
        "header-without-colon",
        _sub("pre:\n", "pre\n"),
        10,
        4,
        ["the block header 'pre' needs a colon", "Write 'pre:'."],
    ),
    (
        "network-never-called",
        _sub("    sigma =", "    NN = MLP(1, 4, (1, identity), seed=1)\n    sigma ="),
        6,
        5,
        ["the network 'NN' is declared but never called", "or delete its line"],
    ),
    (
        "network-not-called",
        _sub("    sigma =", "    NN = MLP(1, 4, (1, identity), seed=1)\n    sigma =").replace(
            "exp(tcl + eta[1])", "exp(tcl + NN[0] + eta[1])"
        ),
        13,
        20,
        ["'NN' is a network and can only be called", "NN(x)[0]"],
    ),
    (
        "state-named-like-a-covariate",
        _sub("    Central' =", "    WT' = -WT\n    Central' ="),
        16,
        5,
        ["'WT' is already declared as a covariate", "Give this state another name."],
    ),
    (
        "network-misnamed",
        _sub("    sigma =", "    NN = MLP(1, 4, (1, identity), seed=1)\n    sigma =").replace(
            "exp(tcl + eta[1])", "exp(tcl + NN9(WT)[0] + eta[1])"
        ),
        13,
        20,
        ["unknown function 'NN9'", "Did you mean 'NN'?", "Networks of this model: NN."],
    ),
    (
        "network-activation-signature",
        _sub("    sigma =", "    NN = MLP(1, 4, (1, relu6), seed=1)\n    sigma =").replace(
            "exp(tcl + eta[1])", "exp(tcl + NN(WT)[0] + eta[1])"
        ),
        6,
        10,
        ["unknown activation 'relu6'", "MLP(n_in, *layers, act=tanh, bias=True"],
    ),
    # other tools' habits: the name or form they meant
    (
        "closed-form-state-missing",
        _closed_form().replace("conc = Central / v", "conc = Peripheral / v"),
        16,
        12,
        [
            "'dynamics: OneCompartmentOral' has the states Depot, Central",
            "'Peripheral' is a state of TwoCompartment, TwoCompartmentOral",
        ],
    ),
    (
        "no-dynamics-block",
        _closed_form().replace("dynamics: OneCompartmentOral\n", ""),
        15,
        12,
        ["'Central' is a compartment of the closed forms", "the model has no 'dynamics:' block"],
    ),
    (
        "time-column-name",
        _sub("conc = Central / v", "conc = Central / v * TIME"),
        18,
        26,
        ["undefined name 'TIME'", "The time of a record is written 't'"],
    ),
    (
        "nonmem-record",
        "$PK\n" + BASE,
        1,
        1,
        ["'$PK' is a record of a NONMEM control stream", "deepnlme.from_nonmem("],
    ),
    (
        "nonmem-if",
        _sub("    v  = exp", "    IF (WT > 70) THEN\n    v  = exp"),
        13,
        5,
        ["'IF' is NONMEM's abbreviated code", "tvcl = A if WT > 70 else B"],
    ),
    (
        "nonmem-pk-name-unread",
        _sub("    v  = exp(tv + eta[2])\n", "    v  = exp(tv + eta[2])\n    ALAG1 = 0.5\n"),
        14,
        5,
        ["'ALAG1' is NONMEM's absorption lag time of compartment 1", "lag[Depot] ="],
    ),
    (
        "nlmixr2-dose-modifier",
        _sub(
            "    v  = exp(tv + eta[2])\n",
            "    v  = exp(tv + eta[2])\ndosing:\n    f(Depot) = 0.7\n",
        ),
        15,
        5,
        ["'f(Depot)' (nlmixr2's dose modifier)", "bioav[Depot] = expression"],
    ),
    (
        "nonmem-dadt",
        _sub("    Depot'   = -ka * Depot\n", "    DADT(1) = -ka * Depot\n"),
        15,
        5,
        ["'DADT(1)' (NONMEM's $DES)", "Name' = expression"],
    ),
    (
        "reserved-word-name",
        _sub(
            "    tv    = Real(init=3.45)\n",
            "    tv    = Real(init=3.45)\n    lambda = Real(init=0.5)\n",
        ),
        5,
        5,
        ["'lambda' is a reserved word", "lambda_"],
    ),
    (
        "fortran-operator",
        _sub("exp(tv + eta[2])", "exp(tv + eta[2]) * (1.2 if WT.GT.70 else 1)"),
        13,
        5,
        ["'.GT.' is NONMEM's (Fortran's) operator", "Write >"],
    ),
    (
        "indented-header",
        _sub("derived:\n", "  derived:\n"),
        17,
        3,
        ["the block header 'derived:' is indented", "at column 0"],
    ),
    (
        "sd-of-either-sign",
        _sub("sigma = Real(lower=0, init=0.7)", "sigma = Real(init=0.7)"),
        19,
        23,
        ["the standard deviation 'sd' is the parameter 'sigma'", "Positive(init=...)"],
    ),
    (
        "other-error-model-name",
        _sub("Normal(conc, sigma)", "Exponential(conc, sigma)"),
        19,
        10,
        ["unknown observation distribution 'Exponential'", "is LogNormal(f, sd)"],
    ),
    # other tools' habits and slips, each with what to write here
    (
        "derivative-on-the-right",
        _sub("ka * Depot - cl", "-Depot' - cl"),
        16,
        5,
        ["a derivative on the right side", "Depot' (a derivative) is used on the right"],
    ),
    (
        "nonmem-semicolon-comment",
        _sub("    ka = exp(tka + eta[0])\n", "    ; absorption\n    ka = exp(tka + eta[0])\n"),
        11,
        5,
        ["';' does not start a comment here", "Comments start with '#'"],
    ),
    (
        "semicolon-after-a-statement",
        _sub("    v  = exp(tv + eta[2])", "    v  = exp(tv + eta[2]) ; volume"),
        13,
        None,
        ["only one statement per line", "(';' ends a statement: comments start with '#'.)"],
    ),
    (
        "ln",
        _sub("exp(tv + eta[2])", "exp(tv + eta[2]) * ln(2)"),
        13,
        None,
        ["unknown function 'ln'", "The natural logarithm is log(x)."],
    ),
    (
        "nonmem-theta",
        _sub("exp(tv + eta[2])", "THETA(3) * exp(eta[2])"),
        13,
        None,
        ["unknown function 'THETA'", "NONMEM's THETA(n) is a parameter declared by name"],
    ),
    (
        "nlmixr2-dotted-name",
        _sub("exp(tv + eta[2])", "exp(t.v + eta[2])"),
        13,
        None,
        ["attribute access", "nlmixr2's t.ka, eta.ka are t_ka, eta_ka here"],
    ),
    (
        "covariates-without-commas",
        _sub("covariates: WT\n", "covariates: WT AGE\n"),
        9,
        None,
        ["Separate names with commas (covariates: WT, DOSE)."],
    ),
    (
        "quoted-activation",
        _sub(
            "    sigma = Real(lower=0, init=0.7)\n",
            "    sigma = Real(lower=0, init=0.7)\n    NN = MLP(1, 3, (1, 'identity'))\n",
        ),
        7,
        None,
        ["is not a constant", "Write the name without quotes: identity."],
    ),
    (
        "nonmem-omega-block-as-a-flat-list",
        _sub("PDiag(init=[0.4, 0.07, 0.02])", "PSD(init=[0.4, 0.01, 0.07, 0, 0, 0.02])"),
        5,
        None,
        [
            "is a flat list, which PSD reads as the diagonal",
            "PSD(init=[[0.4, 0.01, 0.0], [0.01, 0.07, 0.0], [0.0, 0.0, 0.02]])",
        ],
    ),
    (
        "a-closed-forms-state-assigned-in-pre",
        _closed_form().replace(
            "    v  = exp(tv + eta[2])\n", "    v  = exp(tv + eta[2])\n    Central = 0\n"
        ),
        15,
        None,
        ["'Central' is a state of OneCompartmentOral, and line", "assigns it in 'pre:'"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_model_error(case):
    _, text, line, col, fragments = case
    with pytest.raises(deepnlme.ModelError) as info:
        load_model(text)
    msg = str(info.value)
    m = re.match(r"line (\d+), column (\d+): ", msg)
    assert m, msg
    assert int(m.group(1)) == line, msg
    if col is not None:
        assert int(m.group(2)) == col, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in:\n{msg}"
    # the offending line is quoted, with a caret under the column
    src_line = text.splitlines()[line - 1]
    assert f"{line} | {src_line}" in msg, msg
    assert msg.rstrip().endswith("^")


def test_caret_position():
    text = BASE.replace("exp(tcl + eta[1])", "exp(tlc + eta[1])")
    with pytest.raises(deepnlme.ModelError) as info:
        load_model(text)
    lines = str(info.value).splitlines()
    code, caret = lines[-2], lines[-1]
    assert code.index("tlc") == caret.index("^")


def test_error_is_valueerror():
    assert issubclass(deepnlme.ModelError, ValueError)


def test_missing_file():
    with pytest.raises(deepnlme.ModelError, match="model file 'no/such/file.model' not found"):
        load_model("no/such/file.model")


def test_a_bundled_example_named_as_a_file_is_pointed_to(tmp_path, monkeypatch):
    # the command line takes bundled names; load_model("theophylline.model") was only "not found"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(deepnlme.ModelError, match=r"example_path\('theophylline.model'\)"):
        load_model("theophylline.model")


def test_no_output():
    with pytest.raises(deepnlme.ModelError, match="no observed output"):
        load_model("param:\n    a = Real(init=1.0)\n")


def test_error_names_file(tmp_path):
    p = tmp_path / "bad.model"
    p.write_text(BASE.replace("exp(tcl", "exp(tlc"))
    with pytest.raises(deepnlme.ModelError, match=r"bad\.model: line 12, column 14"):
        load_model(str(p))


def test_multiline_statement_error_location():
    text = BASE.replace(
        "    omega = PDiag(init=[0.4, 0.07, 0.02])\n",
        "    omega = PDiag(init=[0.4,\n                        -0.07, 0.02])\n",
    )
    with pytest.raises(deepnlme.ModelError, match="line 5, column 13: PDiag"):
        load_model(text)
    text = BASE.replace("    conc = Central / v\n", "    conc = (Central /\n       vv)\n")
    with pytest.raises(deepnlme.ModelError, match="line 19, column 8: undefined name 'vv'"):
        load_model(text)


def test_a_random_effect_declared_and_never_used():
    # its variance would be "estimated" with nothing depending on it (the fit said converged)
    text = _sub(
        "    sigma = Real(lower=0, init=0.7)\n",
        "    sigma = Real(lower=0, init=0.7)\n    om_q = Positive(init=0.2)\n",
    )
    text = text.replace(
        "    eta ~ MvNormal(omega)\n", "    eta ~ MvNormal(omega)\n    eta_q ~ Normal(0, om_q)\n"
    )
    with pytest.raises(
        deepnlme.ModelError,
        match=r"line 10, column 5: the random effect 'eta_q' is declared but never used\. Use it "
        r"where it belongs \(e\.g\. cl = exp\(tcl \+ eta_q\)\), or delete its line",
    ):
        load_model(text)


def test_an_element_of_a_vector_random_effect_never_used():
    # an element of MvNormal's vector that nothing reads was accepted: its variance had no
    # effect on the objective (the fit found it "not identified" only afterwards)
    text = _sub("exp(tv + eta[2])", "exp(tv)")
    with pytest.raises(
        deepnlme.ModelError,
        match=r"line 8, column 5: eta\[2\] \(of the 3 random effects 'eta' with covariance "
        r"'omega'\) is never used\. Use it where it belongs \(e\.g\. "
        r"cl = exp\(tcl \+ eta\[2\]\)\), or give 'omega' 2 entries",
    ):
        load_model(text)


def test_a_random_effect_only_in_a_variable_nothing_reads():
    # `vv = exp(tv + eta[2])` beside `v = exp(tv)` loaded; only a fit said eta[2] never moved
    text = _sub("    v  = exp(tv + eta[2])\n", "    v  = exp(tv)\n    vv = exp(tv + eta[2])\n")
    with pytest.raises(
        deepnlme.ModelError,
        match=r"line 8, column 5: the random effect eta\[2\] enters only 'vv' \(line 14\) in "
        r"'pre:', which nothing in the model reads",
    ):
        load_model(text)
    # a variable for tables that reads parameters the predictions use is fine
    load_model(
        _sub("    v  = exp(tv + eta[2])\n", "    v  = exp(tv + eta[2])\n    hl = 0.693 * v / cl\n")
    )


def test_a_closed_form_that_does_not_take_a_pre_variable_is_pointed_out():
    # OneCompartment with `ka` in 'pre:' loaded and fitted theophylline as IV boluses
    oral = pathlib.Path("examples/theophylline.model").read_text()
    iv = oral.replace("dynamics: OneCompartmentOral", "dynamics: OneCompartment")
    with pytest.raises(
        deepnlme.ModelError,
        match=r"eta\[0\] enters only 'ka' \(line 14\).*OneCompartment takes cl, v; ka is a "
        r"parameter of OneCompartmentOral, .*: did you mean OneCompartmentOral \(ka, cl, v\)\?",
    ):
        load_model(iv)
    fixed_ka = iv.replace("ka = exp(tka + eta[0])", "ka = exp(tka)")
    fixed_ka = fixed_ka.replace(
        "omega = PDiag(init=[0.4, 0.07, 0.02])", "omega = PDiag(init=[0.07, 0.02])"
    )
    fixed_ka = fixed_ka.replace("eta[1]", "eta[0]").replace("eta[2]", "eta[1]")
    said = (
        r"model line 14: 'ka' is assigned in 'pre:' but nothing reads it\. OneCompartment "
        r"takes cl, v.*did you mean OneCompartmentOral"
    )
    with pytest.warns(UserWarning, match=said):
        load_model(fixed_ka)


def test_empty_model_text_and_a_network_in_random():
    with pytest.raises(deepnlme.ModelError, match="the model text is empty"):
        load_model("  \n")
    text = _sub(
        "    sigma = Real(lower=0, init=0.7)\n",
        "    sigma = Real(lower=0, init=0.7)\n    NN = MLP(1, 3, (1, identity))\n",
    ).replace(
        "    eta ~ MvNormal(omega)\n",
        "    eta ~ MvNormal(omega)\n    e4 ~ Normal(0, exp(NN(1)[0]))\n",
    )
    text = text.replace("exp(tv + eta[2])", "exp(tv + eta[2] + e4)")
    # (it loaded, then failed in the binding with "need at least one array to concatenate")
    with pytest.raises(deepnlme.ModelError, match=r"line 10, column \d+: the network 'NN' is "
                       r"called in 'random:'"):  # fmt: skip
        load_model(text)
