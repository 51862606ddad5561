#!/bin/bash
# gpufill idle watchdog, run by gpufill-idle-watchdog.timer (installed by startup.sh).
# An idle GPU instance costs as much as a busy one: when the model server has seen no
# POST /v1 request for GPUFILL_IDLE_MINUTES, power off. gpufill launches instances with
# instance-initiated shutdown set to terminate, so powering off ends the bill.
#
#   GPUFILL_IDLE_MINUTES    60            idle window
#   GPUFILL_CONTAINER_NAME  gpufill-vllm  the vLLM container whose access log is read
#   GPUFILL_STATE_DIR       /var/lib/gpufill
#
# The idle clock is STATE_DIR/last-activity: startup.sh sets it when it installs the
# watchdog and again when the server is ready; this script moves it on whenever the
# window holds a request. A missing or stopped container counts as idle, so a broken
# startup still ends in a power-off.
set -euo pipefail

IDLE_MINUTES="${GPUFILL_IDLE_MINUTES:-60}"
CONTAINER="${GPUFILL_CONTAINER_NAME:-gpufill-vllm}"
STATE_DIR="${GPUFILL_STATE_DIR:-/var/lib/gpufill}"
LAST_ACTIVITY="$STATE_DIR/last-activity"

log() {
  printf 'gpufill-idle-watchdog: %s\n' "$*"
}

mkdir -p "$STATE_DIR"
[[ -e "$LAST_ACTIVITY" ]] || touch "$LAST_ACTIVITY"

# grep -c reads the whole log: an early-exiting grep -q would SIGPIPE docker, and under
# pipefail that would read as "no requests" on a busy server.
requests="$(docker logs --since "${IDLE_MINUTES}m" "$CONTAINER" 2>&1 | grep -c 'POST /v1' || true)"
if (( ${requests:-0} > 0 )); then
  touch "$LAST_ACTIVITY"
  log "$requests POST /v1 request(s) in the last $IDLE_MINUTES min; staying up"
  exit 0
fi

idle_minutes=$(( ($(date +%s) - $(stat -c %Y "$LAST_ACTIVITY")) / 60 ))
if (( idle_minutes < IDLE_MINUTES )); then
  log "no requests; idle for $idle_minutes of $IDLE_MINUTES min"
  exit 0
fi

log "no POST /v1 request for $idle_minutes min (limit $IDLE_MINUTES); powering off"
systemctl poweroff
