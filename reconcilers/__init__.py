"""Pure reconcile logic: MPIJob + observed children + config + time -> Plan. No I/O here."""
