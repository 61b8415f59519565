"""Which architecture and how many devices: the choice, the alternatives a user weighs,
and the sentence that says why (the architecture the cluster names wins; a faster one is
named beside it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scalelab.plan.reasons import Notes
from scalelab.plan.sweep import SweepRow
from scalelab.text import plural

FASTER_BY = 1.02
"""Another architecture is named faster only above 2% more throughput: closer than that is
inside every band the model carries (a calibration's held-out error, an estimate's)."""


@dataclass(frozen=True)
class Choice:
    """The recommended architecture and its row, with the best row of every architecture."""

    architecture: str
    row: SweepRow
    best: dict[str, SweepRow]
    named: bool = False
    """True when the cluster named the architecture (it is recommended whatever is faster)."""
    faster: str | None = None
    """Another architecture that would give more throughput at the target (None: none)."""
    below_target: bool = False
    """The named architecture keeps the target on no more than one device: it is
    recommended on all of them, below the target."""
    simpler_than: str | None = None
    """None named: the architecture, faster by less than :data:`FASTER_BY`, that this
    simpler one was recommended over (None: it is the fastest)."""


@dataclass(frozen=True)
class Alternative:
    """A device count the user is weighing, with its predicted figures."""

    label: str
    """Why this count: 'all N', 'one node', 'target E'."""
    gpus: int
    architecture: str
    samples_per_s: float
    speedup: float
    efficiency: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "gpus": self.gpus, "architecture": self.architecture,
                "samples_per_s": self.samples_per_s, "speedup": self.speedup,
                "efficiency": self.efficiency}

    def text(self) -> str:
        return (f"{self.label}: {plural(self.gpus, 'GPU')}, {self.samples_per_s:,.0f} samples/s, "
                f"speedup {self.speedup:.2f}, efficiency {floor2(self.efficiency)}")


def floor2(x: float) -> str:
    """Two decimals rounded down, so 0.797 reads 0.79 and never passes a 0.80 target."""
    return f"{math.floor(x * 100 + 1e-9) / 100:.2f}"


def choose(all_rows: dict[str, list[SweepRow]], archs: tuple[str, ...], target: float,
           named: str | None) -> Choice:
    """Per architecture the most devices that keep the target; the architecture the cluster
    names is the one recommended, else the fastest. When the named one keeps the target on
    no more than one device, it is recommended on all the devices (the cluster as
    described), below the target. ``faster`` names the fastest other architecture when it
    gives more than :data:`FASTER_BY` times the recommended one's throughput (at the
    target, or at the same count)."""
    best: dict[str, SweepRow] = {}
    for a in archs:
        ok = [r for r in all_rows[a] if r.efficiency >= target - 1e-12]
        best[a] = ok[-1] if ok else all_rows[a][0]
    fastest = max(archs, key=lambda a: (best[a].samples_per_s, a == named))
    if named not in archs:
        pick = simplest_near(best, archs, fastest)
        return Choice(pick, best[pick], best, simpler_than=fastest if pick != fastest else None)
    row, below = best[named], False
    if row.gpus == 1 and len(all_rows[named]) > 1:
        row, below = all_rows[named][-1], True
    rival = {a: (all_rows[a][row.gpus - 1] if below else best[a]) for a in archs if a != named}
    top = max(rival, key=lambda a: rival[a].samples_per_s, default=None)
    faster = top if top and rival[top].samples_per_s > row.samples_per_s * FASTER_BY else None
    return Choice(named, row, {**best, **rival, named: row}, named=True, faster=faster,
                  below_target=below)


SIMPLEST_FIRST = ("allreduce", "ps", "hierarchical")
"""Among architectures within :data:`FASTER_BY` of the fastest, the one recommended: flat
all-reduce needs no servers and ``scalelab run`` launches it as it is (DDP); the parameter
server needs servers; ``run`` has no hierarchical mode (it runs the flat all-reduce)."""


def simplest_near(best: dict[str, SweepRow], archs: tuple[str, ...], fastest: str) -> str:
    """The simplest architecture (:data:`SIMPLEST_FIRST`) whose throughput at the target is
    within :data:`FASTER_BY` of ``fastest``'s: closer than that, none is faster within the
    model's bands."""
    top = best[fastest].samples_per_s
    if best[fastest].gpus == 1:
        return fastest  # one device exchanges nothing: no architecture is simpler there
    near = [a for a in archs if best[a].gpus > 1 and best[a].samples_per_s * FASTER_BY >= top]
    return min(near, key=SIMPLEST_FIRST.index)


def alternatives(choice: Choice, all_rows: dict[str, list[SweepRow]], cluster_gpus: int,
                 gpus_per_node: int, target: float) -> tuple[Alternative, ...]:
    """The whole cluster, one node, and the target's choice in the chosen architecture; then
    every other architecture at the target's choice (what it would give instead)."""
    rows = all_rows[choice.architecture]
    picks = [(f"all {cluster_gpus}", cluster_gpus),
             ("one node", min(gpus_per_node, cluster_gpus) if gpus_per_node > 1 else 0),
             (f"target {target:g}", choice.row.gpus)]
    out: list[Alternative] = []
    for label, g in picks:
        if g < 1 or g > len(rows) or any(a.gpus == g for a in out):
            continue
        r = rows[g - 1]
        out.append(Alternative(label, g, r.architecture, r.samples_per_s, r.speedup,
                               r.efficiency))
    for a, r in choice.best.items():
        if a == choice.architecture:
            continue
        if r.gpus == 1:  # keeps the target on one device only: what it gives at this count
            r = all_rows[a][choice.row.gpus - 1]
            if r.gpus == 1:
                continue  # one device exchanges nothing: no architecture to weigh
        tag = "faster" if a == choice.faster else "instead"
        out.append(Alternative(f"{a} ({tag})", r.gpus, a, r.samples_per_s, r.speedup,
                               r.efficiency))
    return tuple(out)


def architecture_reason(choice: Choice, archs: list[str], notes: Notes) -> None:
    """Why this architecture: the one the cluster names, or the fastest; and which other one
    would be faster, with what it gives."""
    chosen, row = choice.architecture, choice.row
    if len(archs) < 2:
        return
    others = ", ".join(f"{a} {choice.best[a].samples_per_s:,.0f} samples/s on "
                       f"{plural(choice.best[a].gpus, 'GPU')}" for a in archs if a != chosen)
    if not choice.named:
        if row.gpus > 1 and choice.simpler_than:
            notes.why("architecture", f"architecture {chosen}: the simplest within "
                      f"{FASTER_BY - 1:.0%} of the fastest that keeps the target "
                      f"({choice.simpler_than}), inside the model's bands (vs {others})")
        elif row.gpus > 1:
            notes.why("architecture", f"architecture {chosen}: the fastest that keeps the "
                      f"target (vs {others})")
        return
    if choice.faster is None:
        notes.why("architecture", f"architecture {chosen}: as the cluster names it, and "
                  f"none is faster at the target (vs {others})")
        return
    f = choice.best[choice.faster]
    where = "at the same count" if choice.below_target else "at the target"
    notes.why("architecture",
              f"architecture {chosen}: as the cluster names it ({row.samples_per_s:,.0f} "
              f"samples/s on {plural(row.gpus, 'GPU')}); {choice.faster} would be faster "
              f"{where}: "
              f"{f.samples_per_s:,.0f} samples/s on {plural(f.gpus, 'GPU')} at efficiency "
              f"{floor2(f.efficiency)} (x{f.samples_per_s / row.samples_per_s:.2f}); "
              f"set architecture = \"{choice.faster}\" to plan it (all: {others})")
