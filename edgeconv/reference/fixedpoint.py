"""TFLite's integer arithmetic, element-wise on NumPy arrays: the fixed-point multiplier and shift that stand
for a real scale, and the rounding the reference kernels apply (tensorflow/lite/kernels/internal/common.h,
quantization_util.cc, gemmlowp's fixedpoint.h). Every function here is exact: int64 NumPy arithmetic, no
float approximation of a requantization."""

from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def round_half_away(x: float) -> int:
    """``TfLiteRound``/``std::round``: halves away from zero (Python's ``round`` goes to even)."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier``: ``real = quantized_multiplier * 2^(shift - 31)`` with the multiplier in
    [2^30, 2^31) (a Q0.31 fraction in [0.5, 1)); ``shift`` > 0 is a left shift."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = round_half_away(q * (1 << 31))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return INT32_MAX, 30
    return q_fixed, shift


def trunc_div(x: np.ndarray, divisor: int | np.ndarray) -> np.ndarray:
    """C's integer division (towards zero), not NumPy's floor division."""
    return np.where(x >= 0, x // divisor, -((-x) // divisor))


def round_half_away_array(x: np.ndarray) -> np.ndarray:
    """:func:`round_half_away` of each value (``std::round`` of a float32 quotient), in float64 so that adding
    the half is exact (in float32, 0.49999997 + 0.5 would already round up to 1)."""
    wide = np.asarray(x, dtype=np.float64)
    return np.where(wide >= 0, np.floor(wide + 0.5), -np.floor(-wide + 0.5)).astype(np.int64)


def saturating_rounding_doubling_high_mul(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: the high 32 bits of ``2 * a * b``, rounded to nearest
    (a nudge of 2^30, or 1 - 2^30 for a negative product, then C division by 2^31); INT32_MIN * INT32_MIN
    saturates to INT32_MAX."""
    a64 = np.asarray(a, dtype=np.int64)
    b64 = np.asarray(b, dtype=np.int64)
    ab = a64 * b64
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = trunc_div(ab + nudge, 1 << 31)
    overflow = (a64 == INT32_MIN) & (b64 == INT32_MIN)
    return np.where(overflow, INT32_MAX, high).astype(np.int64)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded to nearest, halves away from zero."""
    x64 = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x64 & mask
    threshold = (mask >> 1) + (x64 < 0)
    return (x64 >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray | int,
                                     shift: np.ndarray | int) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier(x, quantized_multiplier, shift)``: ``x * real`` for the real number
    :func:`quantize_multiplier` encoded, as the reference kernels round it: a left shift first (``shift`` >
    0, in int32 as C does), the doubling high multiply, then a rounding right shift (``shift`` < 0)."""
    s = np.asarray(shift, dtype=np.int64)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    shifted = (np.asarray(x, dtype=np.int64) << left).astype(np.int32).astype(np.int64)  # C: int32 x * (1 << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, multiplier), right)


def multiply_by_quantized_multiplier_single_rounding(x: np.ndarray, multiplier: np.ndarray | int,
                                                     shift: np.ndarray | int) -> np.ndarray:
    """``x * real`` rounded once: ``(x * M + 2^(30 - s)) >> (31 - s)`` in 64 bits (TFLite's
    ``TFLITE_SINGLE_ROUNDING`` form). LiteRT's reference FULLY_CONNECTED with per-channel weights rounds this
    way (measured: 0 of 10,000 values differ, 24 with the double rounding of
    :func:`multiply_by_quantized_multiplier`)."""
    total = 31 - np.asarray(shift, dtype=np.int64)
    product = np.asarray(x, dtype=np.int64) * np.asarray(multiplier, dtype=np.int64)
    return (product + (np.int64(1) << (total - 1))) >> total


def multiply_by_quantized_multiplier_int64(x: np.ndarray, multiplier: np.ndarray | int,
                                           shift: np.ndarray | int) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier(int64_t x, ...)``, what the int16x8 convolutions requantize their int64
    accumulators with: the multiplier reduced to 16 bits (``(M + 2^15) >> 16``, at most ``0x7FFF``), then one
    rounding shift by ``15 - shift``."""
    m = np.asarray(multiplier, dtype=np.int64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - np.asarray(shift, dtype=np.int64)
    return (np.asarray(x, dtype=np.int64) * reduced + (np.int64(1) << (total - 1))) >> total


def activation_range(activation: str, scale: float, zero_point: int, qmin: int, qmax: int) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized``: the fused activation as a clamp of the quantized output, the
    real bounds quantized with the output's scale and zero point (float32 division, rounded half away)."""
    def quantize(real: float) -> int:
        return zero_point + round_half_away(float(np.float32(real) / np.float32(scale)))

    if activation == "RELU":
        return max(qmin, quantize(0.0)), qmax
    if activation == "RELU6":
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    if activation == "RELU_N1_TO_1":
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    if activation in ("NONE", None):
        return qmin, qmax
    raise ValueError(f"fused activation {activation} has no integer clamp")
