"""Numbers on the command line, checked by argparse against their ranges.

Every numeric argument of `sweep` takes its type from here, so an out-of-range value (a negative seed, a
NaN target, a port of 70000) stops in one line naming the argument and the range, before any work
starts (sweeps.cli.ArgumentParser turns argparse's errors into UsageErrors), never as a traceback from
deep inside numpy. Bounds that exist to cap the time a command takes say so in their help text.

    parser.add_argument("--bootstrap-seed", type=integer(0, MAX_SEED), default=0)
    parser.add_argument("--margin", type=real(0, 1, low_open=True), default=0.02)
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

MAX_SEED = 2**32 - 1  # numpy's and torch's seeds are unsigned 32-bit here (recipe seeds: recipe.config.MAX_SEED)


def integer(low: int, high: int, *, also: tuple[int, ...] = ()) -> Callable[[str], int]:
    """An integer in [low, high], or one of `also` (e.g. 0 meaning "none")."""
    extra = "".join(f"{value} or " for value in also)
    expected = f"{extra}an integer in [{low:,}, {high:,}]"

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}") from None
        if value not in also and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"got {value}, expected {expected}")
        return value

    return convert


def real(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
         high_open: bool = False) -> Callable[[str], float]:
    """A finite number in the interval from low to high (open at an end whose flag is set)."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    expected = ("a finite number" if math.isinf(low) and math.isinf(high)
                else f"a finite number > {low:g}" if math.isinf(high) and low_open
                else f"a finite number >= {low:g}" if math.isinf(high)
                else f"a finite number in {left}{low:g}, {high:g}{right}")

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}") from None
        inside = (math.isfinite(value) and (value > low if low_open else value >= low)
                  and (value < high if high_open else value <= high))
        if not inside:
            raise argparse.ArgumentTypeError(f"got {text}, expected {expected}")
        return value

    return convert
