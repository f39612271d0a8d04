# Sourced (not run) by the device_*.sh scripts on the GPU machine, from the repository root:
# the carried wheels into /tmp/site, the environment, a timer, and `build_kernels DIR [SRC]`.
# The wheels come from benchmarks/device_carry.sh, run beforehand on a machine with PyPI.
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# once a machine (a second script in the same call must not reinstall under a build that is importing them)
if [ "$(cat /tmp/site/.wheels 2>/dev/null)" != "$(ls .whl 2>/dev/null)" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "no wheels in .whl/: run benchmarks/device_carry.sh here and carry .whl"; exit 1; }
  ls .whl > /tmp/site/.wheels
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 GGUF_QUANT_KERNELS_HUB=0 MAX_JOBS=${MAX_JOBS:-12}
# libggml-base carried by device_carry.sh: the GPU quantizers checked against libggml directly
[ -f .dev/ggml/libggml-base.so ] && export GGUF_QUANT_GGML_LIB=$PWD/.dev/ggml
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
# build_kernels OUTDIR [SRC] [JOBS]: our kernels (SRC: a kernels-src/gguf_kernels tree) into OUTDIR/build/
build_kernels() {
  python3 -m gguf_quant.build_kernels --out "$1" ${2:+--src "$2"} ${3:+--jobs "$3"} > "$1.log" 2>&1 \
    || { tail -40 "$1.log"; return 1; }
  el "kernels built in $1${2:+ from $2}"
}
