"""Issue 36 item 4 against the real API server: RBAC that allows list but not watch.

A ServiceAccount whose Role grants `get` and `list` on ConfigMaps in one namespace, and no `watch`:
every LIST passes and every WATCH is refused by the authorizer (403). client-go's reflector backs off
0.8 s, 1.6 s, ... 30 s between the relists; this one relisted every 0.8-1.6 s forever (a list reset
its backoff). The waits are recorded rather than slept (the reflector's `_sleep` is the test's), so the
test does not depend on the clock; the LISTs per minute measured with real sleeps are in
docs/figures.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from client.errors import ApiError
from client.resources import CONFIGMAPS
from client.rest import RestClient
from informers.reflector import Backoff, Reflector
from testsupport.reflector_waits import first_waits
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


def list_only_client(kubectl, kubeconfig: str, namespace: str, tmp_path: Path) -> RestClient:
    """A client that authenticates as a ServiceAccount allowed to get and list ConfigMaps, not watch."""
    kubectl("create", "serviceaccount", "lister", "-n", namespace)
    kubectl("create", "role", "cm-lister", "-n", namespace, "--verb=get,list", "--resource=configmaps")
    kubectl("create", "rolebinding", "cm-lister", "-n", namespace, "--role=cm-lister",
            f"--serviceaccount={namespace}:lister")
    token = kubectl("create", "token", "lister", "-n", namespace, "--duration=10m").stdout.strip()
    cluster = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "lister", "user": {"token": token}}],
        "contexts": [{"name": "lister", "context": {"cluster": "local", "user": "lister", "namespace": namespace}}],
        "current-context": "lister",
    }
    path = tmp_path / "lister.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    client = RestClient.from_kubeconfig(str(path), qps=50, burst=50)

    def can_list() -> bool:
        try:
            client.request("GET", CONFIGMAPS.path(namespace))
            return True
        except ApiError:
            return False

    wait_until(can_list, 30, 0.2, "the lister's binding to take effect")
    return client


def test_watch_backoff_against_a_watch_refused_by_rbac(kubectl, kubeconfig, namespace, tmp_path):
    client = list_only_client(kubectl, kubeconfig, namespace, tmp_path)
    with pytest.raises(ApiError) as refused:
        client.stream(CONFIGMAPS.path(namespace), {"resourceVersion": "0"}).close()
    assert refused.value.status == 403  # the premise: list yes, watch no

    lists: list[int] = []
    r = Reflector(client, CONFIGMAPS, lambda items, rv, initial: lists.append(len(items)), lambda *a: None,
                  namespace=namespace, name="watch-backoff-rbac", backoff=Backoff(jitter=0.0))
    delays = first_waits(r, 8, join_s=60)
    # before: [0.8, 0.8, 0.8, ...], a relist every 0.8-1.6 s with jitter, forever
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert len(lists) == 8 and r.watches == 8  # each wait followed a LIST that passed and a WATCH refused
