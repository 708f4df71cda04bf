"""Prometheus metrics of the informers (default registry, defined once)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

list_total = Counter("informer_list_total", "LIST calls (pages count once per list) by informer", ["resource"])
watch_total = Counter("informer_watch_total", "WATCH requests started by informer", ["resource"])
relist_total = Counter(
    "informer_relist_total", "Relists after the first list (410 Gone/Expired, or a failed watch)", ["resource"]
)
events_total = Counter(
    "informer_events_total", "Watch events received, by type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)",
    ["resource", "type"],
)
last_resource_version_age = Gauge(
    "informer_last_resource_version_age_seconds",
    "Seconds since the informer last advanced its resourceVersion (event, bookmark or list)",
    ["resource"],
)
store_objects = Gauge("informer_store_objects", "Objects in the informer's cache", ["resource"])
watch_errors_total = Counter(
    "informer_watch_errors_total", "Watches ended by an error, by kind of error", ["resource", "kind"]
)
