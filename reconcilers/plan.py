"""plan(inputs) -> Plan: the lifecycle of one MPIJob (docs/architecture.md sections 1-3), as a pure function.

Order of decisions:
1. Not ours (`runPolicy.managedBy` set to anything but `Config.controller_name`): empty Plan.
2. Being deleted (`metadata.deletionTimestamp`): empty Plan (the garbage collector removes children).
3. Invalid (validation.validate): status Failed/InvalidSpec + a Warning Event naming the fields; no
   children. A later valid spec clears that condition and the job proceeds.
4. A child of one of our names exists but is not controlled by this MPIJob (name clash, or a
   namesake of an older MPIJob with another uid): Failed/ResourceExists + a Warning Event; the object
   is never adopted, patched or deleted.
5. Finished (Succeeded or Failed True): nothing is created; workers are stopped per cleanPodPolicy
   (Running/All: StatefulSet replicas 0 or worker Job suspended; All also deletes leftover pods, the
   launcher's included; None: left as they are) whatever the reason of the end; an unfinished
   launcher Job (the MPIJob's own deadline ran out) is suspended; ttlSecondsAfterFinished -> delete
   the MPIJob when due, else requeue_after.
6. Suspended: launcher/worker Jobs suspended (not created if missing), StatefulSet scaled to 0,
   Suspended=True, Running=False.
7. Otherwise: create missing children (the launcher at once for AtStartup, or when all workers are
   Ready for WaitForWorkersReady), repair drift, set Running/Restarting; on resume the startTime is
   reset and Jobs rendered from an older template are recreated (see diff.py).
The MPIJob-level activeDeadlineSeconds (from status.startTime) is checked too, with requeue_after.

Expressed in the Plan:
- `creates`/`patches`: children, JSON merge patches of owned fields only.
- `deletes`: a suspended Job to recreate (uid precondition), and under cleanPodPolicy All the
  leftover pods (`Ref("v1", "Pod", ns, name)`, uid precondition).
- `status`: the complete new status (write it to the status subresource), None when unchanged.
- `events`: only on transitions. `requeue_after`: seconds. `delete_mpijob`: TTL ran out.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from reconcilers import backend as bk
from reconcilers import desired as dz
from reconcilers import diff as df
from reconcilers import names as n
from reconcilers import pace as pc
from reconcilers import podgroup as pg
from reconcilers import refusal as rf
from reconcilers import status as st
from reconcilers.defaults import WORKER, with_defaults
from reconcilers.types import Create, Delete, Event, Inputs, Obj, Plan, Ref
from reconcilers.validation import validate

DEFAULT_CONTROLLER_NAMES = ("kubeflow.org/mpi-operator",)


def managed_by_us(mpijob: Any, controller_name: str) -> bool:
    spec = mpijob.get("spec") if isinstance(mpijob, dict) else None
    rp = spec.get("runPolicy") if isinstance(spec, dict) else None
    mb = rp.get("managedBy") if isinstance(rp, dict) else None
    return mb is None or mb == "" or mb == controller_name or not isinstance(mb, str)


def plan(inputs: Inputs) -> Plan:
    job = inputs.mpijob
    if not isinstance(job, dict):
        return Plan()
    if not managed_by_us(job, inputs.config.controller_name):
        return Plan()
    meta = job.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):
        return Plan()
    return _Planner(inputs).run()


class _Planner:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.now = inputs.now
        self.raw = inputs.mpijob
        self.job = with_defaults(inputs.mpijob)
        self.obs = inputs.observed
        # The backend this MPIJob started with, whatever the flag says now (reconcilers/backend.py).
        self.choice = bk.choose(self.job, [self.obs.workers, self.obs.other_workers], self.obs.config_map,
                                inputs.config.worker_backend)
        self.config = replace(inputs.config, worker_backend=self.choice.backend)
        self.workers = self.choice.workers
        self.p = Plan()
        # Writes that only follow pods (discover_hosts.sh), held or carried by finish_status().
        self.minor: list[df.Patch] = []
        self.old_status = st.copy_status(self.raw)
        self.status = st.copy_status(self.raw)
        self.ns = n.job_namespace(self.job)
        self.key = f"{self.ns}/{n.job_name(self.job)}"

    # -- helpers ----------------------------------------------------------------------------------

    def event(self, etype: str, reason: str, message: str) -> None:
        self.p.events.append(Event(etype, reason, message))  # type: ignore[arg-type]

    def cond(self, ctype: str, cstatus: str, reason: str, message: str) -> bool:
        return st.set_condition(self.status, ctype, cstatus, reason, message, self.now)

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        if self.p.requeue_after is None or seconds < self.p.requeue_after:
            self.p.requeue_after = seconds

    def owned(self, obj: Obj | None) -> bool:
        return obj is not None and n.is_controlled_by(obj, self.job)

    def spec(self) -> Obj:
        return self.job["spec"]

    def finish_status(self) -> Plan:
        """The plan, with the minor writes (reconcilers/pace.py) held while the pods still move, unless
        another write of this plan carries them."""
        changed = self.status != self.old_status
        minor_status = changed and pc.status_minor_only(self.old_status, self.status)
        major = self.p.writes > 0 or self.p.events or (changed and not minor_status)
        if not major and (minor_status or self.minor) and self.inputs.settle_s > 0:
            self.p.held = True
            self.requeue(self.inputs.settle_s)
            return self.p
        self.p.patches.extend(self.minor)
        if changed:
            self.p.status = self.status
        return self.p

    def fail(self, reason: str, message: str, completion: str | None = None) -> None:
        if self.cond(st.FAILED, "True", reason, message):
            self.event("Warning", st.R_FAILED, f"{reason}: {message}")
        self.status.setdefault("completionTime", completion or st.fmt_time(self.now))

    # -- the lifecycle ----------------------------------------------------------------------------

    def run(self) -> Plan:
        errors = validate(self.job, self.config)
        if errors:
            return self.invalid(errors)
        failed = st.get_condition(self.status, st.FAILED)
        if failed is not None and failed.get("reason") == st.R_INVALID:
            st.remove_condition(self.status, st.FAILED)  # the spec was fixed
        self.refused()

        if not st.get_condition(self.status, st.CREATED):
            self.cond(st.CREATED, "True", st.R_CREATED, f"MPIJob {self.key} is created.")
            self.event("Normal", st.R_CREATED, f"MPIJob {self.key} is created.")

        self.worker_pods, self.launcher_pods, self.stale_pods = self.our_pods()
        self.stale = self.stale_children()
        clash = self.clash() or self.inputs.taken
        failed = st.get_condition(self.status, st.FAILED)
        if failed is not None and failed.get("reason") == st.R_RESOURCE_EXISTS and not clash:
            st.remove_condition(self.status, st.FAILED)  # the object in the way is gone
            self.status.pop("completionTime", None)
        # Not an end: like InvalidSpec, no completionTime (so no TTL), cleared once the name is free.
        if clash and not st.is_finished(self.status) and self.cond(st.FAILED, "True", st.R_RESOURCE_EXISTS, clash):
            self.event("Warning", st.R_RESOURCE_EXISTS, clash)
        if self.stale and not st.is_finished(self.status):
            # A previous MPIJob of this name left children that the garbage collector is removing
            # (delete and re-create under one name): wait for them, then create ours.
            self.requeue(STALE_RECHECK_SECONDS)
            return self.finish_status()

        suspend = bool(self.spec()["runPolicy"].get("suspend"))
        if not st.is_finished(self.status) and not suspend:
            if st.is_true(self.status, st.SUSPENDED):
                self.cond(st.SUSPENDED, "False", st.R_RESUMED, f"MPIJob {self.key} is resumed.")
                self.event("Normal", st.R_RESUMED, f"MPIJob {self.key} is resumed.")
                self.status["startTime"] = st.fmt_time(self.now)  # resume starts afresh
            self.status.setdefault("startTime", st.fmt_time(self.now))
        if not st.is_finished(self.status):
            self.check_launcher_outcome()
        if not st.is_finished(self.status):
            self.check_deadline()

        self.status["replicaStatuses"] = st.replica_statuses(
            self.obs.launcher if self.owned(self.obs.launcher) else None,
            self.workers if self.owned(self.workers) else None,
            self.launcher_pods, self.worker_pods)

        if st.is_finished(self.status):
            self.finished()
        elif suspend:
            self.suspended()
        else:
            self.active()
        return self.finish_status()

    def invalid(self, errors: list) -> Plan:
        fields = ", ".join(dict.fromkeys(e.path or "(root)" for e in errors))
        message = "Invalid spec: " + "; ".join(str(e) for e in errors)
        if self.cond(st.FAILED, "True", st.R_INVALID, message) or self.old_message() != message:
            self.event("Warning", st.R_INVALID, f"Fix {fields}: {message}")
        return self.finish_status()

    def refused(self) -> None:
        """A child the API server refused (Inputs.refusal, see refusal.py): permanent -> Failed/ChildRefused
        until the spec changes; transient -> Blocked=True while it lasts. One Event per transition."""
        r = self.inputs.refusal
        failed = st.get_condition(self.status, st.FAILED)
        if failed is not None and failed.get("reason") == rf.R_REFUSED and not (r and r.permanent):
            st.remove_condition(self.status, st.FAILED)  # a new generation: try again
            self.status.pop("completionTime", None)
        blocked = st.get_condition(self.status, rf.BLOCKED)
        if blocked is not None and (r is None or r.permanent or st.is_finished(self.status)):
            st.remove_condition(self.status, rf.BLOCKED)  # the write passed, or the job has ended
        if r is None or st.is_finished(self.status):
            return
        msg = rf.describe(r)
        if r.permanent:
            self.fail(rf.R_REFUSED, msg)
        elif self.cond(rf.BLOCKED, "True", rf.R_REFUSED, msg) and blocked is None:
            self.event("Warning", rf.R_REFUSED, msg)

    def old_message(self) -> str | None:
        c = st.get_condition(self.old_status, st.FAILED)
        return c.get("message") if c else None

    def our_pods(self) -> tuple[list[Obj], list[Obj], list[Obj]]:
        """Pods of our launcher/worker objects by role, and the stale ones: pods under our names whose
        controller is not the object we observe (a deleted predecessor's, being removed)."""
        owners = {n.launcher_name(self.job): (n.ROLE_LAUNCHER, self.obs.launcher),
                  n.worker_name(self.job): (n.ROLE_WORKER, self.workers)}
        workers, launchers, stale = [], [], []
        name = n.job_name(self.job)
        for pod in self.obs.pods or []:
            if not isinstance(pod, dict):
                continue
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            if labels.get(n.JOB_NAME_LABEL) != name:
                continue
            refs = meta.get("ownerReferences") or []
            ref = next((r for r in refs if isinstance(r, dict) and r.get("controller")), {})
            role, owner = owners.get(ref.get("name"), (None, None))
            if ref.get("name") not in owners and n.is_controlled_by(pod, self.job):
                # a bare worker pod of the upstream operator (upstream_shaped): controlled by the MPIJob
                if labels.get(n.JOB_ROLE_LABEL) == n.ROLE_WORKER:
                    workers.append(pod)
                continue
            if role is None or labels.get(n.JOB_ROLE_LABEL) != role:
                continue
            owner_uid = (owner.get("metadata") or {}).get("uid") if self.owned(owner) else None
            if ref.get("uid") and ref.get("uid") != owner_uid:
                stale.append(pod)
                continue
            (workers if role == n.ROLE_WORKER else launchers).append(pod)
        return workers, launchers, stale

    def stale_alive(self, role: str) -> bool:
        """A predecessor's pod of `role` still runs: a new one would share its hostname."""
        return any(dz.pod_role(p) == role and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   for p in self.stale_pods)

    def stale_children(self) -> list[Obj]:
        """Children under our names controlled by an MPIJob of our name with another uid: a deleted
        predecessor's, which the garbage collector removes (names are unique, so that one is gone)."""
        uid = (self.job.get("metadata") or {}).get("uid")
        out = []
        for obj in (self.obs.service, self.obs.config_map, self.obs.secret, self.obs.launcher,
                    self.obs.workers, self.obs.other_workers, self.obs.pod_group):
            ref = n.controller_ref(obj) if obj is not None else None
            if ref is not None and ref.get("name") == n.job_name(self.job) and uid and ref.get("uid") \
                    and ref["uid"] != uid:
                out.append(obj)
        return out

    def clash(self) -> str | None:
        stale = [id(o) for o in self.stale]
        for obj, kind in ((self.obs.service, "Service"), (self.obs.config_map, "ConfigMap"),
                          (self.obs.secret, "Secret"), (self.obs.launcher, "Job"), (self.workers, None),
                          (self.obs.pod_group, pg.KIND)):
            if obj is not None and not self.owned(obj) and id(obj) not in stale:
                kind = kind or obj.get("kind", "object")
                name = (obj.get("metadata") or {}).get("name", "?")
                return (f"{kind} {self.ns}/{name} already exists and is not controlled by MPIJob {self.key}; "
                        "delete or rename that object, or give the MPIJob another name")
        return None

    def check_launcher_outcome(self) -> None:
        lau = self.obs.launcher
        if not self.owned(lau):
            return
        outcome = st.job_outcome(lau)
        if outcome is None:
            return
        kind, reason, message, when = outcome
        lost = self.worker_lost_during_run() if kind == st.SUCCEEDED else None
        if lost:
            self.fail(R_WORKER_LOST, (
                f"MPIJob {self.key}: the launcher exited 0, but {lost} while it ran, so ranks may never have "
                "finished: Open MPI 5's mpirun (PRRTE) exits 0 when it loses a worker's daemon and the launcher "
                "Job cannot retry a success (spec.mpiImplementation OpenMPI; runPolicy.backoffLimit does not "
                "apply). Resubmit the MPIJob, or run Open MPI 4, MPICH or Intel MPI, whose mpirun fails and is "
                "retried."), when)
        elif kind == st.SUCCEEDED:
            msg = f"MPIJob {self.key} successfully completed."
            if self.cond(st.SUCCEEDED, "True", st.R_SUCCEEDED, msg):
                self.event("Normal", st.R_SUCCEEDED, msg)
            self.status.setdefault("completionTime", when or st.fmt_time(self.now))
            self.status["replicaStatuses"] = {}
        else:
            detail = self.last_failed_launcher_pod() if reason == "BackoffLimitExceeded" else ""
            msg = f"MPIJob {self.key} has failed: {message or reason}{detail}"
            self.fail(reason, msg, when)
        self.not_running_if_never_ran(when)

    def worker_lost_during_run(self) -> str | None:
        """What shows that a worker was lost while the launcher ran, for a launcher that Succeeded
        (docs/architecture.md section 8): the Restarting condition a worker loss set (Running, which
        clears it, needs the launcher still running), or a worker pod deleted or ended between the
        launcher pod's start and its end. Only an MPI whose mpirun exits 0 after losing a host gets
        here: the others' launcher fails, and the Job retries it."""
        if self.spec().get("mpiImplementation") != "OpenMPI":
            return None
        done = [p for p in self.launcher_pods if (p.get("status") or {}).get("phase") == "Succeeded"]
        if not done:
            return None
        pod = max(done, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        started = st.parse_time((pod.get("status") or {}).get("startTime"))
        ended = [st.parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                 for cs in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(cs, dict)]
        finished = max((t for t in ended if t), default=None)
        if started is None or finished is None:
            return None
        # A loss before this pod started (a retry's, which the Job delays by 10 s or more) is not its.
        restarting = st.get_condition(self.old_status, st.RESTARTING) or {}
        lost_at = st.parse_time(restarting.get("lastTransitionTime"))
        if (restarting.get("status") == "True" and WORKER_LOST_WHY in (restarting.get("message") or "")
                and lost_at is not None and started <= lost_at):
            return "a worker was lost"
        for w in self.worker_pods:
            gone = [st.parse_time((w.get("metadata") or {}).get("deletionTimestamp"))] + [
                st.parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for cs in (w.get("status") or {}).get("containerStatuses") or [] if isinstance(cs, dict)]
            if any(t is not None and started < t <= finished for t in gone):
                return f"worker {dz.pod_hostname(w)} was lost"
        return None

    def not_running_if_never_ran(self, when: str | None) -> None:
        if st.get_condition(self.status, st.RUNNING) is None:
            self.status["conditions"] = [{
                "type": st.RUNNING, "status": "False", "reason": st.R_RUNNING,
                "message": "The MPIJob finished without all its pods ever running together.",
                "lastUpdateTime": when or st.fmt_time(self.now),
                "lastTransitionTime": when or st.fmt_time(self.now)}, *st.conditions_of(self.status)]

    def last_failed_launcher_pod(self) -> str:
        failed = [p for p in self.launcher_pods if (p.get("status") or {}).get("phase") == "Failed"]
        if not failed:
            return ""
        pod = max(failed, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        pst = pod.get("status") or {}
        reason, message = pst.get("reason"), pst.get("message")
        for cs in pst.get("containerStatuses") or []:
            term = ((cs or {}).get("state") or {}).get("terminated") or {}
            if term:
                reason = reason or term.get("reason")
                message = message or f"exit code {term.get('exitCode')}"
                break
        name = (pod.get("metadata") or {}).get("name", "?")
        return f" (last launcher pod {name}: {reason or 'Failed'}{': ' + message if message else ''})"

    def check_deadline(self) -> None:
        ads = self.spec()["runPolicy"].get("activeDeadlineSeconds")
        start = st.parse_time(self.status.get("startTime"))
        if ads is None or start is None or self.spec()["runPolicy"].get("suspend"):
            return
        due = start + timedelta(seconds=ads)
        if self.now >= due:
            self.fail(st.R_DEADLINE, f"MPIJob {self.key} ran longer than runPolicy.activeDeadlineSeconds "
                      f"({ads}s); raise it if the job needs more time")
            self.not_running_if_never_ran(None)
        else:
            self.requeue((due - self.now).total_seconds())

    # -- shared children --------------------------------------------------------------------------

    def shared_children(self) -> None:
        for field, build in (("service", lambda: dz.service(self.job)),
                             ("config_map", lambda: dz.config_map(self.job, self.config, self.worker_pods))):
            want, have = build(), getattr(self.obs, field)
            if have is None:
                self.p.creates.append(Create(want))
            elif self.owned(have):
                patch = df.diff(want, have)
                if patch and field == "config_map" and _only_discover_hosts(want, have):
                    self.minor.append(patch)
                elif patch:
                    self.p.patches.append(patch)
        sec = self.obs.secret
        if sec is None:
            if self.inputs.keygen is not None:
                self.p.creates.append(Create(dz.secret(self.job, self.inputs.keygen())))
        elif self.owned(sec):
            data = sec.get("data")
            if isinstance(data, dict) and not (data.get("ssh-privatekey") and data.get("ssh-publickey")):
                # Someone removed a key: replace the Secret (created anew on the next reconcile). A cache
                # that drops `data` altogether (to save memory) does not trigger this.
                self.p.deletes.append(self.delete(sec, "the SSH Secret lost its keys"))
            else:
                labels = dz.secret(self.job, _NO_KEY)["metadata"]["labels"]
                patch = df.diff({"kind": "Secret", "metadata": {"labels": labels}}, sec)
                if patch:
                    self.p.patches.append(patch)

    def delete(self, obj: Obj, reason: str) -> Delete:
        meta = obj.get("metadata") or {}
        return Delete(df.ref_of(obj), uid=meta.get("uid"), reason=reason)

    # -- workers and launcher ---------------------------------------------------------------------

    def upstream_shaped(self) -> bool:
        """Started by the upstream operator (docs/architecture.md section 6.3): its workers are bare pods
        controlled by the MPIJob, its launcher Job has no template hash of ours. Such a job is run out
        on that shape: no worker Job or StatefulSet (its names would clash with the bare pods'), no
        repair of the launcher, the bare workers deleted when it ends."""
        if self.obs.workers is not None:
            return False
        lau = self.obs.launcher
        if self.owned(lau) and n.TEMPLATE_HASH_ANNOTATION not in ((lau.get("metadata") or {}).get("annotations")
                                                                  or {}):
            return True
        return any(n.is_controlled_by(p, self.job) for p in self.worker_pods)

    def bare_workers_ready(self) -> int:
        return sum(1 for p in self.worker_pods if dz.is_pod_active(p) and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []))

    def workers_ready(self) -> bool:
        count = dz.worker_replicas(self.job)
        if count == 0:
            return True
        if self.upstream_shaped():
            return self.bare_workers_ready() >= count
        w = self.workers
        if not self.owned(w) or _deleting(w):
            return False
        wst = w.get("status") or {}
        ready = wst.get("readyReplicas") if w.get("kind") == "StatefulSet" else wst.get("ready")
        return int(ready or 0) >= count

    def launcher_running(self) -> bool:
        lau = self.obs.launcher
        if not self.owned(lau) or (lau.get("spec") or {}).get("suspend"):
            return False
        if any(dz.is_pod_active(p) for p in self.launcher_pods):
            return True
        return int((lau.get("status") or {}).get("ready") or 0) > 0

    def workers_lost(self, have: Obj) -> str | None:
        """Why a worker Job can no longer give every worker back, or None. An Indexed Job never
        reruns an index whose pod succeeded, and a stopped `sshd` exits 0: a deleted worker pod, or
        every pod of a suspended Job, ends Succeeded and its index stays completed."""
        wst = have.get("status") or {}
        if int(wst.get("succeeded") or 0) > 0 or wst.get("completedIndexes"):
            return f"worker index(es) {wst.get('completedIndexes') or wst.get('succeeded')} ended"
        for ctype in ("Complete", "Failed"):
            if st.job_condition(have, ctype) is not None:
                return f"the worker Job is {ctype}"
        done = sorted(dz.pod_hostname(p) for p in self.worker_pods
                      if (p.get("status") or {}).get("phase") == "Succeeded")
        return f"worker pod(s) {', '.join(done)} ended" if done else None

    def recreate(self, obj: Obj, reason: str) -> None:
        """Delete `obj` to create it afresh on a later reconcile. Foreground: the object stays until its
        pods are gone, so a new pod never shares a hostname with an old one."""
        d = self.delete(obj, reason)
        self.p.deletes.append(replace(d, propagation="Foreground"))

    def sync_workers(self, running: bool) -> None:
        if not isinstance(self.spec()["mpiReplicaSpecs"].get(WORKER), dict):
            return  # no Worker replica spec (the CRD allows it): the launcher runs alone
        if self.upstream_shaped():
            if not running:  # stop the bare workers, as upstream does when the job ends
                for pod in self.worker_pods:
                    if n.is_controlled_by(pod, self.job) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                        self.p.deletes.append(self.delete(pod, "the MPIJob has finished: stop its worker"))
            return
        want = dz.workers(self.job, self.config, running=running)
        have = self.workers
        sts = self.config.worker_backend == "statefulset"
        stray = self.choice.stray
        if stray is not None and not _deleting(stray):
            self.recreate(stray, f"a second set of workers ({stray.get('kind')}) besides the {want['kind']} "
                                 "this MPIJob started with")
        if have is None:
            if running and (sts or dz.worker_replicas(self.job) > 0):
                if self.stale_alive(n.ROLE_WORKER):
                    self.requeue(STALE_RECHECK_SECONDS)  # a predecessor's worker pod is still stopping
                else:
                    self.p.creates.append(Create(want))
            return
        if not self.owned(have) or _deleting(have):
            return  # a clash (reported), or a recreation under way: created again once gone
        lost = self.workers_lost(have) if running and not sts else None
        if lost:
            self.recreate(have, f"{lost}: recreate the workers")
            return
        if running and df.recreate_on_resume(want, have):
            self.recreate(have, "resume: recreate the workers from the current template")
            return
        no_pods = not running or int((have.get("spec") or {}).get("replicas") or 0) == 0
        patch = df.diff(want, have, template_mutable=sts and no_pods)
        if patch:
            self.p.patches.append(patch)

    def sync_launcher(self, running: bool) -> None:
        want = dz.launcher(self.job, self.config, running=running)
        have = self.obs.launcher
        # WaitForWorkersReady holds the launcher back until every worker is Ready: on the first start
        # and on every resume (a suspended launcher Job stays suspended until then).
        hold = running and self.spec()["launcherCreationPolicy"] == "WaitForWorkersReady" \
            and not self.workers_ready()
        if have is None:
            if running and not hold:
                if self.stale_alive(n.ROLE_LAUNCHER):
                    self.requeue(STALE_RECHECK_SECONDS)
                else:
                    self.p.creates.append(Create(want))
            return
        if not self.owned(have) or _deleting(have) or self.upstream_shaped():
            return  # (an upstream launcher Job runs as upstream made it: its template is immutable)
        if running and df.recreate_on_resume(want, have):
            self.recreate(have, "resume: recreate the launcher from the current template")
            return
        if hold and (have.get("spec") or {}).get("suspend"):
            want = dz.launcher(self.job, self.config, running=False)
        patch = df.diff(want, have)
        if patch:
            self.p.patches.append(patch)

    # -- gang scheduling (reconcilers/podgroup.py) -------------------------------------------------

    def sync_pod_group(self) -> None:
        if not pg.enabled(self.config):
            return
        want = pg.pod_group(self.job, self.config, dz.owner_reference(self.job))
        have = self.obs.pod_group
        if have is None:
            self.p.creates.append(Create(want))
        elif self.owned(have):
            patch = pg.diff_pod_group(want, have)
            if patch:
                self.p.patches.append(patch)

    def drop_pod_group(self, reason: str) -> None:
        st.remove_condition(self.status, pg.WAITING_CONDITION)
        have = self.obs.pod_group
        if pg.enabled(self.config) and self.owned(have) and not (have.get("metadata") or {}).get("deletionTimestamp"):
            self.p.deletes.append(self.delete(have, reason))

    def gang_wait(self, running: bool) -> None:
        """WaitingForGang=True (the State column) while the PodGroup waits for room for every pod."""
        have = self.obs.pod_group if self.owned(self.obs.pod_group) else None
        msg = None if running or not pg.enabled(self.config) else pg.waiting_message(have, self.key)
        if msg is not None:
            # Set when the wait begins only: the phase flips between Pending and Scheduling while pods
            # wait at the scheduler's Permit, and each new message would be one more status write.
            if not st.is_true(self.status, pg.WAITING_CONDITION):
                self.cond(pg.WAITING_CONDITION, "True", pg.R_WAITING, msg)
                self.event("Normal", pg.R_WAITING, msg)
        elif st.get_condition(self.status, pg.WAITING_CONDITION) is not None:
            st.remove_condition(self.status, pg.WAITING_CONDITION)
            self.event("Normal", pg.R_GANG_SCHEDULED,
                       f"MPIJob {self.key}: the whole gang is placed (PodGroup {pg.phase(have) or 'gone'}).")

    # -- states -----------------------------------------------------------------------------------

    def active(self) -> None:
        self.shared_children()
        self.sync_pod_group()
        self.sync_workers(running=True)
        self.sync_launcher(running=True)

        count = dz.worker_replicas(self.job)
        running = self.obs.launcher is not None and self.launcher_running() and self.workers_ready()
        lst = ((self.obs.launcher or {}).get("status") or {}) if self.owned(self.obs.launcher) else {}
        # A worker pod that ended either way (a stopped sshd exits 0) is lost while the MPIJob runs.
        worker_failed = any((p.get("status") or {}).get("phase") in ("Failed", "Succeeded") for p in self.worker_pods)
        worker_lost = st.is_true(self.old_status, st.RUNNING) and not self.workers_ready()
        # A launcher pod that already Succeeded is not a retry, even before the Job counts it.
        launcher_done = any((p.get("status") or {}).get("phase") == "Succeeded" for p in self.launcher_pods)
        launcher_retry = int(lst.get("failed") or 0) > 0 and int(lst.get("succeeded") or 0) == 0 and not launcher_done
        if running:
            msg = f"MPIJob {self.key} is running: the launcher and {count} worker(s) are ready."
            if self.cond(st.RUNNING, "True", st.R_RUNNING, msg):
                self.event("Normal", st.R_RUNNING, msg)
        elif launcher_retry or worker_failed or worker_lost:
            why = ("the launcher failed " + str(lst.get("failed")) + " time(s)" if launcher_retry
                   else WORKER_LOST_WHY)
            msg = f"MPIJob {self.key} is restarting: {why}; the launcher Job retries (runPolicy.backoffLimit)."
            if self.cond(st.RESTARTING, "True", st.R_RESTARTING, msg):
                self.event("Warning", st.R_RESTARTING, msg)
        self.gang_wait(running)

    def suspended(self) -> None:
        msg = f"MPIJob {self.key} is suspended."
        if self.cond(st.SUSPENDED, "True", st.R_SUSPENDED, msg):
            self.event("Normal", st.R_SUSPENDED, msg)
        if st.get_condition(self.status, st.RUNNING) is not None:
            self.cond(st.RUNNING, "False", st.R_SUSPENDED, msg)
        st.remove_condition(self.status, st.RESTARTING)
        self.drop_pod_group("the MPIJob is suspended; a resume creates it afresh")
        self.shared_children()
        self.sync_workers(running=False)
        self.sync_launcher(running=False)

    def finished(self) -> None:
        self.drop_pod_group("the MPIJob has finished")
        policy = self.spec()["runPolicy"]["cleanPodPolicy"]
        if policy in ("Running", "All"):
            self.sync_workers(running=False)
        lau = self.obs.launcher
        if self.owned(lau) and st.job_outcome(lau) is None and not (lau.get("spec") or {}).get("suspend"):
            # The MPIJob ended without its launcher Job (its own deadline, a name clash): stop it.
            self.p.patches.append(df.Patch(df.ref_of(lau), {"spec": {"suspend": True}},
                                           "the MPIJob has finished: stop the launcher"))
        if policy == "All":
            for pod in self.launcher_pods + self.worker_pods:
                meta = pod.get("metadata") or {}
                phase = (pod.get("status") or {}).get("phase")
                is_launcher = pod in self.launcher_pods
                if meta.get("deletionTimestamp") or (not is_launcher and phase in ("Running", "Pending", None)):
                    continue  # active workers are stopped by their StatefulSet / Job
                self.p.deletes.append(Delete(Ref("v1", "Pod", self.ns, meta.get("name", "")),
                                             uid=meta.get("uid"), reason="cleanPodPolicy All"))
        self.ttl()

    def ttl(self) -> None:
        ttl = self.spec()["runPolicy"].get("ttlSecondsAfterFinished")
        done = st.parse_time(self.status.get("completionTime"))
        if ttl is None or done is None:
            return
        due = done + timedelta(seconds=ttl)
        if self.now >= due:
            self.p.delete_mpijob = True
        else:
            self.requeue((due - self.now).total_seconds())


_NO_KEY = dz.SSHKey("", "")
# Why Restarting is set when a worker pod ended or is not Ready while the MPIJob runs.
WORKER_LOST_WHY = "a worker failed or was lost"
# Failed reason: the launcher exited 0 although a worker was lost during its run (Open MPI 5).
R_WORKER_LOST = "WorkerLostDuringRun"
# How soon to look again while a deleted predecessor's children or pods are being removed (their
# delete events requeue the MPIJob anyway; this is the safety net).
STALE_RECHECK_SECONDS = 1.0


def _only_discover_hosts(want: Obj, have: Obj) -> bool:
    """The ConfigMap differs from the cache in discover_hosts.sh alone (a minor write, pace.py)."""
    data = have.get("data") if isinstance(have.get("data"), dict) else {}
    same_hosts = {**want, "data": {**want["data"], dz.DISCOVER_HOSTS: data.get(dz.DISCOVER_HOSTS)}}
    return df.diff(same_hosts, have) is None


def _deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))
