"""A reference point's operations on its device: the peaks each runs at, the units it runs on,
and its roofline step time as a function of the fractions (what :mod:`scalelab.hardware.fit`
fits).

The fit classes: which units run a step's convolutions (plain FP32 units, TF32 tensor cores,
FP16/BF16 tensor cores); fractions are fitted per device and class.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from scalelab import hardware
from scalelab.hardware.reference import RefPoint, reference
from scalelab.opclasses import AUTOCAST_FP32_OPS, OP_CLASSES
from scalelab.theory.roofline import RooflineOp, host_step_s, step_floor_s

if TYPE_CHECKING:  # opcount imports torch; the curves read counted operations only
    from scalelab.opcount import StepOps

_HALF = ("fp16", "bf16")


def compute_peaks(device: hardware.Device, precision: str) -> tuple[float, float, float]:
    """(convolution peak, matrix-product peak, other-ops peak) in FLOP/s at ``precision``.

    PyTorch's defaults: ``torch.backends.cudnn.allow_tf32`` is True, so convolutions run in
    TF32 on devices that have it, while ``torch.backends.cuda.matmul.allow_tf32`` is False,
    so matrix products stay FP32 ("fp32"); "tf32" sets both; "fp16"/"bf16" is autocast,
    with tensor-core operations at that precision's peak. A precision the device lacks falls
    back to its FP32 peak (how the framework would run it).
    """
    fp32 = device.peak_flops("fp32")
    if fp32 is None or device.memory_bandwidth_Bps is None:
        raise ValueError(f"{device.name}: its FP32 peak or memory bandwidth is unknown, so "
                         "its step time cannot be estimated (profile on it instead)")
    tf32 = device.peak_flops("tf32") or fp32
    if precision == "fp32":
        return tf32, fp32, fp32
    if precision == "tf32":
        return tf32, tf32, fp32
    half = device.peak_flops(precision) or fp32
    return half, half, fp32


def roofline_ops(ops: StepOps, device: hardware.Device, precision: str) -> list[RooflineOp]:
    """The step's operations, each at the precision the configuration gives it.

    Peaks (:func:`compute_peaks`): dense convolutions at the convolution peak (TF32 by
    default where the device has it), matrix products and attention at the matrix-product
    peak (FP32 unless TF32 or autocast is asked), grouped and depthwise convolutions on the
    FP32 units (their kernels do not use tensor cores), everything else FP32. Bytes: under
    autocast (fp16/bf16) activations and their gradients are half-size, so an operation
    moves half its fp32 bytes, except the operations autocast keeps in fp32
    (:data:`scalelab.opcount.AUTOCAST_FP32_OPS`: layer and group norm, softmax, the losses)
    and the optimizer (fp32 parameters and state).

    Memory format: under autocast a dense convolution of a model not in channels_last
    (``ops.channels_last`` false) is of class ``conv_nchw``, with factors of its own (cuDNN's
    fp16/bf16 kernels work in NHWC: timm's RTX 3090 tables train the same models 0-51%
    faster in NHWC, the convolutional ones 13-51%).

    Units: where the step's convolutions run on tensor cores (fit class "tf32" or "half"),
    an operation with FLOPs at the FP32 peak runs on the FP32 units (an SGEMM in fp32, a
    depthwise convolution) and is marked ``units="cuda-core"``: it takes the device's
    fraction on those units (:meth:`Fit.unit_fractions`), not the tensor cores'.
    """
    conv, mm, other = compute_peaks(device, precision)
    peaks = {"conv": conv, "matmul": mm, "attention": mm}
    fp32 = device.peak_flops("fp32")
    other_units = fit_class(device.name, precision) != "cuda-core"
    nchw = precision in _HALF and not ops.channels_last
    out = []
    for o in ops.ops:
        full = o.phase == "optimizer" or o.name in AUTOCAST_FP32_OPS
        scale = 0.5 if precision in _HALF and not full else 1.0
        peak = peaks.get(o.op_class, mm if o.tensor_core and o.op_class == "elementwise"
                         else other)
        units = "cuda-core" if other_units and o.flops > 0 and peak == fp32 else ""
        cls = "conv_nchw" if nchw and o.op_class == "conv" else o.op_class
        out.append(RooflineOp(o.flops, o.bytes_fp32 * scale, peak, o.kernels, cls, units))
    return out


class _Curve:
    """R(e_c, e_m) of one step on one device, evaluated fast on arrays of fractions.

    With a_i = F_i/(P_i k_c) and b_i = B_i/(W k_m) (k: the op's class factors), op i is
    compute-bound iff a_i/b_i > e_c/e_m; sorted by that ratio, R = (sum of a over the
    compute-bound ops)/e_c + (sum of b over the rest)/e_m. Ops on other units (``u``) have
    their compute fraction e_u fixed: with a'_i = a_i/e_u, op i is memory-bound iff
    e_m < b_i/a'_i, so sorted by that ratio they add (sum of a' of the rest) + (sum of b over
    the memory-bound)/e_m. The kernels' own cost, K x tau (``kernels_s``), is added to the
    device's time. The step is floored at max(kernels x launch_s, N x h) with h the host's
    time per operation (:attr:`host_s_per_op`, or the one given to the call). The fractions
    are not capped at 1 after the class factors here.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, launch_floor_s: float, host_ops: int,
                 host_s_per_op: float, u: np.ndarray | None = None, e_u: float = 1.0,
                 kernels_s: float = 0.0):
        u = np.zeros(len(a), bool) if u is None else u
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(b > 0, a / np.where(b > 0, b, 1.0), np.inf)
        own = np.flatnonzero(~u)
        order = own[np.argsort(r[own], kind="stable")]
        self.r = r[order]
        self.a_cum = np.concatenate([[0.0], np.cumsum(a[order])])
        self.b_cum = np.concatenate([[0.0], np.cumsum(b[order])])
        fa, fb = a[u] / e_u, b[u]
        s = np.where(fa > 0, fb / np.where(fa > 0, fa, 1.0), np.inf)
        o = np.argsort(s, kind="stable")
        self.s = s[o]
        self.fa_cum = np.concatenate([[0.0], np.cumsum(fa[o])])
        self.fb_cum = np.concatenate([[0.0], np.cumsum(fb[o])])
        self.launch_floor_s = launch_floor_s
        self.host_ops = host_ops
        self.host_s_per_op = host_s_per_op
        self.kernels_s = kernels_s

    @property
    def floor_s(self) -> float:
        return max(self.launch_floor_s, host_step_s(self.host_ops, self.host_s_per_op))

    def device_s(self, e_c, e_m):
        """The device's time alone (no floor) at fractions ``e_c``, ``e_m``."""
        e_c, e_m = np.asarray(e_c, float), np.asarray(e_m, float)
        idx = np.searchsorted(self.r, e_c / e_m, side="right")
        t = (self.a_cum[-1] - self.a_cum[idx]) / e_c + self.b_cum[idx] / e_m
        if len(self.s):
            j = np.searchsorted(self.s, e_m, side="right")
            t = t + self.fa_cum[j] + (self.fb_cum[-1] - self.fb_cum[j]) / e_m
        return t + self.kernels_s

    def device_grid_s(self, grid: _Grid) -> np.ndarray:
        """:meth:`device_s` at every (e_c, e_m) of ``grid``, the same values, found faster:
        the ratio e_c/e_m is constant along a diagonal of the grid up to rounding, so each
        diagonal is looked up once (element by element only where a breakpoint falls
        between its smallest and largest ratio), and e_m is constant along a column."""
        lo = np.searchsorted(self.r, grid.diag_lo, side="right")
        hi = np.searchsorted(self.r, grid.diag_hi, side="right")
        idx = lo[grid.diag]
        for d in np.flatnonzero(lo != hi):
            on = grid.diag == d
            idx[on] = np.searchsorted(self.r, grid.ratio[on], side="right")
        e_c, e_m = grid.e_c, grid.e_m
        t = (self.a_cum[-1] - self.a_cum[idx]) / e_c + self.b_cum[idx] / e_m
        if len(self.s):
            j = np.searchsorted(self.s, grid.values, side="right")[grid.column]
            t = t + self.fa_cum[j] + (self.fb_cum[-1] - self.fb_cum[j]) / e_m
        return t + self.kernels_s

    def __call__(self, e_c, e_m, host_s_per_op: float | None = None):
        h = self.host_s_per_op if host_s_per_op is None else host_s_per_op
        floor = max(self.launch_floor_s, host_step_s(self.host_ops, h))
        return np.maximum(self.device_s(e_c, e_m), floor)


