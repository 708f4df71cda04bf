"""client/rest.py: the Authorization header is asked of the kubernetes configuration at most every
AUTH_REFRESH_SECONDS (asking refreshes the credentials), and again at once after a 401."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from client import rest


class Configuration:
    def __init__(self, token: str | None) -> None:
        self.token, self.asked = token, 0

    def auth_settings(self) -> dict:
        self.asked += 1
        if self.token is None:  # client certificates: no BearerToken setting
            return {}
        return {"BearerToken": {"type": "api_key", "in": "header", "key": "authorization",
                                "value": f"Bearer {self.token}"}}


def client(token: str | None) -> tuple[rest.RestClient, Configuration]:
    cfg = Configuration(token)
    return rest.RestClient(SimpleNamespace(configuration=cfg), qps=0, burst=1), cfg


def test_reused_within_the_refresh_period_then_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(rest.time, "monotonic", lambda: now[0])
    c, cfg = client("t1")
    assert c._auth_headers() == {"authorization": "Bearer t1"}
    cfg.token = "t2"  # rotated
    now[0] += rest.AUTH_REFRESH_SECONDS - 0.1
    assert c._auth_headers() == {"authorization": "Bearer t1"} and cfg.asked == 1
    now[0] += 0.2
    assert c._auth_headers() == {"authorization": "Bearer t2"} and cfg.asked == 2


def test_a_401_makes_the_next_request_ask_again() -> None:
    c, cfg = client("t1")
    c._auth_headers()
    cfg.token = "t2"
    c.forget_auth()
    assert c._auth_headers() == {"authorization": "Bearer t2"} and cfg.asked == 2


def test_client_certificates_send_no_authorization_header() -> None:
    c, _ = client(None)
    assert c._auth_headers() == {}
