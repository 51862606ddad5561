#!/bin/bash
# gpufill instance startup: turns a fresh GPU instance into a vLLM OpenAI server on
# 127.0.0.1:PORT. Nothing listens on a public address; users reach the server through
# an SSM port-forwarding session. Run as root by the user data (startup/bootstrap.sh):
#
#   startup.sh --region REGION --bucket BUCKET --image IMAGE [--model-id MODEL_ID] [options]
#
# Each setting is an option or an environment variable; an option wins over the variable.
#   --region                  GPUFILL_REGION                  (required) region of the startup bucket
#   --bucket                  GPUFILL_BUCKET                  (required) startup bucket, holds scripts/ and models/
#   --image                   GPUFILL_IMAGE                   vllm/vllm-openai:v0.10.1.1 (ECR images: logged in first)
#   --model-id                GPUFILL_MODEL_ID                Qwen/Qwen2.5-Coder-7B-Instruct, synced from s3://BUCKET/models/MODEL_ID/
#   --port                    GPUFILL_PORT                    8000, bound to 127.0.0.1 only
#   --gpu-memory-utilization  GPUFILL_GPU_MEMORY_UTILIZATION  0.90
#   --max-model-len           GPUFILL_MAX_MODEL_LEN           16384
#   --tool-call-parser        GPUFILL_TOOL_CALL_PARSER        hermes
#   --tensor-parallel-size    GPUFILL_TENSOR_PARALLEL_SIZE    auto: the most GPUs the model's attention heads divide over
#   --idle-minutes            GPUFILL_IDLE_MINUTES            60, power off after this long without a POST /v1 request
#   --idle-check-minutes      GPUFILL_IDLE_CHECK_MINUTES      5, how often the idle watchdog looks
#   --ready-timeout-seconds   GPUFILL_READY_TIMEOUT_SECONDS   1800, how long the server may take to answer /v1/models
#                             GPUFILL_NVME_WAIT_SECONDS       60, how long the AMI may take to mount the instance store
#                             GPUFILL_CONTAINER_NAME          gpufill-vllm
#                             GPUFILL_IMDS_URL                http://169.254.169.254, the instance metadata service
#
# Each step is also reported in this instance's own tag gpufill:startup-step ("serving" once
# the server answers, "failed: STEP" when startup stops), which the provisioning run and
# `gpufill status` read (docs/readiness.md). A report that fails never stops the startup.
# Paths, overridable so the script can be exercised without root:
#   GPUFILL_LOG_FILE        /var/log/gpufill-startup.log
#   GPUFILL_NVME_DIR        /opt/dlami/nvme        instance store mount: models/, docker/, containerd/
#   GPUFILL_DOCKER_DIR      /var/lib/docker        bind-mounted from the instance store
#   GPUFILL_CONTAINERD_DIR  /var/lib/containerd    bind-mounted from the instance store
#   GPUFILL_HOME            /opt/gpufill           where idle-watchdog.sh is installed
#   GPUFILL_STATE_DIR       /var/lib/gpufill       the idle clock (last-activity)
#   GPUFILL_SYSTEMD_DIR     /etc/systemd/system
#
# Running it again is safe: a mounted disk is never formatted again, the container is
# replaced, and the watchdog units are rewritten.
set -euo pipefail
umask 022

REGION="${GPUFILL_REGION:-}"
BUCKET="${GPUFILL_BUCKET:-}"
IMAGE="${GPUFILL_IMAGE:-vllm/vllm-openai:v0.10.1.1}"
MODEL_ID="${GPUFILL_MODEL_ID:-Qwen/Qwen2.5-Coder-7B-Instruct}"
PORT="${GPUFILL_PORT:-8000}"
GPU_MEMORY_UTILIZATION="${GPUFILL_GPU_MEMORY_UTILIZATION:-0.90}"
MAX_MODEL_LEN="${GPUFILL_MAX_MODEL_LEN:-16384}"
TOOL_CALL_PARSER="${GPUFILL_TOOL_CALL_PARSER:-hermes}"
TENSOR_PARALLEL_SIZE="${GPUFILL_TENSOR_PARALLEL_SIZE:-auto}"
IDLE_MINUTES="${GPUFILL_IDLE_MINUTES:-60}"
IDLE_CHECK_MINUTES="${GPUFILL_IDLE_CHECK_MINUTES:-5}"
READY_TIMEOUT_SECONDS="${GPUFILL_READY_TIMEOUT_SECONDS:-1800}"
NVME_WAIT_SECONDS="${GPUFILL_NVME_WAIT_SECONDS:-60}"
CONTAINER="${GPUFILL_CONTAINER_NAME:-gpufill-vllm}"
IMDS_URL="${GPUFILL_IMDS_URL:-http://169.254.169.254}"
STEP_TAG="gpufill:startup-step"
# Set by identify_instance; empty: steps are logged but not reported.
INSTANCE_ID=""
INSTANCE_REGION=""
STEP=""

