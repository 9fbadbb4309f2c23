"""Export a run's chosen configuration to the engines teams already run.

    source = read_source("runs/demo")            # typed readers of the saved artifacts
    p = plan(source)                             # every number with where it came from
    write_triton(p, out) | write_kubernetes(p, out, autoscaler="hpa") | write_kserve(p, out)
"""
