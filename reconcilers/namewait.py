"""The launcher's wait for its hosts' names (docs/architecture.md section 4.1).

A launcher whose `command:` is `mpirun` (upstream's own examples/v2beta1/pi/pi.yaml) replaces the
image's entrypoint, and with it any lookup loop the image had: with `launcherCreationPolicy:
AtStartup` its container starts with its workers', whose names resolve only once each worker pod has
an address and CoreDNS has seen it (0.3-0.7 s later on the real node), and ssh does not retry a name
that does not resolve. So the operator puts one init container last in the launcher's pod template:
it reads the hostfile the launcher will read and looks each host up through the pod's own resolver
(`getent hosts`, the NSS path ssh takes, with the pod's search path), until every one resolves or
`Config.launcher_names_wait_s` has passed; then it exits 1 naming the hosts that do not resolve
(`terminationMessagePolicy: FallbackToLogsOnError` makes that line the message the operator quotes,
`init_failure`). The user's container, command and image's entrypoint are left as written.

Cost: no write (one more container in a template the operator writes anyway), no pull (the launcher
container's own image), no extra request (the launcher container's resources, and it runs last, so
the pod's effective request, the larger of the init containers' and the containers' sum, which is
what the scheduler, quotas and Kueue count, stays the containers'). Its securityContext is the
launcher container's, so admission (restricted Pod Security included) admits it as it admits the
launcher. A launcher Job made before the init container existed keeps running as it was: a Job's
template is never patched, and a template change recreates a Job only while it is suspended
(reconcilers/diff.py).
"""

from __future__ import annotations

from reconcilers.types import Obj

INIT_CONTAINER = "mpijob-wait-for-workers"
DEFAULT_WAIT_S = 300
# Seconds a launcher waits when its image has no way to look a name up: longer than the 0.3-0.7 s a
# new worker's name takes to resolve (docs/architecture.md 4.1), the best that can be done unchecked.
BLIND_WAIT_S = 3

# POSIX sh, `sh -c SCRIPT mpijob-wait-for-workers <limit seconds> <hostfile>`. Hosts are looked up in
# hostfile order, one at a time (a name that does not resolve yet is asked again 0.1 s later for the
# first 2 s, then every second), so a job of many workers costs the DNS one query round per poll, not
# one per host. The launcher's own name (runLauncherAsWorker) is in the hostfile too.
SCRIPT = r"""
limit=$1 hostfile=$2
say() { echo "mpijob-wait-for-workers: $*"; }
now() { date +%s 2>/dev/null || echo 0; }
if command -v getent >/dev/null 2>&1; then
  how="getent hosts"; look() { getent hosts "$1" >/dev/null 2>&1; }
elif command -v python3 >/dev/null 2>&1; then
  how="python3 socket.getaddrinfo"
  look() { python3 -c 'import socket, sys; socket.getaddrinfo(sys.argv[1], None)' "$1" >/dev/null 2>&1; }
else
  say "this image has neither getent nor python3 to look names up: waiting BLIND s unchecked instead"
  sleep BLIND; exit 0
fi
hosts=
while read -r line || [ -n "$line" ]; do
  line=${line%%#*}; host=${line%%[ :]*}
  [ -n "$host" ] && hosts="$hosts $host"
done < "$hostfile"
start=$(now) slept=0 polls=0 count=0
for host in $hosts; do
  count=$((count + 1))
  until look "$host"; do
    if [ $(( $(now) - start )) -gt "$limit" ] || [ $((slept / 1000)) -ge "$limit" ]; then
      missing=
      for h in $hosts; do look "$h" || missing="$missing $h"; done
      say "after ${limit}s these hosts of $hostfile still do not resolve ($how):$missing;" \
        "their pods have no address yet (Pending, not scheduled?) or the cluster DNS does not answer"
      exit 1
    fi
    step=100; [ "$polls" -ge 20 ] && step=1000
    polls=$((polls + 1)) slept=$((slept + step))
    [ $((polls % 30)) -eq 0 ] && say "still waiting for $host ($((slept / 1000)) s)"
    sleep "$((step / 1000)).$(printf %03d $((step % 1000)))" 2>/dev/null || sleep 1
  done
done
say "all $count hosts of $hostfile resolve ($how) after $polls retries, ~$slept ms of waiting"
"""


def script() -> str:
    return SCRIPT.replace("BLIND", str(BLIND_WAIT_S)).strip() + "\n"


def init_container(launcher: Obj, wait_s: int, config_volume: str, hostfile_dir: str) -> Obj:
    """The init container for the launcher container `launcher` (the pod template's first)."""
    out: Obj = {
        "name": INIT_CONTAINER,
        "image": launcher.get("image"),
        "command": ["/bin/sh", "-c", script(), INIT_CONTAINER, str(wait_s), f"{hostfile_dir}/hostfile"],
        "volumeMounts": [{"name": config_volume, "mountPath": hostfile_dir, "readOnly": True}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key in ("imagePullPolicy", "securityContext", "resources"):
        if launcher.get(key) is not None:
            out[key] = launcher[key]
    return out


def add_to(spec: Obj, wait_s: int, config_volume: str, hostfile_dir: str) -> None:
    """Appends the init container to a launcher pod spec (last: the user's own init containers run
    first, native sidecars included, whose requests it then adds to no more than the launcher's do).
    `wait_s` 0 turns it off; a user's container or init container of the same name is left as written."""
    if wait_s <= 0:
        return
    if any(isinstance(c, dict) and c.get("name") == INIT_CONTAINER
           for c in [*(spec.get("initContainers") or []), *spec["containers"]]):
        return  # the user's own (containers and init containers share names)
    spec["initContainers"] = [*(spec.get("initContainers") or []),
                              init_container(spec["containers"][0], wait_s, config_volume, hostfile_dir)]


def init_failure(pod: Obj) -> str:
    """Why the pod's name wait failed (its termination message: the hosts that do not resolve), or ""."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if not isinstance(cs, dict) or cs.get("name") != INIT_CONTAINER:
            continue
        term = (cs.get("state") or {}).get("terminated") or {}
        if term and term.get("exitCode") not in (0, None):
            lines = [ln for ln in (term.get("message") or "").splitlines() if ln.strip()]
            return lines[-1].strip() if lines else f"{INIT_CONTAINER} exit code {term.get('exitCode')}"
    return ""