class _Grid:
    """Every pair (e_c, e_m) of one 1-D grid of fractions, as :meth:`_Curve.device_grid_s`
    reads it: e_c along the first axis, e_m along the second."""

    def __init__(self, values: np.ndarray):
        n = len(values)
        self.values = np.asarray(values, float)
        self.e_c, self.e_m = np.meshgrid(self.values, self.values, indexing="ij")
        self.ratio = self.e_c / self.e_m
        i, j = np.indices((n, n))
        self.diag = i - j + (n - 1)  # which diagonal each pair is on
        self.column = j
        self.diag_lo = np.full(2 * n - 1, np.inf)
        self.diag_hi = np.full(2 * n - 1, -np.inf)
        np.minimum.at(self.diag_lo, self.diag.ravel(), self.ratio.ravel())
        np.maximum.at(self.diag_hi, self.diag.ravel(), self.ratio.ravel())


@lru_cache(maxsize=1024)
def _raw(p: RefPoint):
    """(a_i, b_i, class index_i, on other units_i, launch floor_s, host operations, kernels)
    of point ``p``'s operations on its device."""
    dev = hardware.device(p.device)
    ops = p.ops()
    rops = roofline_ops(ops, dev, p.precision)
    a = np.array([o.flops / o.peak_flops for o in rops])
    b = np.array([o.nbytes / dev.memory_bandwidth_Bps for o in rops])
    cls = np.array([OP_CLASSES.index(o.op_class) for o in rops])
    u = np.array([bool(o.units) for o in rops])
    kernels = sum(o.kernels for o in rops)
    launch = step_floor_s(kernels, reference().launch_s)
    return a, b, cls, u, launch, ops.host_ops(p.precision), kernels


