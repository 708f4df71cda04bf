"""Whether an MPIJob's launcher is elastic: its horovodrun is given discover_hosts.sh
(docs/architecture.md section 9.2). Pure. Read before validation, to choose the backend
(reconcilers/context.py, reconcilers/backend.py), so every shape of input is a plain no."""

from __future__ import annotations

import shlex
from typing import Any

DISCOVERY_SCRIPT = "discover_hosts.sh"
DISCOVERY_FLAG = "--host-discovery-script"  # horovodrun's


def _dict(value: Any, key: str) -> dict:
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, dict) else {}


def is_elastic(mpijob: Any) -> bool:
    """The launcher's horovodrun is given the discovery script: `--host-discovery-script` followed by
    a path naming discover_hosts.sh, as a word of its command or arguments, as
    `--host-discovery-script=<path>`, or inside a shell string (`sh -c "..."`). What it is, not a
    word in its command: `cat /etc/mpi/discover_hosts.sh; mpirun ...` is not elastic. Read before
    validation too (the backend is chosen first: reconcilers/context.py), so any shape is a no."""
    template = _dict(_dict(_dict(_dict(_dict(mpijob, "spec"), "mpiReplicaSpecs"), "Launcher"), "template"), "spec")
    containers = template.get("containers")
    for c in containers if isinstance(containers, list) else []:
        words = [w for key in ("command", "args") if isinstance(c, dict) and isinstance(c.get(key), list)
                 for w in c[key]]
        if _names_discovery(_tokens([w for w in words if isinstance(w, str)])):
            return True
    return False


def _tokens(words: list[str]) -> list[str]:
    """The words, a shell string among them split as the shell would (shlex, line by line, a comment
    dropped), or at blanks when its quoting is broken: the option and its path may sit in one
    `sh -c` argument."""
    out: list[str] = []
    for w in words:
        if not any(ch.isspace() for ch in w):
            out.append(w)
            continue
        for line in w.splitlines():
            try:
                toks = shlex.split(line)
            except ValueError:  # unbalanced quotes (or a quote spanning lines): words at blanks
                toks = line.split()
            at = next((i for i, t in enumerate(toks) if t.startswith("#")), len(toks))
            out.extend(toks[:at])
    return out


def _names_discovery(tokens: list[str]) -> bool:
    for i, tok in enumerate(tokens):
        if tok == DISCOVERY_FLAG and i + 1 < len(tokens):
            value = tokens[i + 1]
        elif tok.startswith(DISCOVERY_FLAG + "="):
            value = tok[len(DISCOVERY_FLAG) + 1:]
        else:
            continue
        if value.rstrip(";&|)").rsplit("/", 1)[-1] == DISCOVERY_SCRIPT:
            return True
    return False
