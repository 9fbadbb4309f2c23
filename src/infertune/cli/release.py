"""`infertune release add | list | show | diff | prune` — the release registry (SQLite plus
content-addressed variant folders; see rollout/release_registry.py). Registry root: --registry DIR,
else $INFERTUNE_REGISTRY, else the user's data folder."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from infertune.cli._common import quiet_libraries
from infertune.rollout.release_registry import Registry, default_root, record_summary
from infertune.serve import run_server

RegistryOption = Annotated[Path | None, typer.Option(
    "--registry", help="registry folder (default $INFERTUNE_REGISTRY or the user data folder)")]
JsonFlag = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]


def open_registry(root: Path | None) -> Any:
    """The Registry at ``root`` (or the default root)."""

    return Registry(root if root is not None else default_root(os.environ))


def add(
    run: Annotated[Path, typer.Argument(help="run folder (report.json) or variant folder")],
    name: Annotated[str, typer.Option("--name", help="release name, e.g. v2")],
    variant: Annotated[str | None, typer.Option("--variant", help="variant id")] = None,
    registry: RegistryOption = None,
    as_json: JsonFlag = False,
) -> None:
    reg = open_registry(registry)
    release = reg.add(run, name, variant)
    if as_json:
        typer.echo(release.model_dump_json(indent=2))
        return
    r = release.record
    typer.echo(f"release {r.name}: variant {r.variant_id} ({r.runtime}, {r.precision}), "
               f"digest {r.digest[:12]}, stored in {reg.root / 'artifacts' / r.digest}")


def list_cmd(registry: RegistryOption = None, as_json: JsonFlag = False) -> None:
    rows = [record_summary(r) for r in open_registry(registry).releases()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no releases yet; add one with infertune release add RUN --name NAME")
    for row in rows:
        text = str(row["reason"] or "")
        reason = f" — {text[:90]}{'...' if len(text) > 90 else ''}" if text else ""
        typer.echo(f"{row['name']:<16} {row['status']:<12} {row['variant']} "
                   f"({row['runtime']}, {row['precision']}) {row['digest']}{reason}")


def show(name: Annotated[str, typer.Argument()], registry: RegistryOption = None) -> None:
    reg = open_registry(registry)
    payload = json.loads(reg.get(name).model_dump_json())
    payload["events"] = [e.model_dump() for e in reg.events(name)]
    typer.echo(json.dumps(payload, indent=2))


def diff(a: Annotated[str, typer.Argument()], b: Annotated[str, typer.Argument()],
         registry: RegistryOption = None, as_json: JsonFlag = False) -> None:
    rows = open_registry(registry).diff(a, b)
    if as_json:
        typer.echo(json.dumps([{"field": f, a: x, b: y} for f, x, y in rows], indent=2))
        return
    if not rows:
        typer.echo(f"{a} and {b} record the same variant, policy and scenario")
    for field, x, y in rows:
        typer.echo(f"{field}: {a}={x}  {b}={y}")


def prune(keep_retired: Annotated[int, typer.Option("--keep-retired", min=0)] = 1,
          registry: RegistryOption = None) -> None:
    removed = open_registry(registry).prune(keep_retired)
    names = ": " + ", ".join(removed) if removed else ""
    typer.echo(f"pruned {len(removed)} release(s){names}")


def register(app: typer.Typer) -> None:
    release_app = typer.Typer(help="Record immutable releases and inspect them.",
                              no_args_is_help=True)
    release_app.command("add", help="Record RUN's recommended variant (or --variant ID, or a "
                        "variant folder) as release NAME: a verified, content-addressed copy "
                        "with its serve policy, scenario, preprocessing and library "
                        "versions.")(add)
    release_app.command("list", help="Every release with its status.")(list_cmd)
    release_app.command("show", help="A release's full record and its event log.")(show)
    release_app.command("diff", help="Recorded fields that differ between two releases.")(diff)
    release_app.command("prune", help="Delete rolled-back releases and all but the newest "
                        "--keep-retired retired ones, with artifacts no release still "
                        "uses.")(prune)
    app.add_typer(release_app, name="release")


def serve_releases(root: Path | None, state: Any, *, host: str, port: int,
                   policy_for: Callable[[Any], Any],
                   check_exposure: Callable[[Any], list[str]]) -> None:
    """`infertune serve --registry DIR --stable NAME [--canary NAME --canary-weight PCT]
    [--shadow NAME]`: one server hosting those releases behind the router."""
    from infertune.rollout.release_router import build_router  # redis: see cli/__init__

    reg = open_registry(root)
    warnings = check_exposure(policy_for(reg.get(state.stable).record.policy))
    quiet_libraries()
    router = build_router(reg, state, policy_for, os.environ)
    canary = (f", canary {state.canary} at {state.canary_weight:g}%" if state.canary else "")
    shadow = f", shadow {state.shadow}" if state.shadow else ""
    admin = ("admin routes need the API key" if router.api_key else
             "admin routes are closed (no api_key_env set)")
    typer.echo(f"serving stable {state.stable}{canary}{shadow} from {reg.root} on "
               f"http://{host}:{port}; {admin}; /readyz turns 200 after every release warms up",
               err=True)
    for warning in warnings:
        typer.echo(f"WARNING: {warning}", err=True)
    run_server(router, host=host, port=port)
