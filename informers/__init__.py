"""client-go style informers (tools/cache): reflector, indexed store, shared informers, transforms."""
