"""The model of data-parallel training, as pure functions.

Every formula scalelab uses lives here once: :mod:`amdahl` (speedup and efficiency),
:mod:`comm` (parameter-server, ring and hierarchical exchange times, overlap), :mod:`sizing`
(the parameter-server lemma, the worker-link condition, the bandwidth a target needs),
:mod:`sharding` (how tensors land on servers), :mod:`io` (input pipeline). Numbers in,
numbers or frozen dataclasses out; no I/O, no torch. Sizes in bytes, times in seconds,
rates in bytes/s.
"""
