"""The process's client of the API server (docs/architecture.md section 2): the REST transport and
its watch streams (rest), the one error type (errors), client-side rate limiting (ratelimit) and the
resources it speaks (resources). The informers read through it, the executor and leader election
write through it; it knows nothing of MPIJobs."""
