"""Each child of an MPIJob brought to what it should be (docs/architecture.md sections 3-4).

- `shared_children`: the Service (the launcher's alone while the workers leave: `workers_leaving`),
  the ConfigMap (hostfile, discover_hosts.sh), the SSH Secret and the NetworkPolicy
  (reconcilers/netpol.py), all before any pod.
- `sync_workers`: the worker Job or StatefulSet: created, repaired, recreated when an Indexed Job can
  no longer give every worker back, stopped when the MPIJob is not running.
- `sync_launcher`: the launcher Job, held back under WaitForWorkersReady until every worker is Ready.
- `workers_ready`, `launcher_running`: what the Running condition is made of.
- `launcher_waits`: the launcher may not run now (workers made afresh or, under WaitForWorkersReady,
  not all Ready). Old workers on their way out: reconcilers/leaving.py.
Missing children are created; owned ones get merge patches of the fields we own; an object we do
not control is never touched (reconcilers/ownership.py reports it). Nothing here does I/O.
"""

from __future__ import annotations

from reconcilers import desired, diff, discovery, names, netpol, ownership, status, takeover
from reconcilers.context import JobContext
from reconcilers.defaults import WORKER
from reconcilers.draft import Draft
from reconcilers.failure import ledger, restartpolicy, workerexits
from reconcilers.leaving import launcher_held, made_beside_leaving, workers_leaving, workers_lost, workers_renewed
from reconcilers.types import Create, Obj, SSHKey

# How soon to look again while a deleted predecessor's children or pods are being removed (their
# delete events requeue the MPIJob anyway; this is the safety net).
STALE_RECHECK_SECONDS = 1.0
_NO_KEY = SSHKey("", "")


def shared_children(ctx: JobContext, draft: Draft, *, running: bool = False) -> None:
    service = desired.service(ctx.job, workers_leaving=running and workers_leaving(ctx) and not launcher_held(ctx))
    for field, want in (("service", service),
                        ("config_map", desired.config_map(ctx.job, ctx.config, ctx.pods.workers))):
        have = getattr(ctx.observed, field)
        if have is None:
            draft.plan.creates.append(Create(want))
        elif ctx.owned(have):
            patch = diff.diff(want, have)
            # An elastic launcher reads discover_hosts.sh as it goes: never held (reconcilers/discovery.py).
            if (patch and field == "config_map" and _only_discover_hosts(want, have)
                    and not discovery.is_elastic(ctx.job)):
                draft.minor.append(patch)
            elif patch:
                draft.plan.patches.append(patch)
    _secret(ctx, draft)
    network_policy(ctx, draft)


def network_policy(ctx: JobContext, draft: Draft) -> None:
    """The MPIJob's NetworkPolicy made or repaired while it should have one, deleted when it should
    not (the annotation turned isolation off, or a template took hostNetwork while suspended); the
    policy an older version made under the MPIJob's own name replaced; and the NetworkIsolated
    condition of an MPIJob that runs without its policy (docs/architecture.md 10)."""
    have = ctx.observed.network_policy
    taken = False
    if netpol.applies(ctx.job, ctx.config):
        want = netpol.network_policy(ctx.job, desired.owner_reference(ctx.job))
        taken = ctx.inputs.policy_taken or ownership.policy_taken(ctx.job, ctx.observed, ctx.stale_children)
        if have is None and not taken:
            draft.plan.creates.append(Create(want))
        elif ctx.owned(have) and not ownership.deleting(have):
            patch = diff.diff(want, have)
            if patch:
                draft.plan.patches.append(patch)
        _legacy_policy(ctx, draft, want if taken else None)
    else:
        if ctx.owned(have) and not ownership.deleting(have):
            draft.delete(have, "network isolation is off for this MPIJob (annotation or hostNetwork)")
        _legacy_policy(ctx, draft, None)
    if taken:
        msg = netpol.name_taken_message(ctx.key, ctx.job)
        if draft.condition(netpol.NOT_ISOLATED, "False", netpol.R_NAME_TAKEN, msg):
            draft.event("Warning", netpol.R_NOT_ISOLATED, msg)
    elif netpol.wanted(ctx.job, ctx.config) and not desired.pod_network(ctx.job):
        msg = netpol.not_isolated_message(ctx.key)
        if draft.condition(netpol.NOT_ISOLATED, "False", netpol.R_HOST_NETWORK, msg):
            draft.event("Warning", netpol.R_NOT_ISOLATED, msg)
    else:
        status.remove_condition(draft.status, netpol.NOT_ISOLATED)


