#!/bin/bash
# gpufill user data. It only fetches startup.sh from the startup bucket and runs it:
# user data stays far under EC2's 16 KB limit, and startup.sh can change without a
# redeploy. gpufill.bootstrap.user_data fills in the placeholders at launch time.
# shellcheck disable=SC2154  # the lowercase names are template placeholders
set -euo pipefail
install -d -m 0755 /opt/gpufill
aws s3 cp "s3://${bucket}/scripts/startup.sh" /opt/gpufill/startup.sh --region "${region}" --only-show-errors
bash /opt/gpufill/startup.sh --region "${region}" --bucket "${bucket}" --image "${image}" --model-id "${model_id}"
