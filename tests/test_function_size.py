"""Small functions: no function in the package is over 60 lines unless a comment inside it, starting `# long:`,
says why it cannot be split (a reader then knows the length is a decision, not drift)."""

from __future__ import annotations

import ast
from pathlib import Path

import bench

LIMIT = 60


def long_functions(package: Path, limit: int = LIMIT) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = lines[node.lineno - 1:node.end_lineno]
                if len(body) > limit and not any(line.strip().startswith("# long:") for line in body):
                    out.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({len(body)} lines)")
    return out


def test_no_function_is_over_60_lines_without_saying_why():
    assert long_functions(Path(bench.__file__).parent) == []


def test_the_check_finds_a_long_function_and_accepts_a_reasoned_one(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))
    (package / "a.py").write_text(f"def long():\n{body}\n\ndef reasoned():\n    # long: one table of cases\n{body}")
    assert long_functions(package) == ["pkg/a.py:1 long (61 lines)"]
