"""How far each INT8 scheme's dynamic quantization lands from fp32 on THIS CPU, side by side in
one run, on the test MLP (tests/helpers/onnx_graphs.py): U8S8 at full range saturates on CPUs
without VNNI (vpmaddubsw's 16-bit pair sums), which is why optimize offers it only with VNNI.
Also prints how far onnxruntime lands from a numpy model of each scheme (0 where no kernel
saturates). Usage: python benchmarks/int8_schemes.py"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from int8_reference import simulate_dynamic_int8  # noqa: E402
from onnx_graphs import WIDTH, make_mlp  # noqa: E402

from infertune.hardware import detect  # noqa: E402
from infertune.optimize.passes._onnx import quiet_quantizer  # noqa: E402

SCHEMES = [("U8S8 full range", "int8", False), ("U8S8 reduce_range", "int8", True),
           ("U8U8", "uint8", False)]


def main() -> None:
    hw = detect(with_gpus=False)
    print(f"# {hw.cpu_model}, flags: {' '.join(hw.flags) or 'none of the relevant ones'}")
    tmp = Path(tempfile.mkdtemp())
    src = make_mlp(tmp / "mlp.onnx")
    x = np.random.default_rng(1).standard_normal((48, WIDTH)).astype(np.float32)
    ref = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    print(f"{'scheme':18s} {'per channel':>11s} {'max |err|':>10s} {'mean cos':>9s} "
          f"{'|ort - numpy model|':>20s}")
    for label, weight, reduce_range in SCHEMES:
        for per_channel in (True, False):
            dst = tmp / f"{label}-{per_channel}.onnx".replace(" ", "_")
            with quiet_quantizer():
                quantize_dynamic(str(src), str(dst), per_channel=per_channel,
                                 reduce_range=reduce_range, op_types_to_quantize=["MatMul"],
                                 weight_type=QuantType.QInt8 if weight == "int8"
                                 else QuantType.QUInt8)
            y = ort.InferenceSession(str(dst)).run(None, {"x": x})[0]
            cos = (y * ref).sum(1) / np.linalg.norm(y, axis=1) / np.linalg.norm(ref, axis=1)
            model = simulate_dynamic_int8(src, x, weight_type=weight, reduce_range=reduce_range,
                                          per_channel=per_channel)
            print(f"{label:18s} {str(per_channel):>11s} {np.abs(y - ref).max():10.4f} "
                  f"{cos.mean():9.5f} {np.abs(y - model).max():20.5f}")


if __name__ == "__main__":
    main()
