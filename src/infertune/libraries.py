"""Quiet third-party libraries in infertune's own processes (commands, model workers)."""

from __future__ import annotations

import logging


def quiet_libraries() -> None:
    """Silence Hugging Face progress bars and info logs on the command line (only there: the
    library API leaves global logging alone). torchao, when installed, logs a warning per
    optional CUDA kernel it cannot load and torch warns about its enum registrations; neither
    concerns a user, and both would break the one-line error promise on stderr."""
    for noisy in ("torchao", "torch.utils._pytree"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        # transformers is the torch extra: imported on use, quieted only where installed
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
