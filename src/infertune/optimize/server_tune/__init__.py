"""Tuning an OpenAI-compatible LLM server by measured goodput (``optimize --server-cmd``).

    server_flags  the tunable flags of known servers (vLLM, TGI, llama.cpp, SGLang, ...): a
                  typo is a one-line error before anything starts
    command       the command template, its {knob} placeholders and the candidates of a --search
    process       one candidate's server: free port, readiness, memory of its process tree, stop
    halving       sequential halving on goodput at the SLO, over resumable rate sweeps
    tune_report   the typed report (server_tune.json) and its markdown
    tuner         the glue: warm-up, probes with the scenario's prompt mix, the prefix check
"""
