"""Choosing what to try and what wins, within the time budget: the budget (budget.py), the
build plan and its order (builder.py, ordering.py, costs.py, sizing.py), screening by batch 1
and the batch sizes serving forms (sequential.py, screening.py), the timings and the survivors
(timing.py), and the choice of variant (choice.py, ranking.py). The stages (stages/) run them.
"""
