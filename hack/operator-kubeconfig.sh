#!/usr/bin/env bash
exec /tmp/h37-operator-kubeconfig.sh "$@"
