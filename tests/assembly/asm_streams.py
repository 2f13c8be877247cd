"""Synthetic capture files for the asm-data tests, generated once per test session (small K: seconds). Imported by
the test files (a module rather than conftest.py, which other assembly tests may own). A fixture imported into
several modules is a separate fixture in each, so what they build is kept here, once per process."""

from __future__ import annotations

import pytest

_BUILT: dict = {}


def _once(key: str, make):
    if key not in _BUILT:
        _BUILT[key] = make()
    return _BUILT[key]


@pytest.fixture(scope="session")
def week(tmp_path_factory):
    """{K: root} of the synthetic CICIDS2017-format week at K = 1, 2, 3 (seed K)."""
    from bench.assembly.synthetic import generate

    def make():
        base = tmp_path_factory.mktemp("assembly-week")
        return {K: generate(base / f"K{K}", K=K, seed=K) for K in (1, 2, 3)}

    return _once("week", make)


@pytest.fixture(scope="session")
def trio(tmp_path_factory):
    """The synthetic LITNET-2020-format trio at K = 2."""
    from bench.assembly.synthetic import generate_litnet

    return _once("trio", lambda: generate_litnet(tmp_path_factory.mktemp("assembly-litnet"), K=2, seed=0))


@pytest.fixture(scope="session")
def corpus1(week):
    """The week at K = 1 built as the paper's corpus (scale K/1000)."""
    from bench.assembly.corpus import build_corpus

    return _once("corpus1", lambda: build_corpus("cicids2017", week[1], scale=1 / 1000, corpus_name="synthetic"))
