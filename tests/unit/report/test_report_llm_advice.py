"""advise on generation and on vague facts (issue 18): runtime-aware options for a vLLM chat
scenario, the token-level facts asked for, prefill kept apart from decode, and scenarios whose
hardware is given by size or by an unknown name still get a full report with the assumption
stated. Only contradictions are errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from infertune.cli import main
from infertune.config import load_scenario
from infertune.report.advisor import advise
from infertune.report.interview import interview
from infertune.report.knowledge import default_dir, load_knowledge
from infertune.report.provenance import assert_all_figures_have_provenance
from infertune.report.render_md import SUMMARY_END, render_markdown, summary_word_count
from infertune.report.runtimes import RuntimeCatalogue

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scenarios"
CHAT = EXAMPLES / "chat-vllm-l4.yaml"
# What vLLM does on its own (runtimes.yaml): none of these may be recommended for it.
VLLM_DOES = {"continuous-batching", "kv-cache", "prefix-cache", "fp16-gpu", "bf16",
             "torch-compile", "dynamic-batching"}


def chat(**changes: object) -> dict:
    data = yaml.safe_load(CHAT.read_text())
    for dotted, value in changes.items():
        node = data
        *path, last = dotted.split("__")
        for key in path:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def test_vllm_chat_recommends_nothing_vllm_already_does(capsys) -> None:
    report = advise(load_scenario(CHAT))
    ids = {o.id for o in report.options}
    assert not ids & VLLM_DOES
    assert {"vllm-max-num-seqs", "vllm-batched-tokens", "vllm-prefix-caching",
            "vllm-kv-memory", "vllm-speculative-decoding"} <= ids
    # weight quantization by GPU generation: the L4 (Ada) has FP8
    assert "vllm-fp8-weights" in ids and "vllm-int4-weights" not in ids
    moot = [n for n in report.notes if n.startswith("not recommended, vLLM already does it")]
    assert {n.split(": ")[1].split(" —")[0] for n in moot} == VLLM_DOES - {"dynamic-batching"}
    assert main(["advise", str(CHAT)]) == 0
    md = capsys.readouterr().out
    assert "serving engine that schedules per token step" not in md
    assert "Continuous (iteration-level) batching" not in md
    assert summary_word_count(md) < 700
    assert_all_figures_have_provenance(report.to_dict())


def test_weight_quantization_follows_the_gpu_generation(write_scenario) -> None:
    ampere = advise(load_scenario(write_scenario(chat(deployment__hardware__gpu="A100"))))
    ids = {o.id for o in ampere.options}
    assert "vllm-int4-weights" in ids and "vllm-fp8-weights" not in ids


def test_a_pytorch_chat_server_still_gets_continuous_batching(write_scenario) -> None:
    report = advise(load_scenario(write_scenario(chat(model__runtime="pytorch eager"))))
    ids = {o.id for o in report.options}
    assert {"continuous-batching", "kv-cache", "prefix-cache"} <= ids
    assert not any(i.startswith("vllm-") for i in ids)
    assert not any(n.startswith("not recommended") for n in report.notes)


def test_chat_without_token_facts_asks_for_ttft_itl_and_lengths(write_scenario) -> None:
    data = chat(slo__ttft_p95_ms=None, slo__itl_p95_ms=None, inputs=None,
                current__ttft_p95_ms=None, current__itl_p95_ms=None, slo__p95_ms=20000)
    report = advise(load_scenario(write_scenario(data)))
    asked = [m.fact for m in report.missing_facts]
    assert asked == ["current", "inputs", "slo.ttft_p95_ms", "slo.itl_p95_ms",
                     "inputs.typical.output_tokens", "inputs.typical.prompt_tokens"]
    summary = render_markdown(report).split(SUMMARY_END)[0]
    for fact in asked[2:]:
        assert f"- {fact}: assumed" in summary
    stages = {i.stage: i for i in report.diagnosis.items}
    assert stages["prefill (time to first token)"].likelihood == "unknown"
    assert "measure both" in report.diagnosis.summary


def test_stated_token_facts_split_prefill_from_decode() -> None:
    report = advise(load_scenario(CHAT))
    assert not [m for m in report.missing_facts if "." in m.fact]  # nothing token-level asked
    stages = {i.stage: i for i in report.diagnosis.items}
    prefill = stages["prefill (time to first token)"]
    decode = stages["decode (inter-token latency)"]
    # current TTFT p95 1400 > 800 misses; ITL p95 45 <= 60 meets
    assert (prefill.likelihood, decode.likelihood) == ("dominant", "minor")
    assert "1200-token prompt" in prefill.reason and "300 output tokens" in decode.reason
    assert "work on prefill" in report.diagnosis.summary
    figures = report.diagnosis.figures
    assert figures["decode_time_per_answer"].value == 299 * 45  # (300 - 1) x ITL p95 45 ms
    assert figures["weights_16bit_share_of_gpu"].value == round(16.0 / 24, 2)  # 8B x 2 B / 24 GB
    assert report.problem.inside_slo is False
    assert "TTFT p95 800 ms" in report.problem.statement
    assert "ITL p95 45 ms" in report.problem.statement


@pytest.mark.parametrize("cpu", ["8 vCPU", "32 vCPU", "Zilog Z80"])
def test_cpu_by_size_or_unknown_family_gives_a_full_report(write_scenario, capsys,
                                                           cpu: str) -> None:
    data = yaml.safe_load((EXAMPLES / "cpu-by-size.yaml").read_text())
    data["deployment"]["hardware"]["cpu"] = cpu
    path = write_scenario(data)
    report = advise(load_scenario(path))
    assert report.hardware == f"{cpu} (assumed a generic x86-64 CPU with AVX2)"
    stated = [a for a in report.assumptions if a.startswith(f"hardware: CPU '{cpu}'")]
    assert len(stated) == 1 and "to correct it, name the family" in stated[0]
    kind = "of a family the catalogue does not know" if "Z80" in cpu else "by its size only"
    assert kind in stated[0]
    assert report.options and report.recommendation is not None
    assert "int8-cpu" in {o.id for o in report.options}  # AVX2 is enough for CPU INT8
    assert main(["advise", str(path)]) == 0
    md = capsys.readouterr().out
    assert "assumed a generic x86-64 CPU with AVX2" in md.split(SUMMARY_END)[0]


def test_unknown_gpu_is_assumed_by_its_stated_memory(write_scenario) -> None:
    data = chat(deployment__hardware__gpu="RTX 6000 Ada 48GB")
    report = advise(load_scenario(write_scenario(data)))
    assert report.hardware.startswith("one RTX 6000 Ada 48GB (assumed a generic GPU, 48 GB)")
    gpu = next(a for a in report.assumptions if "GPU 'RTX 6000 Ada 48GB'" in a)
    assert "48 GB, as stated" in gpu and "accelerator: other" in gpu
    ids = {o.id for o in report.options}
    assert "vllm-int4-weights" in ids and "vllm-fp8-weights" not in ids  # FP8 not assumed
    assert report.diagnosis.figures["weights_16bit_share_of_gpu"].value == round(16 / 48, 2)


@pytest.mark.parametrize("content, expected", [
    ("slo: {ttft_p95_ms: 500, ttft_p99_ms: 100}\n", "ttft_p99_ms (100.0) is below ttft_p95_ms"),
    ("slo: {tpft_p95_ms: 500}\n", "unknown field 'slo.tpft_p95_ms'"),
    ("current: {itl_p95_ms: -4}\n", "current.itl_p95_ms = -4"),
    ("inputs: {typical: {output_tokens: 0}}\n", "inputs.typical.output_tokens = 0"),
])
def test_only_contradictions_are_errors(tmp_path, capsys, content, expected) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["advise", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_interview_asks_the_token_facts_of_a_generation_scenario(write_scenario) -> None:
    data = chat(slo__ttft_p95_ms=None, slo__itl_p95_ms=None, inputs=None, slo__p95_ms=20000)
    sc = load_scenario(write_scenario(data))
    answers = iter(["", "",              # inputs: batch size, seq len skipped
                    "700", "x", "40",    # TTFT target; ITL target: not a number, then 40
                    "256.0", ""])        # output tokens; prompt tokens skipped
    prompts: list[str] = []
    said: list[str] = []
    done = interview(sc, ask=lambda q: (prompts.append(q), next(answers))[1], say=said.append)
    assert done.slo.ttft_p95_ms == 700 and done.slo.itl_p95_ms == 40
    assert done.inputs.typical is not None and done.inputs.typical.output_tokens == 256
    assert done.inputs.typical.prompt_tokens is None
    assert prompts[2].startswith("Target time to first token p95 in ms")
    assert prompts[-1].startswith("Typical prompt length in tokens")
    assert said == ["'x' is not a number; e.g. 50"]


def test_runtime_catalogue_matching_and_check() -> None:
    cat = RuntimeCatalogue.load()
    ids = lambda text: [r.id for r in cat.match(text)]  # noqa: E731
    assert ids("vLLM 0.8") == ["vllm"]
    assert ids("TensorRT-LLM 0.17") == ["tensorrt-llm"]  # shadows plain TensorRT
    assert ids("Triton with the TensorRT-LLM backend") == ["tensorrt-llm", "triton"]
    assert ids("pytorch eager fp32") == [] and ids(None) == []
    assert ids("llama.cpp server") == ["llama-cpp"] and ids("onnxruntime 1.20") == ["onnxruntime"]
    cat.check(load_knowledge())
    broken = copy.deepcopy(cat)
    broken.runtimes[0].does["continous-batching"] = "typo"
    with pytest.raises(Exception, match="continous-batching, which no knowledge entry is"):
        broken.check(load_knowledge())


def test_every_measured_source_names_its_command_and_cpu() -> None:
    for entry in load_knowledge([default_dir()]).entries:
        assert "issue #" not in entry.source and "(#" not in entry.source, entry.id
        if entry.source.startswith("measured"):
            assert "`infertune " in entry.source and "AMD EPYC" in entry.source, entry.id
