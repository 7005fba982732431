"""Benchmark of the fitter: one 200-point curve fitted, and 1,000 bootstrap refits, default and paper methods.

    .venv/bin/python -m benchmarks.bench_fit [--repeats 3] [--n-boot 1000]

Targets (issue 3): a fit under 0.2 s, 1,000 bootstrap refits under 10 s on a 2-core CPU. The curve is
the paper's ScaleRL 8B row (A 0.610, B 1.92, C_mid 2542, R0 0.30) evaluated every 100 GPU-hours from
100 to 20,000 with Gaussian noise sd 0.01; the whole curve is the fit window. Times are medians over
--repeats runs; the load average is printed because other jobs sharing the CPU slow every figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from fitting import bootstrap_fit, fit_sigmoid, sigmoid_curve

FIT_TARGET_S, BOOT_TARGET_S = 0.2, 10.0


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per bootstrap timing (fits: 10x as many)")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()

    compute = np.arange(100.0, 20001.0, 100.0)
    pass_rate = sigmoid_curve(compute, 0.610, 1.92, 2542, 0.30) + np.random.default_rng(0).normal(0, 0.01, 200)
    load_before = os.getloadavg()[0]
    rows = []
    for method in ("default", "paper"):
        fit = fit_sigmoid(compute, pass_rate, r0=0.30, method=method)  # warm-up (imports, caches)
        fit_s = median_seconds(lambda m=method: fit_sigmoid(compute, pass_rate, r0=0.30, method=m), 10 * args.repeats)
        boot_s = median_seconds(lambda f=fit: bootstrap_fit(f, n_boot=args.n_boot, target=40000, seed=0), args.repeats)
        rows.append((method, fit.n_points, fit_s, boot_s, fit.a, fit.b, fit.c_mid))
    load_after = os.getloadavg()[0]

    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}; {os.cpu_count()} CPUs")
    print(f"| method | points | fit (s) | {args.n_boot} bootstrap refits (s) | A | B | C_mid |")
    print("|---|---|---|---|---|---|---|")
    for method, n, fit_s, boot_s, a, b, c_mid in rows:
        print(f"| {method} | {n} | {fit_s:.3f} | {boot_s:.2f} | {a:.3f} | {b:.2f} | {c_mid:.0f} |")
    met = all(fit_s < FIT_TARGET_S and boot_s < BOOT_TARGET_S * args.n_boot / 1000 for _, _, fit_s, boot_s, *_ in rows)
    print(f"targets (fit < {FIT_TARGET_S} s, 1,000 refits < {BOOT_TARGET_S} s): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
