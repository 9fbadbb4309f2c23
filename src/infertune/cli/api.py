"""The Python API, ``infertune.api``: what ``infertune optimize | advise | serve | loadtest``
do, as typed calls.

    from infertune import api

    run = api.optimize(api.OptimizeOptions(model="model.onnx", scenario="scenario.yaml",
                                           data="inputs.npz", out="runs/my-model", quick=True))
    print(run.report.recommendation)                # the typed report.json
    with api.serve(api.ServeOptions(run.run_dir, port=0)) as server:   # serving, in a thread
        result = api.loadtest(api.LoadtestOptions(f"{server.url}/v1/predict"))

Each call takes one frozen options object, checked when it is built, and returns a typed
result; each calls the functions its command calls (nothing here measures or decides anything
the command would not), and raises the command's errors (``infertune.errors``: a
``ConfigError`` or ``ModelLoadError`` states the rule and the fix) instead of exiting.

It lives here, in ``cli/``, because it is the layer the commands stand on: ``infertune
optimize``, ``advise``, ``serve`` and ``loadtest`` parse their flags into these options and call
these functions (or the steps they are made of: ``prepare_serve``/``build_server``,
``load_target``), so the rules (the budget's minimum, the held-out data default, the run
folder's claim; the serve policy's layers in cli/serving.py) live once, here, and the commands
add only their progress displays and printing. Nothing here imports a command module; the
package exposes it as ``infertune.api``.

Why the verbs live in ``infertune.api`` and not on the package: ``infertune.optimize`` and
``infertune.serve`` are the stage packages of the pipeline (one folder per stage). A function
of the same name on ``infertune`` would be replaced by the subpackage as soon as anything
imports it (``import infertune.serve`` sets that attribute), and a module made callable would
be invisible to type checkers, the readers a typed API is for. So the four verbs keep the
commands' names here, ``infertune.advise`` and ``infertune.loadtest`` (no package of that
name) are also re-exported from ``infertune``, and ``from infertune import api`` gives one
spelling for all four.

``import infertune`` imports nothing heavy; this module loads the command layer (numpy, no
model runtime): onnxruntime and torch are imported inside the calls that need them.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from infertune import models
from infertune.artifacts import RunDir
from infertune.cli._common import quiet_libraries
from infertune.cli.serving import (
    build_policy,
    exposure_warnings,
    int8_warnings,
    resolve_target,
    size_model_threads,
)
from infertune.config import Scenario, ServePolicy, load_scenario
from infertune.data import HeldOut, default_heldout, read_heldout
from infertune.durations import parse_duration
from infertune.errors import ConfigError
from infertune.hardware import detect
from infertune.loadgen.inprocess import InProcessTarget
from infertune.loadgen.result import LoadResult
from infertune.loadgen.runner import RunOptions, run_load
from infertune.loadgen.schedules import ScheduleSpec, build_schedule
from infertune.loadgen.targets import HttpTarget, Target, load_bodies
from infertune.models import load
from infertune.models.adapter import ModelInfo
from infertune.optimize.quickcheck import check_variants
from infertune.optimize.run import DEFAULT_BUDGET_S, QUICK_BUDGET_S
from infertune.optimize.run import OptimizeOptions as StageOptions
from infertune.optimize.run import optimize as run_stages
from infertune.optimize.search.budget import Progress
from infertune.optimize.search.costs import BudgetChoice
from infertune.report.advisor import advise as build_advice
from infertune.report.measured import add_measurements
from infertune.report.run_report import write_run_report
from infertune.report.schema import Report
from infertune.report.vague import VagueReadings
from infertune.serve import create_app, run_server
from infertune.serve.cascade import without_spinning
from infertune.serve.model_processes import ModelSource, uses_processes

__all__ = ["AdviseOptions", "LoadtestOptions", "OptimizeOptions", "OptimizeResult", "Server",
           "ServeOptions", "advise", "loadtest", "optimize", "serve"]

READY_TIMEOUT_S = 120.0  # warm-up of a large model on 2 cores takes tens of seconds
MIN_BUDGET_S = 45.0  # setup + a quick profile + one variant screened + the report


# ---------------------------------------------------------------------------------- optimize

@dataclass(frozen=True)
class OptimizeOptions:
    """``infertune optimize MODEL --scenario FILE``: ``budget`` is a duration ("90s", "5m"),
    seconds, or "auto" (default 5.5 min, 1.5 min with ``quick``); ``out`` defaults to
    runs/<model>-<time>; ``data`` may be left out for ``minilm`` (its bundled set)."""

    model: str
    scenario: Path | str
    data: Path | str | None = None
    out: Path | str | None = None
    budget: str | float | None = None
    quick: bool = False
    candidates: tuple[str, ...] = ()
    seed: int = 0
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not Path(self.scenario).is_file():
            raise ConfigError(f"scenario {self.scenario} not found; pass the path of a "
                              "scenario YAML file (see examples/scenarios/)")


@dataclass(frozen=True)
class OptimizeResult:
    """A finished run: its folder (which holds the whole story) and its typed report."""

    run_dir: Path
    report: Report

    @property
    def recommended_variant(self) -> Path | None:
        """The recommended variant's folder; None when the report keeps the baseline."""
        rec = self.report.recommendation
        if rec is None or rec.variant_id is None:
            return None
        return self.run_dir / "variants" / rec.variant_id

    @property
    def report_html(self) -> Path:
        return self.run_dir / "report.html"