def _legacy_policy(ctx: JobContext, draft: Draft, keep_as: Obj | None) -> None:
    """The policy a version before names.network_policy_name made under the MPIJob's own name: deleted
    (after the create of its successor in the same apply: the executor sends creates first, and a
    failed create ends the apply), or, while the new name is taken (`keep_as`: the policy wanted), kept
    and brought to the wanted selectors. Only when this MPIJob controls it: a user's object of that
    name is never read nor touched (the informers see only our labels)."""
    old = ctx.observed.legacy_network_policy
    if not ctx.owned(old) or ownership.deleting(old):
        return
    if keep_as is None:
        draft.delete(old, f"replaced by NetworkPolicy {names.network_policy_name(ctx.job)}")
        return
    patch = diff.diff({**keep_as, "metadata": {**keep_as["metadata"], "name": names.legacy_network_policy_name(
        ctx.job)}}, old)
    if patch:
        draft.plan.patches.append(patch)


def _secret(ctx: JobContext, draft: Draft) -> None:
    secret = ctx.observed.secret
    if secret is None:
        if ctx.inputs.keygen is not None:
            draft.plan.creates.append(Create(desired.secret(ctx.job, ctx.inputs.keygen())))
        return
    if not ctx.owned(secret):
        return
    data = secret.get("data")
    if isinstance(data, dict) and not (data.get("ssh-privatekey") and data.get("ssh-publickey")):
        # Someone removed a key: replace the Secret (created anew on the next reconcile). A cache
        # that drops `data` altogether (to save memory) does not trigger this.
        draft.delete(secret, "the SSH Secret lost its keys")
        return
    labels = desired.secret(ctx.job, _NO_KEY)["metadata"]["labels"]
    patch = diff.diff({"kind": "Secret", "metadata": {"labels": labels}}, secret)
    if patch:
        draft.plan.patches.append(patch)


def _only_discover_hosts(want: Obj, have: Obj) -> bool:
    """The ConfigMap differs from the cache in discover_hosts.sh alone (a minor write, pace.py)."""
    data = have.get("data") if isinstance(have.get("data"), dict) else {}
    same_hosts = {**want, "data": {**want["data"], desired.DISCOVER_HOSTS: data.get(desired.DISCOVER_HOSTS)}}
    return diff.diff(same_hosts, have) is None


# -- readiness --------------------------------------------------------------------------------------


def workers_ready(ctx: JobContext) -> bool:
    count = desired.worker_replicas(ctx.job)
    return count == 0 or ready_workers(ctx) >= count


def ready_workers(ctx: JobContext) -> int:
    """Workers Ready now (0 while the worker object is deleted): the StatefulSet's readyReplicas or
    the Job's ready, or the count of its Ready pods when that is higher. The object's count lags its
    pods: the Job controller writes `ready` in batches (a second at least after the pod, seconds on a
    busy cluster), and that lag was most of a bring-up's wait for Running (docs/architecture.md 7.1).
    A loss still shows only once both counts fell, as it did with the object's count alone: the pods
    lost are seen on their own (reconcilers/failure/workerloss.py)."""
    if takeover.upstream_shaped(ctx):
        return takeover.bare_workers_ready(ctx)
    workers = ctx.workers
    if not ctx.owned(workers) or ownership.deleting(workers):
        return 0
    wst = workers.get("status") or {}
    ready = wst.get("readyReplicas") if workers.get("kind") == "StatefulSet" else wst.get("ready")
    return max(int(ready or 0), sum(1 for p in ctx.pods.workers if desired.is_pod_ready(p)))


def launcher_running(ctx: JobContext) -> bool:
    launcher = ctx.launcher
    if not ctx.owned(launcher) or (launcher.get("spec") or {}).get("suspend"):
        return False
    if any(desired.is_pod_active(p) and not _waiting(p) for p in ctx.pods.launchers):
        return True
    return int((launcher.get("status") or {}).get("ready") or 0) > 0


def _waiting(pod: Obj) -> bool:
    """A container of the pod waits to run again (restarted in place, in the kubelet's back-off):
    the pod is Running, its launcher is not (docs/architecture.md section 11)."""
    return any("waiting" in ((cs or {}).get("state") or {})
               for cs in (pod.get("status") or {}).get("containerStatuses") or [])


# -- workers ----------------------------------------------------------------------------------------


