"""Optimize: passes that turn the baseline into self-contained, checked variants, and the run
that searches them.

    from infertune.optimize import PassContext, build_variants
    results = build_variants(baseline, PassContext(baseline, hardware, out_dir, calibration))

Where things are: run.py runs the stages in order (stages/, one module per stage; its
__init__ lists them) over the typed RunState and RunPaths (state.py) and saves the RunRecord
(record.py); search/ chooses what to try and what wins within the time budget; served/ measures
serving (traffic, the policy sweep, the confirmation as served); passes/ builds the variants
(passes/variant_files.py writes their folders); server_tune/ tunes an LLM server's flags;
quickcheck.py is ``advise --measure``; knowledge/ the options a CPU run
lists but cannot measure."""

from infertune.optimize.passes import (
    REGISTRY,
    Pass,
    PassContext,
    QualityTarget,
    build_variants,
    check_variant,
    create_pass,
)
from infertune.optimize.passes.variant_files import Variant, VariantResult, agreement, predict_rows

__all__ = ["REGISTRY", "Pass", "PassContext", "QualityTarget", "Variant", "VariantResult",
           "agreement", "build_variants", "check_variant", "create_pass", "predict_rows"]
