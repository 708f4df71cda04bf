#!/usr/bin/env bash
# Proves the real node without the operator: in a fresh namespace, a hand-made SSH Secret, a
# headless Service (publishNotReadyAddresses), a hostfile ConfigMap, two worker pods named as
# the operator names them (hostname <job>-worker-<i>, subdomain <job>) running sshd as mpiuser,
# and a launcher pod that resolves the workers through CoreDNS and runs
#   mpirun -n 4 --hostfile /etc/mpi/hostfile /opt/pi
# over SSH (2 workers x 2 slots). Prints the launcher's output and the timings; exit 0 when pi
# was computed by 4 ranks on 2 hosts. KEEP=1 keeps the namespace; BACKEND=pods|statefulset|job;
# PI_INTERVALS (default 1e8) sets the work.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
# shellcheck source=hack/lib/realnode.sh
source "$here/../lib/realnode.sh"
NS=${NS:-realnode-smoke-$$}
JOB=pi
IMAGE=${IMAGE:-localhost/mpi-pi:latest}
BACKEND=${BACKEND:-pods}  # workers as plain Pods, a StatefulSet, or an Indexed Job
t0=$SECONDS
k() { kubectl_admin -n "$NS" "$@"; }

cleanup() { [ "${KEEP:-0}" = 1 ] || kubectl_admin delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl_admin create namespace "$NS" >/dev/null
key=$(mktemp -d)
ssh-keygen -q -t ecdsa -b 521 -m PEM -N '' -C "$JOB@$NS" -f "$key/id" >/dev/null
k create secret generic "$JOB-ssh" --type=kubernetes.io/ssh-auth \
  --from-file=ssh-privatekey="$key/id" --from-file=ssh-publickey="$key/id.pub" >/dev/null
rm -rf "$key"
printf '%s-worker-0.%s.%s.svc slots=2\n%s-worker-1.%s.%s.svc slots=2\n' "$JOB" "$JOB" "$NS" "$JOB" "$JOB" "$NS" |
  k create configmap "$JOB-config" --from-file=hostfile=/dev/stdin >/dev/null

# The pod template of a launcher or worker, as the operator renders it (docs/architecture.md section 1),
# but for its operator-name: these bare pods belong to no MPIJob, and a bare pod labelled as this
# operator's worker where no MPIJob is is refused, whoever creates it (manifests/rbac/bare_worker_policy.yaml).
template() {  # template <hostname or ""> <role> <restartPolicy> <command json>
  cat <<EOF
metadata:
  labels: {training.kubeflow.org/job-name: $JOB, training.kubeflow.org/job-role: $2,
           training.kubeflow.org/operator-name: realnode-smoke-test}
spec:
$( [ -z "$1" ] || echo "  hostname: $1")
  subdomain: $JOB
  restartPolicy: $3
  nodeSelector: {$NODE_LABEL: "true"}
  tolerations: [{key: $NODE_LABEL, operator: Exists, effect: NoSchedule}]
  enableServiceLinks: false
  automountServiceAccountToken: false
  securityContext: {runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true}
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: IfNotPresent
    args: $4
    env:
    - {name: K_MPI_JOB_ROLE, value: $2}
    - {name: OMPI_MCA_orte_keep_fqdn_hostnames, value: "true"}
    - {name: OMPI_MCA_orte_default_hostfile, value: /etc/mpi/hostfile}
    - {name: OMPI_MCA_plm_rsh_args, value: "-o ConnectionAttempts=10"}
    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: "1", memory: 512Mi}}
    volumeMounts:
    - {name: ssh-auth, mountPath: /home/mpiuser/.ssh}
    - {name: mpi-job-config, mountPath: /etc/mpi}
  volumes:
  - name: ssh-auth
    secret:
      secretName: $JOB-ssh
      items:
      - {key: ssh-privatekey, path: id_rsa}
      - {key: ssh-publickey, path: id_rsa.pub}
      - {key: ssh-publickey, path: authorized_keys}
  - name: mpi-job-config
    configMap:
      name: $JOB-config
      items: [{key: hostfile, path: hostfile, mode: 0444}]
