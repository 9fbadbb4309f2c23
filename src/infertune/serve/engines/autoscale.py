"""Ray Serve autoscaling settings derived from measurements — pure arithmetic, no Ray import.

    derive_plan(ReplicaFacts, Demand, Limits) -> AutoscalePlan   every number with its reasoning

The rules (each Derivation's ``reasoning`` repeats them with the numbers filled in):

- **Operating point.** For each measured batch size b <= max_batch_size, a request can wait for
  the batch in flight, the batching window and its own batch: W(b) = max_wait + 2 S(b), with S(b)
  the measured service time. The operating point b* is the largest b with W(b) <= the SLO (the
  policy's largest batch when no SLO is given; the smallest, with a warning, when none fits).
- **target_ongoing_requests** (Little's law, L = X W): a replica at b* completes
  X = b* / S(b*) inputs per second, each in the system for W(b*), so it holds
  L = X W(b*) / inputs_per_request requests. More ongoing requests than that per replica means
  queueing beyond the SLO budget: scale up. With a per-replica goodput G below X (a measured G,
  unlike the curve, includes HTTP and batching overheads), L = G W(b*).
- **max_ongoing_requests** = 2 x target: headroom for a burst to form full batches while a new
  replica starts. A replica holds no more than that; the rest waits in Ray's router.
- **deadline** D: the policy's timeout_ms, else the serving runtime's default deadline
  max(50 ms, max_wait + 3 S(full batch)) (serve/runtime.py) with S measured.
- **max_queued_requests** (the bound on Ray's router queue, per proxy) = floor(n0 X min(D - H,
  D / 2) / proxies): a request in the router starts to be served only once the replicas take it, at
  n0 X requests per second with n0 the warm pool (the replicas sure to run) and X the replica
  capacity, and then spends up to H = max_wait + the batches ahead of it inside a full
  replica. A longer queue would be answered after D; the excess gets Ray's backpressure
  answer (503 with Retry-After) at once, as the local engine refuses it. Each replica's own
  admission still refuses a request its queue would make late. More replicas drain the queue
  faster, so the bound sized at n0 errs on the side of refusing. The router gets at most half
  of D, so a long deadline still leaves the replica's own queue room for its batches.
- **backpressure_retry_after_s** = the time the full router queues take to drain at n0 X
  (Ray rounds Retry-After up to whole seconds).
- **replica_deadline_s** = D - that drain time: a replica's clock starts when a request reaches
  it, so it serves with this timeout and its own admission refuses what would be answered after
  D counted from Ray's proxy. H above counts whole batches: ceil(max_ongoing / b*) + 1 (the one
  running) batches of b* inputs at X.
- **graceful_shutdown_timeout_s** = D + S(full batch), at least Ray's default 20 s: the longest
  an accepted request takes (its deadline, then one batch time of grace after which the
  runtime answers 503), so a replica stopped by SIGTERM or a downscale answers everything it
  accepted.
- **look_back_period_s** = the replica cold start C (clamped to 2..30 s, and at least five
  metric pushes): a fluctuation shorter than a replica takes to start cannot be served by a new
  replica, so it is averaged away. The push interval is the cluster's (Ray's default 10 s; the
  embedded cluster of `serve --engine ray` sets a shorter one).
- **upscale_delay_s** = 2 pushes: two reports must agree before a replica is added.
- **downscale_delay_s** = C (at least 5 x the upscale delay): the ski-rental rule — hold an
  idle replica for as long as getting it back would take; that never costs more than twice what
  the best choice, made knowing when the load returns, would.
- **min_replicas** (the warm pool) = ceil(rate reachable before a new replica serves / replica
  capacity). A new replica serves after react = upscale delay + look-back / 2 + C; the rate can
  reach min(peak, mean + ramp x react) by then, and the peak at once for a step (bursty, spiky,
  trace, or no ramp given). The forecast sets only this.
- **max_replicas** = what the cluster's CPUs hold, cut to what the cost ceiling pays for at the
  forecast peak (n <= 3.6 x peak x ceiling_per_1k / cost_per_hour): autoscaling is for the
  traffic nobody forecast, so the forecast does not cap it. Only when neither the cluster nor
  a cost ceiling is known is it what the forecast peak needs (with a warning).

Replica capacity is the measured per-replica goodput when given, else X at b* from the service
curve (an estimate: an upper bound that ignores the batching window and HTTP overhead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict

from infertune.serial import Serial
from infertune.serve.runtime import DEFAULT_BOUND_BATCHES, DEFAULT_BOUND_FLOOR_S

STEP_PATTERNS = frozenset({"bursty", "spiky", "trace"})
LOOK_BACK_BOUNDS_S = (2.0, 30.0)
DOWNSCALE_UPSCALE_RATIO = 5.0
RAY_PUSH_INTERVAL_S = 10.0  # Ray Serve 2.60's default metric push interval
RAY_GRACEFUL_SHUTDOWN_S = 20.0  # Ray Serve 2.60's default graceful_shutdown_timeout_s


@dataclass(frozen=True)
class ReplicaFacts:
    """What one replica does, measured: service time per batch size and its cold start."""

    service_ms: dict[int, float]  # batch size -> p50 service time (ms)
    service_source: str
    cold_start_s: float
    cold_start_source: str
    max_batch_size: int
    max_wait_ms: float
    inputs_per_request: float = 1.0
    goodput_rps: float | None = None  # measured per-replica goodput within the SLO
    goodput_source: str = ""
    timeout_ms: float | None = None  # the policy's default deadline; None: the runtime's bound

    def __post_init__(self) -> None:
        if not self.service_ms or any(b < 1 or ms <= 0 for b, ms in self.service_ms.items()):
            raise ValueError("service_ms needs at least one (batch >= 1, ms > 0) point")
        if self.cold_start_s < 0 or self.max_batch_size < 1 or self.inputs_per_request <= 0:
            raise ValueError("cold_start_s >= 0, max_batch_size >= 1, inputs_per_request > 0")
        if self.timeout_ms is not None and not self.timeout_ms > 0:
            raise ValueError(f"timeout_ms must be > 0 or None, got {self.timeout_ms}")

    def full_batch(self) -> tuple[int, float]:
        """(batch, ms): the smallest measured batch holding max_batch_size inputs, else the
        largest measured (the runtime's deadline is sized by its full batch)."""
        holding = [b for b in self.service_ms if b >= self.max_batch_size]
        batch = min(holding) if holding else max(self.service_ms)
        return batch, self.service_ms[batch]


@dataclass(frozen=True)
class Demand:
    """The traffic and the SLO the scenario states (all optional)."""

    slo_ms: float | None = None
    slo_source: str = ""
    mean_rps: float | None = None
    peak_rps: float | None = None
    pattern: str | None = None
    ramp_rps_per_s: float | None = None  # fastest rise in the traffic shape; None: unknown


@dataclass(frozen=True)
class Limits:
    """What caps the replica count: money and the cluster."""

    cpus_per_replica: float = 1.0
    cluster_cpus: float | None = None
    cost_per_hour_usd: float | None = None  # one replica
    cost_ceiling_usd_per_1k: float | None = None
    proxies: int = 1  # Ray's HTTP proxies (one per node): each queues up to max_queued_requests

    def __post_init__(self) -> None:
        if not self.cpus_per_replica > 0 or self.proxies < 1:
            raise ValueError("cpus_per_replica must be > 0 and proxies >= 1")


@dataclass(frozen=True)
class Derivation(Serial):
    value: float
    unit: str
    reasoning: str


class RayAutoscaling(TypedDict):
    """The keys of Ray Serve's ``autoscaling_config`` this plan sets."""

    min_replicas: int
    initial_replicas: int
    max_replicas: int
    target_ongoing_requests: float
    metrics_interval_s: float
    look_back_period_s: float
    upscale_delay_s: float
    downscale_delay_s: float


class RayDeploymentOptions(TypedDict):
    """The keys of ``serve.deployment`` beside ``autoscaling_config`` this plan sets."""

    max_ongoing_requests: int
    max_queued_requests: int
    backpressure_retry_after_s: float
    graceful_shutdown_timeout_s: float


@dataclass
class AutoscalePlan(Serial):
    """Every derived number; its JSON (``to_dict``) adds the two Ray dicts built from them,
    which reading ignores (they follow from the derivations)."""

    DERIVED: ClassVar[tuple[str, ...]] = ("ray_autoscaling_config", "ray_deployment_options")

    target_ongoing_requests: Derivation
    max_ongoing_requests: Derivation
    min_replicas: Derivation
    max_replicas: Derivation
    look_back_period_s: Derivation
    metrics_push_interval_s: Derivation
    upscale_delay_s: Derivation
    downscale_delay_s: Derivation
    replica_capacity_rps: Derivation
    deadline_s: Derivation
    max_queued_requests: Derivation
    backpressure_retry_after_s: Derivation
    replica_deadline_s: Derivation
    graceful_shutdown_timeout_s: Derivation
    warnings: list[str] = field(default_factory=list)

    def derivations(self) -> dict[str, Derivation]:
        return {k: v for k, v in vars(self).items() if isinstance(v, Derivation)}

    def ray_autoscaling(self) -> RayAutoscaling:
        return RayAutoscaling(
            min_replicas=int(self.min_replicas.value),
            initial_replicas=int(self.min_replicas.value),
            max_replicas=int(self.max_replicas.value),
            target_ongoing_requests=self.target_ongoing_requests.value,
            metrics_interval_s=self.metrics_push_interval_s.value,
            look_back_period_s=self.look_back_period_s.value,
            upscale_delay_s=self.upscale_delay_s.value,
            downscale_delay_s=self.downscale_delay_s.value)

    def ray_deployment(self) -> RayDeploymentOptions:
        return RayDeploymentOptions(
            max_ongoing_requests=int(self.max_ongoing_requests.value),
            max_queued_requests=int(self.max_queued_requests.value),
            backpressure_retry_after_s=self.backpressure_retry_after_s.value,
            graceful_shutdown_timeout_s=self.graceful_shutdown_timeout_s.value)

    @property
    def ray_autoscaling_config(self) -> RayAutoscaling:  # the JSON's names for the two above
        return self.ray_autoscaling()

    @property
    def ray_deployment_options(self) -> RayDeploymentOptions:
        return self.ray_deployment()

    def lines(self) -> list[str]:
        """One line per derived number, for a person to read."""
        out = [f"{name} = {_num(d.value)} {d.unit}: {d.reasoning}"
               for name, d in self.derivations().items()]
        return out + [f"warning: {w}" for w in self.warnings]


def _num(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.3g}"


@dataclass(frozen=True)
class _Point:
    batch: int
    service_ms: float
    latency_ms: float  # W(b)
    inputs_per_s: float


def operating_point(facts: ReplicaFacts, slo_ms: float | None) -> tuple[_Point, str, list[str]]:
    """b*, the sentence explaining it, and a warning when no batch size meets the SLO."""
    points = [_Point(b, ms, facts.max_wait_ms + 2 * ms, 1000.0 * b / ms)
              for b, ms in sorted(facts.service_ms.items()) if b <= facts.max_batch_size]
    if not points:
        smallest = min(facts.service_ms)
        ms = facts.service_ms[smallest]
        points = [_Point(smallest, ms, facts.max_wait_ms + 2 * ms, 1000.0 * smallest / ms)]
    if slo_ms is None:
        best = points[-1]
        return best, (f"no SLO given, so the policy's largest measured batch b*={best.batch} "
                      f"(W = {facts.max_wait_ms:g} + 2 x {best.service_ms:.3g} = "
                      f"{best.latency_ms:.3g} ms)"), []
    fits = [p for p in points if p.latency_ms <= slo_ms]
    if not fits:
        best = points[0]
        warning = (f"even batch {best.batch} takes W = {best.latency_ms:.3g} ms > the "
                   f"{slo_ms:g} ms SLO; replicas will miss it under any load — optimize the "
                   "model or relax the SLO")
        return best, f"no batch meets the {slo_ms:g} ms SLO; smallest batch b*={best.batch}", [
            warning]
    best = fits[-1]
    return best, (f"largest measured batch whose W(b) = max_wait + 2 S(b) = "
                  f"{facts.max_wait_ms:g} + 2 x {best.service_ms:.3g} = {best.latency_ms:.3g} ms "
                  f"fits the {slo_ms:g} ms SLO: b*={best.batch}"), []


def derive_plan(facts: ReplicaFacts, demand: Demand | None = None,
                limits: Limits | None = None, *, push_interval_s: float = RAY_PUSH_INTERVAL_S,
                push_source: str = "Ray's default") -> AutoscalePlan:
    """Every autoscaling number for one deployment, from the facts (see the module rules)."""
    demand = demand or Demand()
    limits = limits or Limits()
    point, why_point, warnings = operating_point(facts, demand.slo_ms)
    slo_note = f" ({demand.slo_source})" if demand.slo_source else ""
    requests_per_s = point.inputs_per_s / facts.inputs_per_request
    held = requests_per_s * point.latency_ms / 1000.0
    reasoning = (
        f"Little's law L = X W: {why_point}{slo_note}; X = {point.batch} / {point.service_ms:.3g}"
        f" ms = {point.inputs_per_s:.3g} inputs/s ({facts.service_source}) / "
        f"{facts.inputs_per_request:g} inputs per request = {requests_per_s:.3g} req/s; "
        f"L = {requests_per_s:.3g} x {point.latency_ms / 1000:.3g} s = {held:.3g}")
    if facts.goodput_rps and facts.goodput_rps < requests_per_s:
        # the curve leaves out HTTP and batching overheads; a measured goodput does not
        held_g = facts.goodput_rps * point.latency_ms / 1000.0
        reasoning += (f"; the replica's goodput is lower ({facts.goodput_source}): L = "
                      f"{facts.goodput_rps:.3g} req/s x {point.latency_ms / 1000:.3g} s = "
                      f"{held_g:.3g}, used")
        held = held_g
    target = Derivation(max(1.0, round(held, 2)), "requests per replica",
                        reasoning + (" (raised to 1)" if held < 1 else ""))
    max_ongoing = Derivation(float(max(2, math.ceil(2 * target.value))), "requests per replica", (
        f"2 x target {target.value:g}: headroom for a burst to fill batches while a new replica "
        "starts; the excess waits in Ray's router (bounded by max_queued_requests), where the "
        "autoscaler still counts it"))
    capacity = _capacity(facts, point, requests_per_s)
    c = facts.cold_start_s
    look_lo, look_hi = LOOK_BACK_BOUNDS_S
    clamped = min(look_hi, max(look_lo, c))
    look = max(clamped, 5 * push_interval_s)
    push = Derivation(push_interval_s, "s", (
        f"how often replicas and the proxy report their queues to Ray's autoscaler "
        f"({push_source}; RAY_SERVE_REPLICA/HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S)"))
    look_back = Derivation(round(look, 3), "s", (
        f"one replica cold start C = {c:.3g} s ({facts.cold_start_source}), clamped to "
        f"{look_lo:g}..{look_hi:g} s and at least 5 metric pushes (5 x {push_interval_s:g} s): "
        "a swing shorter than a replica takes to start cannot be served by a new one, so the "
        "signal is averaged over C"))
    up = Derivation(round(2 * push_interval_s, 3), "s", (
        f"2 metric pushes x {push_interval_s:g} s: two reports must agree the replicas are over "
        "target before one is added"))
    floor = DOWNSCALE_UPSCALE_RATIO * up.value
    down = Derivation(round(max(c, floor), 3), "s", (
        f"one cold start C = {c:.3g} s (at least {DOWNSCALE_UPSCALE_RATIO:g} x the upscale "
        f"delay, {floor:g} s, so a replica is never released faster than one is added): the "
        "ski-rental rule — an idle replica is held for as long as bringing it back would take, "
        "which never costs more than twice the best choice made knowing the future"))
    react = up.value + look / 2 + c
    min_r = _warm_pool(demand, capacity.value, react, up.value, look, c)
    max_r, max_warn = _max_replicas(demand, limits, capacity.value, int(min_r.value))
    if max_r.value < min_r.value:
        min_r = Derivation(max_r.value, "replicas",
                           f"{min_r.reasoning}; cut to max_replicas {max_r.value:g}")
    deadline = _deadline(facts)
    queued, retry, replica_deadline, queue_warn = _router_queue(
        facts, point.batch, deadline.value, max_ongoing.value, capacity.value,
        int(min_r.value), limits.proxies)
    return AutoscalePlan(target, max_ongoing, min_r, max_r, look_back, push, up, down, capacity,
                         deadline, queued, retry, replica_deadline,
                         _graceful(facts, deadline.value), warnings + max_warn + queue_warn)


def _deadline(facts: ReplicaFacts) -> Derivation:
    if facts.timeout_ms is not None:
        return Derivation(round(facts.timeout_ms / 1000, 4), "s", (
            f"the policy's timeout_ms {facts.timeout_ms:g}: the deadline of a request that names "
            "none (a request's own timeout_ms replaces it)"))
    batch, ms = facts.full_batch()
    bound = max(DEFAULT_BOUND_FLOOR_S,
                facts.max_wait_ms / 1000 + DEFAULT_BOUND_BATCHES * ms / 1000)
    return Derivation(round(bound, 4), "s", (
        f"no timeout_ms in the policy: the serving runtime's default deadline max("
        f"{DEFAULT_BOUND_FLOOR_S * 1000:g} ms, max_wait {facts.max_wait_ms:g} + "
        f"{DEFAULT_BOUND_BATCHES} x S({batch}) {ms:.3g} ms) ({facts.service_source}); a "
        "request's own timeout_ms replaces it"))


def _router_queue(facts: ReplicaFacts, batch: int, deadline_s: float, max_ongoing: float,
                  capacity: float, warm: int, proxies: int
                  ) -> tuple[Derivation, Derivation, Derivation, list[str]]:
    """max_queued_requests, the Retry-After of Ray's refusals and the deadline each replica
    applies (see the module rules)."""
    per_batch = batch / (capacity * facts.inputs_per_request)  # s per batch of b* inputs
    batches = math.ceil(max_ongoing * facts.inputs_per_request / batch) + 1
    hold = facts.max_wait_ms / 1000 + batches * per_batch
    drain = warm * capacity
    # the router gets at most half the deadline: the rest is the replica's, whose batches form
    # on it, so neither queue's share starves the other's when the deadline is long
    budget = min(deadline_s - hold, deadline_s / 2)
    exact = drain * budget / proxies
    bound = math.floor(exact + 1e-9)
    per = f" / {proxies} proxies" if proxies > 1 else ""
    reasoning = (
        f"floor(warm pool {warm} x {capacity:.3g} req/s per replica x min(deadline {deadline_s:g}"
        f" s - {hold:.3g} s a request spends in a full replica (max_wait {facts.max_wait_ms:g} "
        f"ms + {batches} batches of {batch}: max_ongoing {max_ongoing:g} and the one running, "
        f"{per_batch * 1000:.3g} ms each), half the deadline){per}) = {max(exact, 0.0):.3g}: a "
        "longer router queue would be answered after the deadline, so Ray refuses the excess at "
        "once with 503 (per proxy; more replicas drain it faster, so this errs on the side of "
        "refusing)")
    warnings: list[str] = []
    if bound < 1:
        bound = 1
        reasoning += "; raised to 1, Ray's smallest bound"
    wait = bound * proxies / drain  # the longest a request waits in the router queues
    retry = Derivation(round(wait, 3), "s", (
        f"the full router queue{'s' if proxies > 1 else ''} ({bound} x {proxies}) drain at "
        f"{warm} x {capacity:.3g} req/s in {wait:.3g} s; Ray's Retry-After header rounds it up "
        "to whole seconds"))
    replica = deadline_s - wait
    if replica <= facts.max_wait_ms / 1000 + per_batch:
        # not even one batch fits what the router leaves: the replicas keep the whole deadline
        warnings.append(
            f"the deadline {deadline_s:g} s leaves no time to wait in Ray's router ({wait:.3g} s "
            f"for {bound} request(s)) beyond one batch ({per_batch * 1000:.3g} ms): answers may "
            "come up to that much past the deadline — raise timeout_ms or lower max_wait_ms")
        return (Derivation(float(bound), "requests per proxy", reasoning), retry,
                Derivation(round(deadline_s, 4), "s", "the whole deadline: " + warnings[-1]),
                warnings)
    deadline = Derivation(round(replica, 4), "s", (
        f"deadline {deadline_s:g} s - the {wait:.3g} s a request may wait in Ray's router, which "
        "the replica cannot see (its clock starts when the request reaches it): each replica "
        "serves with this timeout_ms, so its own admission refuses what would answer after the "
        "deadline counted from Ray's proxy (a request's own timeout_ms still counts from the "
        "replica)"))
    return Derivation(float(bound), "requests per proxy", reasoning), retry, deadline, warnings


def _graceful(facts: ReplicaFacts, deadline_s: float) -> Derivation:
    batch, ms = facts.full_batch()
    longest = round(deadline_s + ms / 1000, 3)
    why = (f"deadline {deadline_s:g} s + one batch time S({batch}) {ms:.3g} ms = {longest:g} s "
           "is the longest an accepted request takes (past its deadline the runtime answers 503 "
           "after one batch time of grace), so a replica that stops answers everything it "
           "accepted")
    if longest <= RAY_GRACEFUL_SHUTDOWN_S:
        # a stopping replica leaves as soon as it holds nothing (Ray checks every
        # graceful_shutdown_wait_loop_s), so the longer bound costs nothing when all is well
        return Derivation(RAY_GRACEFUL_SHUTDOWN_S, "s", (
            f"Ray's default {RAY_GRACEFUL_SHUTDOWN_S:g} s, kept: {why} within it"))
    return Derivation(longest, "s", why)


def _capacity(facts: ReplicaFacts, point: _Point, requests_per_s: float) -> Derivation:
    if facts.goodput_rps is not None and facts.goodput_rps > 0:
        return Derivation(round(facts.goodput_rps, 3), "req/s per replica",
                          f"measured goodput of one replica ({facts.goodput_source})")
    return Derivation(round(requests_per_s, 3), "req/s per replica", (
        f"estimate: X at b*={point.batch} from the service curve ({facts.service_source}); an "
        "upper bound that leaves out the batching window and HTTP overhead"))


def _warm_pool(demand: Demand, capacity: float, react: float, up: float, look: float,
               cold: float) -> Derivation:
    base = demand.mean_rps
    if base is None and demand.peak_rps is None:
        return Derivation(1.0, "replicas", "no traffic rates given (scenario traffic.mean_rps / "
                          "peak_rps): a warm pool of one replica")
    peak = demand.peak_rps if demand.peak_rps is not None else base
    assert peak is not None
    start = base if base is not None else peak
    timing = (f"a new replica serves {react:.3g} s after the load rises (upscale delay {up:g} + "
              f"half the look-back {look / 2:.3g} + cold start {cold:.3g} s)")
    if demand.pattern in STEP_PATTERNS or (demand.ramp_rps_per_s is None and peak > start):
        reach = peak
        how = (f"the '{demand.pattern or 'unstated'}' traffic can step from {start:g} to the peak "
               f"{peak:g} req/s faster than that")
    elif demand.ramp_rps_per_s is None:
        reach = peak
        how = f"steady traffic at {peak:g} req/s"
    else:
        reach = min(peak, start + demand.ramp_rps_per_s * react)
        how = (f"ramping {demand.ramp_rps_per_s:g} req/s per s from {start:g}, it reaches "
               f"min({peak:g}, {start:g} + {demand.ramp_rps_per_s:g} x {react:.3g}) = "
               f"{reach:.3g} req/s by then")
    n = max(1, math.ceil(reach / capacity - 1e-9))
    return Derivation(float(n), "replicas", (
        f"{timing}; {how}; ceil({reach:.3g} / {capacity:.3g} req/s per replica) = {n}"))


def _max_replicas(demand: Demand, limits: Limits, capacity: float,
                  min_r: int) -> tuple[Derivation, list[str]]:
    """What the cluster holds and the cost ceiling pays for; the forecast only when neither
    is known (see the module rules)."""
    parts: list[str] = []
    caps: list[int] = []
    warnings: list[str] = []
    if limits.cluster_cpus is not None:
        cluster = math.floor(limits.cluster_cpus / limits.cpus_per_replica + 1e-9)
        parts.append(f"the cluster's {limits.cluster_cpus:g} CPUs hold {cluster} replicas of "
                     f"{limits.cpus_per_replica:g} CPU")
        caps.append(cluster)
    if (limits.cost_ceiling_usd_per_1k is not None and limits.cost_per_hour_usd
            and demand.peak_rps is not None):
        afford = math.floor(3.6 * demand.peak_rps * limits.cost_ceiling_usd_per_1k
                            / limits.cost_per_hour_usd + 1e-9)
        parts.append(f"the cost ceiling ${limits.cost_ceiling_usd_per_1k:g} per 1,000 requests "
                     f"at ${limits.cost_per_hour_usd:g}/h per replica pays for 3.6 x "
                     f"{demand.peak_rps:g} x {limits.cost_ceiling_usd_per_1k:g} / "
                     f"{limits.cost_per_hour_usd:g} = {afford} at the forecast peak (more when "
                     "the traffic is higher)")
        caps.append(afford)
    need = (max(1, math.ceil(demand.peak_rps / capacity - 1e-9))
            if demand.peak_rps is not None else None)
    if caps:
        value = max(1, min(caps))
        if len(caps) > 1:
            parts.append(f"the smaller, {value}")
        if need is not None:
            parts.append(f"the forecast peak {demand.peak_rps:g} req/s / {capacity:.3g} req/s "
                         f"per replica needs {need}, which sets only the warm pool: the "
                         "replicas past it are for traffic nobody forecast")
            if need > value:
                why = ("the cluster holds" if limits.cluster_cpus is not None
                       and value == caps[0] else "the cost ceiling pays for")
                warnings.append(f"the forecast peak needs {need} replicas but {why} {value}; "
                                "the peak will miss the SLO — add nodes (--ray-address), raise "
                                "the ceiling or make each replica faster")
    elif need is not None:
        value = max(min_r, need)
        parts.append(f"no cluster size or cost ceiling known: what the forecast peak "
                     f"{demand.peak_rps:g} req/s / {capacity:.3g} req/s per replica needs, "
                     f"{value} (at least the warm pool {min_r})")
        warnings.append(f"max_replicas is the forecast peak's {value}: traffic above the "
                        "forecast gets no more replicas; give the cluster size or a cost "
                        "ceiling (serve --engine ray measures the cluster)")
    else:
        value = min_r
        parts.append(f"no peak rate, cluster size or cost ceiling given: the warm pool, {value}")
    if value < min_r:
        warnings.append(f"max_replicas {value} is below the warm pool {min_r}; the warm pool is "
                        f"cut to {value}")
    return Derivation(float(value), "replicas", "; ".join(parts)), warnings
