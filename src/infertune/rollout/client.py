"""Talking to a routing server: its admin routes (always behind the API key) and /metrics."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from pydantic import ValidationError

from infertune.errors import ConfigError
from infertune.serve.routing import RoutingState


def server_client(url: str, api_key_env: str | None, environ: Mapping[str, str], *,
                  transport: httpx.BaseTransport | None = None,
                  timeout_s: float = 10.0) -> httpx.Client:
    """An httpx client for ``url`` sending the key read from ``api_key_env``."""
    headers = {}
    if api_key_env:
        key = environ.get(api_key_env, "")
        if not key:
            raise ConfigError(f"--api-key-env names {api_key_env!r} but it is not set; export "
                              f"{api_key_env}=<the server's key>")
        headers["X-API-Key"] = key
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s,
                        transport=transport)


class RouterClient:
    """RoutingControl over HTTP."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def state(self) -> RoutingState:
        return self._parse(self._send("GET", None))

    def change(self, action: str, *, weight: float | None = None, reason: str | None = None,
               release: str | None = None) -> RoutingState:
        body: dict[str, str | float] = {"action": action}
        if release is not None:
            body["release"] = release
        if weight is not None:
            body["weight"] = weight
        if reason is not None:
            body["reason"] = reason[:2000]
        return self._parse(self._send("POST", body))

    def _send(self, method: str, body: dict[str, str | float] | None) -> httpx.Response:
        try:
            return self.client.request(method, "/admin/routing", json=body)
        except httpx.HTTPError as exc:
            raise ConfigError(f"cannot reach {self.client.base_url} ({type(exc).__name__}); "
                              "check --server and that infertune serve --stable ... runs "
                              "there") from exc

    def _parse(self, response: httpx.Response) -> RoutingState:
        if response.status_code != 200:
            try:
                text = response.json().get("error", response.text)
            except ValueError:
                text = response.text[:200]
            raise ConfigError(f"{self.client.base_url}/admin/routing answered "
                              f"{response.status_code}: {text}")
        try:
            return RoutingState.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"{self.client.base_url} is not an infertune routing server "
                              "(no routing state at /admin/routing); start it with "
                              "infertune serve --registry DIR --stable NAME") from exc
