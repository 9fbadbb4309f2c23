"""`advise`: from a Scenario alone to a Report whose every figure is a labelled estimate.

Order of the reasoning: missing facts and stated assumptions -> the problem in one sentence ->
where the time likely goes -> the options that apply (knowledge base, filtered by the scenario,
the hardware catalogue and the runtime catalogue) -> ranked by impact per effort within a risk
budget -> the first-week plan, the measurement plan and the guardrails. This module supplies
the estimates (the Findings); report/assemble.py, the builder optimize uses too, assembles them.

Vague facts never stop it: hardware the catalogue does not know is assumed to be the generic
hardware of its architecture, and every such assumption is listed with how to correct it. Only
contradictions (p50 above p99, a negative value, an SLO on a metric that does not exist) are
errors, raised when the scenario is read.
"""

from __future__ import annotations

from infertune.config import Scenario
from infertune.optimize.search.ranking import inside_slo
from infertune.report.assemble import Findings, Library, Subject, build_report
from infertune.report.generation import prefill_and_decode
from infertune.report.knowledge import (
    HardwareCatalogue,
    HardwareProfile,
    KnowledgeBase,
    load_knowledge,
)
from infertune.report.runtimes import RuntimeCatalogue
from infertune.report.scenario_diagnosis import diagnose
from infertune.report.schema import Diagnosis, Report

GENERIC_CPU = HardwareProfile(description="an assumed generic x86-64 CPU (AVX2)",
                              caps=frozenset({"cpu", "avx2"}), cpu="generic x86-64")


def advise(scenario: Scenario, knowledge: KnowledgeBase | None = None,
           catalogue: HardwareCatalogue | None = None,
           runtimes: RuntimeCatalogue | None = None) -> Report:
    """Build the advice Report for ``scenario``; never refuses a vague fact (see above)."""
    catalogue = catalogue or HardwareCatalogue.load()
    stated = "hardware" not in scenario.missing_facts()
    hw = catalogue.resolve(scenario.deployment.hardware) if stated else GENERIC_CPU
    subject = Subject(scenario=scenario, hardware=hw, hardware_known=stated,
                      runtime=scenario.model.runtime, runtime_source="model.runtime")
    findings = Findings(inside_slo=inside_slo(scenario), inside_measured=False,
                        diagnosis=_diagnosis(scenario, hw))
    library = Library(knowledge=knowledge or load_knowledge(),
                      runtimes=runtimes or RuntimeCatalogue.load())  # ids checked by the tests
    name = scenario.model.name or scenario.model.family or "model"
    return build_report("advice", f"Latency advice: {name}", subject, findings, library)


def _diagnosis(sc: Scenario, hw: HardwareProfile) -> Diagnosis:
    """The generic diagnosis, with prefill and decode apart for a generation task."""
    base = diagnose(sc, hw, sc.traffic.pattern or "steady")
    if sc.model.task != "generation":
        return base
    items, figures, sentence = prefill_and_decode(sc, hw)
    return base.model_copy(update={"items": [*base.items, *items],
                                   "figures": {**base.figures, **figures},
                                   "summary": f"{base.summary} {sentence}"})
