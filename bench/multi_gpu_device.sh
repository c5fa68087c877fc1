#!/usr/bin/env bash
# The multi-GPU validation in one device call: topology, preflight (default and 2-GPU
# config), the telemetry benchmark across all GPUs, and bench/multi_gpu.py (all-reduce with
# telemetry).
#     bench/multi_gpu_device.sh OUTDIR      (python3 must import glm5svc and its deps)
#     SHORT=1 PYTHON=... bench/multi_gpu_device.sh OUTDIR   (the scripts' --short modes: CI)
set -u
OUT=${1:?usage: $0 OUTDIR}
R=$OUT/raw
mkdir -p "$R"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
if [ -n "${SHORT:-}" ]; then
    TELEMETRY_ARGS=(--short) MULTI_GPU_ARGS=(--short)
else
    TELEMETRY_ARGS=(--matmul-seconds 10) MULTI_GPU_ARGS=()
fi

step() {  # step NAME CMD...: stdout to NAME.txt, stderr to NAME.err, exit status to rc.txt
    local name=$1
    shift
    echo "== $name: $*"
    timeout 300 "$@" >"$R/$name.txt" 2>"$R/$name.err"
    local rc=$?
    echo "$name $rc" >>"$R/rc.txt"
    head -c 3000 "$R/$name.txt"
    tail -c 1500 "$R/$name.err"
}

date -u +%FT%TZ >"$R/date.txt"
step nvidia-smi nvidia-smi
step gpu-query nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,compute_cap,pcie.link.gen.max,pcie.link.width.max,power.limit --format=csv
step topo-m nvidia-smi topo -m
step topo-p2p-r nvidia-smi topo -p2p r
step topo-p2p-w nvidia-smi topo -p2p w
step nvlink-s nvidia-smi nvlink -s
step pip-versions "$PY" -c "import pydantic, yaml, rich, prometheus_client, pynvml, torch; print(pydantic.VERSION, torch.__version__, torch.cuda.device_count())"
step preflight-default "$PY" -m glm5svc --config /dev/null preflight
step preflight-default-json "$PY" -m glm5svc --config /dev/null preflight --json
step preflight-2gpu "$PY" -m glm5svc --config bench/multi_gpu_2gpu.yaml preflight
step preflight-2gpu-json "$PY" -m glm5svc --config bench/multi_gpu_2gpu.yaml preflight --json
step telemetry-bench "$PY" bench/telemetry.py --out "$R/telemetry-bench.json" "${TELEMETRY_ARGS[@]}"
step multi-gpu "$PY" bench/multi_gpu.py --out "$R/multi-gpu.json" --logs "$R" "${MULTI_GPU_ARGS[@]}"
step nvlink-s-after nvidia-smi nvlink -s
cp "$R/multi-gpu.json" "$R/telemetry-bench.json" "$OUT/" 2>/dev/null
tar czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$R"
cat "$OUT/raw.tgz" >/dev/null && echo "done: $(ls "$OUT")"
