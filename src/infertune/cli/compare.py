"""`infertune compare A B [--data FILE] [--json OUT] [--budget 60s]`: is B faster than A on
this machine? Randomised interleaved blocks of single requests, the p50 and p95 ratio B/A with
a bootstrap CI (99% in the runner: it looks repeatedly, see measure/compare.py), and a verdict;
more trials are added until it is conclusive or the budget is spent.

Each side loads and runs in a timing process of its own (measure/arm_process.py), as optimize
times its survivors: two runtimes in one process take each other's cores and caches. The models
are loaded here only to read the data and check that it fits, then dropped before timing."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from infertune.cli._common import quiet_libraries
from infertune.cli.profile import load_data, progress_bars
from infertune.durations import parse_duration
from infertune.errors import ModelLoadError
from infertune.jsonfile import write_json
from infertune.measure.arm_process import ArmFailed, ArmProcess
from infertune.measure.compare import run_interleaved
from infertune.measure.profile import check_fits
from infertune.models import load


def register(app: typer.Typer) -> None:
    @app.command("compare", help="Is B faster than A here? Warm both, run randomised "
                 "interleaved trials, report the p50 and p95 ratio B/A with a bootstrap CI "
                 "and a verdict (faster / slower / no significant difference).")
    def compare_cmd(
        a: Annotated[str, typer.Argument(help="baseline: model reference or variant folder")],
        b: Annotated[str, typer.Argument(help="candidate: model reference or variant folder")],
        data: Annotated[Path | None, typer.Option(
            "--data", help="held-out inputs; defaults to the bundled set for minilm")] = None,
        json_out: Annotated[Path | None, typer.Option(
            "--json", help="write the comparison (schema infertune.compare/v1) here")] = None,
        budget: Annotated[str, typer.Option(
            "--budget", help="most time for trials when the verdict is unclear")] = "60s",
        threshold: Annotated[float, typer.Option(
            "--threshold", min=0.0, max=0.5,
            help="noise threshold: a ratio within 1 +/- this is no change")] = 0.02,
        block_size: Annotated[int, typer.Option(
            "--block-size", min=1, help="requests per block of A or B")] = 20,
        seed: Annotated[int, typer.Option("--seed", help="seed for order and bootstrap")] = 0,
    ) -> None:
        budget_s = parse_duration(budget, "--budget")
        quiet_libraries()
        requests = _checked_requests(a, b, data)
        result = compare_in_own_processes(
            a, b, requests, budget_s=budget_s, block_size=block_size, seed=seed,
            threshold=threshold)
        if json_out is not None:
            write_json(json_out, result.to_dict())
        print_result(result, json_out)


def _checked_requests(a: str, b: str, data: Path | None) -> list[list[Any]]:
    """The held-out inputs as single requests, checked against both models here; the models
    are freed on return so that neither holds memory or threads while the children time."""

    model_a, model_b = load(a), load(b)
    inputs, source = load_data(a, data, model_a)
    check_fits(model_a, inputs, source)
    check_fits(model_b, inputs, source)
    del model_a, model_b
    gc.collect()
    return [[x] for x in inputs]


def compare_in_own_processes(a: str, b: str, requests: list[list[Any]], *, budget_s: float,
                             block_size: int, seed: int, threshold: float) -> Any:
    """Interleaved trials with A and B each in a timing process of its own (ArmProcess times
    ``predict`` where it runs); a side that cannot start there is a one-line error."""

    try:
        with ArmProcess(a) as arm_a, ArmProcess(b) as arm_b, progress_bars() as update:
            result = run_interleaved(
                arm_a, arm_b, requests, budget_s=budget_s, block_size=block_size, seed=seed,
                threshold=threshold, names=(a, b), self_timed=True,
                on_trial=lambda trial, elapsed: update(
                    "interleaved trials (seconds of budget)", int(min(elapsed, budget_s)),
                    int(budget_s)))
            pids = [arm_a.pid, arm_b.pid]
    except ArmFailed as exc:
        raise ModelLoadError(f"{exc}; compare times each side in a process of its own, so each "
                          "model must load there on its own") from exc
    return dataclasses.replace(result, where="each side in its own process", pids=pids)


def print_result(result: Any, json_out: Path | None) -> None:
    console = Console(highlight=False)
    stats = result.stats
    console.print(f"A = {result.a}    B = {result.b}    ({result.where})")
    console.print(f"{stats.n_a} + {stats.n_b} single requests in {result.trials} interleaved "
                  f"trials of {result.block_size} per block, each after {result.block_warmup} "
                  f"untimed warm-up calls ({result.seconds:.1f} s; stopped: {result.stopped})")
    for est, name in ((stats.p50, "p50"), (stats.p95, "p95")):
        sa, sb = result.a_summary.p(est.percentile), result.b_summary.p(est.percentile)
        console.print(f"{name}: A {sa:.2f} ms, B {sb:.2f} ms, ratio B/A {est.ratio:.3f} "
                      f"({100 * est.confidence:g}% CI {est.low:.3f}-{est.high:.3f}) -> "
                      f"{est.verdict}")
    console.print(f"verdict (p50, noise threshold {100 * stats.threshold:g}%): {stats.verdict}"
                  + ("" if stats.conclusive else
                     " (inconclusive: the CI is wider than the noise band; raise --budget)"))
    if json_out is not None:
        console.print(f"written to {json_out}")
