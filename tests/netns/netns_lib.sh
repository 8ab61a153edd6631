# Sourced by the tests in this folder: a small network of hosts on one machine. Each "host" is a
# network namespace with one veth interface (10.77.0.<k+1>/24 for host k) plugged into a bridge in
# a "switch" namespace, so that cutting a host off is `ip link set <its switch port> down`.
# Names carry the test's pid, so concurrent runs never share a namespace; everything is removed
# on exit. Without permission for `ip netns add` (not root, a container without CAP_SYS_ADMIN) the
# test exits 77, which meson reports as skipped.

NETNS_ID=fn$$
NETNS_HOSTS=0

netns_name() { echo "${NETNS_ID}h$1"; }   # host k's namespace
netns_addr() { echo "10.77.0.$(($1 + 1))"; }
netns_port() { echo "${NETNS_ID}p$1"; }   # host k's port on the switch

netns_cleanup() {
  ip link del "${NETNS_ID}m" 2>/dev/null
  k=0
  while [ "$k" -lt "$NETNS_HOSTS" ]; do
    ip netns del "$(netns_name "$k")" 2>/dev/null
    k=$((k + 1))
  done
  ip netns del "${NETNS_ID}sw" 2>/dev/null
  return 0
}

# netns_up N: N hosts on one switch; exits 77 where namespaces are not permitted.
netns_up() {
  if ! command -v ip >/dev/null || ! ip netns add "${NETNS_ID}sw" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (needs iproute2 and root)"
    exit 77
  fi
  ip -n "${NETNS_ID}sw" link add br0 type bridge || exit 1
  ip -n "${NETNS_ID}sw" link set br0 up || exit 1
  k=0
  while [ "$k" -lt "$1" ]; do
    ns=$(netns_name "$k")
    ip netns add "$ns" || exit 1
    NETNS_HOSTS=$((k + 1))
    # The pair is made inside the host's namespace and its peer end moved to the switch.
    ip -n "$ns" link add eth0 type veth peer name "$(netns_port "$k")" || exit 1
    ip -n "$ns" link set "$(netns_port "$k")" netns "${NETNS_ID}sw" || exit 1
    ip -n "${NETNS_ID}sw" link set "$(netns_port "$k")" master br0 up || exit 1
    ip -n "$ns" addr add "$(netns_addr "$k")/24" dev eth0 || exit 1
    ip -n "$ns" link set eth0 up || exit 1
    ip -n "$ns" link set lo up || exit 1
    k=$((k + 1))
  done
}

# netns_mgmt_up: a second, management network (10.78.0.<k+1>/24 on each host, 10.78.0.254 on a
# bridge in this machine's own namespace), for mpirun: its PMIx server runs in this namespace and
# each rank must reach it, as a cluster's launcher uses its management network. Cutting a host
# (netns_cut) cuts its data link only. Its bridge and links carry the test's id and are removed
# on exit.
netns_mgmt_up() {
  ip link add "${NETNS_ID}m" type bridge || exit 1
  ip addr add 10.78.0.254/24 dev "${NETNS_ID}m" || exit 1
  ip link set "${NETNS_ID}m" up || exit 1
  k=0
  while [ "$k" -lt "$NETNS_HOSTS" ]; do
    ns=$(netns_name "$k")
    ip -n "$ns" link add mgmt0 type veth peer name "${NETNS_ID}q$k" || exit 1
    ip -n "$ns" link set "${NETNS_ID}q$k" netns 1 || exit 1
    ip link set "${NETNS_ID}q$k" master "${NETNS_ID}m" up || exit 1
    ip -n "$ns" addr add "10.78.0.$((k + 1))/24" dev mgmt0 || exit 1
    ip -n "$ns" link set mgmt0 up || exit 1
    k=$((k + 1))
  done
}

# netns_cut K: host K loses its link (its switch port goes down), as a pulled cable.
netns_cut() { ip -n "${NETNS_ID}sw" link set "$(netns_port "$1")" down; }

# netns_exec K CMD...: runs CMD on host K.
netns_exec() {
  ns=$(netns_name "$1")
  shift
  ip netns exec "$ns" "$@"
}
