#!/usr/bin/env bash
# Points this node's containerd at pull-through image mirrors: one /etc/containerd/certs.d/<registry>/hosts.toml
# per registry, which tries the mirror first and falls back to the registry itself. containerd re-reads these files
# on every pull (containerd docs/hosts.md). kind's node image pulls locally (its config.toml sets
# discard_unpacked_layers = true), which reads certs.d by default. Runs ON the node as root, started by dispatch.sh.
#
# On a real server (NODE_KIND=machine) containerd may ignore the files: what `containerd config dump` says it does
# is checked first, and when the operator allows (CONFIGURE_CONTAINERD=true) containerd 2.x is pointed at
# certs.d with a drop-in file of ours and restarted; otherwise the run is refused with the exact line to change.
#
# Only files this script wrote (first line: the marker below) are ever replaced or removed; a registry that
# already has a hosts.toml of someone else's is refused, not overwritten.
#
# Environment (names in components/shell.py):
#   NODE_NAME              Kubernetes Node name (for messages)
#   REGISTRY_MIRRORS       one line per registry: "<registry host> <upstream server URL> <mirror URL>";
#                          empty: remove every file this script wrote (the delete action)
#   NODE_KIND              container (kindest/node) | machine (containerd checked; default container)
#   CONFIGURE_CONTAINERD   true: a machine's containerd 2.x may be configured and restarted (default: refuse)
#   Test-only: GPU_TENANCY_NODE_ROOT (prefix for /etc), RUNTIME_WAIT_ATTEMPTS, RUNTIME_WAIT_PAUSE_SECONDS
#
# Exit 0: the node's mirror files are exactly REGISTRY_MIRRORS. Exit 1: bad input, a foreign hosts.toml, or (on a
# machine) a containerd that would ignore the files.
set -euo pipefail
# One brace group: bash reads all of it from stdin before running any command.
{
if [[ -z "${NODE_NAME:-}" ]]; then
  printf 'gpu-tenancy: node-mirrors.sh: required environment variable(s) not set: NODE_NAME\n' >&2
  exit 1
fi
node="$NODE_NAME"
root="${GPU_TENANCY_NODE_ROOT:-}"
certs_d="$root/etc/containerd/certs.d"
marker="# gpu-tenancy image mirror: written by node-mirrors.sh, removed with it"
registry_re='^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$'
url_re='^https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$'

ours() {
  [[ -f "$1" ]] && [[ "$(head -n 1 "$1")" == "$marker" ]]
}

runtime_attempts="${RUNTIME_WAIT_ATTEMPTS:-60}"
runtime_pause="${RUNTIME_WAIT_PAUSE_SECONDS:-1}"
config_toml="$root/etc/containerd/config.toml"
# Our drop-in: containerd 2.x's own import pattern (defaults/defaults_unix.go DefaultConfigIncludePattern), as
# `containerd config default` writes it into config.toml.
drop_in="$root/etc/containerd/conf.d/99-gpu-tenancy-mirrors.toml"
drop_in_marker="# gpu-tenancy image mirror: containerd reads /etc/containerd/certs.d; written by node-mirrors.sh"

fail() {
  printf 'gpu-tenancy: node %s: %s\n' "$node" "$*" >&2
  exit 1
}

# `containerd config dump` as lines "<table>" and "<table>.<key>=<value>", the quotes taken off table names and
# string values: containerd 1.x prints TOML strings double-quoted (BurntSushi/toml), 2.x single-quoted
# (pelletier/go-toml/v2 encodeString, used by containerd v2.x cmd/containerd/command/config.go outputConfig).
# A value keeps any other form (true, 3, ['a', 'b']) as printed.
toml_flat() {
  local line table="" key value
  local table_re='^[[:space:]]*\[([^][]+)\][[:space:]]*$'
  local kv_re="^[[:space:]]*([A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')[[:space:]]*=[[:space:]]*(.*[^[:space:]])[[:space:]]*\$"
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" =~ $table_re ]]; then
      table="${BASH_REMATCH[1]//[\"\']/}"
      table="${table//[[:space:]]/}"
      printf '%s\n' "$table"
    elif [[ "$line" =~ $kv_re ]]; then
      key="${BASH_REMATCH[1]//[\"\']/}"
      value="${BASH_REMATCH[2]}"
      if [[ "$value" =~ ^\'(.*)\'$ || "$value" =~ ^\"(.*)\"$ ]]; then
        value="${BASH_REMATCH[1]}"
      fi
      printf '%s\n' "${table:+$table.}$key=$value"
    fi
  done <<<"$1"
}

# The value of one key in toml_flat's output ("" when absent).
flat_value() {  # <flat text> <table.key>
  local line
  while IFS= read -r line; do
    if [[ "$line" == "$2="* ]]; then
      printf '%s' "${line#"$2="}"
      return 0
    fi
  done <<<"$1"
}

# Whether containerd, configured as the dump says, reads /etc/containerd/certs.d for CRI pulls: sets reason (empty
# when it does, else why not), fix_line and fix_table to the line that makes it and the table it goes under,
# fix_first to what must come first, unfixable to why a drop-in cannot help ("" when it can), and config_version.
check_certs_d() {  # <dump>
  local flat reg path shown default="" local_pull=0 entry
  local -a entries
  reason="" fix_first="" unfixable=""
  flat="$(toml_flat "$1")"
  config_version="$(flat_value "$flat" version)"
  if [[ "$config_version" == 2 ]]; then
    # containerd 1.x: the CRI plugin always pulls locally.
    reg="plugins.io.containerd.grpc.v1.cri.registry"
    fix_table='[plugins."io.containerd.grpc.v1.cri".registry]'
    fix_line='config_path = "/etc/containerd/certs.d"'
    local_pull=1
    unfixable="a file it imports replaces its whole CRI section"
  elif [[ "$config_version" == 3 || "$config_version" == 4 ]]; then
    # containerd 2.0-2.2 print config version 3, 2.3 prints 4 (version/version.go ConfigVersion); 4 moved only
    # server settings into plugins (v2.3.0 cmd/containerd/server/config/config.go serviceMigrate).
    local images="plugins.io.containerd.cri.v1.images"
    reg="$images.registry"
    fix_table="[plugins.'io.containerd.cri.v1.images'.registry]"
    fix_line="config_path = '/etc/containerd/certs.d'"
    # The CRI plugin pulls through the transfer service unless told to pull locally, or an option only the local
    # pull has is set (containerd v2.1+ internal/cri/config/config.go CheckLocalImagePullConfigs); 2.0 has no
    # use_local_image_pull and always pulls locally.
    if ! grep -q "^$images\.use_local_image_pull=" <<<"$flat" \
      || grep -Eq "^$reg\.(mirrors|configs|auths)\." <<<"$flat" \
      || [[ "$(flat_value "$flat" "$images.use_local_image_pull")" == true \
        || "$(flat_value "$flat" "$images.discard_unpacked_layers")" == true \
        || "$(flat_value "$flat" "$images.image_pull_with_sync_fs")" == true \
        || "$(flat_value "$flat" "$images.disable_snapshot_annotations")" == false \
        || "$(flat_value "$flat" "$images.max_concurrent_downloads")" != 3 ]]; then
      local_pull=1
    fi
    # 2.3 reads an empty config_path, without mirrors, as this list (v2.3.0 plugins/cri/images/plugin.go).
    [[ "$config_version" == 4 ]] && default="/etc/containerd/certs.d:/etc/docker/certs.d"
  else
    reason="'containerd config dump' shows config version '$config_version'; this script knows 2 (containerd 1.x)"
    reason+=" to 4 (2.3), and a newer version may move the CRI settings it checks, as 3 did"
    fix_table="" fix_line="management.registryMirrors"
    unfixable="it does not know this config version"
    return 0
  fi
  path="$(flat_value "$flat" "$reg.config_path")"
  if grep -q "^$reg\.mirrors\." <<<"$flat"; then
    # internal/cri/config/config.go ValidateImageConfig (v2.3.0; 1.7 pkg/cri/config): the CRI image service
    # fails to start with both set.
    reason="its CRI registry has mirrors of its own (registry.mirrors), and containerd refuses config_path next to"
    reason+=" them"
    fix_first="Move each into /etc/containerd/certs.d/<registry>/hosts.toml and delete the registry.mirrors tables"
    unfixable="it does not move registry.mirrors"
    return 0
  fi
  shown="'$path'"
  [[ -z "$path" && -n "$default" ]] && path="$default" shown="'' (containerd 2.3 reads that as '$default')"
  if ((local_pull)); then
    # The local pull splits config_path into directories (image_pull.go registryHosts, filepath.SplitList).
    IFS=: read -r -a entries <<<"$path"
    for entry in "${entries[@]}"; do
      [[ "$entry" == /etc/containerd/certs.d || "$entry" == /etc/containerd/certs.d/ ]] && return 0
    done
    reason="its config_path is $shown, which does not name /etc/containerd/certs.d"
  elif [[ "$path" == /etc/containerd/certs.d || "$path" == /etc/containerd/certs.d/ ]]; then
    return 0
  elif [[ -z "$path" ]]; then
    reason="its config_path is empty and it pulls through the transfer service, which then reads no hosts.toml"
  else
    # The transfer service takes config_path as ONE directory (image_pull.go registry.WithHostDir; containerd
    # issues 12415 and 12636): a list such as 2.2's default finds no hosts.toml at all.
    reason="it pulls through the transfer service, which reads config_path as one directory, and config_path is"
    reason+=" $shown"
  fi
}

wait_for_containerd() {
  local attempt
  for ((attempt = 1; ; attempt++)); do
    systemctl is-active --quiet containerd && return 0
    ((attempt >= runtime_attempts)) && fail "containerd is not active after its restart; inspect it: systemctl status containerd"
    sleep "$runtime_pause"
  done
}

dump_config() {
  local out
  out="$(containerd config dump 2>&1)" || fail "'containerd config dump' failed: $out"
  printf '%s' "$out"
}

# The refusal: why, what to do (the arguments, ending in a colon), then the exact lines to change.
refuse() {
  printf 'gpu-tenancy: node %s: containerd does not read /etc/containerd/certs.d for image pulls, so image\n' "$node" >&2
  printf 'mirrors would be ignored: %s.\n%s\n' "$reason" "$*" >&2
  [[ -z "$fix_table" ]] || printf '    %s\n' "$fix_table" >&2
  printf '    %s\n' "$fix_line" >&2
  exit 1
}

if [[ "${NODE_KIND:-container}" == machine && -n "${REGISTRY_MIRRORS//[[:space:]]/}" ]]; then
  command -v containerd >/dev/null 2>&1 || fail "containerd is not installed"
  dump="$(dump_config)" || exit 1
  check_certs_d "$dump"
  # containerd 2.x prints its own config version whatever config.toml says; a version 2 file names the section the
  # 1.x way.
  main_version=""
  [[ -f "$config_toml" ]] && main_version="$(flat_value "$(toml_flat "$(<"$config_toml")")" version)"
  if [[ "$fix_table" == "[plugins.'io.containerd.cri.v1.images'"* && "$main_version" == 2 ]]; then
    fix_table='[plugins."io.containerd.grpc.v1.cri".registry]'
    fix_line='config_path = "/etc/containerd/certs.d"'
  fi
  apply="Make this change to $config_toml, restart containerd and run make up again"
  [[ -z "$fix_first" ]] || apply="$fix_first. Then m${apply#M}"
  if [[ -n "$reason" && "${CONFIGURE_CONTAINERD:-}" == true && -z "$unfixable" ]]; then
    # containerd 2.x merges an imported file into the CRI plugin's settings key by key (v2.x
    # cmd/containerd/server/config/config_test.go TestMergingPluginsWithTwoCriDropInConfigs); 1.7 replaces the whole
    # plugin section (services/server/config/config.go mergeConfig), so 1.x is never configured this way.
    # containerd reads imports only from an existing config.toml (v2.3.0 cmd/containerd/command/main.go), and
    # refuses an import of a newer config version than it (cmd/containerd/server/config/config.go
    # LoadConfigWithPlugins): the drop-in has the main file's version, which containerd migrates like the file.
    if [[ ! -f "$config_toml" ]]; then
      fix_table="version = $config_version"$'\n'"    $fix_table"
      refuse "There is no $config_toml, and without it containerd imports no drop-in. Create it with these lines," \
        "restart containerd and run make up again:"
    fi
    if [[ ! "$main_version" =~ ^[0-9]+$ ]] || ((main_version < 2 || main_version > config_version)); then
      refuse "$config_toml has config version '$main_version', not 2 to $config_version, so no drop-in of" \
        "gpu-tenancy can go with it. $apply:"
    fi
    if ((main_version == 2)); then
      section='[plugins."io.containerd.grpc.v1.cri".registry]'$'\n''  config_path = "/etc/containerd/certs.d"'
    else
      section="[plugins.'io.containerd.cri.v1.images'.registry]"$'\n'"  config_path = '/etc/containerd/certs.d'"
    fi
    content="$(printf '%s\nversion = %s\n\n%s\n' "$drop_in_marker" "$main_version" "$section")"
    [[ ! -e "$drop_in" || "$(head -n 1 "$drop_in")" == "$drop_in_marker" ]] \
      || refuse "$drop_in exists and was not written by gpu-tenancy. Remove it, or $apply:"
    mkdir -p "${drop_in%/*}"
    printf '%s\n' "$content" >"$drop_in"
    chmod 644 "$drop_in"
    # What containerd will load with the file in place: the dump reads the same files containerd does.
    dump="$(dump_config)" || { rm -f "$drop_in"; exit 1; }
    check_certs_d "$dump"
    if [[ -n "$reason" ]]; then
      rm -f "$drop_in"
      reason="not even with $drop_in ($reason)"
      fix_table="" fix_line="imports = ['/etc/containerd/conf.d/*.toml']"
      refuse "$config_toml does not import /etc/containerd/conf.d/*.toml. Add this line at its top, restart" \
        "containerd and run make up again:"
    fi
    systemctl restart containerd || fail "cannot restart containerd after writing $drop_in"
    wait_for_containerd
    printf 'node %s: %s makes containerd read /etc/containerd/certs.d; containerd restarted\n' "$node" "$drop_in"
  elif [[ -n "$reason" && -z "$fix_table" ]]; then
    refuse "Drop this setting, or use a gpu-tenancy release that knows config version $config_version:"
  elif [[ -n "$reason" ]]; then
    if [[ -z "$unfixable" ]]; then
      apply+=" (or let gpu-tenancy do it: management.configureContainerd: true)"
    elif [[ "${CONFIGURE_CONTAINERD:-}" == true ]]; then
      apply+=" (management.configureContainerd cannot: $unfixable)"
    fi
    refuse "$apply, or drop management.registryMirrors:"
  fi
fi

wanted=" "
while read -r registry server mirror extra; do
  [[ -n "$registry" ]] || continue
  if [[ -n "${extra:-}" || ! "$registry" =~ $registry_re || ! "$server" =~ $url_re || ! "$mirror" =~ $url_re ]]; then
    printf 'gpu-tenancy: node %s: malformed mirror entry %q (expected "<registry> <server URL> <mirror URL>")\n' \
      "$node" "$registry $server $mirror${extra:+ $extra}" >&2
    exit 1
  fi
  file="$certs_d/$registry/hosts.toml"
  if [[ -e "$file" ]] && ! ours "$file"; then
    printf 'gpu-tenancy: node %s: %s exists and was not written by gpu-tenancy; merge the mirror %s into it by\n' \
      "$node" "$file" "$mirror" >&2
    printf 'hand and stop giving this node a mirror for %s (management.registryMirrors on an SSH worker,\n' \
      "$registry" >&2
    printf 'management.imageMirror: false for the lab), or remove the file\n' >&2
    exit 1
  fi
  # With `resolve` containerd takes the mirror's tag -> digest answer; over plain HTTP anyone on the path could
  # answer it (containerd docs/hosts.md, capabilities). On a machine a http:// mirror only serves content by digest,
  # which containerd verifies, and tags are resolved at the server over HTTPS. The lab's own caches (container
  # nodes) sit on the Docker host's bridge, which only the host's root can tamper with.
  capabilities='"pull", "resolve"'
  if [[ "${NODE_KIND:-container}" == machine && "$mirror" == http://* ]]; then
    capabilities='"pull"'
  fi
  mkdir -p "$certs_d/$registry"
  tmp="$(mktemp "$certs_d/$registry/.hosts.toml.XXXXXX")"
  printf '%s\nserver = "%s"\n\n[host."%s"]\n  capabilities = [%s]\n' \
    "$marker" "$server" "$mirror" "$capabilities" >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$file"
  wanted+="$registry "
done <<<"${REGISTRY_MIRRORS:-}"

# The lab's caches answer anyone on the kind network, and a pod's connection leaves its node masqueraded to the node's
# address (Calico natOutgoing), so the cache cannot tell a pod from the node's containerd. The node can: containerd's
# pulls are the node's own (OUTPUT), a pod's packets are forwarded (FORWARD). On a container node, drop forwarded TCP
# to the caches' ports on the kind network, in a chain of mangle FORWARD, which Calico's filter chains (whose ACCEPT
# ends only the filter table) do not undo. A systemd unit applies it again when the container restarts (the rules
# live in the container's network namespace, the unit on its disk).
fence_chain=GPU-TENANCY-MIRRORS
fence_bin="/usr/local/sbin/gpu-tenancy-mirror-fence"
fence_unit="/etc/systemd/system/gpu-tenancy-mirror-fence.service"
if [[ "${NODE_KIND:-container}" == container ]]; then
  ports=""
  while read -r registry server mirror; do
    [[ -n "$registry" ]] || continue
    port="${mirror#*://}"; port="${port%%/*}"
    if [[ "$port" == *:* ]]; then port="${port##*:}"; elif [[ "$mirror" == https://* ]]; then port=443; else port=80; fi
    [[ " $ports " == *" $port "* ]] || ports+="${ports:+ }$port"
  done <<<"${REGISTRY_MIRRORS:-}"
  if [[ -n "$ports" ]]; then
    mkdir -p "$root${fence_bin%/*}" "$root${fence_unit%/*}"
    cat >"$root$fence_bin" <<FENCE
#!/bin/bash
# gpu-tenancy: written by node-mirrors.sh, removed with it. Pods may not open connections to the image caches.
set -euo pipefail
dev="\$(ip -4 route show default | awk '{print \$5; exit}')"
cidr="\$(ip -4 -o addr show dev "\$dev" | awk '{print \$4; exit}')"
if [[ -z "\$cidr" ]]; then
  echo "gpu-tenancy-mirror-fence: no IPv4 address on the default route's interface '\$dev'" >&2
  exit 1
fi
iptables -w -t mangle -N $fence_chain 2>/dev/null || iptables -w -t mangle -F $fence_chain
for port in $ports; do
  iptables -w -t mangle -A $fence_chain -d "\$cidr" -p tcp --dport "\$port" -j DROP
done
iptables -w -t mangle -C FORWARD -j $fence_chain 2>/dev/null || iptables -w -t mangle -I FORWARD 1 -j $fence_chain
FENCE
    chmod 755 "$root$fence_bin"
    printf '%s\n' '# gpu-tenancy: written by node-mirrors.sh, removed with it' '[Unit]' \
      'Description=gpu-tenancy: pods may not reach the image caches' 'After=network-online.target' \
      'Before=kubelet.service' '' '[Service]' 'Type=oneshot' "ExecStart=$fence_bin" 'RemainAfterExit=yes' '' \
      '[Install]' 'WantedBy=multi-user.target' >"$root$fence_unit"
    systemctl daemon-reload
    systemctl enable --quiet "${fence_unit##*/}"
    if ! fence_error="$("$root$fence_bin" 2>&1)"; then
      printf 'gpu-tenancy: node %s: cannot keep pods off the image caches: %s\n' "$node" "$fence_error" >&2
      exit 1
    fi
  elif [[ -e "$root$fence_unit" ]]; then
    systemctl disable --quiet "${fence_unit##*/}" || true
    rm -f "$root$fence_unit" "$root$fence_bin"
    systemctl daemon-reload || true
    iptables -w -t mangle -D FORWARD -j "$fence_chain" 2>/dev/null || true
    iptables -w -t mangle -F "$fence_chain" 2>/dev/null || true
    iptables -w -t mangle -X "$fence_chain" 2>/dev/null || true
  fi
fi

# Files of ours for registries no longer listed.
removed=0
for file in "$certs_d"/*/hosts.toml; do
  [[ -e "$file" ]] || continue
  registry="$(basename "$(dirname "$file")")"
  [[ "$wanted" == *" $registry "* ]] && continue
  if ours "$file"; then
    rm -f "$file"
    rmdir "$(dirname "$file")" 2>/dev/null || true
    removed=$((removed + 1))
  fi
done
# The delete action also takes back our containerd drop-in.
if [[ -z "${REGISTRY_MIRRORS//[[:space:]]/}" && -f "$drop_in" && "$(head -n 1 "$drop_in")" == "$drop_in_marker" ]]; then
  rm -f "$drop_in"
  systemctl restart containerd || fail "removed $drop_in but cannot restart containerd"
  wait_for_containerd
  printf 'node %s: removed %s; containerd restarted\n' "$node" "$drop_in"
fi
printf 'node %s: image mirrors for:%s(%d removed)\n' "$node" "$wanted" "$removed"
}
