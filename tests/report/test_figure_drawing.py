"""How the report's figures are drawn: the page's curves on one reused Figure must come out as if each had its
own, and no figure is drawn more often than it is written."""

import numpy as np
import pandas as pd

from matplotlib.figure import Figure

from bench.report import curves
from bench.report import heatmaps as hm


def _curve(stem, series, ylabel, yrange):
    values = pd.DataFrame([{"figure": stem, "series": n, "x": x, "y": float(y)} for n, sx, sy in series
                           for x, y in zip(sx, sy)])
    return {"stem": stem, "series": series, "xlabel": "after learning task i", "ylabel": ylabel, "yrange": yrange,
            "values": values}


def _forgetting(stem):
    rng = np.random.default_rng(1)
    R = np.tril(rng.uniform(0.5, 1, (6, 6)))
    return _curve(stem, [(f"t{j}", list(range(j, 6)), R[j:, j]) for j in range(6)], "ROC-AUC", (0.5, 1.0))


def _memory(stem):
    # another x extent and an autoscaled, much larger y range than the curve drawn before it
    return _curve(stem, [("state", list(range(9)), np.linspace(10, 12000, 9))], "MB", None)


def test_a_reused_painter_draws_what_a_fresh_one_draws(tmp_path):
    """Lines, legend, limits and autoscaling of the curve before must not leak into the next one, in either
    order (fixed y range after autoscaled, and back)."""
    (tmp_path / "reused").mkdir()
    (tmp_path / "fresh").mkdir()
    reused = curves.Painter()
    for c in (_forgetting("a"), _memory("b"), _forgetting("c")):
        reused.draw(c, tmp_path / "reused")
        curves.Painter().draw(c, tmp_path / "fresh")
    for stem in "abc":
        for fmt in curves.FORMATS:
            assert (tmp_path / "reused" / f"{stem}.{fmt}").read_bytes() == \
                (tmp_path / "fresh" / f"{stem}.{fmt}").read_bytes(), (stem, fmt)
    assert len(reused.ax.lines) == 6 and reused.ax.get_ylim() == (0.5, 1.0)


def test_the_digest_changes_with_the_values_and_the_drawing_code(monkeypatch):
    from bench.report.render import drawing_code

    assert "def digest" in drawing_code(curves.__name__) and "matplotlib" in drawing_code(hm.__name__)
    c = _forgetting("a")
    before = curves.digest(c)
    assert curves.digest(_forgetting("a")) == before
    assert curves.digest(_memory("a")) != before
    monkeypatch.setattr(curves, "drawing_code", lambda module: "changed drawing code")
    assert curves.digest(c) != before  # a new drawing redraws the figures the old code made


def _count_draws(monkeypatch) -> list:
    calls = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (calls.append(1), draw(self, renderer))[1])
    return calls


def test_each_written_file_draws_its_figure_once(tmp_path, monkeypatch):
    """A layout engine left on a figure (tight_layout leaves one) makes every savefig draw twice."""
    n = 4
    mean = np.tril(np.linspace(0.5, 1, n * n).reshape(n, n))
    mean[np.triu_indices(n, 1)] = np.nan
    h = hm.Heatmap("heatmap_x", "mvtec", "random", "cl", "image", hm.ALL, hm.ALL, hm.ALL, [f"t{i}" for i in range(n)],
                   mean, np.tril(np.ones((n, n), int)), 2)
    painter = curves.Painter()  # built before counting: only the drawing of the files counts
    calls = _count_draws(monkeypatch)
    hm.save(h, tmp_path)
    assert len(calls) == 2  # PNG and PDF
    calls.clear()
    painter.draw(_forgetting("a"), tmp_path)
    assert len(calls) == len(curves.FORMATS)


def _heatmap(stem, model, seed, tasks):
    n = len(tasks)
    mean = np.tril(np.random.default_rng(seed).uniform(0.4, 1, (n, n)))
    mean[np.triu_indices(n, 1)] = np.nan
    mean[n - 1, 0] = np.nan  # a cell without a value: no number, masked
    return hm.Heatmap(stem, "mvtec", "random", "cl", "image", model, "resnet18", "imagenet", tasks, mean,
                      np.tril(np.full((n, n), 2)), 1)


def _png(fig, path):
    fig.savefig(path, format="png", dpi=60)
    return path.read_bytes()


