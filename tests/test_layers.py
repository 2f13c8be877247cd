"""The house runs one way: every import of the package, those inside functions included, goes from a layer to the
same or a lower one, and no two parts of the package import each other. A change that imports upward (the runner
reaching into a track, a detector into the reports) fails here, naming the file and line.

Units are bench's top-level modules and packages. Layers, lowest first (docs/architecture.md says why each sits
where it does):
"""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bench"
LAYERS = (
    # core: no track, no engine, no heavy dependency beyond what each needs
    {"bench.errors", "bench.io", "bench.config", "bench.metrics", "bench.results", "bench.checkpoint",
     "bench.tracks", "bench.registry", "bench.devices", "bench.plugins", "bench.datasets"},
    # engines: the continual runner and its output guards, the one training loop and replay buffers; they know
    # no track (a track is found through bench.tracks, a detector through bench.registry)
    {"bench.continual", "bench.training"},
    # the image track's data: readers, index, streams, frozen-backbone features
    {"bench.data", "bench.features"},
    # the image track's detectors
    {"bench.models"},
    # the tracks' objects and protocols, registered through bench.tracks: nothing below imports them
    {"bench.image", "bench.tabular"},
    # services over result files and runs
    {"bench.report"},
    # the stream-assembly study (its corpus, arms, detectors, runs and report): above the reports whose helpers its
    # page reuses, below hpc, which submits its runs
    {"bench.assembly"},
    {"bench.hpc"},
    {"bench.scenarios"},
    # tools and the command line
    {"bench.tools", "bench.testing", "bench.cli", "bench.__main__"},
)
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _all_imports():
    """(importing module, imported module, 'file:line') for every import in the package, those inside functions
    included. `from bench.data import manifest` is an import of the submodule bench.data.manifest where that file
    exists, else of the package's __init__ (bench.data)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                           for a in node.names]
            else:
                assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}:{node.lineno}: relative import"
                continue
            for target in targets:
                if target.startswith("bench."):
                    yield module, target, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, 'file:line') for every import of a bench module by another unit."""
    return [(unit_of(m), unit_of(t), where) for m, t, where in _all_imports() if unit_of(t) != unit_of(m)]


def module_imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, 'file:line') for every import between two modules of one unit."""
    return [(m, t, where) for m, t, where in _all_imports() if t != m and unit_of(t) == unit_of(m)]


def test_every_unit_has_a_layer():
    units = {unit_of(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)) for p in PACKAGE.glob("*")
             if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    units.discard("bench.__init__")
    assert units - set(LAYER_OF) == set(), "new top-level module or package: give it a layer in LAYERS"


def test_no_import_runs_up_a_layer():
    upward = [f"{where}: {a} (layer {LAYER_OF[a]}) imports {b} (layer {LAYER_OF[b]})"
              for a, b, where in imports() if LAYER_OF.get(b, -1) > LAYER_OF.get(a, -1)]
    assert upward == []


def test_no_two_units_import_each_other_even_lazily():
    edges: dict[str, set[str]] = {}
    for a, b, _ in imports():
        edges.setdefault(a, set()).add(b)
    cycles = [(a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ())]
    assert cycles == []
    # and no longer circle either: a depth-first search finds no back edge
    state: dict[str, int] = {}

    def visit(u, path):
        state[u] = 1
        for v in edges.get(u, ()):
            if state.get(v) == 1:
                pytest.fail(f"import circle: {' -> '.join(path + [u, v])}")
            if v not in state:
                visit(v, path + [u])
        state[u] = 2

    for u in list(edges):
        if u not in state:
            visit(u, [])


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The rule is not vacuous: a lazy import of a track from the core is found."""
    fake = tmp_path / "bench"
    fake.mkdir()
    (fake / "metrics.py").write_text("def f():\n    from bench.tabular import track\n")
    (fake / "tabular").mkdir()
    (fake / "tabular" / "__init__.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert ("bench.metrics", "bench.tabular", "bench/metrics.py:2") in imports()


def _circle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(u, path):
        state[u] = 1
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                return path + [u, v]
            if v not in state:
                found = visit(v, path + [u])
                if found:
                    return found
        state[u] = 2
        return None

    for u in sorted(edges):
        if u not in state:
            found = visit(u, [])
            if found:
                return found
    return None


def test_no_two_modules_of_one_package_import_each_other_even_lazily():
    """Inside a package too: a package's __init__ that imports a module which imports the package back (a lazy
    import was the only thing that kept it from failing) is a circle, named with the lines that make it."""
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for a, b, line in module_imports():
        edges.setdefault(a, set()).add(b)
        where.setdefault((a, b), line)
    circle = _circle(edges)
    assert circle is None, "import circle: " + ", ".join(f"{a} -> {b} ({where[a, b]})"
                                                         for a, b in zip(circle, circle[1:]))


def test_the_in_package_check_sees_a_planted_circle(tmp_path, monkeypatch):
    fake = tmp_path / "bench"
    (fake / "data").mkdir(parents=True)
    (fake / "data" / "__init__.py").write_text("def read():\n    from bench.data.multi import read_multi\n")
    (fake / "data" / "multi.py").write_text("from bench.data import read\n")
    (fake / "data" / "index.py").write_text("X = 1\n")
    (fake / "data" / "reuse.py").write_text("from bench.data import index\n")  # a submodule: no circle
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    edges: dict[str, set[str]] = {}
    for a, b, _ in module_imports():
        edges.setdefault(a, set()).add(b)
    assert edges == {"bench.data": {"bench.data.multi"}, "bench.data.multi": {"bench.data"},
                     "bench.data.reuse": {"bench.data.index"}}
    assert _circle(edges) == ["bench.data", "bench.data.multi", "bench.data"]
