"""The provenance rule as a reusable check: every number in a report sits inside a Figure (or a
Series) whose ``source`` is "measured" or "estimate" and whose ``basis`` says where it comes from.
A Figure labelled measured carries its sample count and names the artifact that measured it (a
path relative to the run folder, e.g. "profile.json", or the one label `advise --measure` uses:
it saves no file), and the check follows its derivations (``inputs``): one computed from an
estimate is an estimate, and a "measured" label on it is reported. A measured figure in a
unit only a derivation gives (DERIVED_UNITS) must name its inputs, so none escapes the check.

Numbers under a ``settings`` key are exempt: they are configuration we chose (a serving policy's
max batch size), not results. Booleans are not numbers here.
"""

from __future__ import annotations

from typing import Any

from infertune.report.schema import IN_PROCESS_ARTIFACT

SOURCES = ("measured", "estimate")
# "policy": Report.serving.policy knobs; "targets": the SLO as the user stated it
EXEMPT_KEYS = frozenset({"settings", "policy", "targets"})
# units no instrument reads: a figure in one is computed from others (a ratio of two timings,
# a price over a rate, a count from a rate, a rate from a latency), so a measured one must name
# them in ``inputs``, or the check could not follow it back to an estimate
DERIVED_UNITS = ("% change", "USD per 1,000 requests", "instances", "requests/s per worker")


def provenance_problems(report: dict[str, Any]) -> list[str]:
    """Every place in ``report`` that breaks the rule, as 'path: what is wrong'."""
    problems: list[str] = []
    _walk(report, "$", covered=False, problems=problems)
    return problems


def assert_all_figures_have_provenance(report: dict[str, Any]) -> None:
    """Raise AssertionError listing (at most ten) numbers without provenance in ``report``
    (a report dict, e.g. ``Report.to_dict()`` or json.load of report.json)."""
    problems = provenance_problems(report)
    if problems:
        shown = "\n  ".join(problems[:10])
        raise AssertionError(f"{len(problems)} figure(s) without provenance:\n  {shown}")


def _is_figure(node: dict[str, Any]) -> bool:
    return "source" in node and "basis" in node


def _derived_estimates(node: dict[str, Any], path: str) -> list[str]:
    """Paths of the estimates a figure derives from, however deep (its ``inputs``)."""
    out: list[str] = []
    for i, child in enumerate(node.get("inputs") or []):
        where = f"{path}.inputs[{i}]"
        if isinstance(child, dict):
            out += [where] if child.get("source") == "estimate" else []
            out += _derived_estimates(child, where)
    return out


def artifact_problem(artifact: object) -> str | None:
    """Why ``artifact`` does not name where a figure was measured, or None when it does: a
    relative path inside the run folder ("variants/int8/latency.json"), or the in-process
    label of `advise --measure`."""
    if not isinstance(artifact, str) or not artifact.strip():
        return "labelled measured without the artifact that measured it"
    if artifact == IN_PROCESS_ARTIFACT:
        return None
    # no absolute path, URL, drive, Windows separator, blank, "." or ".." segment
    segments = artifact.split("/")
    if ("\\" in artifact or ":" in artifact or any(ch.isspace() for ch in artifact)
            or any(seg in ("", ".", "..") for seg in segments)):
        return (f"artifact {artifact!r} is not a path relative to the run folder (like "
                "'variants/<id>/latency.json')")
    return None


def _check_measured(node: dict[str, Any], path: str, problems: list[str]) -> None:
    """A figure labelled measured carries its sample count, names the artifact that measured
    it and derives from no estimate: a value computed from an estimate is an estimate, whatever
    else went into it."""
    if node.get("source") != "measured":
        return
    if "unit" in node and not node.get("samples"):  # a Figure (a Series holds its points)
        problems.append(f"{path}: labelled measured without a sample count")
    wrong = artifact_problem(node.get("artifact"))
    if wrong is not None:
        problems.append(f"{path}: {wrong}")
    unit = node.get("unit")
    if isinstance(unit, str) and unit.startswith(DERIVED_UNITS) and not node.get("inputs"):
        problems.append(f"{path}: labelled measured in {unit!r}, a unit only a derivation "
                        "gives, without the figures it was derived from (inputs)")
    for where in _derived_estimates(node, path):
        problems.append(f"{path}: labelled measured but derived from the estimate at {where}; "
                        "label it an estimate")


def _walk(node: Any, path: str, covered: bool, problems: list[str]) -> None:
    if isinstance(node, dict):
        if _is_figure(node):
            if node["source"] not in SOURCES:
                problems.append(f"{path}.source = {node['source']!r}: must be one of {SOURCES}")
            basis = node["basis"]
            if not isinstance(basis, str) or not basis.strip():
                problems.append(f"{path}.basis: empty; say where the figure comes from")
            _check_measured(node, path, problems)
            covered = True
        elif "source" in node and isinstance(node["source"], str) and not covered:
            # an Option's own source label: it must still be one of the two kinds
            if node["source"] not in SOURCES:
                problems.append(f"{path}.source = {node['source']!r}: must be one of {SOURCES}")
        for key, child in node.items():
            if key in EXEMPT_KEYS:
                continue
            _walk(child, f"{path}.{key}", covered, problems)
    elif isinstance(node, list | tuple):
        for i, child in enumerate(node):
            _walk(child, f"{path}[{i}]", covered, problems)
    elif isinstance(node, int | float) and not isinstance(node, bool) and not covered:
        problems.append(f"{path} = {node!r}: a number outside any Figure (no source/basis)")
