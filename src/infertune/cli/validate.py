"""`infertune validate MODEL VARIANT --floor ...` — check one variant against a quality floor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from infertune.cli._common import quiet_libraries
from infertune.config import load_scenario
from infertune.data import default_heldout, read_heldout
from infertune.errors import DataError, ModelLoadError, QualityFloorError
from infertune.models import BUILTIN, TextAdapter, load
from infertune.models.loaders import files_hash
from infertune.models.runners import OrtRunner, ort_session
from infertune.quality.floor import floor_from_config, parse_floor
from infertune.quality.validate import compare_quality, preflight

HELP = "\n\n".join([
    "Check a VARIANT against the baseline MODEL on held-out data and a quality floor.",
    "\b\nFloor grammar (--floor):\n"
    "  METRIC>=X  or  METRIC<=X   an absolute bound on the variant's metric\n"
    "  METRIC drop<=X             may worsen by at most X from the baseline\n"
    "  METRIC drop<=X%            ... by at most X% of the baseline's score\n"
    "  e.g. 'cosine>=0.99' (cosine = mean_cosine), 'accuracy drop<=1%'",
    "Metrics: accuracy, macro_f1, top_k_accuracy@K (or top5_accuracy), argmax_agreement, mae, "
    "rmse, mean_cosine, min_cosine, knn_agreement@K, spearman, ndcg@K, rank_agreement, "
    "max_abs_diff, max_rel_diff. Label metrics need a label per example; the others compare "
    "with the baseline.",
    "Verdict, from a seeded paired-bootstrap 95% CI over the examples: pass (exit 0) when the "
    "whole CI is inside the floor; fail (exit 1) when wholly outside; inconclusive (exit 1, "
    "since the floor is not shown to hold) when the CI straddles it, with an estimate of how "
    "many more examples would decide it (CI width shrinks about as 1/sqrt(n)). Floors on "
    "min_cosine, max_abs_diff and max_rel_diff are judged on the examples seen, as a bootstrap "
    "CI of an extreme is unreliable.",
    "VARIANT may be any model reference, or an .onnx file exported from MODEL, which is then run "
    "with MODEL's tokenizer and postprocessing.",
])


Model = Annotated[str, typer.Argument(help="The baseline: a model reference or 'minilm'.")]
Variant = Annotated[str, typer.Argument(help="The variant to check (see above).")]
Data = Annotated[Path | None, typer.Option(
    "--data", help="Held-out data (.jsonl/.csv/.npz); minilm defaults to its bundled set.")]
Floor = Annotated[str | None, typer.Option(
    "--floor", help="The quality floor, e.g. 'cosine>=0.99'; default: the --scenario's.")]
ScenarioFile = Annotated[Path | None, typer.Option(
    "--scenario", help="Scenario YAML whose constraints.quality_floor to use.")]
JsonOut = Annotated[Path | None, typer.Option(
    "--json", help="Write the result (quality.json format) here.")]
Task = Annotated[str | None, typer.Option(
    "--task", help="classification|regression|embedding|reranking|other; default: the "
    "model's.")]
Metric = Annotated[list[str] | None, typer.Option(
    "--metric", help="Report this metric too (repeatable); default: the task's set.")]
BatchSize = Annotated[int, typer.Option("--batch-size", min=1)]
InputColumn = Annotated[str, typer.Option("--input-column")]
LabelColumn = Annotated[str, typer.Option("--label-column")]
Resamples = Annotated[int, typer.Option("--resamples", min=100, help="Bootstrap resamples.")]
Seed = Annotated[int, typer.Option("--seed", help="Bootstrap seed.")]


@dataclass(frozen=True)
class ValidateOptions:
    """``infertune validate MODEL VARIANT``: the held-out data, the floor (``floor`` text, or
    the ``scenario``'s), the metrics and the bootstrap."""

    model: str
    variant: str
    data: Path | None = None
    floor: str | None = None
    scenario: Path | None = None
    json_out: Path | None = None
    task: str | None = None
    metrics: tuple[str, ...] = ()
    batch_size: int = 32
    input_column: str = "input"
    label_column: str = "label"
    resamples: int = 1000
    seed: int = 0


def validate(model: Model, variant: Variant, data: Data = None, floor: Floor = None,
             scenario: ScenarioFile = None, json_out: JsonOut = None, task: Task = None,
             metric: Metric = None, batch_size: BatchSize = 32,
             input_column: InputColumn = "input", label_column: LabelColumn = "label",
             resamples: Resamples = 1000, seed: Seed = 0) -> None:
    run(ValidateOptions(model, variant, data, floor, scenario, json_out, task,
                        tuple(metric or ()), batch_size, input_column, label_column,
                        resamples, seed))


def register(app: typer.Typer) -> None:
    app.command("validate", help=HELP)(validate)


def run(o: ValidateOptions) -> None:
    """Run both models on the held-out data and judge the floor; exit 1 (QualityFloorError)
    when it is not met or the evidence is inconclusive."""

    chosen = _floor(o.floor, o.scenario)
    held = _data(o.model, o.data, o.input_column, o.label_column)
    metrics = list(o.metrics) or None
    preflight(chosen, held.labels is not None, metrics, o.task, held.source)
    baseline, candidate = _load_pair(o.model, o.variant, o.task)
    result = _run(baseline, candidate, held, chosen, metrics, o.batch_size, o.task,
                  o.resamples, o.seed)
    if o.json_out is not None:
        result.save(o.json_out)
    _print(result, o.json_out)
    check = result.floor_check
    if result.verdict == "fail":
        raise QualityFloorError(f"quality floor not met: {check.explanation}")
    if result.verdict == "inconclusive":
        raise QualityFloorError(f"quality floor inconclusive: {check.explanation}")


def _floor(text: str | None, scenario: Path | None) -> Any:
    if text is not None:
        return parse_floor(text)
    if scenario is not None:
        config = load_scenario(scenario).constraints.quality_floor
        if config is not None:
            return floor_from_config(config)
        raise QualityFloorError(f"{scenario} sets no constraints.quality_floor; add one or "
                                "pass --floor 'cosine>=0.99'")
    raise QualityFloorError("no quality floor given; pass --floor (e.g. 'cosine>=0.99') or "
                            "--scenario FILE with constraints.quality_floor")


def _data(model: str, path: Path | None, input_column: str, label_column: str) -> Any:
    if path is not None:
        return read_heldout(path, input_column=input_column, label_column=label_column)
    if model == BUILTIN:
        return default_heldout()
    raise DataError(f"--data is required for {model!r} (only {BUILTIN!r} has a bundled set); "
                    "pass a .jsonl, .csv or .npz file")


def _load_pair(model: str, variant: str, task: str | None) -> tuple[Any, Any]:
    """The baseline, and the variant; an .onnx variant of a text model borrows its tokenizer."""

    quiet_libraries()
    baseline = load(model, task=task)
    path = Path(variant)
    if path.suffix == ".onnx" and path.is_file() and isinstance(baseline, TextAdapter):
        try:
            session = ort_session(str(path))
        except Exception as exc:  # onnxruntime raises untyped errors for bad graphs
            raise ModelLoadError(f"{path}: not a loadable ONNX model ({type(exc).__name__})") \
                from exc
        runner = OrtRunner(session, precision=_onnx_precision(path))
        return baseline, baseline.with_runner(runner, id=path.stem, version=files_hash([path]),
                                              source=str(path))
    return baseline, load(variant, task=task)


_INTEGER_OPS = {"MatMulInteger", "DynamicQuantizeLinear", "QLinearMatMul", "ConvInteger",
                "QLinearConv", "DynamicQuantizeMatMul", "MatMulNBits"}


def _onnx_precision(path: Path) -> str:
    """"int8" when every MatMul is quantized, "int8+fp32" when some stay float, else "fp32"
    (read from the graph's operators; the file has no precision field)."""
    import onnx  # the onnx extra: see cli/__init__

    ops = [node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node]
    if not any(op in _INTEGER_OPS for op in ops):
        return "fp32"
    return "int8+fp32" if "MatMul" in ops else "int8"


def _run(baseline: Any, variant: Any, held: Any, floor: Any, metrics: list[str] | None,
         batch_size: int, task: str | None, resamples: int, seed: int) -> Any:
    columns = (TextColumn("running both models"), BarColumn(), MofNCompleteColumn())
    console = Console(stderr=True)
    # no bar when stderr is not a terminal: CI logs and scripts get only the one-line result
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        job = bar.add_task("validate", total=2 * len(held))
        return compare_quality(
            baseline, variant, held, floor, metrics or None, batch_size, task=task,
            progress=lambda n: bar.advance(job, n), resamples=resamples, seed=seed,
        )


def _print(result: Any, json_out: Path | None) -> None:
    console = Console()
    console.print(f"baseline {result.baseline}\nvariant  {result.variant}\n"
                  f"data     {result.data_source} ({result.n_examples} examples, "
                  f"{'with' if result.has_labels else 'no'} labels; task {result.task})")
    table = Table()
    table.add_column("metric", no_wrap=True)
    for name in ("vs", "baseline", "note"):
        table.add_column(name)
    table.add_column("variant [95% CI]", no_wrap=True)
    for m in result.metrics:
        note = "extreme: CI unreliable" if m.note else ""
        if m.diff is not None:
            note = f"diff {m.diff:+.4f} [{m.diff_ci_low:+.4f}, {m.diff_ci_high:+.4f}]"
        table.add_row(m.name, m.vs, f"{m.baseline_value:.4f}", note,
                      f"{m.value:.4f} [{m.ci_low:.4f}, {m.ci_high:.4f}]")
    console.print(table)
    if result.drift is not None:
        parts = ", ".join(f"{s.name} {s.verdict}" + (f" (PSI {s.psi:.3f})" if s.psi is not None
                                                     else "") for s in result.drift.summaries)
        console.print(f"output drift: {result.drift.verdict} — {parts}")
    console.print(f"verdict: {result.verdict.upper()} for {result.floor_check.floor.text()}")
    console.print(result.floor_check.explanation, soft_wrap=True)
    if json_out is not None:
        console.print(f"wrote {json_out}")