EOF
}
indent() { sed "s/^/$(printf "%${1}s" "")/"; }
named() { sed "s/^metadata:/metadata:\n  name: $1/"; }
SSHD='["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]'
MPIRUN='["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi", "'"${PI_INTERVALS:-100000000}"'"]'
{
  cat <<EOF
apiVersion: v1
kind: Service
metadata: {name: $JOB}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {training.kubeflow.org/job-name: $JOB}
---
EOF
  case $BACKEND in
    pods)
      for i in 0 1; do
        printf 'apiVersion: v1\nkind: Pod\n'
        template "$JOB-worker-$i" worker Always "$SSHD" | named "$JOB-worker-$i"
        echo ---
      done
      printf 'apiVersion: v1\nkind: Pod\n'
      template "$JOB-launcher" launcher Never "$MPIRUN" | named "$JOB-launcher"
      ;;
    statefulset|job)
      if [ "$BACKEND" = statefulset ]; then
        # StatefulSet pods get hostname <sts>-<i> and, from serviceName, the subdomain.
        cat <<EOF
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: $JOB-worker}
spec:
  serviceName: $JOB
  podManagementPolicy: Parallel
  replicas: 2
  selector: {matchLabels: {training.kubeflow.org/job-name: $JOB, training.kubeflow.org/job-role: worker}}
  template:
$(template "" worker Always "$SSHD" | indent 4)
---
EOF
      else
        # Indexed Job pods get hostname <job>-<index>; the template's subdomain does the rest.
        cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $JOB-worker}
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  # as the operator's worker Job (reconcilers/desired.py): without it the Job controller counts a
  # deleted pod that still runs as failed, and runs its index again, before the kubelet reports
  # how it ended (docs/architecture.md section 4)
  podReplacementPolicy: Failed
  template:
$(template "" worker Never "$SSHD" | indent 4)
---
EOF
      fi
      cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $JOB-launcher}
spec:
  backoffLimit: 3
  template:
$(template "$JOB-launcher" launcher Never "$MPIRUN" | indent 4)
EOF
      ;;
    *) die "BACKEND must be pods, statefulset or job" ;;
  esac
} | k apply -f - >/dev/null
log "submitted 2 workers ($BACKEND) + launcher in namespace $NS ($((SECONDS - t0))s)"

launcher_pod() {  # the newest launcher pod
  k get pods -l training.kubeflow.org/job-name=$JOB,training.kubeflow.org/job-role=launcher \
    --sort-by=.metadata.creationTimestamp -o jsonpath='{.items[-1:].metadata.name}' 2>/dev/null
}
launcher_done() {  # prints Succeeded/Failed once the launcher (pod, or Job with retries) is done
  local c
  if [ "$BACKEND" = pods ]; then
    c=$(k get pod "$JOB-launcher" -o jsonpath='{.status.phase}' 2>/dev/null)
  else
    c=$(k get job "$JOB-launcher" -o jsonpath='{.status.conditions[?(@.status=="True")].type}' 2>/dev/null)
    c=${c/Complete/Succeeded}
  fi
  case $c in *Succeeded*) echo Succeeded ;; *Failed*) echo Failed ;; *) return 1 ;; esac
}
p=
for _ in $(seq 1 360); do
  p=$(launcher_done) && break
  sleep 0.5
done
lp=$(launcher_pod)
log "launcher: ${p:-not done} after $((SECONDS - t0))s"
uid=$(k get pod "$lp" -o jsonpath='{.metadata.uid}')
# The kubelet's log file (kubectl logs needs the API server to reach the kubelet).
log=$(ls "$RN/pod-logs/${NS}_${lp}_$uid/main/"*.log 2>/dev/null | tail -n 1 || true)
out=$( [ -n "$log" ] && sed -E 's/^[^ ]+ (stdout|stderr) [FP] //' "$log" || k logs "$lp" 2>&1 || true)
echo "$out"
k get pods -o wide >&2
if [ "$p" = Succeeded ] && grep -q "pi is approximately 3.14159.*4 ranks on 2 hosts" <<<"$out"; then
  log "OK: pi computed by 4 MPI ranks on 2 worker pods, $((SECONDS - t0))s from submission"
  exit 0
fi
log "FAILED"
exit 1
