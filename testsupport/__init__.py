"""What the tests, the end-to-end tests, the benchmarks and the demo share: MPIJob builders
(builders), the operator as a process (operator_process), kubectl helpers and waits on the local
cluster (kubectl, waiting), free ports (net) and the checkout's paths (paths). Installed with the
project (pyproject.toml), so no caller edits sys.path. Label names come from reconcilers.names:
one constant per fact."""
