"""Reasons and warnings of a plan as typed values, one topic each.

A :class:`Reason` names what it justifies (``topic``: batch, devices, servers, network,
...) and says why in one sentence with its formula; the plan table, plan.json and the
report print ``text``. :class:`Notes` collects them in the order the plan finds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOPICS = ("batch", "algorithm", "compute", "devices", "architecture", "bottleneck",
          "servers", "network", "intra-node", "loaders", "cost", "calibration", "cluster",
          "input", "memory", "estimate")


@dataclass(frozen=True)
class Reason:
    """One sentence of a plan, about one topic."""

    topic: str
    """What it is about (one of TOPICS)."""
    text: str
    """The sentence, with its formula and numbers."""

    def __post_init__(self):
        if self.topic not in TOPICS:
            raise ValueError(f"unknown reason topic {self.topic!r} ({', '.join(TOPICS)})")

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "text": self.text}


@dataclass
class Notes:
    """Reasons and warnings as a plan collects them."""

    reasons: list[Reason] = field(default_factory=list)
    warnings: list[Reason] = field(default_factory=list)

    def why(self, topic: str, text: str) -> None:
        self.reasons.append(Reason(topic, text))

    def warn(self, topic: str, text: str) -> None:
        self.warnings.append(Reason(topic, text))
