"""The stream-assembly paper's numbers, as data (`data/paper/assembly/`), and when ours are comparable to them.

Shipped files, one long layout (`cell, arm, scorer, batch, level, metric, value, origin, source`):
  assembly_table4.csv  Table 4, the assembly contrast (held-out records, attacks, prevalence, AP per arm)
  assembly_table6.csv  Table 6, both arms restricted to the 78,000 shared records (ECOD under both batches)
  assembly_table8.csv  Table 8, branch-wise AP and AUC of the deployed BOCPD score, and the binding share
  assembly_table9.csv  Table 9, the prevalence sweep (achieved chance level and mean AP over three draws)
  assembly_text.csv    values the text states: identities, margins and their intervals, the ladder, lifts
`origin` says where a value comes from: `text` (printed in the paper), `manifest` (the table's content is absent
from the text; recovered from the archived manifest macro named in `source`), `derived` (arithmetic on printed
values, stated in `source`). Each file's SHA-256 is pinned in `SHIPPED_SHA256` and checked on every load: an edited
value is refused in one line.

A cell of ours is comparable to a published one only when the corpus, budgets, subsampling rule, scale, feature
set, non-finite policy, split and detector settings are the released ones; `comparability` returns every reason it
is not.
"""

from __future__ import annotations

import csv
import enum
import io
import math
from dataclasses import dataclass
from pathlib import Path

from bench.assembly import records
from bench.errors import BenchError
from bench.io import PinnedRead, read_pinned

PAPER = ("Stream assembly as a treatment (stream-assembly-and-provenance; released code and manifests "
         "MichelYsf/rcbsid-paper)")
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "paper" / "assembly"
COLUMNS = ("cell", "arm", "scorer", "batch", "level", "metric", "value", "origin", "source")
ORIGINS = ("text", "manifest", "derived")
SHIPPED_SHA256 = {
    "assembly_table4.csv": "6a46bb8682d85506f571cd0aa82d6d4dbfadf555e18f0f3713e03e50f6bda078",
    "assembly_table6.csv": "d0008d71f5978bec0e8ab914cfce18fe32836373634b0f078af74b9e8b1292cb",
    "assembly_table8.csv": "46a755cfc80e34629bb7facf1abcb2c817a2108778ab46be992673abf0e3046c",
    "assembly_table9.csv": "e8e015c65439ed13aede990511046e3ec7cfadf2b5fc4797e3e4599558efa171",
    "assembly_text.csv": "1972c3838f5d8fb2cd5bcc7583cf8caf7a6760276ea06e9a04fb3b3e8f81ae48",
}


@dataclass(frozen=True)
class PaperCell:
    file: str
    cell: str
    arm: str
    scorer: str
    batch: str
    level: str
    metric: str
    value: float
    origin: str  # ORIGINS
    source: str


def _pinned(path: Path) -> PinnedRead:
    """The shipped file's content (CRLF read as LF), refused unless its SHA-256 is the pinned one."""
    pinned = SHIPPED_SHA256.get(path.name)
    if pinned is None:
        raise BenchError(f"{path}: not a shipped table of the stream-assembly paper ({', '.join(SHIPPED_SHA256)})")
    try:
        table = read_pinned(path, pinned)
    except OSError as e:
        raise BenchError(f"{path}: cannot read the published values ({e.strerror})") from None
    if not table.intact:
        raise BenchError(f"{path}: SHA-256 {table.digest[:16]}… is not the pinned {pinned[:16]}… (an edited "
                         "published value is refused)")
    return table


