"""Issue 51 item 1, the gang: WaitingForGang quotes the gang scheduler's words (reconcilers/gang/):
Volcano's PodGroup condition Unschedulable, or for Coscheduling (which writes none on its PodGroup)
the pods it turns away; written once when they first come, never for a rewording. (The Workload
API's gang already quoted its PodGroupInitiallyScheduled=False: tests/unit/test_workload_gang.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.gang import podgroup as pg
from tests.unit.sim import BACKENDS, apply_plan, converge, mpijob, pod, run, with_status

SCHED = "scheduler-plugins-scheduler"
COSCHED_MSG = "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
VOLCANO_COND = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "message": "4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending, 4 minAvailable"}


def turned_away(p: dict, message: str = COSCHED_MSG) -> dict:
    return with_status(p, phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}])


JOB = mpijob()
W0, W1 = (pod(JOB, "worker", i, phase="Pending") for i in range(2))
N0, N1 = (w["metadata"]["name"] for w in (W0, W1))


@pytest.mark.parametrize("group, pods, said", [
    (None, [], ""),
    ({"status": {"phase": "Pending"}}, [W0, W1], ""),  # nothing said yet
    ({"status": {"phase": "Pending"}}, [turned_away(W1), W0], f"pod {N1}: {COSCHED_MSG}"),
    ({"status": {"phase": "Pending"}}, [turned_away(W1, "later"), turned_away(W0)], f"pod {N0}: {COSCHED_MSG}"),
    ({"status": {"phase": "Inqueue", "conditions": [VOLCANO_COND]}}, [turned_away(W0)],
     f"NotEnoughResources: {VOLCANO_COND['message']}"),
    ({"status": {"phase": "Pending", "conditions": [dict(VOLCANO_COND, status="False")]}}, [], ""),
    ({"status": {"phase": "Pending"}}, [with_status(W0, conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}])], ""),
])
def test_explain_gang_scheduler_said(group, pods, said):
    assert pg.scheduler_said(group, pods) == said


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_gang_coscheduling_wait_quotes_the_scheduler_once(backend):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=SCHED)
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": "Pending"}})
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert pg.QUOTE not in st.get_condition(p.status, pg.WAITING_CONDITION)["message"]  # the wait begins
    job, obs = apply_plan(job, obs, p)
    stuck = [turned_away(pod(job, "worker", i, phase="Pending", backend=backend)) for i in range(2)]
    p = run(job, replace(obs, pods=stuck), backend, gang_scheduler=SCHED)
    c = st.get_condition(p.status, pg.WAITING_CONDITION)
    assert c["status"] == "True" and c["reason"] == pg.R_WAITING
    first = min(x["metadata"]["name"] for x in stuck)
    assert f"is Pending (minMember 3); the scheduler: pod {first}: {COSCHED_MSG}; no pod starts" in c["message"]
    assert p.writes == 1 and not p.events  # the status alone: the wait's Event was sent when it began
    job, obs = apply_plan(job, replace(obs, pods=stuck), p)
    # the scheduler retries with other words, the phase flips: nothing written
    reworded = [turned_away(x, "0/4 nodes are available: 4 Insufficient cpu.") for x in stuck]
    obs = replace(obs, pods=reworded, pod_group={**obs.pod_group, "status": {"phase": "Scheduling"}})
    again = run(job, obs, backend, gang_scheduler=SCHED)
    assert again.writes == 0 and not again.events


def test_explain_gang_volcano_wait_quotes_its_condition_from_the_start():
    job, obs, _ = converge(mpijob(), gang_scheduler=pg.VOLCANO)
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": "Inqueue", "conditions": [VOLCANO_COND]}})
    p = run(job, obs, gang_scheduler=pg.VOLCANO)
    c = st.get_condition(p.status, pg.WAITING_CONDITION)
    assert c["message"].endswith(f"the scheduler: NotEnoughResources: {VOLCANO_COND['message']}; no pod starts "
                                 "until the cluster has room for all of them at once.")
    assert [e.reason for e in p.events] == [pg.R_WAITING]
