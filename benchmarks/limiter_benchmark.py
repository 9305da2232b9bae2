"""The adaptive limiter across endpoints, in virtual time, side by side with an earlier commit's.

Each scenario is a server of C slots (queueing the rest in arrival order) and
192 or 800 judge calls; service times are fixed, spread uniformly (as the
loopback server's ``latency_spread``) or log-normal (a long tail of long
replies). For five seeds it prints wall ÷ ideal (1.00 = every slot busy from
start to end), the peak requests in flight and the mean latency ÷ the mean
service time (1.0 = no request waited in the server's queue), for this
checkout's limiter and — with ``--against REV`` — the one at git revision REV:

    python benchmarks/limiter_benchmark.py [--against HEAD~1] [--seeds 5]

No sleeping and no network: see :mod:`ragtrack.llm.queue_simulation`. Over real
HTTP ``benchmarks/llm_benchmark.py`` measures the same scenarios (slower, noisier,
with the client's overhead).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from ragtrack.llm.concurrency import AdaptiveLimiter
from ragtrack.llm.queue_simulation import Scenario, simulate

SCENARIOS = {
    "one slot, fixed L": Scenario(capacity=1, latency_s=0.6, calls=24),
    "one slot, spread 0.5": Scenario(capacity=1, latency_s=0.6, calls=24, spread=0.5),
    "one slot, resumed at 8": Scenario(capacity=1, latency_s=0.6, calls=30, resume_at=8),
    "4 slots, resumed at 16": Scenario(capacity=4, resume_at=16),
    "2 slots, fixed": Scenario(capacity=2),
    "4 slots, fixed": Scenario(capacity=4),
    "4 slots, spread 0.5": Scenario(capacity=4, spread=0.5),
    "16 slots, fixed": Scenario(capacity=16),
    "16 slots, spread 0.3": Scenario(capacity=16, spread=0.3),
    "16 slots, spread 0.4": Scenario(capacity=16, spread=0.4),
    "16 slots, spread 0.5": Scenario(capacity=16, spread=0.5),
    "16 slots, spread 0.5, 800 calls": Scenario(capacity=16, spread=0.5, calls=800),
    "16 slots, spread 0.5, resumed at 16": Scenario(capacity=16, spread=0.5, resume_at=16),
    "16 slots, log-normal 0.6, 800": Scenario(capacity=16, lognormal_sigma=0.6, calls=800),
    "16 slots, log-normal 1.0, 800": Scenario(capacity=16, lognormal_sigma=1.0, calls=800),
    "16 slots, steps ×0.5-2, spread 0.5": Scenario(capacity=16, spread=0.5, calls=800, step_scale=(1, 0.5, 2, 1)),
    "8 slots, max 32, spread 0.5": Scenario(capacity=8, spread=0.5, calls=800, maximum=32),
    "16 slots, max 64, fixed": Scenario(capacity=16, calls=800, maximum=64),
    "16 -> 4 slots at 3 s, fixed": Scenario(capacity=16, calls=800, busier_at=(3.0, 4)),
    "16 -> 4 slots at 3 s, spread 0.5": Scenario(capacity=16, calls=800, spread=0.5, busier_at=(3.0, 4)),
}


def limiter_at(revision: str) -> type:
    """``AdaptiveLimiter`` as it was at ``revision``, adapted to the simulation's calls if it predates them."""
    source = subprocess.run(
        ["git", "show", f"{revision}:ragtrack/llm/concurrency.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "concurrency_then.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("concurrency_then", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    then = module.AdaptiveLimiter
    if hasattr(then, "try_acquire"):
        return then

    class Adapted(then):  # before tickets: the slot was only a context manager, replies carried nothing
        def try_acquire(self) -> bool | None:
            if self.in_flight >= int(self.limit):
                return None
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return True

        def release(self) -> None:
            self.in_flight -= 1

        def on_success(self, latency_s: float, step: str = "", sent: object = None) -> None:
            super().on_success(latency_s, step)

    return Adapted


def row(limiter: type, scenario: Scenario, seeds: int) -> str:
    runs = [simulate(scenario, seed, limiter) for seed in range(seeds)]
    return (
        " ".join(f"{r.ratio:5.2f}" for r in runs)
        + "  peak "
        + " ".join(f"{r.peak_in_flight:2d}" for r in runs)
        + "  waits "
        + " ".join(f"{r.slowdown:4.1f}" for r in runs)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also run the limiter of this git revision")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    limiters = {"this checkout": AdaptiveLimiter}
    if args.against:
        limiters = {args.against: limiter_at(args.against), **limiters}
    print(f"wall ÷ ideal for seeds 0-{args.seeds - 1}; peak in flight; mean latency ÷ service time", file=sys.stderr)
    for name, scenario in SCENARIOS.items():
        print(name)
        for label, limiter in limiters.items():
            print(f"  {label:>14}  {row(limiter, scenario, args.seeds)}")


if __name__ == "__main__":
    main()
