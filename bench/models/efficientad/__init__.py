"""EfficientAD-S in one folder: the detector (detector.py), its networks and teacher file format (pdn.py) and the
teacher's distillation (distill.py, `python -m bench distill-teacher`).

Importing the package registers the detector: the registry discovers the packages of bench.models as it does
their modules, by name.
"""

from bench.models.efficientad import detector  # noqa: F401  (its last statement registers "efficientad")
