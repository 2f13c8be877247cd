"""Half-Space Trees as the stream-assembly paper ran them (`src/baselines/hst.py` of the released code): river's
`MinMaxScaler` then `HalfSpaceTrees(n_trees=25, height=15, window_size=250, seed)`, each record a dict
{"f0": x_0, "f1": x_1, ...} (the released names: river builds its trees over the sorted feature names, so the
names decide which trees a seed draws), scored with `score_one` before `learn_one`.

river's `score_one` changes nothing (a pipeline learns its scaler only in `learn_one`), so learning the training
rows with or without scoring them leaves the same model. The state is river's own numbers as arrays: the
scaler's running min and max, and every tree's nodes in depth-first order (split feature, threshold, the
reference and latest window masses), with the window counter. Loading rebuilds river's node objects from them;
nothing is unpickled.
"""

from __future__ import annotations

import numpy as np

from bench.assembly import records
from bench.assembly.detectors import DetectorSpec, check_records, register
from bench.errors import CheckpointError

_CONFIG = ("n_trees", "height", "window_size", "seed")


class HalfSpaceTrees:
    kind = records.Kind.ONLINE

    def __init__(self, n_trees: int = 25, height: int = 15, window_size: int = 250, seed: int = 42):
        from river import anomaly, compose, preprocessing

        self.n_trees, self.height, self.window_size, self.seed = n_trees, height, window_size, seed
        self.scaler_ = preprocessing.MinMaxScaler()
        self.trees_ = anomaly.HalfSpaceTrees(n_trees=n_trees, height=height, window_size=window_size, seed=seed)
        self.model_ = compose.Pipeline(self.scaler_, self.trees_)
        self.n_features_: int | None = None

    def score_learn(self, X) -> records.StreamScores:
        X = check_records(X, "hst", self.n_features_)
        self.n_features_ = X.shape[1]
        names = [f"f{i}" for i in range(X.shape[1])]
        out = np.empty(X.shape[0])
        score_one, learn_one = self.model_.score_one, self.model_.learn_one
        for i, row in enumerate(X.tolist()):
            x = dict(zip(names, row))
            out[i] = score_one(x)
            learn_one(x)
        return records.StreamScores(score=out)

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"config/{k}": np.asarray(getattr(self, k)) for k in _CONFIG}
        if self.n_features_ is None:
            return out
        d = self.n_features_
        names = [f"f{i}" for i in range(d)]
        out["n_features"] = np.asarray(d)
        out["scaler/min"] = np.array([self.scaler_.min[n].get() for n in names])
        out["scaler/max"] = np.array([self.scaler_.max[n].get() for n in names])
        out["counter"] = np.asarray(self.trees_.counter)
        out["first_window"] = np.asarray(self.trees_._first_window)
        out.update(_trees_to_arrays(self.trees_._tree_nodes))
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> HalfSpaceTrees:
        for key in _CONFIG:
            if f"config/{key}" not in state or int(state[f"config/{key}"]) != getattr(self, key):
                raise CheckpointError(f"hst state: config/{key} differs from this detector's {key}="
                                      f"{getattr(self, key)!r}")
        fresh = HalfSpaceTrees(self.n_trees, self.height, self.window_size, self.seed)
        if "n_features" in state:
            fresh._restore(state)
        self.__dict__.update(fresh.__dict__)
        return self

    def _restore(self, state) -> None:
        from river import stats

        d = int(state["n_features"])
        for i in range(d):
            lo, hi = stats.Min(), stats.Max()
            lo.min, hi.max = float(state["scaler/min"][i]), float(state["scaler/max"][i])
            self.scaler_.min[f"f{i}"], self.scaler_.max[f"f{i}"] = lo, hi
        if "tree/feature" in state:
            self.trees_.trees = _trees_from_arrays(state, self.n_trees, self.height)
            self.trees_._tree_nodes = [list(t.iter_dfs()) for t in self.trees_.trees]
        self.trees_.counter = int(state["counter"])
        self.trees_._first_window = bool(state["first_window"])
        self.n_features_ = d
        again = self.state_dict()  # the rebuilt model must give back exactly the numbers it was built from
        for key, value in state.items():
            if key not in again or not _same(np.asarray(value), again[key]):
                raise CheckpointError(f"hst state: {key} does not round-trip (corrupt or foreign state)")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    floating = a.dtype.kind == "f" and b.dtype.kind == "f"  # leaves have no threshold: NaN
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=floating))


def _trees_to_arrays(tree_nodes) -> dict[str, np.ndarray]:
    """Every tree's nodes in depth-first order: split feature index (−1 at a leaf), threshold, masses."""
    if not tree_nodes:  # river builds its trees at the first learn_one
        return {}
    nodes = [n for tree in tree_nodes for n in tree]
    shape = (len(tree_nodes), len(tree_nodes[0]))
    feature = np.array([int(n.feature[1:]) if hasattr(n, "feature") else -1 for n in nodes], np.int32)
    threshold = np.array([getattr(n, "threshold", np.nan) for n in nodes], np.float64)
    return {"tree/feature": feature.reshape(shape), "tree/threshold": threshold.reshape(shape),
            "tree/l_mass": np.array([n.l_mass for n in nodes], np.int64).reshape(shape),
            "tree/r_mass": np.array([n.r_mass for n in nodes], np.int64).reshape(shape)}


def _trees_from_arrays(state, n_trees: int, height: int) -> list:
    from river.tree.padded import PaddedBranch, PaddedLeaf

    feature, threshold = np.asarray(state["tree/feature"]), np.asarray(state["tree/threshold"])
    l_mass, r_mass = np.asarray(state["tree/l_mass"]), np.asarray(state["tree/r_mass"])
    n_nodes = 2 ** (height + 1) - 1
    if feature.shape != (n_trees, n_nodes):
        raise CheckpointError(f"hst state: tree arrays are {list(feature.shape)}, expected [{n_trees}, {n_nodes}]")

    def build(t: int, i: int, depth: int):
        """(node at depth-first index i of tree t, index after its subtree)."""
        masses = {"l_mass": int(l_mass[t, i]), "r_mass": int(r_mass[t, i])}
        if depth == height:
            return PaddedLeaf(**masses), i + 1
        left, nxt = build(t, i + 1, depth + 1)
        right, nxt = build(t, nxt, depth + 1)
        node = PaddedBranch(left=left, right=right, feature=f"f{int(feature[t, i])}",
                            threshold=float(threshold[t, i]), **masses)
        return node, nxt

    return [build(t, 0, 0)[0] for t in range(n_trees)]


register(DetectorSpec(
    name="hst", label="Half-Space Trees", kind=records.Kind.ONLINE, factory=HalfSpaceTrees,
    presets={"released": {"n_trees": 25, "height": 15, "window_size": 250}},
    batch_dependent=False, seeded=True, branches=(), quick={"n_trees": 4, "height": 5, "window_size": 40},
    source="released src/baselines/hst.py: river MinMaxScaler + HalfSpaceTrees(n_trees=25, height=15, "
           "window_size=250, seed)"))
