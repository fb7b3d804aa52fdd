"""gemmlowp's fixed-point functions (fixedpoint.h) that TFLite's reference SOFTMAX, LOGISTIC and TANH kernels
compute with: a Q(m).(31 - m) number is its int32 ``raw`` value over 2^(31 - m). Arrays of int64 holding
int32 values; every step rounds as gemmlowp does."""

from __future__ import annotations

import numpy as np

from .fixedpoint import INT32_MAX, INT32_MIN, rounding_divide_by_pot, saturating_rounding_doubling_high_mul, trunc_div

srdhm = saturating_rounding_doubling_high_mul  # the product of two fixed-point numbers: raw of Q(a + b)


def _wrap(x: np.ndarray) -> np.ndarray:
    """int32 arithmetic (gemmlowp adds raw values as int32)."""
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def saturating_rounding_multiply_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """``SaturatingRoundingMultiplyByPOT<exponent>``: a saturating left shift, or a rounding right shift."""
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    shifted = _wrap(np.asarray(x, np.int64) << exponent)
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, shifted))


def rescale(x: np.ndarray, src_integer_bits: int, dst_integer_bits: int) -> np.ndarray:
    """``Rescale<dst>``: the same number with another split of integer and fractional bits."""
    return saturating_rounding_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def rounding_half_sum(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """``RoundingHalfSum``: ``(a + b) / 2`` rounded away from zero, in 64 bits."""
    total = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    return trunc_div(total + np.where(total >= 0, 1, -1), 2)


def exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0) in Q0.31: the Taylor expansion around -1/8 to the 4th power."""
    constant_term = 1895147668  # exp(-1/8)
    constant_1_over_3 = 715827883
    x = _wrap(a + (1 << 28))  # a + 1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = saturating_rounding_multiply_by_pot(x4, -2)
    poly = saturating_rounding_multiply_by_pot(_wrap(srdhm(_wrap(x4_over_4 + x3), constant_1_over_3) + x2), -1)
    return _wrap(srdhm(constant_term, _wrap(x + poly)) + constant_term)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
           (4, 242))  # exp(-2^exponent) in Q0.31


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp(a) for a <= 0 given in Q(integer_bits), as Q0.31: exp of ``a mod 1/4`` by the polynomial, then one
    multiplication by exp(-2^k) per bit k of the rest (a barrel shifter); 0 below -32, 1 at 0."""
    fractional = 31 - integer_bits
    one_quarter = 1 << (fractional - 2)
    mask = one_quarter - 1
    a_mod_quarter_minus_one_quarter = _wrap((a & mask) - one_quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = _wrap(a_mod_quarter_minus_one_quarter - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = 1 << (fractional + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT32_MAX, result)


def _reciprocal_of_half_denominator(a: np.ndarray) -> np.ndarray:
    """x ~ 1 / d for d = (1 + a) / 2 (a in [0, 1) in Q0.31), in Q2.29: three Newton-Raphson steps from
    48/17 - 32/17 * d, as gemmlowp's two divisions share them."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    x = _wrap(srdhm(half_denominator, -1010580540) + 1515870810)  # 48/17 and -32/17 in Q2.29
    one = 1 << 29
    for _ in range(3):
        one_minus = _wrap(one - srdhm(half_denominator, x))
        x = _wrap(x + rescale(srdhm(x, one_minus), 4, 2))
    return x


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """1 / (1 + a) for a in [0, 1) in Q0.31: half the reciprocal of the half denominator."""
    return rescale(_reciprocal_of_half_denominator(a), 1, 0)  # ExactMulByPot<-1>: Q2 -> Q1, raw unchanged


def count_leading_zeros(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of each value as a uint32 (32 for 0)."""
    u = np.asarray(x, np.int64) & 0xFFFFFFFF
    bits = np.zeros(u.shape, np.int64)
    nonzero = u > 0
    bits[nonzero] = np.frexp(u[nonzero].astype(np.float64))[1]  # u = m * 2^e, m in [0.5, 1): e bits
    return 32 - bits


def get_reciprocal(x: np.ndarray, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """``GetReciprocal``: 1 / x for x > 0 in Q(x_integer_digits), as a Q0.31 scale and the bits it is over 1."""
    headroom_plus_one = count_leading_zeros(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted = ((np.asarray(x, np.int64) << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31)
    return one_over_one_plus_x_for_x_in_0_1(_wrap(shifted)), num_bits_over_unit


def one_minus_x_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """(1 - a) / (1 + a) for a in [0, 1) in Q0.31: the reciprocal of the half denominator, minus one."""
    return rescale(_wrap(_reciprocal_of_half_denominator(a) - (1 << 29)), 2, 0)


def logistic(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """1 / (1 + exp(-a)) of a Q(integer_bits) number, in Q0.31: for |a|, 1 / (1 + exp(-|a|)); for a < 0 one
    minus it; 1/2 at 0."""
    positive = a > 0
    minus_abs = np.where(positive, -a, a)  # -|a|, as exp_on_negative_values takes it
    on_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(minus_abs, integer_bits))
    return np.where(a == 0, 1 << 30, np.where(positive, on_positive, _wrap(INT32_MAX - on_positive)))


def tanh(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """tanh of a Q(integer_bits) number, in Q0.31: ``t = (1 - exp(-2|a|)) / (1 + exp(-2|a|))`` (the doubling
    is a change of integer bits on the same raw value), signed as ``a``; 0 at 0."""
    negative = a < 0
    n = np.where(negative, a, -a)  # -|a|
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, 0, np.where(negative, -t, t))


def inv_sqrt_quantized_multiplier(x: np.ndarray, reverse_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """``GetInvSqrtQuantizedMultiplierExp``: 1 / sqrt(x) of each x >= 0 (an int32 sum of squares) as a Q0.31
    multiplier and a shift (times ``reverse_shift``): x brought into [2^27, 2^29) by shifts of two bits, five
    Newton-Raphson steps ``y = 1.5 y - (x / 2) y^3`` in Q3.28 from y = 1, times sqrt(2) / 2; x <= 1 gives
    INT32_MAX and 0."""
    small = np.asarray(x, np.int64) <= 1
    value = np.where(small, 4, np.asarray(x, np.int64))
    shift = np.full(value.shape, 11, np.int64)
    while (big := value >= (1 << 29)).any():
        value = np.where(big, value // 4, value)
        shift += big
    pairs = (count_leading_zeros(value) - 1) // 2 - 1
    shift -= pairs
    value = value << (2 * pairs)
    half_input = rounding_divide_by_pot(value >> 1, 1)  # SaturatingRoundingMultiplyByPOT<-1>, Q3.28
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3.28
    y = np.full(value.shape, 1 << 28, np.int64)  # F3::One()
    for _ in range(5):
        y3 = rescale(srdhm(srdhm(y, y), y), 9, 3)
        y = rescale(_wrap(srdhm(half_three, y) - srdhm(half_input, y3)), 6, 3)
    y = srdhm(y, 1518500250)  # times sqrt(2) / 2 in Q0.31: Q3.28 still
    negative = shift < 0
    y = np.where(negative, _wrap(y << np.where(negative, -shift, 0)), y)
    shift = np.where(negative, 0, shift) * reverse_shift
    return np.where(small, INT32_MAX, y), np.where(small, 0, shift)



def _saturating_shift_left(x: np.ndarray | int, exponent: np.ndarray | int) -> np.ndarray:
    """TFLite's ``SaturatingRoundingMultiplyByPOTParam`` for exponents >= 0 (one per value): ``x << exponent``,
    saturated to the int32 range."""
    x64 = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    threshold = (np.int64(1) << (31 - e)) - 1
    shifted = _wrap(x64 << e)
    return np.where(x64 > threshold, INT32_MAX, np.where(x64 < -threshold, INT32_MIN, shifted))


def _saturate(x: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(x, np.int64), INT32_MIN, INT32_MAX)


# The constants of log_x_for_x_greater_than_or_equal_to_1_impl, in Q0.31.
_LOG_2, _SQRT_SQRT_HALF, _SQRT_HALF, _ONE_QUARTER = 1488522236, 1805811301, 1518500250, 536870912
_ALPHA_N, _ALPHA_D, _ALPHA_I, _ALPHA_F = 117049297, 127690142, 1057819769, 638450708


def log_x_for_x_greater_than_or_equal_to_1(x: np.ndarray, input_bits: int, output_bits: int) -> np.ndarray:
    """``log_x_for_x_greater_than_or_equal_to_1_impl<output_bits, input_bits>`` (TFLite's common.h): ln(x) for
    x >= 1 in Q(input_bits): x = 2^z * r with r in [sqrt(1/2), sqrt(2)) (two candidate splits, the better one
    kept), z * ln 2 plus a rational approximation of ln(r) around 2^-1/4, summed with one more integer bit
    of headroom and rescaled to Q(output_bits)."""
    accum = output_bits + 1
    shifted_quarter = rescale(np.array(_ONE_QUARTER, np.int64), 0, accum)
    z_a = np.asarray(x, np.int64)
    z_a_headroom_plus_1 = count_leading_zeros(z_a)
    r_a_tmp = _saturating_shift_left(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = _saturating_shift_left(srdhm(r_a_tmp, _SQRT_HALF), 1)
    z_a_pow_2_adj = _saturate(_saturating_shift_left(input_bits - z_a_headroom_plus_1, 31 - accum) + shifted_quarter)
    z_b = srdhm(z_a, _SQRT_HALF)
    z_b_headroom = count_leading_zeros(z_b) - 1
    r_b_raw = _saturating_shift_left(z_a, z_b_headroom)
    z_b_pow_2_adj = _saturate(_saturating_shift_left(input_bits - z_b_headroom, 31 - accum) - shifted_quarter)
    r = np.minimum(r_a_raw, r_b_raw)
    z_pow_2_adj = np.maximum(z_a_pow_2_adj, z_b_pow_2_adj)
    p = rounding_half_sum(r, _SQRT_SQRT_HALF)
    q = _wrap(r - _SQRT_SQRT_HALF)
    q = _wrap(q + q)
    common_sq = srdhm(q, q)
    num = _wrap(srdhm(q, r) + srdhm(srdhm(q, common_sq), _ALPHA_N))
    denom_minus_one = _wrap(srdhm(p, _wrap(_wrap(_ALPHA_I + q) + srdhm(_ALPHA_D, common_sq))) + srdhm(_ALPHA_F, q))
    recip_denom = one_over_one_plus_x_for_x_in_0_1(denom_minus_one)
    num_scaled = rescale(num, 0, accum)
    return rescale(_wrap(srdhm(z_pow_2_adj, _LOG_2) + srdhm(num_scaled, recip_denom)), accum, output_bits)
