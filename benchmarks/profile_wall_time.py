"""How long does `infertune profile minilm --json out.json` take here, and on what kind of
machine load? The goal is under 120 s on a 2-core machine. Prints the wall time, each step's
share, and the machine's load average and other processes' CPU use during the run, so a slow
result can be told apart from a busy machine.

    .venv/bin/python benchmarks/profile_wall_time.py [--quick] [extra profile args...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 120.0


def main() -> None:
    extra = sys.argv[1:]
    exe = str(Path(sys.executable).with_name("infertune"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.json"
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run([exe, "profile", "minilm", "--json", str(out), *extra],
                              capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        load_after = os.getloadavg()[0]
        if done.returncode != 0:
            print(done.stderr.strip().splitlines()[-1])
            sys.exit(done.returncode)
        data = json.loads(out.read_text())
    print(f"infertune profile minilm {' '.join(extra)}: {wall:.1f} s wall "
          f"({wall / GOAL_S:.2f} x the {GOAL_S:.0f} s goal)")
    print(f"  inside profile(): {data['seconds']:.1f} s; steps: " + ", ".join(
        f"{k} {v:.1f} s" for k, v in data["step_seconds"].items()))
    util = data["utilisation"]
    print(f"  load average {load_before:.1f} -> {load_after:.1f} on "
          f"{util['logical_cores']} cores; other processes kept {util['other_cores']:.1f} "
          "cores busy during the timed requests")
    print(f"  requests timed: {data['stages']['summaries']['e2e']['count']}; curve points "
          f"measured: {len(data['curve']['points'])}, unmeasured: "
          f"{len(data['curve']['unmeasured'])}")


if __name__ == "__main__":
    main()
