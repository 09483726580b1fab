#!/bin/sh
# The gputune DaemonSet's init container: writes this node's profile for `gputune daemon
# --boot-profile`. The node's label gputune.io/profile names a file of the gputune-profiles
# ConfigMap (NAME.toml), which is copied; a node without the label gets an empty file (no
# profile: the daemon clears the boot defaults); a label naming no file stops the pod here with
# one sentence. The downward API cannot give a pod its node's labels, so the node is read from
# the API server with the pod's service account (RBAC: get nodes).
set -eu

label=${GPUTUNE_PROFILE_LABEL:-gputune.io/profile}
profiles=${GPUTUNE_PROFILES_DIR:-/etc/gputune/profiles}
chosen=${GPUTUNE_CHOSEN_PROFILE:-/var/run/gputune-node/boot-profile.toml}
account=${GPUTUNE_SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
api=${GPUTUNE_KUBERNETES_API:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}

if [ -z "${NODE_NAME:-}" ]; then
  echo "choose-profile: NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)." >&2
  exit 1
fi
token=$(cat "$account/token")
if ! node=$(curl --silent --show-error --fail --max-time 20 --cacert "$account/ca.crt" \
  --header "Authorization: Bearer $token" "$api/api/v1/nodes/$NODE_NAME"); then
  echo "choose-profile: node $NODE_NAME could not be read from $api; the gputune ServiceAccount needs \`get nodes\` (rbac.yaml)." >&2
  exit 1
fi
name=$(printf '%s' "$node" | jq -r --arg key "$label" '.metadata.labels[$key] // ""')

if [ -z "$name" ]; then
  : > "$chosen"
  echo "choose-profile: node $NODE_NAME has no $label label: no node profile."
  exit 0
fi
case $name in
  *[!A-Za-z0-9_.-]* | .*)
    echo "choose-profile: node $NODE_NAME's label $label=$name is not a profile file name." >&2
    exit 1 ;;
esac
if [ ! -f "$profiles/$name.toml" ]; then
  available=$(cd "$profiles" && ls -1 -- *.toml 2>/dev/null | sed 's/\.toml$//' | tr '\n' ' ')
  echo "choose-profile: node $NODE_NAME's label $label=$name names no profile: the gputune-profiles ConfigMap has ${available:-none}; add $name.toml to it or change the label." >&2
  exit 1
fi
cp "$profiles/$name.toml" "$chosen"
echo "choose-profile: node $NODE_NAME boots its GPUs with the profile $name."