def _row(path: Path, line: int, row: dict) -> PaperCell:
    if row["origin"] not in ORIGINS:
        raise BenchError(f"{path}: line {line}: origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
    try:
        value = float(row["value"])
    except ValueError:
        raise BenchError(f"{path}: line {line}: value {row['value']!r} is not a number") from None
    if not math.isfinite(value) or not row["source"].strip():
        raise BenchError(f"{path}: line {line}: a finite value with its source is expected")
    return PaperCell(path.name, *(row[c] for c in COLUMNS[:6]), value, row["origin"], row["source"])


def load(name: str, directory: Path | None = None) -> tuple[PaperCell, ...]:
    """The cells of one shipped file, its digest checked first."""
    path = (directory or DATA_DIR) / name
    reader = csv.DictReader(io.StringIO(_pinned(path).data.decode("utf-8")))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise BenchError(f"{path}: columns {reader.fieldnames} are not {list(COLUMNS)}")
    cells = tuple(_row(path, i + 2, row) for i, row in enumerate(reader))
    seen = set()
    for c in cells:
        if c.cell in seen:
            raise BenchError(f"{path}: cell {c.cell!r} appears twice")
        seen.add(c.cell)
    return cells


def load_all(directory: Path | None = None) -> dict[str, tuple[PaperCell, ...]]:
    return {name: load(name, directory) for name in SHIPPED_SHA256}


def frame(cells) -> object:
    import pandas as pd

    return pd.DataFrame([c.__dict__ for c in cells])


# ------------------------------------------------------------------ comparability

class Reason(enum.Enum):
    CORPUS = "corpus"
    BUDGETS = "budgets"
    RULE = "subsampling rule"
    SCALE = "scale"
    FEATURES = "feature set"
    NON_FINITE = "non-finite policy"
    SPLIT = "split"
    DETECTOR = "detector settings"


@dataclass(frozen=True)
class Mismatch:
    reason: Reason
    detail: str  # ours against the released, in words


@dataclass(frozen=True)
class Comparability:
    mismatches: tuple[Mismatch, ...]

    @property
    def comparable(self) -> bool:
        return not self.mismatches

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return tuple(m.reason for m in self.mismatches)

    def text(self) -> str:
        if self.comparable:
            return "comparable"
        return "not comparable: " + "; ".join(f"{m.reason.value} ({m.detail})" for m in self.mismatches)


# the released studies: corpus source -> what its published numbers were computed on
RELEASED_FEATURES = {"cicids2017": 84}  # the improved CICIDS2017 files give 84 released features


@dataclass(frozen=True)
class DetectorSetting:
    name: str
    preset: str
    params: dict  # the parameters the run used (preset and overrides resolved)


def _corpus_mismatches(manifest: dict) -> list[Mismatch]:
    import bench.assembly.corpus  # noqa: F401  (registers the sources)
    from bench.assembly.sources import SOURCES, FeatureSet, NonFinite

    out = []
    source = manifest.get("capture_identity", {}).get("source", "")
    if source not in ("cicids2017", "litnet"):
        return [Mismatch(Reason.CORPUS, f"{source or 'unknown'} is not a corpus the paper reports (cicids2017, "
                                        "litnet)")]
    released = SOURCES[source]
    if dict(manifest.get("budgets", {})) != dict(released.budgets):
        out.append(Mismatch(Reason.BUDGETS, f"{manifest.get('budgets')} against {released.budgets}"))
    if manifest.get("rule") != released.rule.value:
        out.append(Mismatch(Reason.RULE, f"{manifest.get('rule')} against {released.rule.value}"))
    if manifest.get("scale") != 1.0:
        out.append(Mismatch(Reason.SCALE, f"scale {manifest.get('scale')} against 1.0 (the full budgets)"))
    features = manifest.get("features", {})
    wanted_n = RELEASED_FEATURES.get(source)
    if features.get("set") != FeatureSet.RELEASED.value or (wanted_n and features.get("n") != wanted_n):
        out.append(Mismatch(Reason.FEATURES, f"{features.get('set')} ({features.get('n')} columns) against "
                                             f"released{f' ({wanted_n} columns)' if wanted_n else ''}"))
    policy = manifest.get("non_finite", {}).get("policy")
    if policy != NonFinite.RELEASED.value:
        out.append(Mismatch(Reason.NON_FINITE, f"{policy} against {NonFinite.RELEASED.value}"))
    return out


def comparability(manifest: dict, rule: records.SplitRule, detectors: list[DetectorSetting] = ()) -> Comparability:
    """Whether a study on a corpus with `manifest`, split by `rule`, with these detector settings measured what
    the paper measured; every reason it did not."""
    from bench.assembly.detectors import get

    out = _corpus_mismatches(manifest)
    if (rule.train, rule.validation) != (0.70, 0.15):
        out.append(Mismatch(Reason.SPLIT, f"{rule.train}/{rule.validation} against 0.7/0.15"))
    for d in detectors:
        released = get(d.name).presets["released"]
        if d.preset != "released" or {k: v for k, v in d.params.items() if k != "seed"} != released:
            out.append(Mismatch(Reason.DETECTOR, f"{d.name}: preset {d.preset} {d.params} against released "
                                                 f"{released}"))
    return Comparability(tuple(out))


# ------------------------------------------------------------------ identities at any scale

PAPER_RECORDS = 1_600_000  # the paper's CICIDS2017 corpus


@dataclass(frozen=True)
class Identity:
    """A quantity of the assembly audit that a corpus with the paper's structure reproduces at any scale (the
    synthetic week: every count scales with its records), beside the paper's value."""

    quantity: str
    ours: float
    ours_at_paper_scale: float  # ours × 1,600,000 / our records (shares and flags unscaled)
    paper: float
    paper_cell: str
    holds: bool


def _identity(quantity: str, ours: float, scale: float, cell: str, cells: dict, tol: float = 0.5) -> Identity:
    scaled = ours * scale
    return Identity(quantity, ours, scaled, cells[cell], cell, abs(scaled - cells[cell]) <= tol)


def identities(audit) -> tuple[Identity, ...]:
    """The paper's split sizes, overlap and dilution identities (§5.2) against a two-arm CICIDS2017-shaped audit
    (`bench.assembly.audit.AssemblyAudit` with a timestamp / day-round-robin pair)."""
    cells = {c.cell: c.value for c in load("assembly_text.csv")}
    if not audit.pairs:
        raise BenchError("identities: the audit holds no pair of arms over the whole corpus")
    pair = audit.pairs[0]
    arm_b = next(a for a in audit.arms if a.arm == pair.arm_b)
    n = sum(arm_b.records)
    scale = PAPER_RECORDS / n
    test = arm_b.composition[2]  # [captures, (records, attacks)] of b's held-out slice
    attack_free = int(test[test[:, 1] == 0, 0].sum())
    return (
        _identity("held-out records per arm", pair.heldout_a, scale, "id.held_out", cells),
        _identity("records both arms hold out", pair.overlap, scale, "id.shared", cells),
        _identity("shared share of a held-out slice", float(pair.overlap_share), 1.0, "id.shared_share", cells, 5e-7),
        _identity("attack-free captures' rows in the round robin's held-out slice", attack_free, scale,
                  "id.rr_attack_free_rows", cells),
    )


def identity_frame(rows: tuple[Identity, ...]):
    import pandas as pd

    return pd.DataFrame([r.__dict__ for r in rows])