def _factor_arrays(factors) -> tuple[np.ndarray, np.ndarray]:
    kc = np.ones(len(OP_CLASSES))
    km = np.ones(len(OP_CLASSES))
    for name, c, m in factors:
        kc[OP_CLASSES.index(name)], km[OP_CLASSES.index(name)] = c, m
    return kc, km


@lru_cache(maxsize=8192)
def _curve(p: RefPoint, factors: tuple, e_u: float, host_s_per_op: float,
           kernel_s: float = 0.0) -> _Curve:
    a, b, cls, u, launch, host_ops, kernels = _raw(p)
    kc, km = _factor_arrays(factors)
    return _Curve(a / kc[cls], b / km[cls], launch, host_ops, host_s_per_op, u, e_u,
                  kernels * kernel_s)


def point_curve(p: RefPoint, factors: tuple = (), e_u: float = 1.0,
                host_s_per_op: float | None = None, kernel_s: float = 0.0) -> _Curve:
    """The point's curve R(e_c, e_m) with class factors ``((class, k_c, k_m), ...)``, the
    fraction ``e_u`` of the units its FP32-unit operations run on (see :func:`roofline_ops`),
    the host's time per operation (default: the packaged measurement) and the device's
    own cost per kernel ``kernel_s``."""
    h = reference().host_s_per_op if host_s_per_op is None else host_s_per_op
    present = _classes(p)  # factors of classes the point lacks change nothing: one curve
    return _curve(p, tuple(f for f in factors if f[0] in present), float(e_u), float(h),
                  float(kernel_s))


@lru_cache(maxsize=1024)
def _classes(p: RefPoint) -> frozenset[str]:
    """The operation classes of point ``p``'s step."""
    return frozenset(OP_CLASSES[i] for i in set(_raw(p)[2].tolist()))


def precision_class(precision: str) -> str:
    """"full" (fp32, tf32) or "half" (fp16, bf16 autocast): fractions are fitted per class."""
    return "half" if precision in _HALF else "full"


FIT_CLASSES = ("cuda-core", "tf32", "half")


def fit_class(device: str, precision: str) -> str:
    """Which units run the step's convolutions: fractions are fitted per such class.

    "half": autocast on a device with tensor cores at that precision; "tf32": fp32/tf32 on a
    device with TF32 tensor cores (PyTorch runs convolutions in TF32 by default); otherwise
    "cuda-core": plain FP32 units (V100 in fp32, P100, K80). The same code reaches different
    fractions of the peak on different units, so each class has its own pooled fractions.
    """
    dev = hardware.device(device)
    if precision in _HALF and dev.peak_flops(precision) is not None:
        return "half"
    if dev.peak_flops("tf32") is not None and precision in ("fp32", "tf32"):
        return "tf32"
    return "cuda-core"


def twin_key(device: hardware.Device) -> tuple:
    """What identifies the silicon and clocks: the peaks and the memory bandwidth."""
    return (device.fp32_tflops, device.tf32_tflops, device.fp16_tflops, device.bf16_tflops,
            device.memory_bandwidth_Bps)
