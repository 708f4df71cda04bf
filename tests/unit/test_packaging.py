"""Every package of the operator is in pyproject.toml's explicit list: the operator's image installs
only what that list names (hack/images/build.sh operator), so a subpackage missing from it made the
deployed operator fail at import (reconcilers.failure, once) while every test from the checkout passed."""

from __future__ import annotations

import tomllib

from testsupport.paths import ROOT

TOP = ("client", "controller", "informers", "reconcilers", "testsupport")


def test_every_package_is_installed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in TOP for init in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml [tool.setuptools] packages: {found - listed}"
    assert listed - found == set(), f"listed but not packages: {listed - found}"
