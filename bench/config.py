"""Run configuration: one dataclass, JSON round-trip, and the hashes that identify a run.

The *run key* hashes everything that changes the result (dataset content, task order, model, backbone,
weights, protocol, seed, image size, batch size, hyperparameters) and nothing that does not (paths, device,
worker count). The *config hash* covers the whole configuration and is recorded as provenance.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

from bench.errors import ConfigError

SCHEMA_VERSION = 1
BACKBONES = ("resnet18", "wide_resnet50_2")  # here, not in bench.features, so the CLI lists them without torch
DATASETS = ("synthetic", "mvtec", "visa", "btad", "mpdd", "dagm", "multi")  # likewise without pandas


@dataclass
class RunConfig:
    dataset: str
    root: str
    model: str
    tasks: list[str]
    ordering: str = "custom"
    backbone: str = "resnet18"
    weights: str = "imagenet"
    protocol: str = "cl"
    seed: int = 0
    image_size: int = 224
    batch_size: int = 32
    device: str = "auto"
    workers: int = 0
    hparams: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config fields {sorted(unknown)}")
        return cls(**data)

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def identity(self, index_sha256: str, weights_id: str) -> dict:
        """What the result depends on: the run key's preimage."""
        return {
            "dataset": self.dataset, "index_sha256": index_sha256, "tasks": list(self.tasks),
            "model": self.model, "backbone": self.backbone, "weights": weights_id, "protocol": self.protocol,
            "seed": self.seed, "image_size": self.image_size, "batch_size": self.batch_size,
            "hparams": self.hparams, "schema": SCHEMA_VERSION,
        }

    def run_key(self, index_sha256: str, weights_id: str) -> str:
        payload = json.dumps(self.identity(index_sha256, weights_id), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def run_name(self, run_key: str) -> str:
        """Readable file stem: what a human looks for, plus the key that makes it unique."""
        dataset = self.dataset.replace("/", "-")
        return f"{dataset}_{self.model}_{self.backbone}_{self.protocol}_{self.ordering}_s{self.seed}_{run_key[:12]}"
