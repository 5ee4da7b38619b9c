"""Checks a Consul server with py-consul, a real Consul client from PyPI.

tests/protocol/consul.rs runs it against meshpush's stand-in Consul server
(src/testing/consul.rs), as the Kubernetes stand-in is checked with kubectl:
what a registry reads and a registration writes must behave as Consul's
own API does for a real client.

Usage: consul_check.py HOST PORT TOKEN. Exits 0 and prints "ok" when every
check holds; otherwise an assertion names the one that failed.
"""

import sys
import threading
import time

import consul
import consul.exceptions

host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = consul.Consul(host=host, port=port, token=token)

# Registration through the catalog, as a registrator would write it.
assert c.catalog.register(
    "node-a",
    "10.0.0.1",
    service={"Service": "reviews", "ID": "reviews-1", "Tags": ["version|v1"], "Address": "10.1.0.1",
             "Port": 9080, "Meta": {"protocol": "http"}},
)
assert c.agent.service.register("ratings", service_id="ratings-1", address="10.1.0.9", port=9080, tags=["v|1"])

index, services = c.catalog.services()
assert services.get("reviews") == ["version|v1"], services
assert "ratings" in services, services
assert int(index) >= 1, index

index, instances = c.catalog.service("reviews")
assert len(instances) == 1, instances
one = instances[0]
assert (one["ServiceID"], one["ServiceAddress"], one["ServicePort"], one["Address"]) == (
    "reviews-1", "10.1.0.1", 9080, "10.0.0.1"), one
assert one["ServiceMeta"] == {"protocol": "http"} and one["ServiceTags"] == ["version|v1"], one
assert one["Datacenter"], one

# A blocking query: held until the catalog changes, then answered with a
# higher index.
def register_later():
    time.sleep(0.5)
    c.catalog.register("node-b", "10.0.0.2",
                       service={"Service": "reviews", "ID": "reviews-2", "Tags": ["version|v2"], "Port": 9080})

threading.Thread(target=register_later).start()
started = time.monotonic()
new_index, services = c.catalog.services(index=index, wait="10s")
held = time.monotonic() - started
assert 0.3 < held < 5, held
assert int(new_index) > int(index), (index, new_index)
assert sorted(services["reviews"]) == ["version|v1", "version|v2"], services

# With nothing changing, a short wait ends with the same index.
started = time.monotonic()
same, _ = c.catalog.services(index=new_index, wait="300ms")
assert same == new_index and time.monotonic() - started >= 0.25, (same, new_index)

# An unknown service is an empty list, not an error.
_, none = c.catalog.service("no-such-service")
assert none == [], none

# Deregistration.
assert c.catalog.deregister("node-a", service_id="reviews-1")
assert c.agent.service.deregister("ratings-1")
_, instances = c.catalog.service("reviews")
assert [i["ServiceID"] for i in instances] == ["reviews-2"], instances
_, services = c.catalog.services()
assert "ratings" not in services, services

# A wrong token is refused as Consul refuses it.
try:
    consul.Consul(host=host, port=port, token="wrong").catalog.services()
    raise AssertionError("a wrong token was accepted")
except consul.ACLPermissionDenied:
    pass

# A wait without a unit is a bad request, as in Consul.
try:
    c.catalog.services(index=new_index, wait="10")
    raise AssertionError("a wait without a unit was accepted")
except consul.exceptions.BadRequest:
    pass

print("ok")
