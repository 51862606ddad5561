#!/bin/bash
# Stand-in for the commands startup.sh and idle-watchdog.sh call on an instance. Linked
# into a sandbox bin/ under each command's name; records its argv (tab-separated, one
# call a line) in STUB_CALLS and does just enough of the real thing, with its state kept
# in STUB_STATE, so the scripts run without root, network, Docker or AWS.
set -euo pipefail

name="${0##*/}"
state="$STUB_STATE"

record() {
  local IFS=$'\t'
  printf '%s\n' "$*" >>"$STUB_CALLS"
}

listed() {  # listed FILE LINE: is LINE a line of FILE?
  [[ -e "$1" ]] && grep -qxF -- "$2" "$1"
}

record "$name" "$@"
last="${*: -1}"

case "$name" in
  docker)
    case "${1:-}" in
      pull)
        sleep "${STUB_SLOW_SECONDS:-0.5}"
        if [[ -n "${STUB_FAIL_PULL:-}" ]]; then
          echo "Error response from daemon: manifest for $last not found" >&2
          exit 1
        fi
        record "$name:done" "$@" ;;
      login) cat >/dev/null ;;
      container) [[ -e "$state/container" ]] ;;
      rm) rm -f "$state/container" ;;
      run) touch "$state/container"; echo 4f1c0ffee ;;
      logs)
        [[ -z "${STUB_DOCKER_LOGS_FAIL:-}" ]] || { echo "Error: No such container: $last" >&2; exit 1; }
        [[ ! -e "$state/docker-logs" ]] || cat "$state/docker-logs" ;;
    esac ;;
  aws)
    case "${1:-} ${2:-}" in
      "s3 cp")
        source_file="$STUB_SCRIPTS_DIR/${3##*/}"
        [[ -e "$source_file" ]] || { echo "fatal error: An error occurred (404) when calling the HeadObject operation: Key not found" >&2; exit 1; }
        cp "$source_file" "$4" ;;
      "s3 sync")
        sleep "${STUB_SLOW_SECONDS:-0.5}"
        if [[ -n "${STUB_FAIL_SYNC:-}" ]]; then
          echo "fatal error: An error occurred (AccessDenied) when calling the ListObjectsV2 operation: Access Denied" >&2
          exit 1
        fi
        mkdir -p "$4"
        [[ -z "${STUB_EMPTY_PREFIX:-}" ]] || exit 0
        printf '{"num_attention_heads": 28, "num_key_value_heads": 4}\n' >"$4/config.json"
        record "$name:done" "$@" ;;
      "ecr get-login-password") echo stub-ecr-password ;;
      "ec2 create-tags")
        if [[ -n "${STUB_FAIL_TAGGING:-}" ]]; then
          echo "An error occurred (UnauthorizedOperation) when calling the CreateTags operation" >&2
          exit 254
        fi ;;
    esac ;;
  mount) printf '%s\n' "$last" >>"$state/mounts" ;;
  mountpoint) listed "$state/mounts" "$last" ;;
  mkfs.ext4) printf '%s\n' "$last" >>"$state/formatted" ;;
  lsblk)
    case "$*" in
      *NAME,MODEL*) [[ ! -e "$state/disks" ]] || cat "$state/disks" ;;
      *FSTYPE*) if listed "$state/formatted" "$last"; then echo ext4; else echo; fi ;;
      *MOUNTPOINT*) echo ;;
    esac ;;
  nvidia-smi)
    for ((i = 0; i < ${STUB_GPUS:-1}; i++)); do
      echo "GPU $i: NVIDIA L4 (UUID: GPU-stub-$i)"
    done ;;
  curl)
    case "$last" in
      */latest/api/token) [[ -z "${STUB_NO_IMDS:-}" ]] && echo stub-imds-token ;;
      */latest/meta-data/instance-id) echo "${STUB_INSTANCE_ID:-i-0123456789abcdef0}" ;;
      */latest/meta-data/placement/region) echo "${STUB_INSTANCE_REGION:-us-west-2}" ;;
      *) [[ -z "${STUB_FAIL_CURL:-}" ]] ;;
    esac ;;
  systemctl) ;;
  *) echo "stub_command.sh: no stub behaviour for $name" >&2; exit 97 ;;
esac
