"""Optimize: passes that turn the baseline into self-contained, checked variants.

    from infertune.optimize import PassContext, build_variants
    results = build_variants(baseline, PassContext(baseline, hardware, out_dir, calibration))

The search and ranking over these variants live beside this package (search.py)."""

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
