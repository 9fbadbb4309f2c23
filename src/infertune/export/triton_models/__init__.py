"""Triton Python-backend models that `infertune export --to triton` copies into a model
repository as ``<model>/1/model.py``. They run inside Triton's Python backend (which provides
``triton_python_backend_utils``), not in infertune: nothing in infertune imports them, and they
import nothing from infertune, so the repository works where only Triton is installed."""
