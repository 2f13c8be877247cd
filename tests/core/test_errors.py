"""User-facing errors live in one module, bench/errors.py: a reader finds every exit-2 error class there, and the
names callers import from where an error is raised keep working."""

from __future__ import annotations

import ast
from pathlib import Path

from bench import errors

PACKAGE = Path(__file__).resolve().parents[2] / "bench"
ERROR_NAMES = {name for name, value in vars(errors).items() if isinstance(value, type)
               and issubclass(value, errors.BenchError)}


def test_every_error_class_of_the_package_is_defined_in_errors_py():
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & ERROR_NAMES:
                    outside.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.name}")
    assert outside == []


def test_the_moved_errors_keep_their_import_names_and_exit_status():
    from bench.report.collect import ProvenanceError
    from bench.training.loop import NonFiniteLossError

    assert ProvenanceError is errors.ProvenanceError and NonFiniteLossError is errors.NonFiniteLossError
    assert ProvenanceError("x").exit_code == NonFiniteLossError("x").exit_code == 2
