#!/usr/bin/env bash
# The package ships whole: build the wheel, install it (not editable, core + onnx extra, no
# torch) into a fresh virtual environment outside the checkout, check that every data file
# under src/infertune is inside it, and run doctor, advise and optimize from that install.
# Usage: scripts/check_wheel.sh [WORKDIR]   (a temporary folder by default; kept on failure)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d -t infertune-wheel.XXXXXX)}
mkdir -p "$work"
python=${PYTHON:-python3}
echo "check_wheel: building the wheel in $work/dist"
"$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$repo" 2>&1 | grep -v "is ignored" || true
wheel=$(ls "$work"/dist/infertune-*.whl)
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet -c "$repo/constraints.txt" "${wheel}[onnx]" 2>&1 \
  | grep -v "is ignored" || true
"$work/venv/bin/python" - "$wheel" "$repo/src/infertune" <<'PY'
import sys, zipfile, pathlib
wheel, src = sys.argv[1], pathlib.Path(sys.argv[2])
inside = set(zipfile.ZipFile(wheel).namelist())
data = sorted(str(p.relative_to(src.parent)) for p in src.rglob("*")
              if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
              and ".egg-info" not in str(p))
missing = [d for d in data if d not in inside]
if missing:
    sys.exit(f"check_wheel: data files missing from the wheel: {missing}; add their glob to "
             "[tool.setuptools.package-data] in pyproject.toml")
print(f"check_wheel: all {len(data)} data files are in the wheel")
PY
cd "$work"  # nowhere near src/: the installed package is the one imported
bin="$work/venv/bin"
"$bin/python" -c "import infertune, sys; assert 'site-packages' in infertune.__file__, infertune.__file__; assert 'torch' not in sys.modules"
"$bin/infertune" doctor --json > hardware.json
"$bin/infertune" advise "$repo/examples/scenarios/reranker-t4.yaml" --format json --out advise.json
"$bin/python" -c "import json; assert json.load(open('advise.json'))['recommendation'] is not None"
PYTHONPATH="$repo/tests/helpers" "$bin/python" - <<'PY'
import numpy as np, yaml
from onnx_graphs import WIDTH, make_mlp
from pathlib import Path
make_mlp(Path("mlp.onnx"))
np.savez("data.npz", inputs=np.random.default_rng(3).standard_normal((200, WIDTH)).astype(np.float32))
Path("scenario.yaml").write_text(yaml.safe_dump({
    "model": {"name": "mlp", "family": "other", "task": "embedding", "framework": "onnx"},
    "deployment": {"target": "container", "hardware": {"cpu": "test cpu"}, "cost_per_hour_usd": 0.1},
    "inputs": {"typical": {"batch_size": 1}},
    "slo": {"p95_ms": 5, "p99_ms": 10},
    "traffic": {"pattern": "steady", "mean_rps": 50, "peak_rps": 100},
    "constraints": {"quality_floor": {"metric": "mean_cosine", "min": 0.99}}}))
PY
"$bin/infertune" optimize mlp.onnx --scenario scenario.yaml --data data.npz --quick \
  --budget 45s --out run > optimize.log
test -s run/report.json
echo "check_wheel: doctor, advise and optimize ran from the installed wheel in $work"