LOG_FILE="${GPUFILL_LOG_FILE:-/var/log/gpufill-startup.log}"
NVME_DIR="${GPUFILL_NVME_DIR:-/opt/dlami/nvme}"
DOCKER_DIR="${GPUFILL_DOCKER_DIR:-/var/lib/docker}"
CONTAINERD_DIR="${GPUFILL_CONTAINERD_DIR:-/var/lib/containerd}"
GPUFILL_HOME="${GPUFILL_HOME:-/opt/gpufill}"
STATE_DIR="${GPUFILL_STATE_DIR:-/var/lib/gpufill}"
SYSTEMD_DIR="${GPUFILL_SYSTEMD_DIR:-/etc/systemd/system}"

INSTANCE_STORE_MODEL="Amazon EC2 NVMe Instance Storage"
WATCHDOG_UNIT="gpufill-idle-watchdog"

log() {
  printf '%s gpufill-startup: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "$LOG_FILE"
}

die() {
  log "ERROR: $*" >&2
  exit 1
}

# The instance's id and region from IMDSv2 (the instance requires tokens), for reporting steps.
identify_instance() {
  local token
  if token="$(curl --silent --fail --max-time 2 --request PUT \
                --header "X-aws-ec2-metadata-token-ttl-seconds: 21600" "$IMDS_URL/latest/api/token")" \
    && INSTANCE_ID="$(curl --silent --fail --max-time 2 --header "X-aws-ec2-metadata-token: $token" \
                        "$IMDS_URL/latest/meta-data/instance-id")" \
    && INSTANCE_REGION="$(curl --silent --fail --max-time 2 --header "X-aws-ec2-metadata-token: $token" \
                            "$IMDS_URL/latest/meta-data/placement/region")"; then
    return 0
  fi
  INSTANCE_ID=""
  log "WARNING: the instance metadata service did not say which instance this is; steps are logged but not reported"
}

# Tags this instance with the step it reached (the instance role may set only this key, only
# on itself). Bounded timeouts and no failure: a lost report costs the run its serving verdict,
# never the model server.
report_step() {
  STEP="$1"
  [[ -n "$INSTANCE_ID" ]] || return 0
  aws ec2 create-tags --region "$INSTANCE_REGION" --resources "$INSTANCE_ID" \
    --tags "$(printf '[{"Key":"%s","Value":"%s"}]' "$STEP_TAG" "$STEP")" \
    --cli-connect-timeout 5 --cli-read-timeout 10 >/dev/null 2>&1 \
    || log "WARNING: could not report step '$STEP' in tag $STEP_TAG; startup goes on"
}

usage() {
  sed -n '2,/^set -euo pipefail$/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

parse_args() {
  while (( $# > 0 )); do
    case "$1" in
      --region) REGION="${2:?--region needs a value}" ;;
      --bucket) BUCKET="${2:?--bucket needs a value}" ;;
      --image) IMAGE="${2:?--image needs a value}" ;;
      --model-id) MODEL_ID="${2:?--model-id needs a value}" ;;
      --port) PORT="${2:?--port needs a value}" ;;
      --gpu-memory-utilization) GPU_MEMORY_UTILIZATION="${2:?--gpu-memory-utilization needs a value}" ;;
      --max-model-len) MAX_MODEL_LEN="${2:?--max-model-len needs a value}" ;;
      --tool-call-parser) TOOL_CALL_PARSER="${2:?--tool-call-parser needs a value}" ;;
      --tensor-parallel-size) TENSOR_PARALLEL_SIZE="${2:?--tensor-parallel-size needs a value}" ;;
      --idle-minutes) IDLE_MINUTES="${2:?--idle-minutes needs a value}" ;;
      --idle-check-minutes) IDLE_CHECK_MINUTES="${2:?--idle-check-minutes needs a value}" ;;
      --ready-timeout-seconds) READY_TIMEOUT_SECONDS="${2:?--ready-timeout-seconds needs a value}" ;;
      -h | --help) usage; exit 0 ;;
      *) echo "startup.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift 2
  done
}

