"""The offline stand-ins: a scripted researcher and a simulated trainer, both seeded and
deterministic, so a night replays the same way on any machine and in the tests.

The "model" has two knobs, a learning rate and a width. Its validation loss is a smooth bowl
around a best point (learning rate 3e-3, width 512) plus seeded noise; a training run takes
longer for a wider model. The researcher perturbs the best candidate so far (a random walk
with shrinking steps) and says why, as a real one would in a commit message.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

BEST_LOG_LR = math.log10(3e-3)
BEST_WIDTH = 512


@dataclass
class Candidate:
    learning_rate: float
    width: int
    note: str


def propose(seed: int, iteration: int, best: Candidate | None) -> Candidate:
    """The researcher's next idea: a step away from the best candidate so far."""
    rng = random.Random(seed * 1_000_003 + iteration)
    if best is None:
        return Candidate(1e-2, 128, "baseline")
    step = max(0.05, 0.5 / (1 + iteration / 4))
    log_lr = math.log10(best.learning_rate) + rng.uniform(-step, step)
    width = max(32, min(2048, int(best.width * 2 ** rng.uniform(-step * 2, step * 2))))
    change = "learning rate" if abs(log_lr - math.log10(best.learning_rate)) > step / 2 else "width"
    return Candidate(round(10**log_lr, 6), width, f"try a different {change} (step {step:.2f})")


def training_minutes(candidate: Candidate) -> int:
    """How long a run of ``candidate`` takes on the (simulated) GPU."""
    return 10 + candidate.width // 32


def validation_loss(seed: int, candidate: Candidate) -> float:
    """The loss a run of ``candidate`` ends at: a bowl around the best point, plus noise."""
    rng = random.Random(f"{seed}:{candidate.learning_rate}:{candidate.width}")
    distance = (math.log10(candidate.learning_rate) - BEST_LOG_LR) ** 2 + math.log2(
        candidate.width / BEST_WIDTH
    ) ** 2 / 4
    return round(1.0 + distance + rng.gauss(0, 0.005), 5)
