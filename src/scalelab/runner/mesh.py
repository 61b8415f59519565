"""The device mesh of a :class:`~scalelab.parallel.ParallelLayout`.

One mesh for every degree, with its dimensions in torchtitan's order (``ParallelDims``):
``pp`` outermost, then ``dp``, ``cp`` and ``tp`` innermost, so that the ranks of one
tensor-parallel group are consecutive (the GPUs of one node, where NVLink is), and a
pipeline's stages are the furthest apart. Rank ``r`` sits at::

    r = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i

Every dimension is in the mesh, of size 1 where the layout has no such parallelism, so a
one-rank mesh (one GPU, or one CPU process) is the same code path as a cluster's.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelab.parallel import ParallelLayout

#: The mesh's dimension names, outermost first (torchtitan's order).
DIMS = ("pp", "dp", "cp", "tp")


@dataclass(frozen=True)
class Coords:
    """Where one rank sits on the mesh."""

    pp: int
    dp: int
    cp: int
    tp: int


def shape_of(layout: ParallelLayout) -> tuple[int, ...]:
    """The mesh's shape, in :data:`DIMS` order."""
    return tuple(getattr(layout, d) for d in DIMS)


def coords_of(layout: ParallelLayout, rank: int) -> Coords:
    """The mesh coordinates of a global rank (the formula of the module docstring)."""
    if not 0 <= rank < layout.gpus:
        raise ValueError(f"rank {rank} is outside a mesh of {layout.gpus} ranks")
    out = {}
    for name in reversed(DIMS):
        size = getattr(layout, name)
        out[name] = rank % size
        rank //= size
    return Coords(**out)


def rank_of(layout: ParallelLayout, c: Coords) -> int:
    """The global rank at mesh coordinates ``c`` (inverse of :func:`coords_of`)."""
    r = 0
    for name in DIMS:
        r = r * getattr(layout, name) + getattr(c, name)
    return r


def build_mesh(layout: ParallelLayout, device_type: str):
    """The ``DeviceMesh`` of ``layout`` over the default process group's ranks (which
    must number ``layout.gpus``), with dimensions named :data:`DIMS`."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    layout.check_world(dist.get_world_size())
    return init_device_mesh(device_type, shape_of(layout), mesh_dim_names=DIMS)
