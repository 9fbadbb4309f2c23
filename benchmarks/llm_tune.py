"""The server-tuning search on this machine: `infertune optimize --server-cmd` over the shipped
LLM server's --max-num-seqs (default 1,4,16), one server per candidate, sequential halving on
goodput at the TTFT/ITL SLOs, and the ranked table it prints. With --prefix-check it also
measures a second search's winner with and without a shared prefix against --prefix-cache.

    .venv/bin/python benchmarks/llm_tune.py [--values 1,4,16] [--slo ttft_p95_ms=250,itl_p95_ms=25]
        [--rate 3] [--probe-s 3] [--steps 6] [--output-tokens 32] [--hidden 64] [--layers 2]
        [--prefix-check] [--out runs/llm-tune]

Every figure in the table is measured in this run, on the machine it names; on a machine
shared with other jobs the latencies (and so the winner, when candidates are close) move from
run to run: the CIs say by how much. Each server start imports torch (5-15 s), so a run of three
candidates takes one to three minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from infertune.cli.server_tune import print_table
from infertune.loadgen.streaming_result import parse_slos
from infertune.loadgen.workloads import WorkloadSpec
from infertune.optimize.server_tune.command import ServerCommand
from infertune.optimize.server_tune.tuner import TuneOptions, tune


def _server(args: argparse.Namespace, extra: str = "") -> str:
    return (f"{sys.executable} -m infertune.loadgen.llmserver --port {{port}} --hidden-size "
            f"{args.hidden} --layers {args.layers} --heads 4 --max-positions 1024 {extra}"
            "--max-num-seqs {max_num_seqs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--values", default="1,4,16")
    parser.add_argument("--slo", default="ttft_p95_ms=250,itl_p95_ms=25")
    parser.add_argument("--rate", type=float, default=3.0)
    parser.add_argument("--probe-s", type=float, default=3.0)
    # 6 doublings from --rate 3 reach 96 req/s: with 3 the ladder stopped at 12 req/s, below
    # every candidate's capacity on a 2-core EPYC, and the table was a three-way tie
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prefix-check", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/llm-tune"))
    args = parser.parse_args()

    started = time.monotonic()
    command = ServerCommand(_server(args), {"max_num_seqs": args.values.split(",")})
    report = tune(TuneOptions(
        command=command, slos=parse_slos(args.slo), out=args.out / "search",
        workload=WorkloadSpec(prompt_tokens=16, output_tokens=args.output_tokens, count=512),
        start_rate=args.rate, max_steps=args.steps, probe_s=args.probe_s, warmup_requests=3,
        shape="constant"), progress=lambda line: print(line, file=sys.stderr))
    print_table(report)
    if args.prefix_check:
        command = ServerCommand(_server(args, "--prefix-cache "),
                                {"max_num_seqs": [report.candidates[0].knobs["max_num_seqs"]]})
        prefixed = tune(TuneOptions(
            command=command, slos=parse_slos("ttft_p95_ms=5000"), out=args.out / "prefix",
            workload=WorkloadSpec(prompt_tokens=8, output_tokens=4, count=256,
                                  prefix_tokens=120, prefix_share=1.0),
            start_rate=args.rate, max_steps=1, probe_s=args.probe_s, warmup_requests=3,
            shape="constant", confirm_sessions=0),
            progress=lambda line: print(line, file=sys.stderr))
        if prefixed.prefix_effect is not None:
            print(prefixed.prefix_effect.statement)
    print(f"wall time {time.monotonic() - started:.0f} s; reports in {args.out}")


if __name__ == "__main__":
    main()