validate() {
  local positive='^[1-9][0-9]*$'
  [[ -n "$REGION" ]] || die "no region: pass --region or set GPUFILL_REGION"
  [[ -n "$BUCKET" ]] || die "no bucket: pass --bucket or set GPUFILL_BUCKET"
  [[ -n "$IMAGE" ]] || die "no image: pass --image or set GPUFILL_IMAGE"
  # The model id becomes a path on the instance store and inside the container.
  [[ "$MODEL_ID" =~ ^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$ && "$MODEL_ID" != *..* ]] \
    || die "model id '$MODEL_ID' is not of the form ORG/NAME"
  [[ "$PORT" =~ $positive ]] || die "port '$PORT' is not a TCP port"
  (( PORT <= 65535 )) || die "port '$PORT' is not a TCP port"
  [[ "$GPU_MEMORY_UTILIZATION" =~ ^(0\.[0-9]+|1(\.0+)?)$ ]] \
    || die "gpu memory utilisation '$GPU_MEMORY_UTILIZATION' is not a fraction in (0, 1]"
  [[ "$MAX_MODEL_LEN" =~ $positive ]] || die "max model length '$MAX_MODEL_LEN' is not a positive integer"
  [[ "$TENSOR_PARALLEL_SIZE" == auto || "$TENSOR_PARALLEL_SIZE" =~ $positive ]] \
    || die "tensor parallel size '$TENSOR_PARALLEL_SIZE' is neither 'auto' nor a positive integer"
  [[ "$IDLE_MINUTES" =~ $positive ]] || die "idle minutes '$IDLE_MINUTES' is not a positive integer"
  [[ "$IDLE_CHECK_MINUTES" =~ $positive ]] || die "idle check minutes '$IDLE_CHECK_MINUTES' is not a positive integer"
  [[ "$READY_TIMEOUT_SECONDS" =~ ^[0-9]+$ ]] || die "ready timeout '$READY_TIMEOUT_SECONDS' is not a number of seconds"
  [[ "$NVME_WAIT_SECONDS" =~ ^[0-9]+$ ]] || die "instance store wait '$NVME_WAIT_SECONDS' is not a number of seconds"
}

# Prints the first local NVMe instance-store disk that nothing has mounted. Types with
# several such disks get them striped by the DLAMI already; here one is plenty.
find_instance_store_disk() {
  local name model
  while read -r name model; do
    [[ "$model" == "$INSTANCE_STORE_MODEL" ]] || continue
    [[ -z "$(lsblk --noheadings --output MOUNTPOINT "$name" | tr -d '[:space:]')" ]] || continue
    printf '%s\n' "$name"
    return 0
  done < <(lsblk --nodeps --noheadings --paths --output NAME,MODEL)
}

# The DLAMI mounts the instance store itself at boot, possibly while user data already
# runs: give it a moment rather than format the disk under it. /opt/dlami marks that AMI.
wait_for_ami_mount() {
  local waited=0
  until mountpoint -q "$NVME_DIR"; do
    if [[ ! -d "${NVME_DIR%/*}" ]] || (( waited >= NVME_WAIT_SECONDS )); then
      return 1
    fi
    sleep 2
    waited=$((waited + 2))
  done
}

mount_instance_store() {
  if wait_for_ami_mount; then
    log "storage: instance store already mounted at $NVME_DIR"
    return 0
  fi
  local disk
  disk="$(find_instance_store_disk)"
  mkdir -p "$NVME_DIR"
  if [[ -z "$disk" ]]; then
    log "storage: WARNING no free NVMe instance store; models and images stay on the root volume in $NVME_DIR"
    return 0
  fi
  # A disk that already has a filesystem is from an earlier run: mount it, never format it.
  if [[ -z "$(lsblk --noheadings --output FSTYPE "$disk" | tr -d '[:space:]')" ]]; then
    log "storage: formatting $disk as ext4"
    mkfs.ext4 -q -L gpufill-nvme "$disk"
  fi
  mount -o noatime "$disk" "$NVME_DIR"
  log "storage: mounted $disk at $NVME_DIR"
}

