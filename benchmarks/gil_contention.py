"""Why serve runs an eager PyTorch model's batches in worker processes: the same forward, on a
worker thread, while another Python thread of the same process is busy part of the time (as the
serving event loop is: HTTP parsing, queueing, JSON), against the same forward with that thread
idle. The busy thread works in 1 ms slices for a duty cycle of 0, 30 and 60 %.

An eager forward runs hundreds of small operators with Python between them; the GIL that the
Python needs is taken by the busy thread, so the forward slows down with the duty cycle. A
worker process has its own GIL (serve/model_processes.py).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gil_contention.py [--model minilm] [--batch 8]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    from infertune.libraries import quiet_libraries
    from infertune.models import load

    quiet_libraries()
    adapter = load(args.model)
    texts = ["Fast inference matters when users wait for every answer. (request 3-17)"]
    batch = texts * args.batch
    worker = ThreadPoolExecutor(1)
    worker.submit(adapter.predict, batch).result()  # warm
    stop = threading.Event()

    def busy(duty: float) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < 0.001 * duty:
                sum(range(100))  # Python work: holds the GIL
            time.sleep(0.001 * (1 - duty))

    import torch

    print(f"model {args.model}, batch {args.batch}, torch intra-op threads "
          f"{torch.get_num_threads()}; forward on a worker thread, median of {args.reps}")
    for duty in (0.0, 0.3, 0.6):
        stop.clear()
        other = threading.Thread(target=busy, args=(duty,))
        other.start()
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            worker.submit(adapter.predict, batch).result()
            times.append((time.perf_counter() - start) * 1000)
        stop.set()
        other.join()
        print(f"  other thread busy {duty:4.0%}: {statistics.median(times):6.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
