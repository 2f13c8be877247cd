"""User-facing errors: the CLI prints them as one line and exits with status 2."""


class BenchError(Exception):
    """Bad input or environment the user can fix (missing data, wrong layout, missing weights...)."""

    exit_code = 2


class DatasetError(BenchError):
    """A dataset root, layout, image or mask is not what the reader expects."""


class WeightsError(BenchError):
    """Pretrained weights are not staged or do not match the backbone."""


class ConfigError(BenchError):
    """An unknown choice or inconsistent option."""


def choice_error(kind: str, value, valid) -> ConfigError:
    """An error listing the valid choices, e.g. `unknown model 'x' (valid: patchcore, padim)`."""
    return ConfigError(f"unknown {kind} {value!r} (valid: {', '.join(sorted(map(str, valid)))})")


class CheckpointError(BenchError):
    """A checkpoint file is corrupt, truncated, foreign, or holds something other than plain data."""


class NumericalError(BenchError):
    """A model produced NaN or infinite scores or maps: no ROC-AUC of them would mean anything."""


class NonFiniteLossError(BenchError):
    """Training diverged: the loss became NaN or infinite (the model would be garbage)."""


class ProvenanceError(BenchError):
    """A result file cannot be published: no provenance, unknown schema, or conflicting duplicates."""
