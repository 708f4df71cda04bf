#!/bin/sh
# ENTRYPOINT of localhost/mpi-pi, as in the MPI Operator's Intel/MPICH images: when the pod is an
# MPIJob's launcher (K_MPI_JOB_ROLE=launcher), wait until every host of the hostfile resolves,
# retrying with exponential backoff from 0.1 s (10 times, ~100 s in all), then run the command.
# With launcherCreationPolicy AtStartup the launcher can start before the workers' pods have
# IPs, and ssh does not retry a name that does not resolve (ConnectionAttempts only retries
# connecting). Workers run their command as it is: a stopped sshd exits 0, and the operator
# replaces such a worker (README, "Lost workers"). Pods that set `command:` bypass this script;
# set `args:` to keep it.
if [ "${K_MPI_JOB_ROLE:-}" = launcher ]; then
  hostfile=${OMPI_MCA_orte_default_hostfile:-${I_MPI_HYDRA_HOST_FILE:-${HYDRA_HOST_FILE:-/etc/mpi/hostfile}}}
  if [ -r "$hostfile" ]; then
    # Open MPI: "host slots=N"; Intel MPI and MPICH: "host:N".
    for host in $(sed 's/#.*//' "$hostfile" | awk '{print $1}' | cut -d: -f1); do
      delay=0.1 tries=0
      until getent hosts "$host" >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -gt "${MPI_WAIT_HOSTS_RETRIES:-10}" ]; then
          echo "entrypoint: $host does not resolve; starting anyway" >&2
          break
        fi
        sleep "$delay"
        delay=$(awk -v d="$delay" 'BEGIN { print d * 2 }')
      done
    done
  fi
fi
exec "$@"
