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

from datetime import timedelta
from typing import Any

from reconcilers import desired as dz
from reconcilers import diff as df
from reconcilers import names as n
from reconcilers import status as st
from reconcilers.defaults import with_defaults
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
        self.config = inputs.config
        self.now = inputs.now
        self.raw = inputs.mpijob
        self.job = with_defaults(inputs.mpijob)
        self.obs = inputs.observed
        self.p = Plan()
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
        if self.status != self.old_status:
            self.p.status = self.status
        return self.p

    def fail(self, reason: str, message: str, completion: str | None = None) -> None:
        if self.cond(st.FAILED, "True", reason, message):
            self.event("Warning", st.R_FAILED, f"{reason}: {message}")
        self.status.setdefault("completionTime", completion or st.fmt_time(self.now))

    # -- the lifecycle ----------------------------------------------------------------------------

    def run(self) -> Plan:
        errors = validate(self.job)
        if errors:
            return self.invalid(errors)
        failed = st.get_condition(self.status, st.FAILED)
        if failed is not None and failed.get("reason") == st.R_INVALID:
            st.remove_condition(self.status, st.FAILED)  # the spec was fixed

        if not st.get_condition(self.status, st.CREATED):
            self.cond(st.CREATED, "True", st.R_CREATED, f"MPIJob {self.key} is created.")
            self.event("Normal", st.R_CREATED, f"MPIJob {self.key} is created.")

        self.worker_pods, self.launcher_pods = self.our_pods()
        clash = self.clash()
        if clash and not st.is_finished(self.status):
            self.fail(st.R_RESOURCE_EXISTS, clash)

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
            self.obs.workers if self.owned(self.obs.workers) else None,
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

    def old_message(self) -> str | None:
        c = st.get_condition(self.old_status, st.FAILED)
        return c.get("message") if c else None

    def our_pods(self) -> tuple[list[Obj], list[Obj]]:
        """Pods of our launcher/worker objects (by controller ownerReference name), by role."""
        owners = {n.launcher_name(self.job): n.ROLE_LAUNCHER, n.worker_name(self.job): n.ROLE_WORKER}
        workers, launchers = [], []
        name = n.job_name(self.job)
        for pod in self.obs.pods or []:
            if not isinstance(pod, dict):
                continue
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            if labels.get(n.JOB_NAME_LABEL) != name:
                continue
            refs = meta.get("ownerReferences") or []
            owner = next((r.get("name") for r in refs if isinstance(r, dict) and r.get("controller")), None)
            role = owners.get(owner)
            if role is None and n.is_controlled_by(pod, self.job):
                role = n.ROLE_WORKER  # a bare worker pod of the upstream operator (upstream_shaped)
            if role is None or labels.get(n.JOB_ROLE_LABEL) != role:
                continue
            (workers if role == n.ROLE_WORKER else launchers).append(pod)
        return workers, launchers

    def clash(self) -> str | None:
        for field, kind in (("service", "Service"), ("config_map", "ConfigMap"), ("secret", "Secret"),
                            ("launcher", "Job"), ("workers", None)):
            obj = getattr(self.obs, field)
            if obj is not None and not self.owned(obj):
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
        if kind == st.SUCCEEDED:
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
                if patch:
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
        w = self.obs.workers
        if not self.owned(w):
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

    def sync_workers(self, running: bool) -> None:
        if self.upstream_shaped():
            if not running:  # stop the bare workers, as upstream does when the job ends
                for pod in self.worker_pods:
                    if n.is_controlled_by(pod, self.job) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                        self.p.deletes.append(self.delete(pod, "the MPIJob has finished: stop its worker"))
            return
        want = dz.workers(self.job, self.config, running=running)
        have = self.obs.workers
        sts = self.config.worker_backend == "statefulset"
        if have is None:
            if running and (sts or dz.worker_replicas(self.job) > 0):
                self.p.creates.append(Create(want))
            return
        if not self.owned(have):
            return
        if have.get("kind") != want["kind"]:
            # The operator's --worker-backend changed: leave the other kind alone while it runs.
            return
        if running and df.recreate_on_resume(want, have):
            self.p.deletes.append(self.delete(have, "resume: recreate the workers from the current template"))
            return
        no_pods = not running or int((have.get("spec") or {}).get("replicas") or 0) == 0
        patch = df.diff(want, have, template_mutable=sts and no_pods)
        if patch:
            self.p.patches.append(patch)

    def sync_launcher(self, running: bool) -> None:
        want = dz.launcher(self.job, self.config, running=running)
        have = self.obs.launcher
        if have is None:
            wait = self.spec()["launcherCreationPolicy"] == "WaitForWorkersReady"
            if running and (not wait or self.workers_ready()):
                self.p.creates.append(Create(want))
            return
        if not self.owned(have) or self.upstream_shaped():
            return  # (an upstream launcher Job runs as upstream made it: its template is immutable)
        if running and df.recreate_on_resume(want, have):
            self.p.deletes.append(self.delete(have, "resume: recreate the launcher from the current template"))
            return
        patch = df.diff(want, have)
        if patch:
            self.p.patches.append(patch)

    # -- states -----------------------------------------------------------------------------------

    def active(self) -> None:
        self.shared_children()
        self.sync_workers(running=True)
        self.sync_launcher(running=True)

        count = dz.worker_replicas(self.job)
        running = self.obs.launcher is not None and self.launcher_running() and self.workers_ready()
        lst = ((self.obs.launcher or {}).get("status") or {}) if self.owned(self.obs.launcher) else {}
        worker_failed = any((p.get("status") or {}).get("phase") == "Failed" for p in self.worker_pods)
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
                   else "a worker failed or was lost")
            msg = f"MPIJob {self.key} is restarting: {why}; the launcher Job retries (runPolicy.backoffLimit)."
            if self.cond(st.RESTARTING, "True", st.R_RESTARTING, msg):
                self.event("Warning", st.R_RESTARTING, msg)

    def suspended(self) -> None:
        msg = f"MPIJob {self.key} is suspended."
        if self.cond(st.SUSPENDED, "True", st.R_SUSPENDED, msg):
            self.event("Normal", st.R_SUSPENDED, msg)
        if st.get_condition(self.status, st.RUNNING) is not None:
            self.cond(st.RUNNING, "False", st.R_SUSPENDED, msg)
        st.remove_condition(self.status, st.RESTARTING)
        self.shared_children()
        self.sync_workers(running=False)
        self.sync_launcher(running=False)

    def finished(self) -> None:
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
