"""The tunable flags of the LLM servers infertune knows, so that a misspelt knob is a one-line
error before any server starts (a typo in ``--max-num-seq {n}`` would otherwise cost a whole
sweep per candidate, or start a server that ignores it).

Only the flags that trade latency, throughput and memory are listed, from each project's
documentation of its serving arguments; a flag a newer release added can be searched with
``--no-knob-check``. A command whose program is not in the table is not checked.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from infertune.errors import ConfigError


@dataclass(frozen=True)
class Runtime:
    name: str
    markers: tuple[tuple[str, ...], ...]  # argv token runs that name the program
    flags: frozenset[str]
    source: str

    def matches(self, argv: list[str]) -> bool:
        names = [a.rsplit("/", 1)[-1] for a in argv]
        return any(_contains(names, m) for m in self.markers)


def _contains(names: list[str], run: tuple[str, ...]) -> bool:
    return any(tuple(names[i:i + len(run)]) == run for i in range(len(names) - len(run) + 1))


def _flags(text: str) -> frozenset[str]:
    return frozenset(text.split())


RUNTIMES: tuple[Runtime, ...] = (
    Runtime("vLLM", (("vllm", "serve"), ("vllm.entrypoints.openai.api_server",)), _flags(
        "--max-num-seqs --max-num-batched-tokens --enable-prefix-caching "
        "--no-enable-prefix-caching --enable-chunked-prefill --no-enable-chunked-prefill "
        "--gpu-memory-utilization --max-model-len --block-size --kv-cache-dtype --quantization "
        "--dtype --tensor-parallel-size --pipeline-parallel-size --swap-space "
        "--speculative-config --scheduling-policy --long-prefill-token-threshold "
        "--max-num-partial-prefills --enforce-eager --cpu-offload-gb"),
        "vLLM docs, 'Engine Arguments'"),
    Runtime("TGI", (("text-generation-launcher",),), _flags(
        "--max-concurrent-requests --max-batch-total-tokens --max-batch-prefill-tokens "
        "--max-batch-size --max-waiting-tokens --waiting-served-ratio --max-input-tokens "
        "--max-total-tokens --quantize --dtype --num-shard --cuda-graphs --speculate "
        "--kv-cache-dtype --cuda-memory-fraction"),
        "text-generation-inference docs, 'Launcher arguments'"),
    Runtime("llama.cpp server", (("llama-server",),), _flags(
        "--parallel -np --ctx-size -c --batch-size -b --ubatch-size -ub --threads -t "
        "--threads-batch -tb --n-gpu-layers -ngl --cont-batching -cb --no-cont-batching -nocb "
        "--flash-attn -fa --cache-type-k -ctk --cache-type-v -ctv --cache-reuse "
        "--defrag-thold --mlock --no-mmap --draft-max --draft-min"),
        "llama.cpp tools/server README"),
    Runtime("SGLang", (("sglang.launch_server",),), _flags(
        "--max-running-requests --max-total-tokens --chunked-prefill-size "
        "--mem-fraction-static --schedule-policy --schedule-conservativeness "
        "--disable-radix-cache --enable-torch-compile --cuda-graph-max-bs --tp-size --dp-size "
        "--quantization --kv-cache-dtype --max-prefill-tokens --stream-interval"),
        "SGLang docs, 'Server Arguments'"),
    Runtime("transformers serve", (("transformers", "serve"),), _flags(
        "--continuous-batching --no-continuous-batching --attn-implementation --compile "
        "--no-compile --dtype --cb-block-size --cb-num-blocks --cb-max-batch-tokens "
        "--quantization --device"),
        "`transformers serve --help` (transformers 5.24)"),
    Runtime("infertune llmserver", (("infertune.loadgen.llmserver",),), _flags(
        "--max-num-seqs --threads --prefix-cache --hidden-size --layers --heads "
        "--max-positions --stall-ms --stall-every"),
        "python -m infertune.loadgen.llmserver --help"),
)


def detect(argv: list[str]) -> Runtime | None:
    return next((r for r in RUNTIMES if r.matches(argv)), None)


def check_flag(runtime: Runtime, flag: str) -> None:
    """A one-line ConfigError when ``flag`` is not a tunable flag ``runtime`` is known to have."""
    if flag in runtime.flags:
        return
    close = difflib.get_close_matches(flag, sorted(runtime.flags), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ConfigError(f"{runtime.name} has no tunable flag {flag} ({runtime.source}); {hint}"
                      "fix the --server-cmd, or pass --no-knob-check if your version has it")
