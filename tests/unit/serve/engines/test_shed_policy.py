"""The autoscaling rule of `serve --engine ray`: Ray's queue-length rule, raised while the
replicas refuse a share of what reaches them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infertune.serve.engines.shed_policy import (
    MAX_SHARE,
    POLICY_PATH,
    REFUSED_SHARE,
    desired_replicas,
    shedding_policy,
)


def test_without_refusals_it_is_rays_queue_length_rule() -> None:
    assert desired_replicas(2, ongoing=30.0, target=10.0, refused_shares=[]) == 3.0
    assert desired_replicas(2, ongoing=30.0, target=10.0, refused_shares=[0.0, 0.0]) == 3.0
    assert desired_replicas(0, ongoing=5.0, target=1.0, refused_shares=[0.5]) == 0.0
    # idle replicas that refuse nothing scale down as Ray's rule says
    assert desired_replicas(2, ongoing=5.0, target=10.0, refused_shares=[0.0, 0.0]) == 0.5


def test_refusals_raise_it_to_what_would_carry_the_whole_load() -> None:
    # a replica holding 3 of a target of 10 (it sheds what its deadline cannot hold) while
    # refusing 60% of what reaches it: 1 / (1 - 0.6) = 2.5 replicas, not Ray's 0.3
    assert desired_replicas(1, ongoing=3.0, target=10.0, refused_shares=[0.6]) == 2.5
    # the replicas' mean share: 2 / (1 - 0.5)
    assert desired_replicas(2, ongoing=3.0, target=10.0, refused_shares=[0.2, 0.8]) == 4.0
    # a longer queue still wins
    assert desired_replicas(1, ongoing=50.0, target=10.0, refused_shares=[0.1]) == 5.0
    # shares outside 0..MAX_SHARE are clamped: no division by zero, no negative demand
    assert desired_replicas(1, 0.0, 1.0, [1.0]) == pytest.approx(1 / (1 - MAX_SHARE))
    assert desired_replicas(1, 2.0, 1.0, [-0.5]) == 2.0


def test_the_ray_hook_reads_the_context() -> None:
    config = SimpleNamespace(get_target_ongoing_requests=lambda: 10.0)
    ctx = SimpleNamespace(current_num_replicas=1, target_num_replicas=1, total_num_requests=3.0,
                          config=config, aggregated_metrics={REFUSED_SHARE: {"r1": 0.6}})
    assert shedding_policy(ctx) == (2.5, {})
    cold = SimpleNamespace(current_num_replicas=0, target_num_replicas=2)
    assert shedding_policy(cold) == (2.0, {})
    none = SimpleNamespace(**{**vars(ctx), "aggregated_metrics": None})
    assert shedding_policy(none) == (0.3, {})
    module, name = POLICY_PATH.split(":")
    assert name == shedding_policy.__name__ and module == shedding_policy.__module__
