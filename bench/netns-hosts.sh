#!/bin/sh
# Hosts made of network namespaces for `bench startup` through agents (needs root, iproute2):
#   bench/netns-hosts.sh up N     makes cvb-h0 (where charmrun runs) and cvb-h1..cvb-hN on a
#                                 bridge (10.97.0.1 ...), a remote shell and a machine file
#                                 naming hosts 1..N in /tmp/cvb/
#   bench/netns-hosts.sh down N   removes them
# Then, e.g.:
#   ip netns exec cvb-h0 target/release/bench startup --pes 4,8,16,32 \
#     --charmrun-args "++agents ++remote-shell /tmp/cvb/netns-shell ++nodelist /tmp/cvb/machines"
set -eu
what=$1; n=$2; dir=/tmp/cvb
if [ "$what" = down ]; then
  for h in $(seq 0 "$n"); do ip netns del "cvb-h$h" 2>/dev/null || true; done
  ip netns del cvb-sw 2>/dev/null || true
  rm -rf "$dir"
  exit 0
fi
mkdir -p "$dir"
ip netns add cvb-sw
ip -n cvb-sw link add br0 type bridge
ip -n cvb-sw link set br0 up
: > "$dir/machines"
printf '#!/bin/sh\nhost="$1"; shift\ncase "$host" in\n' > "$dir/netns-shell"
for h in $(seq 0 "$n"); do
  ip netns add "cvb-h$h"
  ip link add "cvbe$h" type veth peer name "cvbp$h"
  ip link set "cvbe$h" netns "cvb-h$h"
  ip link set "cvbp$h" netns cvb-sw
  ip -n cvb-sw link set "cvbp$h" master br0
  ip -n cvb-sw link set "cvbp$h" up
  ip -n "cvb-h$h" addr add "10.97.0.$((h + 1))/24" dev "cvbe$h"
  ip -n "cvb-h$h" link set "cvbe$h" up
  ip -n "cvb-h$h" link set lo up
  printf '  10.97.0.%s) ns=cvb-h%s ;;\n' "$((h + 1))" "$h" >> "$dir/netns-shell"
  [ "$h" = 0 ] || echo "10.97.0.$((h + 1))" >> "$dir/machines"
done
printf '  *) echo "no route to host $host" >&2; exit 255 ;;\nesac\nexec ip netns exec "$ns" sh -c "$1"\n' >> "$dir/netns-shell"
chmod +x "$dir/netns-shell"
