"""Measuring serving: the traffic schedules, simulator and in-process load tests
(traffic.py), the simulated policy sweep (policy_sweep.py), the cost ceiling (ceiling.py), the
confirmation in a served process of its own (confirm.py, sized by confirm_sizing.py), the
cascade and right-sizing (cascade_eval.py) and the input options (input_options.py). Nothing
here imports stages/ or search/.
"""
