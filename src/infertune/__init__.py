"""infertune: measured, ranked, low-risk changes that cut ML inference latency and cost."""

__version__ = "0.1.0"
