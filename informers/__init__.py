"""client-go style informers: reflector, indexed store, shared informers, REST transport."""
