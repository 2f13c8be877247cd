"""Task discovery (CAD framework paper, Sec. "Task discovery"): candidate task sets from a cleaned table.

Each method maps the cleaned records to a task name per record ("" = unassigned) plus a description:
- `natural`: one task per value of a metadata column (`day` = capture day by default).
- clustering (`kmeans`, `spectral`, `gmm`) in three variants:
  `joint` — normals and anomalies clustered together;
  `nearest` — normals clustered, each anomaly assigned to the nearest cluster (k-Means/GMM predict; spectral:
  nearest cluster centroid);
  `random` — normals clustered, anomalies distributed uniformly at random over the clusters (seeded).
  Features are standardised on the normal records for clustering only. Each clusterer is fitted on at most
  `max_fit` records (spectral: `max_fit_spectral`, its affinity matrix is quadratic) and the rest are assigned by
  its own predict, or for spectral clustering by the nearest fitted cluster's centroid.
- minimum sizes: a task with fewer than `min_normal` normals or `min_anomalous` anomalies is dropped (recorded).
- `semantics="released"` (the DISCOVERY preset `released`) clusters as the CAD framework's released code does
  (CAD 675a9c9 `src/cadbench/splits/clustering/clustering.py:24-32`, `methods.py:63-98`): raw (unscaled)
  features, every record fitted (no `max_fit` sample), the released seed 42 (`types.py`, not `seed`), KMeans
  with scikit-learn's default n_init, a Gaussian
  mixture of always 10 diagonal components with reg_covar 1e-3; `nearest` assigns each anomaly to the nearest
  centroid, in raw feature space, of the normal clusters that have `min_normal` normals, then tops up every
  cluster below `min_anomalous` anomalies with the nearest anomalies of clusters above it, and drops no cluster
  for too few anomalies (only one with none: it has no ROC-AUC). `joint` drops by both minima as released;
  `random` and `spectral` stay the suite's (docs/tabular.md).
- multi-dataset: scenario.multi_table puts several datasets' records together with the metadata columns `dataset`
  (natural split: each dataset one task) and `dataset_day` (each dataset decomposed by capture day). A clustering
  candidate decomposes the union, or with `within="dataset"` each dataset on its own: `n_tasks` clusters per
  dataset, standardised on that dataset's normals, tasks named `<dataset>/c<i>` (`within` takes any metadata
  column; the minimum sizes apply to every resulting task).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from bench.config import check_file_name
from bench.errors import ConfigError, choice_error
from bench.registry import Choice, Int, ParamTable
from bench.tabular.cic import FEATURES

if TYPE_CHECKING:
    import pandas as pd

METHODS = ("natural", "kmeans", "spectral", "gmm")

# Discovery settings with presets (the FC thresholds' mechanism, bench.tabular.filtering.FRAMEWORK): `suite` keeps
# small tasks (the synthetic benchmark's test sets hold hundreds of records); `released` is what the CAD framework's
# released code uses on CICIDS2017: tasks need 1,500 normal and 1,000 anomalous records. Its 10 clusters are the
# candidate's K (kmeans:nearest:10): the candidate text carries K, so no preset sets it.
DISCOVERY = ParamTable("tabular task discovery", params={
    "min_normal": Int(100, 1, doc="a task with fewer normal records is dropped"),
    "min_anomalous": Int(10, 0, doc="a task with fewer anomalous records (at least 1) is dropped"),
    "semantics": Choice("suite", ("suite", "released"), doc="clustering as the suite does it or as the released "
                                                            "code does (unscaled, nearest with anomaly top-up)")},
    presets={"suite": {}, "released": {"min_normal": 1500, "min_anomalous": 1000, "semantics": "released"}},
    default_preset="suite")
VARIANTS = ("joint", "nearest", "random")
# the candidate `bench tabular index` and `scenarios` discover without --candidate(s): one task per capture day
DEFAULT_CANDIDATE = "natural:day"


@dataclass(frozen=True)
class DiscoverySettings:
    method: str = "natural"
    column: str = "day"  # natural split
    n_tasks: int = 5  # clustering
    variant: str = "nearest"
    min_normal: int = 100
    min_anomalous: int = 10
    max_fit: int = 20000
    max_fit_spectral: int = 2000
    seed: int = 0
    within: str = ""  # a metadata column (e.g. dataset): discover tasks in each of its groups separately
    semantics: str = "suite"  # DISCOVERY's: "released" clusters as the CAD framework's released code

    def __post_init__(self):
        if self.method not in METHODS:
            raise choice_error("task discovery method", self.method, METHODS)
        if self.variant not in VARIANTS:
            raise choice_error("clustering variant", self.variant, VARIANTS)
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed {self.seed!r} is not allowed (expected an integer ≥ 0)")
        if self.n_tasks < 1 or self.min_normal < 1 or self.min_anomalous < 0:
            raise ConfigError("n_tasks and min_normal must be ≥ 1, min_anomalous ≥ 0")
        if not isinstance(self.within, str) or self.within == self.column and self.method == "natural":
            raise ConfigError(f"within={self.within!r}: expected a metadata column other than the split's own")
        check_file_name("candidate column", self.column)  # the candidate's name is a folder name
        if self.within:
            check_file_name("candidate @column", self.within)
        DISCOVERY.resolve({"semantics": self.semantics})  # one line naming the valid choices

    @property
    def name(self) -> str:
        base = (f"natural-{self.column}" if self.method == "natural"
                else f"{self.method}-{self.variant}-k{self.n_tasks}")
        return f"{base}-by-{self.within}" if self.within else base

    def to_dict(self) -> dict:
        """The settings as the record index records them (and its index_sha256 covers them). An empty `within` and
        the suite's semantics are left out, so indexes built before the settings existed keep their SHA-256 and
        their runs their keys."""
        return {k: v for k, v in asdict(self).items()
                if not (k == "within" and not v or k == "semantics" and v == "suite")}

    @property
    def released_natural(self) -> bool:
        """The released natural split: no minimum sizes (they are the clustering's), a concept needs both classes."""
        return self.semantics == "released" and self.method == "natural"

    @property
    def released_nearest(self) -> bool:
        """The released code's Closest method: anomalies topped up to `min_anomalous`, never dropped below it."""
        return self.semantics == "released" and self.method != "natural" and self.variant == "nearest"


RELEASED_GMM_COMPONENTS = 10  # clustering.py:28: n_components=10 whatever the number of clusters asked for
RELEASED_SEED = 42  # types.py: ClusteringConfig.random_state, which the released script leaves at its default


def _clusterer(s: DiscoverySettings):
    from sklearn.cluster import KMeans, SpectralClustering
    from sklearn.mixture import GaussianMixture

    if s.semantics == "released" and s.method == "kmeans":
        return KMeans(n_clusters=s.n_tasks, random_state=RELEASED_SEED)
    if s.semantics == "released" and s.method == "gmm":
        return GaussianMixture(n_components=RELEASED_GMM_COMPONENTS, covariance_type="diag", reg_covar=1e-3,
                               random_state=RELEASED_SEED)
    if s.method == "kmeans":
        return KMeans(n_clusters=s.n_tasks, n_init=4, random_state=s.seed)
    if s.method == "gmm":
        return GaussianMixture(n_components=s.n_tasks, covariance_type="diag", random_state=s.seed, reg_covar=1e-4)
    return SpectralClustering(n_clusters=s.n_tasks, affinity="nearest_neighbors", n_neighbors=10,
                              random_state=s.seed, assign_labels="cluster_qr")


def _cluster(X: np.ndarray, s: DiscoverySettings, rng: np.random.Generator) -> tuple[np.ndarray, object]:
    """Cluster ids for every row of X; returns also a function assigning new rows."""
    # the released code fits k-Means and the mixture on every record (its sampling_size defaults to None)
    cap = (s.max_fit_spectral if s.method == "spectral" else
           len(X) if s.semantics == "released" else s.max_fit)
    fit_rows = np.sort(rng.choice(len(X), cap, replace=False)) if len(X) > cap else np.arange(len(X))
    model = _clusterer(s)
    if s.method == "spectral":
        ids = model.fit_predict(X[fit_rows])
        centroids = np.stack([X[fit_rows][ids == c].mean(0) if (ids == c).any() else np.full(X.shape[1], np.inf)
                              for c in range(s.n_tasks)])

        def assign(Z):
            d = ((Z[:, None, :] - centroids[None]) ** 2).sum(2)
            return d.argmin(1)
    else:
        model.fit(X[fit_rows])
        assign = model.predict
    out = np.empty(len(X), dtype=int)
    for start in range(0, len(X), 100_000):
        out[start:start + 100_000] = assign(X[start:start + 100_000])
    if s.method == "spectral":
        out[fit_rows] = ids
    return out, assign


def discover(df: pd.DataFrame, s: DiscoverySettings) -> tuple[np.ndarray, dict]:
    """Task name per record ("" = dropped) and a description with per-task counts and what was dropped."""
    labels = df["label"].to_numpy()
    if not s.within:
        return enforce_minimum(_tasks(df, s), labels, s)
    if s.within not in df.columns:
        raise ConfigError(f"within={s.within!r}: no such column in the table (a multi-dataset table has dataset)")
    groups = df[s.within].astype(str).to_numpy()
    tasks = np.empty(len(df), dtype=object)
    each = replace(s, within="")
    for group in sorted(set(groups)):
        rows = np.flatnonzero(groups == group)
        normals = int((labels[rows] == 0).sum())
        if s.method != "natural" and normals < s.n_tasks:
            raise ConfigError(f"{s.name}: {s.within} {group!r} has {normals} normal records, fewer than the "
                              f"{s.n_tasks} clusters asked for")
        tasks[rows] = [f"{group}/{t}" for t in _tasks(df.iloc[rows], each)]
    return enforce_minimum(tasks, labels, s)


def _tasks(df: pd.DataFrame, s: DiscoverySettings) -> np.ndarray:
    """The task name of every record of `df` by one method (natural split or clustering), before minimum sizes."""
    labels = df["label"].to_numpy()
    if s.method == "natural":
        if s.column not in df.columns:
            raise ConfigError(f"natural split column {s.column!r} not in the table (columns: day, attack, source…)")
        tasks = df[s.column].astype(str).to_numpy(dtype=object)
        empty = tasks == ""
        if empty.any():  # "" means unassigned: those records would vanish from the scenario unsaid
            files = sorted(set(df["source"].to_numpy()[empty])) if "source" in df.columns else []
            shown = ", ".join(files[:3]) + (f" … ({len(files)} files)" if len(files) > 3 else "")
            raise ConfigError(f"{s.name}: {int(empty.sum())} of {len(tasks)} records have no {s.column} ({shown}: "
                              f"no Timestamp column to take it from); use a clustering candidate instead, e.g. "
                              f"--candidates kmeans:nearest:3")
    else:
        rng = np.random.default_rng(s.seed)
        X = df[list(FEATURES)].to_numpy(dtype=np.float64)
        norm = labels == 0
        clustered = len(X) if s.variant == "joint" else int(norm.sum())
        if clustered < s.n_tasks:  # scikit-learn would fail with n_samples < n_clusters
            raise ConfigError(f"{s.name}: {clustered} {'records' if s.variant == 'joint' else 'normal records'} to "
                              f"cluster, fewer than the {s.n_tasks} clusters asked for; ask for fewer clusters")
        if s.semantics != "released":  # the released code clusters the raw features
            mu, sd = X[norm].mean(0), X[norm].std(0)
            X = (X - mu) / np.where(sd > 0, sd, 1)
        ids = np.empty(len(X), dtype=int)
        if s.variant == "joint":
            ids[:], _ = _cluster(X, s, rng)
        elif s.released_nearest:
            ids[norm], _ = _cluster(X[norm], s, rng)
            ids[~norm] = released_nearest(X[norm], ids[norm], X[~norm], s.min_normal, s.min_anomalous)
        else:
            ids[norm], assign = _cluster(X[norm], s, rng)
            if (~norm).any():
                ids[~norm] = assign(X[~norm]) if s.variant == "nearest" else rng.integers(0, s.n_tasks,
                                                                                          (~norm).sum())
        tasks = np.array([f"c{i}" for i in ids], dtype=object)
    return tasks


def released_nearest(normals: np.ndarray, ids: np.ndarray, anomalies: np.ndarray, min_normal: int,
                     min_anomalous: int) -> np.ndarray:
    """The cluster of each anomaly as the released Closest method assigns it (methods.py:72-96): the nearest
    (Euclidean) centroid among the clusters with ≥ `min_normal` normals, then, cluster by cluster in id order, a
    cluster short of `min_anomalous` takes the anomalies nearest to it from the clusters that hold more than that."""
    from scipy.spatial.distance import cdist

    kept = np.array([c for c in np.unique(ids) if (ids == c).sum() >= min_normal])
    if not kept.size or not len(anomalies):
        return np.full(len(anomalies), -1 if not kept.size else kept[0])
    centroids = np.stack([normals[ids == c].mean(0) for c in kept])
    dists = cdist(anomalies, centroids)
    out = kept[dists.argmin(1)]
    for i, c in enumerate(kept):
        deficit = min_anomalous - int((out == c).sum())
        if deficit <= 0:
            continue
        held, counts = np.unique(out, return_counts=True)
        candidates = np.flatnonzero(np.isin(out, held[counts > min_anomalous]))
        out[candidates[dists[candidates, i].argsort()[:deficit]]] = c  # argsort as released (:94)
    return out


def enforce_minimum(tasks: np.ndarray, labels: np.ndarray, s: DiscoverySettings) -> tuple[np.ndarray, dict]:
    tasks = np.asarray(tasks, dtype=object).copy()
    info = {"candidate": s.name, "settings": s.to_dict(), "tasks": {}, "dropped": {}}
    # the released nearest method tops clusters up and never drops one for few anomalies (only for none); the
    # released natural split keeps every concept with normals and anomalies (cicids2017.py:142-147)
    min_anomalous = 1 if s.released_nearest or s.released_natural else max(s.min_anomalous, 1)
    min_normal = 1 if s.released_natural else s.min_normal
    for t in sorted(set(tasks) - {""}):
        rows = tasks == t
        n_norm, n_anom = int((labels[rows] == 0).sum()), int((labels[rows] == 1).sum())
        entry = {"normal": n_norm, "anomalous": n_anom}
        if n_norm < min_normal or n_anom < min_anomalous:
            tasks[rows] = ""
            info["dropped"][t] = entry
        else:
            info["tasks"][t] = entry
    if not info["tasks"]:
        raise ConfigError(f"{s.name}: no task has ≥ {s.min_normal} normal and ≥ {max(s.min_anomalous, 1)} "
                          f"anomalous records (found {info['dropped']})")
    return tasks, info