def optimize(options: OptimizeOptions, *, progress: Progress | None = None,
             on_budget: Callable[[BudgetChoice], None] | None = None) -> OptimizeResult:
    """Run every stage of ``infertune optimize`` into ``options.out`` and write its report.
    ``progress`` hears each stage and step (``stage(name, detail)``, ``tick(detail)``), the
    report's writing last; ``on_budget`` hears what ``budget="auto"`` chose and why."""

    scenario = load_scenario(options.scenario)
    budget_s = budget_seconds(options)
    held = heldout_for(options.model, Path(options.data) if options.data is not None else None)
    quiet_libraries()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = Path(options.out or Path("runs") / f"{Path(options.model).stem}-{stamp}")
    claim_run_folder(folder, options.overwrite)
    state = run_stages(StageOptions(
        model=options.model, scenario=scenario, data=held, out=folder, budget_s=budget_s,
        quick=options.quick, candidates=list(options.candidates), seed=options.seed,
        scenario_source=str(options.scenario), budget_auto=_auto(options.budget)),
        progress=progress, on_budget=on_budget)
    if progress is not None:
        progress.stage("report", "writing report.json, report.md, report.html")
    write_run_report(state.paths.root)
    return OptimizeResult(state.paths.root, RunDir(state.paths.root).report(Report))


def budget_seconds(options: OptimizeOptions) -> float:
    """The run's budget in seconds: ``options.budget``, else the default (quick: shorter);
    "auto" starts from the default and is sized once the model is measured."""

    budget = options.budget
    text = None if _auto(budget) or budget is None else _budget_text(budget)
    return parse_budget(text, QUICK_BUDGET_S if options.quick else DEFAULT_BUDGET_S)


def _auto(budget: str | float | None) -> bool:
    return isinstance(budget, str) and budget.strip().lower() == "auto"


def _budget_text(budget: str | float) -> str:
    return budget if isinstance(budget, str) else f"{float(budget):g}s"


def parse_budget(text: str | None, default: float) -> float:
    """``--budget`` in seconds (``default`` when not given), at least MIN_BUDGET_S."""

    try:
        seconds = parse_duration(text, "--budget") if text is not None else default
    except ConfigError as exc:
        raise ConfigError(f"{exc}; or pass --budget auto to size it from the model") from exc
    if seconds < MIN_BUDGET_S:
        raise ConfigError(
            f"a budget of {seconds:g} s is too small to measure anything: optimize needs at "
            f"least {MIN_BUDGET_S:g} s (about 10 s to load and profile the baseline, 15 s to "
            "build and screen one variant, 10 s to time it against the baseline, 10 s for the "
            "report) and about 5 minutes for a full run; pass --budget 1m with --quick, or "
            "--budget 5m")
    return seconds


def heldout_for(model: str, path: Path | None) -> HeldOut:
    """The held-out inputs: ``path``, or minilm's bundled set."""

    if path is not None:
        return read_heldout(path)
    if model == "minilm":
        return default_heldout()
    raise ConfigError(f"no held-out data for {model!r}; pass --data with a .jsonl, .csv or "
                      ".npz file of typical inputs (the bundled set is for minilm only)")


