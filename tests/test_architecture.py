"""The package's structure: layers import only downwards, the behaviour of a method lives on
its class, and every declared dependency is used (docs/internals.md, "Layers")."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "deepnlme"

# from the bottom up; a module may import its own layer and the layers before it
LAYERS = [
    ("base", ("errors", "_config", "_gc", "_autodiff", "_version")),
    ("data", ("data",)),
    ("datasets", ("datasets",)),
    ("model", ("model",)),
    ("nn", ("nn",)),
    ("solve", ("solve",)),
    ("likelihood", ("likelihood",)),
    ("estimation", ("estimation",)),
    ("results", ("results",)),
    ("symbolic", ("symbolic",)),
    ("export", ("export",)),
    ("workflows", ("workflows",)),
    ("interfaces", ("interfaces",)),
    ("root", ("", "_validation", "__main__")),
]
RANK = {part: i for i, (_, parts) in enumerate(LAYERS) for part in parts}


def _layer(module: str) -> int:
    parts = module.split(".")
    return RANK[parts[1] if len(parts) > 1 else ""]


def _modules():
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) > 50, f"the package's modules were not found under {SRC}"
    for path in paths:
        rel = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(("deepnlme",) + rel).removesuffix(".__init__")
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        yield name, package, ast.parse(path.read_text(encoding="utf-8"))


def _imports():
    """(importer, imported module) for every import of a deepnlme module, lazy ones too."""
    for name, package, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target == "deepnlme" or target.startswith("deepnlme."):
                    yield name, target
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "deepnlme":
                        yield name, alias.name


def test_layers_import_only_downwards():
    # the command line is a user of the public API: it alone may import the package root
    upward = [
        (a, b)
        for a, b in _imports()
        if _layer(b) > _layer(a) and not (a == "deepnlme.interfaces.cli" and b == "deepnlme")
    ]
    assert upward == []


def test_the_layers_have_no_cycle():
    edges = {(_layer(a), _layer(b)) for a, b in _imports() if _layer(a) != _layer(b)}
    edges -= {(RANK["interfaces"], RANK[""])}  # the command line's use of the public API
    assert all(b < a for a, b in edges), sorted(edges)


METHOD_CLASSES = {"Method", "FO", "FOCE", "FOCEI", "LaplaceI", "JointMAP", "NaivePooled"}


def test_no_module_outside_the_methods_tests_which_method_it_has():
    found = []
    for name, _, tree in _modules():
        if name.startswith("deepnlme.likelihood.methods"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                classes = node.args[1]
                elts = classes.elts if isinstance(classes, ast.Tuple) else [classes]
                named = {getattr(e, "id", getattr(e, "attr", None)) for e in elts}
                if named & (METHOD_CLASSES - {"Method"}):
                    found.append((name, node.lineno))
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
                owner = node.left.value
                if node.left.attr == "name" and getattr(owner, "attr", None) == "method":
                    found.append((name, node.lineno))
    assert found == []


def _import_name(requirement: str) -> str:
    name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]
    return name.lower().replace("-", "_")


@pytest.mark.parametrize("group", ["dependencies", "plot"])
def test_every_declared_dependency_is_imported_by_the_code(group):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = (
        project[group] if group == "dependencies" else project["optional-dependencies"][group]
    )
    imported = set()
    for _, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    not_imported = [d for d in declared if _import_name(d) not in imported]
    # the one kind of exception: a version bound on a dependency of a dependency we import
    # (pyproject.toml says why), which installs nothing that would not be installed anyway
    bounds = [d for d in not_imported if _import_name(d) in _dependencies_of(imported)]
    assert [d for d in not_imported if d not in bounds] == []


def _dependencies_of(imported: set[str]) -> set[str]:
    """The import names of what the installed distributions among `imported` require."""
    names = set()
    for dist in imported:
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        names |= {_import_name(r) for r in requires if "extra ==" not in r}
    return names
