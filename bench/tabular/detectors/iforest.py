"""Isolation Forest (PyOD `IForest`, i.e. scikit-learn's): mean isolation depth over random trees.

Defaults are PyOD 3.6.7's. The state is the forest's own arrays (each tree's node table and values, the feature
subsets, the offset), so a checkpoint is plain arrays; loading rebuilds the scikit-learn objects around them.
"""

from __future__ import annotations

import numpy as np

from bench.registry import Bool, Float, Int, ModelSpec, register
from bench.tabular.detectors.base import TabularDetector


class IsolationForest(TabularDetector):
    name = "iforest"

    def _pyod(self, seed: int):
        from pyod.models.iforest import IForest

        h = self.hparams
        return IForest(n_estimators=h["n_estimators"], max_samples=h["max_samples"] if h["max_samples"] else "auto",
                       max_features=h["max_features"], bootstrap=h["bootstrap"], n_jobs=1, random_state=seed)

    def fit(self, X, seed):
        self.model_ = self._pyod(seed).fit(np.asarray(X, dtype=np.float32))
        return self

    def score(self, X):
        # PyOD's IForest.decision_function is −(forest.decision_function); called on the forest directly so a
        # loaded state needs no PyOD training-set attributes (decision_scores_, threshold_, labels_).
        return -np.asarray(self.model_.detector_.decision_function(np.asarray(X, dtype=np.float32)), np.float64)

    def state_dict(self):
        f = self.model_.detector_
        out = {"n_features": np.array(f.n_features_in_), "max_samples": np.array(f.max_samples_),
               "max_features": np.array(f._max_features), "offset": np.array(f.offset_),
               "n_trees": np.array(len(f.estimators_))}
        for i, (tree, feats) in enumerate(zip(f.estimators_, f.estimators_features_)):
            st = tree.tree_.__getstate__()
            # the node records as raw bytes [nodes, itemsize]: checkpoints hold plain numeric arrays only
            nodes = np.ascontiguousarray(st["nodes"])
            out[f"tree{i}/nodes"] = nodes.view(np.uint8).reshape(len(nodes), nodes.dtype.itemsize)
            out[f"tree{i}/values"] = st["values"]
            out[f"tree{i}/max_depth"], out[f"tree{i}/features"] = np.array(st["max_depth"]), np.asarray(feats)
        return out

    def load_state_dict(self, state):
        from sklearn.ensemble import IsolationForest as SkForest
        from sklearn.ensemble._iforest import _average_path_length
        from sklearn.tree import ExtraTreeRegressor
        from sklearn.tree._tree import Tree

        h = self.hparams
        self.model_ = self._pyod(0)
        f = SkForest(n_estimators=h["n_estimators"], max_features=h["max_features"], bootstrap=h["bootstrap"])
        n_feat, n_used = int(state["n_features"]), int(state["max_features"])
        f.n_features_in_, f._max_features = n_feat, n_used
        f.max_samples_ = f._max_samples = int(state["max_samples"])
        f.offset_ = float(state["offset"])
        f.estimators_, f.estimators_features_ = [], []
        for i in range(int(state["n_trees"])):
            tree = Tree(n_used, np.array([1], dtype=np.intp), 1)
            nodes = np.asarray(state[f"tree{i}/nodes"])
            if nodes.dtype.names is None:  # raw bytes (state_dict): back to scikit-learn's node records
                nodes = np.ascontiguousarray(nodes, dtype=np.uint8).view(tree.__getstate__()["nodes"].dtype).ravel()
            tree.__setstate__({"max_depth": int(state[f"tree{i}/max_depth"]), "node_count": len(nodes),
                               "nodes": nodes, "values": np.asarray(state[f"tree{i}/values"])})
            est = ExtraTreeRegressor(max_features=1, splitter="random")
            est.tree_, est.n_features_in_, est.n_outputs_, est.max_features_ = tree, n_used, 1, 1
            f.estimators_.append(est)
            f.estimators_features_.append(np.asarray(state[f"tree{i}/features"]))
        # what scikit-learn's fit derives from the trees (scikit-learn 1.9)
        f._decision_path_lengths = [e.tree_.compute_node_depths() for e in f.estimators_]
        f._average_path_length_per_tree = [_average_path_length(e.tree_.n_node_samples) for e in f.estimators_]
        self.model_.detector_ = f
        return self


register(ModelSpec(
    name="iforest", label="Isolation Forest", factory=lambda **h: IsolationForest(**h), track="tabular",
    params={"n_estimators": Int(100, 1), "max_samples": Int(0, 0, doc="0 = 'auto' (min(256, n))"),
            "max_features": Float(1.0, 0, 1, low_open=True), "bootstrap": Bool(False)},
    quick={"n_estimators": 50},
    # released: the CAD framework's released code (docs/tabular.md); suite: the defaults above
    presets={"suite": {}, "released": {}},
    default_preset="suite", inputs="records", version=1, source="PyOD 3.6.7 defaults"))
