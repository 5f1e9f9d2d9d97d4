"""A grid key's values: a list as written, or a range (``linspace``, ``logspace``, ``arange``) expanded here.

A range's values are the floats numpy gives (``numpy.linspace``, ``logspace``, ``arange`` with their
defaults), computed in Python's own float arithmetic so that they are the same on every host (no BLAS, SIMD
or libm in the way): the run identity hashes them bit for bit.

- ``linspace: [start, stop, num]``: x_i = start + i * step with step = (stop - start) / (num - 1), the last
  value ``stop`` itself (numpy's formula: a product and a sum, each rounded once).
- ``logspace: [start_exp, stop_exp, num]``: 10 ** x_i of that linspace, each the float nearest to the power
  (computed in ``decimal`` with 40 digits, then rounded once: numpy's ``power`` calls libm or SVML, whose last
  bit may differ between hosts).
- ``arange: [start, stop, step]``: ceil((stop - start) / step) values start, start + step, then start + i * d
  with d = (start + step) - start (numpy's fill); integers when all three are integers.
"""

from __future__ import annotations

import decimal
import math

from hbvm_core.errors import ConfigError

RANGES = ("linspace", "logspace", "arange")
#: the most values of one range (a typo such as 1e9 for 1e4 is refused instead of filling the memory)
MAX_RANGE_VALUES = 10**7


def grid_values(where: str, values) -> list:
    """The values of one grid key (``where``: its key in messages): a non-empty list as it is, or the expansion
    of a one-key mapping ``{linspace|logspace|arange: [a, b, c]}``; ConfigError naming the key otherwise."""
    if isinstance(values, list):
        if not values:
            raise ConfigError(f"{where} = []: expected a non-empty list of values or a range")
        return values
    if not isinstance(values, dict) or len(values) != 1 or next(iter(values)) not in RANGES:
        raise ConfigError(
            f"{where} = {values!r}: expected a non-empty list of values or one range "
            "({linspace: [start, stop, num]}, {logspace: [start_exp, stop_exp, num]} or {arange: [start, stop, step]})"
        )
    ((spacing, args),) = values.items()
    where = f"{where}.{spacing}"
    third = "step" if spacing == "arange" else "num"
    if not isinstance(args, list) or len(args) != 3:
        raise ConfigError(f"{where} = {args!r}: expected 3 numbers [start, stop, {third}]")
    for name, x in zip(("start", "stop", third), args):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ConfigError(f"{where} = {args!r}: {name} = {x!r} is not a finite number")
    start, stop, third_value = args
    if spacing == "arange":
        return arange(where, start, stop, third_value)
    if isinstance(third_value, float) and third_value.is_integer():
        third_value = int(third_value)
    if not isinstance(third_value, int) or not 1 <= third_value <= MAX_RANGE_VALUES:
        raise ConfigError(f"{where} = {args!r}: num = {args[2]!r}: expected an integer from 1 to {MAX_RANGE_VALUES}")
    xs = linspace(float(start), float(stop), third_value)
    if spacing == "logspace":
        xs = [power10(x) for x in xs]
        if not all(0.0 < x < math.inf for x in xs):
            raise ConfigError(f"{where} = {args!r}: 10 ** {max(args[:2], key=abs)!r} is not a finite float above 0")
    return xs


def linspace(start: float, stop: float, num: int) -> list[float]:
    """numpy.linspace(start, stop, num) (endpoint included), in Python floats."""
    if num == 1:
        return [start]
    div, delta = num - 1, stop - start
    step = delta / div
    if step == 0.0:  # numpy divides first when the step underflows: y = arange(num) / div * delta
        xs = [i / div * delta + start for i in range(num)]
    else:
        xs = [i * step + start for i in range(num)]  # numpy: y = arange(num) * step; y += start
    xs[-1] = stop
    return xs


_CONTEXT = decimal.Context(prec=40, rounding=decimal.ROUND_HALF_EVEN, Emax=10**6, Emin=-(10**6))


def power10(x: float) -> float:
    """10 ** x rounded to the nearest float (40 digits in ``decimal``, then once to a float: the same bits on
    every host)."""
    return float(_CONTEXT.power(decimal.Decimal(10), decimal.Decimal(x)))


def arange(where: str, start, stop, step) -> list:
    """numpy.arange(start, stop, step) for step > 0 (integers when all three are integers)."""
    if not step > 0:
        raise ConfigError(f"{where} = {[start, stop, step]!r}: step = {step!r}: expected a number > 0")
    if not stop > start:
        raise ConfigError(f"{where} = {[start, stop, step]!r}: stop = {stop!r} is not above start = {start!r}")
    if all(isinstance(x, int) for x in (start, stop, step)):
        count = len(range(start, stop, step))
        _count(where, [start, stop, step], count)
        return list(range(start, stop, step))
    start, stop, step = float(start), float(stop), float(step)
    count = math.ceil((stop - start) / step)
    _count(where, [start, stop, step], count)
    second = start + step
    d = second - start  # numpy fills from the first two values: x_i = start + i * (x_1 - x_0)
    return [start, second, *(start + i * d for i in range(2, count))][:count]


def _count(where: str, args: list, count: int) -> None:
    if count > MAX_RANGE_VALUES:
        raise ConfigError(f"{where} = {args!r}: {count:.3g} values, more than {MAX_RANGE_VALUES}")
