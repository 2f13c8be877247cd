"""The README is the front door: its docs index lists every page under docs/, every file it links to exists, and
every `make` target and `bench` subcommand it names is one the Makefile and the CLI have."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_the_docs_index_lists_every_page():
    index = README[README.index("\n## Documentation"):]
    listed = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", index))
    assert listed == {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}


def test_every_linked_file_exists():
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)#][^)]*)\)", README) if "://" not in t}
    assert [t for t in sorted(targets) if not (REPO / t).exists()] == []


def test_every_make_target_it_names_exists():
    makefiles = [REPO / "Makefile", *sorted((REPO / "make").glob("*.mk"))]
    defined = {m for f in makefiles for m in re.findall(r"^([a-z][\w-]*):", f.read_text(), flags=re.M)}
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", README))
    assert named - defined == set()


def test_every_bench_subcommand_it_names_exists():
    import argparse

    from bench.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    named = set(re.findall(r"-m bench ([a-z][\w-]*)", README))
    assert named and named - commands == set()
