#!/bin/sh
# Runs INSIDE the Debian chroot (as root, in a private mount namespace) to turn a debootstrap
# minbase rootfs into the base of localhost/mpi-pi:<flavour>: its MPI, an SSH server and client set up
# as the Kubeflow MPI Operator's images expect (kubeflow/mpi-operator build/base/Dockerfile):
#   - sshd and ssh on port 2222; StrictHostKeyChecking no; UserKnownHostsFile /dev/null;
#   - a non-root user mpiuser (uid/gid 1000) whose ~/.ssh is where the MPIJob's Secret is
#     mounted (sshAuthMountPath: /home/mpiuser/.ssh: id_rsa, id_rsa.pub, authorized_keys);
#   - /home/mpiuser/.sshd_config: sshd run as mpiuser, host key = the mounted id_rsa,
#     StrictModes no (the Secret's files are root-owned).
# Inputs from the environment: PACKAGES, SSH_PORT.
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
# No daemons may start inside the chroot.
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d

apt-get -q update
# shellcheck disable=SC2086
apt-get -q install -y --no-install-recommends $PACKAGES
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log /var/log/alternatives.log
rm -f /usr/sbin/policy-rc.d
# Never ship host keys: every pod uses the mounted id_rsa as its host key.
rm -f /etc/ssh/ssh_host_*
mkdir -p /run/sshd /var/run/sshd
# Docs and man pages are dead weight in a container image.
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/*

# SSH client: no host key prompts, nothing written to a (read-only) known_hosts, port 2222.
cat >>/etc/ssh/ssh_config <<EOF

# mpijob-operator (as in the MPI Operator's images)
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    Port $SSH_PORT
EOF
# System sshd (used when the worker runs as root): same port and host key.
sed -i "s/^#\?Port .*/Port $SSH_PORT/; s/^#\?StrictModes .*/StrictModes no/" /etc/ssh/sshd_config
printf 'HostKey /home/mpiuser/.ssh/id_rsa\nPermitRootLogin prohibit-password\n' >>/etc/ssh/sshd_config

groupadd -g 1000 mpiuser
useradd -m -u 1000 -g 1000 -s /bin/bash mpiuser
cat >/home/mpiuser/.sshd_config <<EOF
PidFile /home/mpiuser/sshd.pid
HostKey /home/mpiuser/.ssh/id_rsa
StrictModes no
Port $SSH_PORT
EOF
chown mpiuser:mpiuser /home/mpiuser/.sshd_config

# Open MPI in pods: no CMA single copy (needs ptrace between ranks, which containers lack),
# TCP only on the pod interface, and no prompting for an interactive login. Open MPI 5 renamed
# the shared-memory BTL vader to sm.
if [ -d /etc/openmpi ]; then
  sm=vader
  [ ! -x /usr/bin/prterun ] || sm=sm
  cat >>/etc/openmpi/openmpi-mca-params.conf <<EOF

# mpijob-operator: containers on a CNI bridge
btl_${sm}_single_copy_mechanism = none
pml = ob1
btl = self,${sm},tcp
btl_tcp_if_exclude = lo
oob_tcp_if_exclude = lo
EOF
fi
# Intel MPI from a wheel (build.sh put it in /opt/intel/mpi and its lib/ in ld.so.conf.d).
ldconfig
# Non-login ssh sessions (how orted is started) must find mpirun/orted: they are in /usr/bin.
echo "image rootfs ready: $(du -sh --exclude=/proc --exclude=/sys / 2>/dev/null | cut -f1)"
