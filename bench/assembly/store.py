"""The assembly run file and its checkpoint (HDF5), written atomically (`bench.io.atomic_path`).

Run file `<runs>/<run name>.h5`:
- attributes: `format` = "bench.assembly.run", `format_version`, `status` = "complete" (only complete files are
  ever written), `run_key`, `run_name`, the spec (`spec`, JSON) and the key's preimage (`identity`, JSON), corpus,
  corpus_sha256, arm, detector, preset, seed, kind, n, i_tr, i_va, the detector's label, parameters, source and
  `batch_dependent`, the batch record (`batch_size`, `batch_ids_sha256`) of a batch detector, the corpus manifest
  (`manifest`, JSON) and its inputs' SHA-256 (`inputs_sha256`, JSON), `config_sha256` (of the spec), and the
  provenance every result file of the suite records (`bench.results.provenance`: commit, dirty flag, packages,
  Python, host, SLURM ids, container), with `created`;
- datasets, in stream order: `rows` (corpus rows), `y`, `score`, `branches/<name>`, and for analyses `timestamp`
  and `capture` (index into the attribute `captures`).

Checkpoint `<run file>.ckpt`: attributes `run_key`, `position` (records scored); datasets `score` and
`branches/<name>` up to `position`, and `state/<key>` the detector's `state_dict()` (numpy arrays only).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np

from bench.assembly.records import BatchRecord, Kind, ScoredStream
from bench.errors import CheckpointError, DatasetError
from bench.io import atomic_path

# bench.results (the suite's result-file helpers, reused here) is imported inside the functions: it pulls in
# pandas, which importing this module (by runs and the HPC layer) does not otherwise need

FORMAT = "bench.assembly.run"
FORMAT_VERSION = 1
DATASETS = ("rows", "y", "score")


def file_run_key(path: Path) -> str | None:
    """The run key an assembly run file records, or None when `path` is not a readable one."""
    from bench import results

    return results.file_run_key(path, fmt=FORMAT)


def is_complete(path: Path, run_key: str | None = None) -> bool:
    from bench import results

    return results.is_complete(path, run_key, fmt=FORMAT)


def _attrs(stream: ScoredStream, *, key: str, spec, corpus, det_spec) -> dict:
    from bench import results

    spec_json = spec.to_json()
    attrs = {"format": FORMAT, "format_version": FORMAT_VERSION, "status": "complete", "run_key": key,
             "spec": spec_json, "identity": json.dumps(spec.identity(stream.corpus_sha256), sort_keys=True),
             "config_sha256": hashlib.sha256(spec_json.encode()).hexdigest(), "corpus": stream.corpus,
             "corpus_sha256": stream.corpus_sha256, "arm": stream.arm, "detector": stream.detector,
             "preset": stream.preset, "seed": stream.seed, "kind": stream.kind.value, "n": stream.n,
             "i_tr": stream.bounds[0], "i_va": stream.bounds[1], "detector_label": det_spec.label,
             "params": json.dumps(spec.identity(stream.corpus_sha256)["params"], sort_keys=True),
             "detector_source": det_spec.source, "batch_dependent": bool(det_spec.batch_dependent),
             "manifest": json.dumps(corpus.manifest, sort_keys=True),
             "inputs_sha256": json.dumps(corpus.manifest.get("files", {}), sort_keys=True),
             "captures": json.dumps(list(corpus.captures)), "created": results.now(),
             "steps_done": 1, "n_tasks": 1}  # what `make status` prints for a complete run: 1/1
    if stream.batch is not None:
        attrs.update(batch_size=stream.batch.size, batch_ids_sha256=stream.batch.ids_sha256)
    attrs.update(results.provenance())
    return attrs


def write_run(path: Path, stream: ScoredStream, *, key: str, spec, corpus, det_spec) -> Path:
    """Write the complete run file of `stream` atomically (readers see no file or the whole one)."""
    attrs = _attrs(stream, key=key, spec=spec, corpus=corpus, det_spec=det_spec)
    attrs["run_name"] = Path(path).stem
    with atomic_path(Path(path)) as tmp:
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs.update(attrs)
            f.create_dataset("rows", data=stream.rows.astype(np.int64))
            f.create_dataset("y", data=stream.y.astype(np.int8))
            f.create_dataset("score", data=stream.score.astype(np.float64))
            for name, values in stream.branches.items():
                f.create_dataset(f"branches/{name}", data=values.astype(np.float64))
            f.create_dataset("timestamp", data=corpus.timestamp[stream.rows])
            f.create_dataset("capture", data=corpus.capture[stream.rows])
    return Path(path)


def read_run(path) -> ScoredStream:
    """The `ScoredStream` an assembly run file holds; DatasetError (one line) for anything that is not a complete
    assembly run file, or that declares datasets larger than it stores (checked before anything is read)."""
    from bench import results

    path = Path(path)
    try:
        with h5py.File(path, "r", locking=False) as f:
            a = {k: results.plain(v) for k, v in f.attrs.items()}
            if a.get("format") != FORMAT:
                raise DatasetError(f"{path}: not an assembly run file (no format={FORMAT!r} attribute)")
            if a.get("status") != "complete":
                raise DatasetError(f"{path}: not a complete assembly run file (status {a.get('status')!r})")
            datasets = results.sized_datasets(path, f)
            missing = [d for d in DATASETS if d not in datasets]
            if missing:
                raise DatasetError(f"{path}: not a complete assembly run file (missing {', '.join(missing)})")
            arrays = {d: datasets[d][()] for d in DATASETS}
            branches = {k.removeprefix("branches/"): v[()] for k, v in datasets.items() if k.startswith("branches/")}
    except OSError as e:
        raise DatasetError(f"{path}: not a readable assembly run file ({e})") from None
    n = len(arrays["rows"])
    if any(len(v) != n for v in (arrays["y"], arrays["score"], *branches.values())):
        raise DatasetError(f"{path}: not a complete assembly run file (arrays of different lengths)")
    batch = BatchRecord(int(a["batch_size"]), str(a["batch_ids_sha256"])) if "batch_size" in a else None
    return ScoredStream(corpus=str(a["corpus"]), corpus_sha256=str(a["corpus_sha256"]), arm=str(a["arm"]),
                        detector=str(a["detector"]), preset=str(a["preset"]), seed=int(a["seed"]),
                        kind=Kind(a["kind"]), rows=arrays["rows"].astype(np.int64), y=arrays["y"].astype(np.int8),
                        bounds=(int(a["i_tr"]), int(a["i_va"])), score=arrays["score"].astype(np.float64),
                        branches={k: v.astype(np.float64) for k, v in branches.items()}, batch=batch)


def run_attrs(path) -> dict:
    """Every attribute of an assembly run file (provenance, spec, manifest), as plain values."""
    from bench.results import plain

    with h5py.File(path, "r", locking=False) as f:
        return {k: plain(v) for k, v in f.attrs.items()}


# ---- checkpoints ------------------------------------------------------------------------------------------------


def checkpoint_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".ckpt")


def write_checkpoint(path: Path, run_key: str, position: int, detector, score: np.ndarray, branches: dict) -> None:
    """The detector's state after `position` records and the scores so far, atomically."""
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w", locking=False) as f:
            f.attrs.update({"run_key": run_key, "position": int(position)})
            f.create_dataset("score", data=score[:position])
            for name, values in branches.items():
                f.create_dataset(f"branches/{name}", data=values[:position])
            for key, value in detector.state_dict().items():
                f.create_dataset(f"state/{key}", data=np.asarray(value))


def read_checkpoint(path: Path, run_key: str, detector, score: np.ndarray, branches: dict) -> int:
    """Restore a checkpoint of this run into `detector`, `score` and `branches`; the position to resume at (0: none,
    or one of another run, which is then removed)."""
    from bench import results

    if not path.is_file():
        return 0
    try:
        with h5py.File(path, "r", locking=False) as f:
            if results.plain(f.attrs.get("run_key")) != run_key:
                raise CheckpointError("another run's checkpoint")
            results.sized_datasets(path, f)  # a crafted checkpoint declaring huge arrays: start over, unread
            position = int(f.attrs["position"])
            state = {}
            f["state"].visititems(lambda name, obj: state.__setitem__(name, obj[()])
                                  if isinstance(obj, h5py.Dataset) else None)
            saved = f["score"][()], {k: f[f"branches/{k}"][()] for k in branches}
    except (OSError, KeyError, CheckpointError, DatasetError):
        path.unlink(missing_ok=True)  # not this run's, or unreadable: start over
        return 0
    detector.load_state_dict(state)
    score[:position] = saved[0]
    for k, values in saved[1].items():
        branches[k][:position] = values
    return position
