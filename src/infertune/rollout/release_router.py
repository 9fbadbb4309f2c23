"""Building the router from registry releases: verify, load, one serving app per release."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from prometheus_client import CollectorRegistry

from infertune.config import QualityFloor, ServePolicy
from infertune.errors import ConfigError
from infertune.models import load
from infertune.rollout.feedback import FeedbackStore, RedisFeedback
from infertune.rollout.release_registry import Registry
from infertune.serve.app import create_app
from infertune.serve.routing import (
    AgreementRule,
    RoutedRelease,
    Router,
    RoutingState,
    RoutingStore,
)


def agreement_rule(floor: QualityFloor | None) -> AgreementRule:
    """How two answers must agree, from the scenario's floor metric: cosine metrics compare
    rows by cosine (at the floor's ``min`` when it sets one, else 0.99); every other metric
    (accuracy, f1, ndcg, agreement) by the top class."""
    if floor is not None and "cosine" in floor.metric:
        return AgreementRule("cosine", floor.min if floor.min is not None else 0.99)
    return AgreementRule("top1")


def build_router(registry: Registry, state: RoutingState,
                 policy_for: Callable[[ServePolicy], ServePolicy],
                 environ: Mapping[str, str], also: Sequence[str] = (),
                 store: RoutingStore | None = None) -> Router:
    """A Router over the releases ``state`` names, each hash-verified and loaded; each
    release's recorded policy passes through ``policy_for`` (the command's overrides).
    ``also``: more releases to load, to become a canary later without a restart. ``store``:
    the routing state shared by several replicas (serve --engine ray)."""
    wanted = (state.stable, state.canary, state.shadow, *also)
    names = list(dict.fromkeys(n for n in wanted if n))
    releases, policies = [], {}
    for name in names:
        release = registry.get(name)
        folder = registry.verified_path(name)
        policy = policies[name] = policy_for(release.record.policy)
        metrics = CollectorRegistry()
        app = create_app(load(folder), policy, registry=metrics, environ=environ)
        releases.append(RoutedRelease(name, app, metrics, version=release.record.variant_id,
                                      digest=release.record.digest[:12]))
    stable = policies[state.stable]
    api_key = None
    if stable.api_key_env:
        api_key = environ.get(stable.api_key_env) or None
        if api_key is None:
            raise ConfigError(f"api_key_env names {stable.api_key_env!r} but it is not set; "
                              f"export {stable.api_key_env}=<key>")
    floor = registry.get(state.stable).record.quality_floor
    # replicas sharing a Redis (the cache's redis_url) share feedback and the answer log too
    shared = RedisFeedback(stable.redis_url) if stable.redis_url else None
    try:
        return Router(releases, state, api_key=api_key, rule=agreement_rule(floor),
                      events=registry, feedback=shared or FeedbackStore(registry),
                      answer_log=shared, max_body_bytes=stable.max_request_bytes,
                      store=store)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
