"""Token files: a flat binary of token ids, as nanoGPT's ``prepare.py`` and many pipelines
write them (``--data PATH.bin``), memory-mapped and read in random windows.

The file is ids back to back with no header, little-endian, ``uint16`` or ``uint32``
(:func:`scalelab.token_models.token_dtype`: ``--token-dtype``, or by the vocabulary:
uint16 up to 65,536 ids, else uint32). It is opened with ``numpy.memmap``: nothing is read
until a window is, so a file larger than memory trains as a small one.

Windows. One sample is ``seq_len`` consecutive ids starting anywhere a whole window fits,
``0 <= start <= n - seq_len``; the next-token loss predicts ids 1..S-1 of the window from
0..S-2. The global batch of step s (W workers at per-worker batch b) is the W*b starts
drawn by ``numpy.random.default_rng(mix(seed, s))``
(:class:`scalelab.runner.data.TokenFileShards`), and worker k takes starts
``[k*b, (k+1)*b)`` of them: the union over the workers is one global batch, and one process
at batch W*b draws the same W*b starts (the same generator, the first W*b draws), so data
parallelism and one process see the same tokens, and a resumed run draws what the
interrupted one would have. A window is drawn with replacement: epochs are not tracked.

Checked when opened (one line, exit 2): a path that is no file, a size that is not a whole
number of ids, fewer ids than one sequence, an id that reaches the vocabulary (the whole file
is scanned for its largest id once, in chunks of 16 Mi ids: 0.14 s for 32 Mi uint16 ids on
this machine's CPU; the result is kept per file version in this process).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from scalelab.errors import UsageError

_CHUNK = 1 << 24


@lru_cache(maxsize=16)
def _largest_id(path: str, dtype: str, version: tuple[int, int]) -> int:
    ids = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
    return max(int(ids[i:i + _CHUNK].max()) for i in range(0, len(ids), _CHUNK))


class TokenFile:
    """The ids of ``path``, memory-mapped and checked against ``vocab`` and ``seq_len``."""

    def __init__(self, path: str | Path, vocab: int, seq_len: int, dtype: str = "uint16"):
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"--data {path}: no such token file (a flat binary of "
                             f"{dtype} token ids)")
        item = np.dtype(dtype).itemsize
        size = p.stat().st_size
        if size % item:
            raise UsageError(f"--data {path}: {size} bytes is not a whole number of {dtype} "
                             f"ids ({item} bytes each; --token-dtype says which)")
        self.path, self.dtype, self.seq_len = str(p), dtype, seq_len
        self.n = size // item
        if self.n < seq_len:
            raise UsageError(f"--data {path}: {self.n} token ids, shorter than one sequence "
                             f"of --seq-len {seq_len}")
        st = p.stat()
        top = _largest_id(self.path, dtype, (st.st_mtime_ns, st.st_size))
        if top >= vocab:
            raise UsageError(f"--data {path}: holds token id {top}, which reaches the "
                             f"model's vocabulary of {vocab} (ids 0..{vocab - 1}; "
                             f"--token-dtype {dtype})")
        self.ids = np.memmap(self.path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")

    def starts(self, seed: int, count: int) -> np.ndarray:
        """``count`` window starts, the first ``count`` draws of a generator seeded ``seed``
        (the runner's ``mix(seed, step)``)."""
        rng = np.random.default_rng(seed)
        return rng.integers(0, self.n - self.seq_len + 1, size=count)

    def windows(self, starts) -> np.ndarray:
        """The windows at ``starts``, (len(starts), seq_len) int64."""
        return np.stack([np.asarray(self.ids[s:s + self.seq_len], dtype=np.int64)
                         for s in starts])


def write_tokens(path: str | Path, ids, dtype: str = "uint16") -> Path:
    """Write ``ids`` as a flat little-endian binary of ``dtype`` (what :class:`TokenFile`
    reads); for tests, examples and users who hold their ids in memory."""
    arr = np.asarray(ids)
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < 0 or arr.max() > info.max):
        raise ValueError(f"ids outside {dtype}'s range 0..{info.max}")
    p = Path(path)
    arr.astype(np.dtype(dtype).newbyteorder("<")).tofile(p)
    return p
