"""Times the quick `capsbench` commands (--help, --version, list ..., show-config) against `python -c pass`,
interleaved round by round so that machine load hits both alike, and prints each command's median wall time and
its ratio to the bare interpreter's.

    uv run python benchmarks/cli_startup.py [--repeats 7] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = [
    ["--help"],
    ["--version"],
    ["list", "models"],
    ["list", "datasets"],
    ["list", "suites"],
    ["list", "checkpoints"],
    ["show-config", "suite=accuracy"],
    ["show-config", "suite=robustness", "--format", "json"],
]
TARGET_SECONDS = 1.5


def _wall(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="rounds; each times every command once")
    parser.add_argument("--cache-dir", help="checkpoint cache for `list checkpoints` (default: an empty directory)")
    args = parser.parse_args()
    cli = [sys.executable, "-c", "from capsbench.cli import main; main()"]
    with tempfile.TemporaryDirectory() as cwd:
        commands = [c + ([f"cache_dir={args.cache_dir}"] if args.cache_dir and c[-1] == "checkpoints" else [])
                    for c in COMMANDS]
        runs: dict[str, list[float]] = {"python -c pass": []} | {" ".join(c): [] for c in commands}
        for _ in range(args.repeats):
            runs["python -c pass"].append(_wall([sys.executable, "-c", "pass"], cwd))
            for command in commands:
                runs[" ".join(command)].append(_wall(cli + command, cwd))
    base = statistics.median(runs["python -c pass"])
    print(f"median of {args.repeats} runs each (interleaved); target < {TARGET_SECONDS} s")
    print(f"{'command':48s} {'median s':>9s} {'min s':>7s} {'ratio':>7s}")
    for name, times in runs.items():
        median = statistics.median(times)
        flag = "" if median < TARGET_SECONDS else "  (over target)"
        print(f"{name:48s} {median:9.3f} {min(times):7.3f} {median / base:7.1f}{flag}")


if __name__ == "__main__":
    main()