def test_a_reused_heatmap_figure_draws_what_a_fresh_one_draws(tmp_path):
    """Cells, numbers and title of the heatmap drawn before on that Figure must not stay behind, also when another
    task list came in between."""
    five, four = [f"t{i}" for i in range(5)], [f"u{i}" for i in range(4)]
    mean = _heatmap("m", hm.ALL, 5, five)  # aggregate's means: another protocol, level and ordering in the title
    mean.protocol, mean.level, mean.ordering, mean.backbone, mean.weights, mean.n_methods = \
        "ncl", "pixel", "easy_to_hard", hm.ALL, hm.ALL, 9
    maps = [_heatmap("a", "patchcore", 0, five), _heatmap("b", "padim", 1, five), _heatmap("c", "cfa", 2, four),
            _heatmap("d", "padim", 3, five), _heatmap("e", "cfa", 4, four), mean]
    painter = hm.Painter()
    for h in maps:
        reused = painter.figure(h)
        assert _png(reused, tmp_path / "r.png") == _png(hm.figure(h), tmp_path / "f.png"), h.stem
        assert len(reused.axes[0].texts) == len(h.tasks) * (len(h.tasks) + 1) // 2 - 1


def test_fixed_margins_keep_wide_tick_labels_and_the_y_label_inside_the_figure(tmp_path):
    """The curves have no tight_layout: the left margin must hold six-digit and 0.000x tick labels."""
    painter = curves.Painter()
    for hi in (654321.0, 0.00042):
        painter.draw(_curve("w", [("s", list(range(9)), np.linspace(hi / 3, hi, 9))], "bank / state memory (MB)",
                            None), tmp_path)
        renderer = painter.fig.canvas.get_renderer()
        texts = [t for t in painter.ax.get_yticklabels() if t.get_text()] + [painter.ax.yaxis.label]
        assert min(t.get_window_extent(renderer).x0 for t in texts) >= 0, hi


def test_a_heatmap_digest_changes_with_its_values_and_its_drawing_code(monkeypatch):
    h = _heatmap("a", "patchcore", 0, ["t0", "t1", "t2"])
    before = hm.digest(h)
    assert hm.digest(_heatmap("a", "patchcore", 0, ["t0", "t1", "t2"])) == before
    assert hm.digest(_heatmap("a", "patchcore", 1, ["t0", "t1", "t2"])) != before
    assert hm.digest(h, ("png",)) != before
    monkeypatch.setattr(hm, "drawing_code", lambda module: "changed drawing code")
    assert hm.digest(h) != before


def _many(n=10):
    five, four = [f"t{i}" for i in range(5)], [f"u{i}" for i in range(4)]
    return [_heatmap(f"h{k}", ["patchcore", "padim", "cfa"][k % 3], k, five if k % 2 else four) for k in range(n)]


def test_heatmaps_drawn_by_two_processes_are_the_bytes_one_process_draws(tmp_path, monkeypatch):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    monkeypatch.setenv("BENCH_REPORT_PROCESSES", "1")
    hm.save_all(_many(), one, ("png",))
    monkeypatch.delenv("BENCH_REPORT_PROCESSES")
    monkeypatch.setattr(hm, "_second_process", lambda n: True)  # also on a one-CPU machine
    hm.save_all(_many(), two, ("png",))
    names = sorted(p.name for p in one.iterdir())
    assert len(names) == 10 and names == sorted(p.name for p in two.iterdir())
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_a_heatmap_the_second_process_cannot_draw_is_one_error_naming_it(tmp_path, monkeypatch):
    import pytest

    from bench.errors import BenchError

    real = hm.save

    def save(h, directory, formats, painter=None):
        if h.stem == "h3":  # in the forked share (every other one, from the second)
            raise OSError("disk full")
        return real(h, directory, formats, painter)

    monkeypatch.setattr(hm, "save", save)
    monkeypatch.setattr(hm, "_second_process", lambda n: True)
    with pytest.raises(BenchError, match=r"second process failed \(exit code 1\): h3: OSError: disk full"):
        hm.save_all(_many(), tmp_path, ("png",))


def test_a_stuck_second_process_is_killed_and_its_share_drawn_here_with_a_warning(tmp_path, monkeypatch):
    import os
    import time

    import pytest

    real, parent = hm.save, os.getpid()

    def save(h, directory, formats, painter=None):
        if os.getpid() != parent:
            time.sleep(60)  # the forked process hangs
        return real(h, directory, formats, painter)

    monkeypatch.setattr(hm, "save", save)
    monkeypatch.setattr(hm, "_second_process", lambda n: True)
    monkeypatch.setattr(hm, "SECONDS_PER_FIGURE", 0.2)
    with pytest.warns(UserWarning, match="did not finish"):
        hm.save_all(_many(), tmp_path, ("png",))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"h{k}.png" for k in range(10))
