"""What a kernel holds the GPU for beyond its bytes: DeepSeek's published training trace, read (issue 27).

DeepSeek published a PyTorch profiler trace of DeepSeek-V3 training (github.com/deepseek-ai/profile-data,
``train.json`` at ae7fc0780d06b5e51aec4ca3005b03d575209643: H800, EP 64, TP 1, 4K sequence, one DualPipe pair of a
forward and a backward chunk of 4 MoE layers each). The trace is not in this repository; fetch it and pass its path::

    python benchmarks/moe_kernel_trace.py /path/to/train.json

It prints, for the compute stream (the stream with the most kernels):

- the gap between consecutive kernels (the next one's start minus the previous one's end), all of them and those
  where the host had issued the next kernel (its ``cudaLaunchKernel``/``cudaLaunchKernelExC`` call, matched by
  correlation id) at least 5 us before the previous kernel ended, so the stream was not waiting for the host;
- the durations of small ATen kernels (``at::native``; grids of at most one wave, one block per SM) and of ATen kernels
  by grid size;
- the host's launch call durations.

The step model's ``kernels.KERNEL_GAP_S`` and ``KERNEL_MIN_S`` are its medians. The profiler writes whole
microseconds, so each figure is +-1 us.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC")
AHEAD_US = 5  # the host issued the next kernel at least this long before the previous kernel ended


def _quantiles(values: list[float]) -> str:
    v = sorted(values)
    if not v:
        return "n=0"
    return (
        f"n={len(v)} min={v[0]:g} p10={v[len(v) // 10]:g} median={statistics.median(v):g} "
        f"p90={v[9 * len(v) // 10]:g} mean={statistics.mean(v):.2f}"
    )


def _blocks(event: dict) -> int:
    g = event["args"].get("grid", [1, 1, 1])
    return int(g[0]) * int(g[1]) * int(g[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="the trace (train.json of deepseek-ai/profile-data)")
    args = ap.parse_args()
    try:
        data = json.loads(args.trace.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        ap.exit(2, f"error: {args.trace}: not a readable JSON trace ({e})\n")
    events = data["traceEvents"] if isinstance(data, dict) else data
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        ap.exit(2, f"error: {args.trace}: no list of trace events (traceEvents)\n")
    props = data.get("deviceProperties", []) if isinstance(data, dict) else []
    sms = next((int(d.get("numSms", 132)) for d in props), 132)
    kernels = [e for e in events if e.get("cat") == "kernel" and isinstance(e.get("args"), dict)]
    if not kernels:
        ap.exit(2, f"error: {args.trace}: no kernel events to time\n")
    stream = Counter(e["args"]["stream"] for e in kernels).most_common(1)[0][0]
    ks = sorted((e for e in kernels if e["args"]["stream"] == stream), key=lambda e: e["ts"])
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCH_CALLS and "correlation" in e.get("args", {})
    }
    gaps, ahead = [], []
    for prev, cur in zip(ks, ks[1:], strict=False):
        gap = cur["ts"] - (prev["ts"] + prev["dur"])
        if gap < 0:  # overlapping records (another context's kernel): no gap
            continue
        gaps.append(gap)
        call = launches.get(cur["args"].get("correlation"))
        if call is not None and call["ts"] + call["dur"] <= prev["ts"] + prev["dur"] - AHEAD_US:
            ahead.append(gap)
    aten = [e for e in ks if "at::native" in e["name"]]
    devices = [d.get("name") for d in data.get("deviceProperties", [])] if isinstance(data, dict) else []
    print(f"trace: {args.trace} ({', '.join(sorted(set(filter(None, devices)))) or 'device not named'}, {sms} SMs)")
    print(f"compute stream {stream}: {len(ks)} of {len(kernels)} kernels")
    print(f"gap between consecutive kernels (us), all: {_quantiles(gaps)}")
    print(f"gap where the host was >= {AHEAD_US} us ahead (us): {_quantiles(ahead)}")
    print(
        f"small ATen kernels (<= {sms} blocks) duration (us): {_quantiles([e['dur'] for e in aten if _blocks(e) <= sms])}"
    )
    print(f"larger ATen kernels duration (us): {_quantiles([e['dur'] for e in aten if _blocks(e) > sms])}")
    for name in LAUNCH_CALLS:
        calls = [e["dur"] for e in events if e.get("cat") == "cuda_runtime" and e.get("name") == name]
        print(f"host {name} (us): {_quantiles(calls)}")


if __name__ == "__main__":
    main()
