"""What a tabular detector's preset reproduces, and the track behaviour that follows from it, in one place.

A preset either runs the suite's own protocol (`Fidelity.SUITE`) or reproduces the CAD framework's released code
(`Fidelity.RELEASED`): pyCLAD's cross evaluation after every step, the released metrics' non-finite policy and the
released Replay share rule. A detector declares the fidelity of its presets with its registration
(`ModelSpec.preset_fidelity`, preset name → fidelity name); a preset named `released` that declares nothing is
released. The track asks `behaviour(spec, preset)` and never compares preset names itself, so a plugin with a
released preset of any name gets the released evaluation without touching track code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bench.errors import choice_error


class Fidelity(enum.Enum):
    SUITE = "suite"  # the suite's protocol
    RELEASED = "released"  # the CAD framework's released code (675a9c9)


@dataclass(frozen=True)
class TrackBehaviour:
    """How the tabular track runs a preset of this fidelity."""

    # every task evaluated after every step, as pyCLAD's ConceptAwareScenario does (src/pyclad/scenarios/
    # concept_aware.py:31; the released forgetting measure reads the cells before a task was learned); None keeps
    # the evaluation the run asks for
    evaluation: str | None
    # a non-finite record score: "released" replaces it as the released metrics do (NaN/+inf → the largest finite
    # score, −inf → the smallest); "stop" raises NumericalError (a diverged model is not a result)
    nonfinite: str
    # how the Replay (cl) buffer shares its records between past tasks: "floor", pyCLAD v0.3.0's ⌊capacity / tasks⌋
    # per task (adaptive_balanced.py:20); "water", the suite's water filling
    replay_share: str


BEHAVIOUR = {
    Fidelity.SUITE: TrackBehaviour(evaluation=None, nonfinite="stop", replay_share="water"),
    Fidelity.RELEASED: TrackBehaviour(evaluation="cross", nonfinite="released", replay_share="floor"),
}


def fidelity(spec, preset: str) -> Fidelity:
    """The fidelity of `spec`'s preset `preset`: declared with the registration, else released for a preset
    named `released` and the suite's for any other."""
    declared = getattr(spec, "preset_fidelity", {}).get(preset)
    if declared is None:
        return Fidelity.RELEASED if preset == Fidelity.RELEASED.value else Fidelity.SUITE
    try:
        return Fidelity(declared)
    except ValueError:
        raise choice_error(f"{spec.name}: preset {preset!r} fidelity", declared,
                           [f.value for f in Fidelity]) from None


def behaviour(spec, preset: str) -> TrackBehaviour:
    return BEHAVIOUR[fidelity(spec, preset)]