def sync_workers(ctx: JobContext, draft: Draft, running: bool) -> None:
    if not isinstance(ctx.spec["mpiReplicaSpecs"].get(WORKER), dict):
        return  # no Worker replica spec (the CRD allows it): the launcher runs alone
    if takeover.upstream_shaped(ctx):
        if not running:
            takeover.stop_bare_workers(ctx, draft)
        return
    want = desired.workers(ctx.job, ctx.config, running=running)
    have = ctx.workers
    sts = ctx.config.worker_backend == "statefulset"
    if not running and ctx.run_policy.get("suspend"):
        workerexits.drop(draft)  # the resume starts afresh
    stray = ctx.choice.stray
    if stray is not None and not ownership.deleting(stray):
        draft.recreate(stray, f"a second set of workers ({stray.get('kind')}) besides the {want['kind']} "
                              "this MPIJob started with")
    if have is None:
        if running and (sts or desired.worker_replicas(ctx.job) > 0):
            if ownership.stale_alive(ctx.pods, names.ROLE_WORKER) and not made_beside_leaving(ctx, sts):
                draft.requeue(STALE_RECHECK_SECONDS)  # a worker pod of an earlier set is still stopping
            else:  # with the ledger of the launcher Job it replaces, if any (afresh.relaunch)
                draft.plan.creates.append(Create(ledger.carry(ctx, want)))
        return
    if not ctx.owned(have) or ownership.deleting(have):
        return  # a clash (reported), or a recreation under way: created again once gone
    lost = workers_lost(ctx, have) if running and not sts else None
    wait = workerexits.pace(ctx, draft) if lost else None
    if wait is not None:
        draft.requeue(wait)  # a worker that exited by itself: paced as the Job controller paces its pods
        return
    if lost:
        # Background: the Job goes at once and the new one is created on the next pass, while the
        # old pods stop; the Service keeps every worker's name out of DNS until they have
        # (`workers_leaving`, `made_beside_leaving`, reconcilers/leaving.py; docs/architecture.md section 11).
        draft.delete(have, f"{lost}: recreate the workers")
        return
    if running and diff.recreate_on_resume(want, have):
        draft.recreate(have, "resume: recreate the workers from the current template")
        return
    no_pods = not running or int((have.get("spec") or {}).get("replicas") or 0) == 0
    patch = diff.diff(want, have, template_mutable=sts and no_pods)
    if patch:
        draft.plan.patches.append(patch)


# -- launcher ---------------------------------------------------------------------------------------


def launcher_waits(ctx: JobContext, new_failure: bool = True) -> bool:
    """A launcher pod that failed makes its Job afresh, held until its workers are back, rather than
    left to its Job's retry (retries.remade; docs/architecture.md section 11): while the workers are
    made afresh (`workers_renewed`), or, under WaitForWorkersReady, after a failure not announced yet
    while a worker is not Ready or is on its way out (a deleted pod can show Ready until its kubelet
    reports its end). A failure announced earlier (before a resume, say) stays its Job's to retry."""
    return workers_renewed(ctx) or (new_failure and restartpolicy.waits_for_workers(ctx.job) and not _all_ready(ctx))


def _all_ready(ctx: JobContext) -> bool:
    count = desired.worker_replicas(ctx.job)
    return workers_ready(ctx) and not any(ownership.deleting(p) and (desired.worker_index(ctx.job, p) or 0) < count
                                          for p in ctx.pods.workers)


def sync_launcher(ctx: JobContext, draft: Draft, running: bool) -> None:
    want = desired.launcher(ctx.job, ctx.config, running=running)
    have = ctx.launcher
    # WaitForWorkersReady holds the launcher back until every worker is Ready: on the first start,
    # on every resume (the suspend deleted the launcher Job that had run: none is made until then;
    # one that never started stays suspended) and on every retry.
    hold = running and restartpolicy.waits_for_workers(ctx.job) and not _all_ready(ctx)
    if have is None:
        # Nor while the workers it would run with are on their way out (a launcher Job made afresh
        # after a lost worker, afresh.relaunch): it starts with the new ones, created in the same
        # plan as on a first start (section 11).
        hold = hold or (ctx.workers is not None and workers_renewed(ctx))
        if running and not hold:
            if ownership.stale_alive(ctx.pods, names.ROLE_LAUNCHER):
                draft.requeue(STALE_RECHECK_SECONDS)
            else:  # with the ledger of the launcher Job it replaces, if any (afresh.relaunch)
                draft.plan.creates.append(Create(ledger.carry(ctx, want)))
        return
    if not ctx.owned(have) or ownership.deleting(have) or takeover.upstream_shaped(ctx):
        return  # (an upstream launcher Job runs as upstream made it: its template is immutable)
    if running and diff.recreate_on_resume(want, have):
        ledger.hand_over(ctx, draft, ledger.read(have))  # the retries used are the MPIJob's
        draft.recreate(have, "resume: recreate the launcher from the current template")
        return
    if hold and (have.get("spec") or {}).get("suspend"):
        want = desired.launcher(ctx.job, ctx.config, running=False)
    patch = diff.diff(want, have)
    if patch:
        draft.plan.patches.append(patch)
