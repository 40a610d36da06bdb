#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
# Pick the "Ubuntu 24.04" base image (Python 3.12): the pinned packages need Python >= 3.11.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap util-linux ca-certificates
python3 -m venv /opt/autograder-venv
/opt/autograder-venv/bin/pip install --no-cache-dir --upgrade pip
/opt/autograder-venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
    -r /autograder/source/requirements.txt
# The hidden tests and the reference solution: readable by root only.
chmod -R go-rwx /autograder/source
