#!/usr/bin/env python
"""Issue 17: what each physical term of the step model does to the error against published runs.

Run from the repository root::

    .venv/bin/python benchmarks/project_causes.py

Projects every row of every published throughput table (``commlens project validate``'s tables) with the
full model, then with one term switched off at a time: the slowest GPU (``step.GPU_SPEED_CV``), the host's
launch time (every framework profile's ``host_s_per_kernel`` and ``module_host_s``), fp8 casts (every recipe of
``kernels.FP8_RECIPES`` moving no bytes and launching nothing), fp8 GEMMs at their own plateau
(``Device.fp8_gemm_efficiency``). Prints the mean and max absolute error of the rows the model projects: all,
dense only, and the dense fp8 H100 rows of the Megatron-Bridge tables (25.11, 26.02.01 and 26.04.01); and how many it refuses.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from commlens.project import frameworks, hardware, kernels, step
from commlens.project.validate import table_names, validate_tables

MOE = ("qwen3", "deepseek", "mixtral", "gpt-oss")


def run(label: str) -> None:
    step.clear_caches()
    step.slowest_gpu_factor.cache_clear()
    rows = validate_tables([n for n in table_names() if n != "memory"])

    def stats(keep) -> str:
        errors = [abs(r.error) for r in rows if r.error is not None and keep(r)]
        return f"{100 * statistics.mean(errors):5.1f}% mean, {100 * max(errors):5.1f}% max ({len(errors)} rows)"

    def dense(r) -> bool:
        return not r.workload.startswith(MOE)

    def h100_fp8(r) -> bool:
        return r.table.startswith("megatron-bridge") and r.topology == "dgx-h100" and dense(r)

    refused = sum(r.error is None for r in rows)
    print(
        f"{label:34s} all {stats(lambda r: True)} | dense {stats(dense)} | H100 fp8 {stats(h100_fp8)} | {refused} refused"
    )


def main() -> None:
    run("full model")
    saved = step.GPU_SPEED_CV
    step.GPU_SPEED_CV = 0.0
    run("without the slowest GPU")
    step.GPU_SPEED_CV = saved
    profiles = list(frameworks._profiles().values())
    host = [(fw.host_s_per_kernel, fw.module_host_s) for fw in profiles]
    for fw in profiles:  # frozen pydantic models: the cached profiles are changed in place for this run only
        object.__setattr__(fw, "host_s_per_kernel", 0.0)
        object.__setattr__(fw, "module_host_s", 0.0)
    run("without the host's launch time")
    for fw, (per_kernel, per_module) in zip(profiles, host, strict=True):
        object.__setattr__(fw, "host_s_per_kernel", per_kernel)
        object.__setattr__(fw, "module_host_s", per_module)
    recipes = dict(kernels.FP8_RECIPES)
    for name, recipe in recipes.items():
        kernels.FP8_RECIPES[name] = replace(recipe, bytes_tn_only=0.0, bytes_any_layout=0.0, launches=0)
    run("without fp8 casts")
    kernels.FP8_RECIPES.update(recipes)
    devices = [hardware.device_for(n) for n in ("H100 SXM", "H200 SXM", "B200", "B200 (GB200)")]
    plateaus = [d.fp8_gemm_efficiency for d in devices]
    for d in devices:  # frozen pydantic models: the cached instances are changed in place for this run only
        object.__setattr__(d, "fp8_gemm_efficiency", None)
    run("fp8 GEMMs at the bf16 plateau")
    for d, v in zip(devices, plateaus, strict=True):
        object.__setattr__(d, "fp8_gemm_efficiency", v)


if __name__ == "__main__":
    main()
