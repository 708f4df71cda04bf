"""Root conftest: the local-cluster fixtures (tests/cluster_fixtures.py) serve tests/ and e2e/ alike."""

pytest_plugins = ["tests.cluster_fixtures"]