def claim_run_folder(folder: Path, overwrite: bool) -> None:
    """Refuse to mix a new run into an earlier one; with ``overwrite``, clear it first so no
    stale variant folder from the old run sits beside the new report."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ConfigError(f"--out {folder} is a file; pass a folder for the run")
    if not any(folder.iterdir()):
        return
    if not overwrite:
        raise ConfigError(f"--out {folder} already holds files (an earlier run?); pass another "
                          "--out, or --overwrite to replace it")
    shutil.rmtree(folder)


# ------------------------------------------------------------------------------------ advise

@dataclass(frozen=True)
class AdviseOptions:
    """``infertune advise SCENARIO [--measure MODEL]``: advice from the scenario alone (every
    figure a labelled estimate), or with ``measure`` timed on this machine where it can."""

    scenario: Path | str
    measure: str | None = None


def advise(options: AdviseOptions | Path | str, *,
           interview: Callable[[Scenario], Scenario] | None = None,
           on_measure: Callable[[str], None] | None = None) -> Report:
    """The advice report (missing facts, diagnosis, ranked options, plan) for a scenario;
    render it with ``infertune.report.render.render(report, "md")``. ``interview`` may fill
    in the scenario's missing facts before the advice (``infertune advise -i`` asks for
    them); ``on_measure`` hears the model about to be measured."""

    if not isinstance(options, AdviseOptions):
        options = AdviseOptions(options)
    readings = VagueReadings()  # "50ms", "about 50", "spiky at lunch": read, and listed
    scenario = load_scenario(options.scenario, prepare=readings.read)
    if interview is not None:
        scenario = interview(scenario)
    report = build_advice(scenario)
    if options.measure is not None:
        quiet_libraries()
        if on_measure is not None:
            on_measure(options.measure)
        report = add_measurements(report, scenario, options.measure, check=check_variants)
    if readings.assumptions:  # each vague value, as read, is an assumption of the advice
        report = report.model_copy(
            update={"assumptions": readings.assumptions + report.assumptions})
    return report


# ------------------------------------------------------------------------------------- serve

@dataclass(frozen=True)
class ServeOptions:
    """``infertune serve TARGET``: TARGET is a model reference, a variant folder, or a run
    folder (its recommended variant and policy). ``policy`` holds the fields to change: only
    the ones set when it was built (``ServePolicy(max_batch_size=16)``) override the run's
    policy and ``config``, as flags do. ``port=0`` takes a free port (``Server.url``)."""

    target: Path | str
    host: str = "127.0.0.1"
    port: int = 8000
    policy: ServePolicy | None = None
    config: Path | None = None  # serve.yaml: ServePolicy fields
    fast_model: str | None = None  # cascade: a fast model answering confident inputs
    insecure_no_auth: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535 (0: a free one), got {self.port}")


@dataclass
class Server:
    """A server built and warmed by nothing yet: ``run()`` serves until SIGTERM/SIGINT, as the
    command does; ``with server:`` serves on a background thread for the block and returns
    once /readyz answers 200 (warm-up done)."""

    app: Any  # the ASGI app (serve.create_app)
    policy: ServePolicy
    model_ref: str
    host: str
    port: int
    warnings: tuple[str, ...] = ()
    model: ModelInfo | None = None  # the served model's id, version and runtime
    model_threads: int | None = None  # intra-op threads per worker (torch); None: the runtime's
    worker_processes: bool = False  # batches run in child processes, not worker threads
    ready_timeout_s: float = READY_TIMEOUT_S
    _uvicorn: Any = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def run(self) -> None:
        run_server(self.app, host=self.host, port=self.port)

    def __enter__(self) -> Server:
        # run_server's settings (no graceful-shutdown cut-off, no access log); uvicorn skips
        # its signal handlers off the main thread, so __exit__ stops it instead
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=None, access_log=False)
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._uvicorn.run, name="infertune-serve",
                                        daemon=True)
        self._thread.start()
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self._uvicorn = self._thread = None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while not self._uvicorn.started:  # bound, lifespan (queue, workers) started
            if not self._thread or not self._thread.is_alive():
                raise ConfigError(f"the server on {self.host}:{self.port} did not start (is "
                                  "the port in use?); pass another port, or 0 for a free one")
            _wait_until(deadline, f"the server on {self.url} to start")
        if self.port == 0:  # the port the OS picked
            self.port = self._uvicorn.servers[0].sockets[0].getsockname()[1]
        with httpx.Client(timeout=5.0) as client:
            while client.get(f"{self.url}/readyz").status_code != 200:  # warm-up runs
                _wait_until(deadline, f"{self.url}/readyz to answer 200 (warm-up)")


def _wait_until(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise ConfigError(f"gave up waiting for {what}; raise Server.ready_timeout_s for a "
                          "large model")
    time.sleep(0.05)


@dataclass(frozen=True)
class ServeSetup:
    """What serving needs before the model loads: the options, the model reference the target
    resolved to, the merged policy and the warnings to print at start and show on /readyz."""

    options: ServeOptions
    model_ref: str
    policy: ServePolicy
    warnings: tuple[str, ...]


def prepare_serve(options: ServeOptions) -> ServeSetup:
    """Resolve the target and merge the policy layers (cli/serving.py); refuse an exposed
    address without an API key (ConfigError) and warn of an INT8 scheme this CPU saturates."""

    model_ref, report_policy = resolve_target(str(options.target))
    policy = build_policy(report_policy, options.config, options.policy or ServePolicy())
    warnings = exposure_warnings(options.host, policy, options.insecure_no_auth)
    warnings += int8_warnings(model_ref, detect(with_gpus=False))
    return ServeSetup(options, model_ref, policy, tuple(warnings))


def build_server(setup: ServeSetup) -> Server:
    """Load the model (and the cascade's fast one), size its threads and build the app."""

    options, policy = setup.options, setup.policy
    quiet_libraries()
    adapter = load(setup.model_ref)
    fast = load(options.fast_model) if options.fast_model else None
    if fast is not None:
        adapter, fast = without_spinning(adapter, fast)
    adapter, threads = size_model_threads(adapter, policy,
                                          detect(with_gpus=False).effective_cores)
    source = ModelSource(setup.model_ref, adapter.info.version,
                         threads if adapter.info.runtime == "torch" else None)
    app = create_app(adapter, policy, fast_adapter=fast, warnings=list(setup.warnings),
                     model_source=source)
    return Server(app, policy, setup.model_ref, options.host, options.port, setup.warnings,
                  model=adapter.info, model_threads=threads,
                  worker_processes=uses_processes(policy.worker_kind, adapter.info.runtime,
                                                  source))


def serve(options: ServeOptions | Path | str) -> Server:
    """Load the model and build the server as ``infertune serve`` does (the same policy
    layers, exposure check, INT8 and thread sizing), ready to ``run()`` or enter. The
    release router (``--stable``/``--canary``) and ``--engine ray`` stay with the command."""
    if not isinstance(options, ServeOptions):
        options = ServeOptions(options)
    return build_server(prepare_serve(options))


# ---------------------------------------------------------------------------------- loadtest

def _default_schedule() -> ScheduleSpec:
    return ScheduleSpec(shape="poisson", rate=10.0, duration_s=30.0)


@dataclass(frozen=True)
class LoadtestOptions:
    """``infertune loadtest TARGET``: an http(s) URL (POSTed JSON bodies), or a model
    reference run in-process behind serve's own batcher (``policy``: its batching knobs).
    ``schedule`` is the open-loop arrival schedule (``infertune.loadgen.schedules.
    ScheduleSpec``: shape, rate, duration_s, seed, ...); ``bodies`` a JSONL file of request
    bodies (or raw model inputs in-process), used round-robin. The streaming LLM APIs
    (``--api openai-chat``) stay with the command."""

    target: str
    schedule: ScheduleSpec = field(default_factory=_default_schedule)
    bodies: Path | None = None
    policy: ServePolicy | None = None
    max_in_flight: int | None = None
    timeout_s: float = 30.0
    spin_ms: float = 1.0

    def __post_init__(self) -> None:
        if not self.target:
            raise ConfigError("loadtest needs a target: an http(s) URL or a model reference")


def loadtest(options: LoadtestOptions) -> LoadResult:
    """Send the schedule open-loop and summarise latency from each request's intended send
    time (percentiles with CIs, goodput, sheds, client lag), as ``infertune loadtest``."""

    target = load_target(options)
    return run_load(build_schedule(options.schedule), target,
                    run_options(options))  # closes the target when done


def run_options(options: LoadtestOptions) -> RunOptions:
    """How the runner sends: the in-flight cap, the seed, the busy-wait before each send."""
    return RunOptions(max_in_flight=options.max_in_flight, seed=options.schedule.seed,
                      spin_s=options.spin_ms / 1000)


def load_target(options: LoadtestOptions) -> Target:
    """An http(s) URL's target, or the model loaded in-process behind serve's own runtime
    with ``options.policy``'s batching knobs."""

    bodies = load_bodies(options.bodies) if options.bodies is not None else None
    if options.target.startswith(("http://", "https://")):
        return HttpTarget(options.target, bodies=bodies, timeout_s=options.timeout_s)

    given = options.policy or ServePolicy()
    policy = ServePolicy(max_batch_size=given.max_batch_size, max_wait_ms=given.max_wait_ms,
                         workers=given.workers, max_queue=given.max_queue)
    quiet_libraries()
    adapter = models.load(options.target)
    inputs = bodies if bodies is not None else adapter.sample_inputs(64)
    # serve's own runtime; its response cache is off because the inputs are replayed
    # round-robin, and a cache answering the repeats would hide the model's latency. An eager
    # torch model's batches run in worker processes, as `infertune serve` runs them.
    return InProcessTarget(adapter, policy.model_copy(update={"cache_size": 0}), inputs,
                           model_source=ModelSource(options.target, adapter.info.version,
                                                    policy.model_threads))
