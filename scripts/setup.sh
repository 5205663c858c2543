#!/usr/bin/env bash
# Installs what cuda-agent needs on Debian 12 (idempotent): build tools and -dev packages from
# apt, and a Python venv with torch for the bridge, kept outside the clone and keyed by the hash
# of python/requirements.txt so that it is reused. Prints the venv's python path last.
# Usage: source scripts/setup.sh   (exports CUDA_AGENT_PYTHON and PATH additions)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

apt_packages=(build-essential clang libclang-rt-14-dev pkg-config python3 python3-venv
  libjansson-dev libsqlite3-dev libxxhash-dev libdlpack-dev libcmocka-dev libseccomp-dev
  libcurl4-openssl-dev zlib1g-dev libmicrohttpd-dev libgnutls28-dev libhiredis-dev redis-server chromium)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >&2
fi

# The CUDA toolkit: /usr/local/cuda (NVIDIA's packages) or nvcc on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if ! command -v nvcc >/dev/null 2>&1; then
  echo "setup: warning: nvcc not found; install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads)." >&2
  echo "setup: without nvcc nothing can be compiled; the GPU worker is not built." >&2
fi

# Python venv with torch (CPU use in tests; a GPU host may bring its own torch instead).
req="$here/python/requirements.txt"
key="$(sha256sum "$req" | cut -c1-16)"
venv="${CUDA_AGENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cuda-agent/venv-$key}"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "setup: creating the Python venv $venv (torch is large: this takes minutes once)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -r "$req" >&2
  touch "$venv/.complete"
fi
# The RL engines (verl, TRL) for python/cuda_agent_rl and its tests, into the same venv.
rl_req="$here/python/requirements-rl.txt"
rl_key="$(sha256sum "$rl_req" | cut -c1-16)"
if [ ! -f "$venv/.complete-rl-$rl_key" ]; then
  echo "setup: installing verl and trl into $venv (python/requirements-rl.txt)" >&2
  "$venv/bin/pip" install -q -r "$rl_req" >&2
  rm -f "$venv"/.complete-rl-*
  touch "$venv/.complete-rl-$rl_key"
fi
export CUDA_AGENT_PYTHON="$venv/bin/python"
echo "$CUDA_AGENT_PYTHON"
