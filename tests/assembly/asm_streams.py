"""Synthetic capture files for the asm-data tests, generated once per session (small K: seconds). Imported by the
test files (a module rather than conftest.py, which other assembly tests may own)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def week(tmp_path_factory):
    """{K: root} of the synthetic CICIDS2017-format week at K = 1, 2, 3."""
    from bench.assembly.synthetic import generate

    base = tmp_path_factory.mktemp("assembly-week")
    return {K: generate(base / f"K{K}", K=K, seed=K) for K in (1, 2, 3)}


@pytest.fixture(scope="session")
def trio(tmp_path_factory):
    """The synthetic LITNET-2020-format trio at K = 2."""
    from bench.assembly.synthetic import generate_litnet

    return generate_litnet(tmp_path_factory.mktemp("assembly-litnet"), K=2, seed=0)


@pytest.fixture(scope="session")
def corpus1(week):
    from bench.assembly.corpus import build_corpus

    return build_corpus("cicids2017", week[1], scale=1 / 1000, corpus_name="synthetic")