# Bind mounts rather than daemon.json/containerd config edits: one mechanism for both
# daemons, and the AMI's own runtime configuration (the nvidia runtime) stays untouched.
move_container_data() {
  local target moved=()
  for target in "$DOCKER_DIR" "$CONTAINERD_DIR"; do
    mountpoint -q "$target" || moved+=("$target")
  done
  if (( ${#moved[@]} == 0 )); then
    log "storage: docker and containerd data already on the instance store"
    return 0
  fi
  # Stopped so no image layer is written to the root volume half-way through the move.
  systemctl stop docker.socket docker.service containerd.service
  for target in "${moved[@]}"; do
    mkdir -p "$NVME_DIR/${target##*/}" "$target"
    mount --bind "$NVME_DIR/${target##*/}" "$target"
    log "storage: $target now on the instance store ($NVME_DIR/${target##*/})"
  done
  systemctl start containerd.service docker.service
}

prepare_storage() {
  mount_instance_store
  mkdir -p "$NVME_DIR/models"
  # Without an instance store there is nothing to move onto.
  if mountpoint -q "$NVME_DIR"; then
    move_container_data
  fi
}

# Installed before the long pull and sync, so an instance whose startup hangs or fails
# still powers itself off (instance-initiated shutdown terminates it).
install_idle_watchdog() {
  local watchdog="$GPUFILL_HOME/idle-watchdog.sh"
  local source_uri="s3://$BUCKET/scripts/idle-watchdog.sh"
  mkdir -p "$GPUFILL_HOME" "$STATE_DIR" "$SYSTEMD_DIR"
  aws s3 cp "$source_uri" "$watchdog" --region "$REGION" --only-show-errors \
    || die "could not fetch the idle watchdog from $source_uri (the deploy uploads startup/ to scripts/)"
  chmod 0755 "$watchdog"

  cat >"$SYSTEMD_DIR/$WATCHDOG_UNIT.service" <<EOF
[Unit]
Description=gpufill idle watchdog: power off after $IDLE_MINUTES minutes without a POST /v1 request
After=docker.service

[Service]
Type=oneshot
Environment="GPUFILL_IDLE_MINUTES=$IDLE_MINUTES"
Environment="GPUFILL_CONTAINER_NAME=$CONTAINER"
Environment="GPUFILL_STATE_DIR=$STATE_DIR"
ExecStart=$watchdog
EOF

  cat >"$SYSTEMD_DIR/$WATCHDOG_UNIT.timer" <<EOF
[Unit]
Description=gpufill idle check every $IDLE_CHECK_MINUTES minutes

[Timer]
OnActiveSec=${IDLE_CHECK_MINUTES}min
OnUnitActiveSec=${IDLE_CHECK_MINUTES}min
AccuracySec=30s

[Install]
WantedBy=timers.target
EOF

  # The idle clock starts now; the watchdog moves it on whenever it sees requests.
  touch "$STATE_DIR/last-activity"
  systemctl daemon-reload
  systemctl enable "$WATCHDOG_UNIT.timer"
  # restart, not start: a second run may have changed the check interval.
  systemctl restart "$WATCHDOG_UNIT.timer"
  log "watchdog: $WATCHDOG_UNIT.timer enabled (check every $IDLE_CHECK_MINUTES min, power off after $IDLE_MINUTES idle min)"
}

pull_image() {
  local registry="${IMAGE%%/*}"
  if [[ "$registry" =~ ^[0-9]+\.dkr\.ecr(-fips)?\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$ ]]; then
    log "image: logging in to ECR $registry"
    aws ecr get-login-password --region "${BASH_REMATCH[2]}" \
      | docker login --username AWS --password-stdin "$registry" >/dev/null
  fi
  docker pull --quiet "$IMAGE" >/dev/null
  log "image: pulled $IMAGE"
}

sync_model() {
  aws s3 sync "$MODEL_URI" "$MODEL_DIR" --region "$REGION" --only-show-errors
  log "model: synced $MODEL_URI to $MODEL_DIR"
}

# The image (gigabytes) and the model (gigabytes) come from different places: fetch
# both at once, and wait for both so neither failure goes unreported.
fetch_image_and_model() {
  local pull_pid sync_pid done_pid="" first_status=0 pull_status=0 sync_status=0
  report_step "pulling image and syncing model"
  log "image: pulling $IMAGE"
  pull_image &
  pull_pid=$!
  log "model: syncing $MODEL_ID from $MODEL_URI"
  sync_model &
  sync_pid=$!

  # Whichever finishes first, the step then names the one still running (wait -p: bash 5.1+,
  # which the Ubuntu 22.04 DLAMI has). Both are awaited, so neither failure goes unreported.
  wait -n -p done_pid "$pull_pid" "$sync_pid" || first_status=$?
  if [[ "$done_pid" == "$pull_pid" ]]; then
    pull_status=$first_status
    report_step "syncing model"
    wait "$sync_pid" || sync_status=$?
  else
    sync_status=$first_status
    report_step "pulling image"
    wait "$pull_pid" || pull_status=$?
  fi
  if (( pull_status != 0 )); then
    log "ERROR: image pull failed (exit $pull_status) for $IMAGE; check the image name and that the instance role may pull it" >&2
  fi
  if (( sync_status != 0 )); then
    log "ERROR: model sync failed (exit $sync_status) for model $MODEL_ID from $MODEL_URI; check the model was uploaded there and the instance role may read it" >&2
  fi
  # The step a failure is reported at is the fetch that failed, whichever finished last.
  if (( pull_status != 0 && sync_status != 0 )); then
    STEP="pulling image and syncing model"
  elif (( pull_status != 0 )); then
    STEP="pulling image"
  elif (( sync_status != 0 )); then
    STEP="syncing model"
  fi
  (( pull_status == 0 && sync_status == 0 )) \
    || die "startup stopped before the server started; the idle watchdog powers this instance off after $IDLE_MINUTES minutes"
  [[ -f "$MODEL_DIR/config.json" ]] \
    || die "model $MODEL_ID has no config.json under $MODEL_URI; upload it with: aws s3 sync ./MODEL_DIR $MODEL_URI"
}

# auto: the most GPUs that divide the model's attention heads (vLLM refuses others),
# so a small model on a big instance still starts.
tensor_parallel_size() {
  if [[ "$TENSOR_PARALLEL_SIZE" != auto ]]; then
    printf '%s\n' "$TENSOR_PARALLEL_SIZE"
    return 0
  fi
  local gpus
  gpus="$(nvidia-smi --list-gpus | grep -c '^GPU' || true)"
  python3 - "$MODEL_DIR/config.json" "${gpus:-0}" <<'PY'
import json
import sys

config = json.load(open(sys.argv[1]))
config = config.get("text_config", config)
gpus = max(int(sys.argv[2]), 1)
heads = int(config.get("num_attention_heads", 1))
kv_heads = int(config.get("num_key_value_heads", heads))
print(max(n for n in range(1, gpus + 1)
          if heads % n == 0 and (kv_heads % n == 0 or n % kv_heads == 0)))
PY
}

start_server() {
  local tp
  tp="$(tensor_parallel_size)"
  if docker container inspect "$CONTAINER" >/dev/null 2>&1; then
    log "server: replacing the existing $CONTAINER container"
    docker rm --force "$CONTAINER" >/dev/null
  fi
  # HF_HUB_OFFLINE: the model comes from the bucket only, never from a hub.
  docker run --detach --name "$CONTAINER" --restart unless-stopped \
    --gpus all --ipc=host \
    --publish "127.0.0.1:$PORT:8000" \
    --volume "$NVME_DIR/models:/models:ro" \
    --env HF_HUB_OFFLINE=1 \
    "$IMAGE" \
    --model "/models/$MODEL_ID" \
    --served-model-name "$MODEL_ID" \
    --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION" \
    --max-model-len "$MAX_MODEL_LEN" \
    --tensor-parallel-size "$tp" \
    --enable-auto-tool-choice \
    --tool-call-parser "$TOOL_CALL_PARSER" >/dev/null
  log "server: started $CONTAINER ($MODEL_ID, $tp GPU(s)) on 127.0.0.1:$PORT"
}

wait_until_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT_SECONDS))
  until curl --silent --fail --max-time 5 --output /dev/null "http://127.0.0.1:$PORT/v1/models"; do
    if (( SECONDS >= deadline )); then
      log "ERROR: the server did not answer on 127.0.0.1:$PORT within $READY_TIMEOUT_SECONDS s; its last log lines:" >&2
      docker logs --tail 50 "$CONTAINER" 2>&1 | tee -a "$LOG_FILE" >&2 || true
      die "server not ready; the idle watchdog powers this instance off after $IDLE_MINUTES minutes"
    fi
    sleep 10
  done
}

report_exit() {
  local status=$?
  if (( status != 0 )); then
    log "FAILED (exit $status); the lines above say where" >&2
    [[ -z "$STEP" ]] || report_step "failed: $STEP"
  fi
}

main() {
  parse_args "$@"
  mkdir -p "$(dirname "$LOG_FILE")"
  # The last line of the log always says how the run ended, whichever command failed.
  trap report_exit EXIT
  validate
  MODEL_URI="s3://$BUCKET/models/$MODEL_ID/"
  MODEL_DIR="$NVME_DIR/models/$MODEL_ID"
  log "starting: model $MODEL_ID, image $IMAGE, port 127.0.0.1:$PORT, bucket $BUCKET ($REGION)"
  identify_instance

  report_step "preparing storage"
  prepare_storage
  report_step "installing watchdog"
  install_idle_watchdog
  fetch_image_and_model
  report_step "starting vLLM"
  start_server
  report_step "loading model"
  wait_until_ready
  # Loading the model can take many minutes; that must not count as idle time.
  touch "$STATE_DIR/last-activity"
  log "ready: $MODEL_ID answers on 127.0.0.1:$PORT (reach it through an SSM port-forwarding session)"
  report_step serving
}

main "$@"
