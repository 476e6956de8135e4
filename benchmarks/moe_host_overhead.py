"""Host (CPU) cost of one Megatron-Core MoE transformer layer against a dense one (issue 27).

Runs with a separate virtual environment that holds megatron-core and a CPU build of torch, not the project's::

    python3.11 -m venv /work/venv-mcore
    /work/venv-mcore/bin/pip install torch==2.13.0 megatron-core numpy
    /work/venv-mcore/bin/python benchmarks/moe_host_overhead.py [--reps 200] [--ep 1 2] [--write]

It builds Megatron-Core's own (no Transformer Engine) GPT layer, dense and MoE (router, alltoall token dispatcher,
experts as SequentialMLP or as the grouped-GEMM GroupedMLP), on CPU with tiny fp32 tensors (hidden 64, 16 tokens;
CPU bf16 matmuls take ~30 us each here), so the kernels themselves take little and what is timed is the host's work: Python, autograd and the ATen
dispatcher. Each configuration is timed forward and forward + backward (median over ``--reps``), and its ATen ops
are counted with a TorchDispatchMode, forward and backward apart: all ops, and the ops that would launch a GPU kernel
(views, ``empty`` and ``detach`` launch none). ``--ep 2`` runs two gloo ranks so the dispatcher takes its expert-
parallel path (token counts gathered, all-to-alls, the second permutation); the gloo collectives' own time is in it.

What the figures omit, against an eager CUDA run: cudaLaunchKernel and the CUDA caching allocator per kernel, the
dispatcher's device-to-host copies and stream waits, NCCL's host work, Transformer Engine's Python (its modules,
fused permutation and router, GroupedLinear are not on CPU). What they include that a GPU run's host does not pay:
the CPU kernels' own time (small at these sizes) and gloo's collectives (at EP 1 too: world size 1 still calls them). The grouped GEMM package
(fanshiqing/grouped_gemm) is CUDA-only; GroupedMLP is run with its ``gmm`` replaced by an autograd function over
one matmul per grouped GEMM (one op forward, two backward, as the package launches; torch's CPU ``_grouped_mm``
loops over the experts, CPU kernel time that a GPU does not spend on the host).

``--write`` replaces the section "MoE layer host cost (issue 27)" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty

try:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    warnings.filterwarnings("ignore")
    # megatron-core is deliberately not a dependency of commlens (it runs only in its own venv, above), so it is
    # loaded by name rather than imported
    mcore = importlib.import_module("megatron.core")
    parallel_state = importlib.import_module("megatron.core.parallel_state")
    get_gpt_layer_local_spec = importlib.import_module(
        "megatron.core.models.gpt.gpt_layer_specs"
    ).get_gpt_layer_local_spec
    random_mod = importlib.import_module("megatron.core.tensor_parallel.random")
    gg = importlib.import_module("megatron.core.transformer.moe.grouped_gemm_util")
    moe_utils = importlib.import_module("megatron.core.transformer.moe.moe_utils")
    token_dispatcher = importlib.import_module("megatron.core.transformer.moe.token_dispatcher")
    MoEAlltoAllTokenDispatcher = token_dispatcher.MoEAlltoAllTokenDispatcher
    TransformerConfig = importlib.import_module("megatron.core.transformer.transformer_config").TransformerConfig
    TransformerLayer = importlib.import_module("megatron.core.transformer.transformer_layer").TransformerLayer
except ImportError as exc:  # pragma: no cover - the project's venv has no megatron-core
    sys.exit(
        f"moe_host_overhead.py needs torch and megatron-core ({exc.name} is missing); run it with a separate venv:\n"
        "  python3.11 -m venv /work/venv-mcore && /work/venv-mcore/bin/pip install torch megatron-core numpy\n"
        "  /work/venv-mcore/bin/python benchmarks/moe_host_overhead.py"
    )

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SECTION = "## MoE layer host cost (issue 27)"
HIDDEN = 64
TOKENS = 16
# ops that launch no kernel on a GPU: aliases and allocation-only ops
NO_KERNEL = {"empty", "empty_strided", "detach", "alias", "lift_fresh", "_local_scalar_dense", "set_"}


@dataclass(frozen=True)
class Case:
    """One layer configuration: its name and the TransformerConfig fields it sets."""

    name: str
    local_experts: int  # 0: dense
    topk: int = 8
    grouped: bool = True
    score: str = "softmax"
    balance: str = "aux_loss"
    extra: dict[str, object] = field(default_factory=dict)


def cases(experts: list[int]) -> list[Case]:
    """The configurations timed: dense, then the published rows' router/expert settings over local experts."""
    out = [Case("dense", 0)]
    for e in experts:
        out.append(Case(f"moe grouped softmax aux top8 E{e}", e))
    for e in experts:
        out.append(Case(f"moe sequential softmax aux top8 E{e}", e, grouped=False))
    e = 8
    out += [
        Case(f"moe grouped softmax no-aux top8 E{e}", e, balance="none"),
        Case(f"moe grouped softmax seq_aux top4 E{e}", e, topk=4, balance="seq_aux_loss"),
        Case(
            f"moe grouped sigmoid bias+shared top8 E{e}",
            e,
            score="sigmoid",
            balance="seq_aux_loss",
            extra={"moe_router_enable_expert_bias": True, "moe_shared_expert_intermediate_size": 32},
        ),
    ]
    return out


class _FakeStream:
    """Stands in for the dispatcher's CUDA side stream on a CPU build (its copies are no-ops there)."""

    def wait_stream(self, _other: object) -> None:
        pass

    def record_event(self) -> _FakeStream:
        return self

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> _FakeStream:
        return self

    def __exit__(self, *_a: object) -> None:
        pass


def _cpu_shims() -> None:
    """Let the CUDA-only calls of the alltoall dispatcher and GroupedMLP run on a CPU build."""
    stream = _FakeStream()
    MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = stream
    torch.cuda.current_stream = lambda *a, **k: stream  # type: ignore[assignment]
    torch.cuda.stream = lambda s: stream  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]  # the attention's buffer

    class _Gmm(torch.autograd.Function):
        """grouped_gemm.ops.gmm as the package issues it: one grouped GEMM forward, two backward. Each is one
        matmul over the first expert's weight here: torch's CPU grouped_mm runs a matmul per expert, CPU kernel
        time that a GPU spends asynchronously (the values do not matter; the ops dispatched do)."""

        @staticmethod
        def forward(ctx, a, b, batch_sizes, trans_b):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(a, b)
            return a @ b[0]

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            a, b = ctx.saved_tensors
            return grad @ b[0].t(), (a.t() @ grad).expand_as(b), None, None

    class _Ops:
        @staticmethod
        def gmm(a, b, batch_sizes, trans_b=False):  # type: ignore[no-untyped-def]
            return _Gmm.apply(a, b, batch_sizes, trans_b)

    gg.ops = _Ops

    def to_host(tensor, as_numpy=False, record_stream=False):  # type: ignore[no-untyped-def]
        # moe_utils.maybe_move_tensor_to_cpu as it runs on a GPU: one copy per tensor, split sizes as numpy
        if not torch.is_tensor(tensor):
            return tensor
        host = tensor.to("cpu", copy=True)
        return host.numpy() if as_numpy else host

    token_dispatcher.maybe_move_tensor_to_cpu = to_host
    # megatron-core 0.16 names te_general_gemm in the router's linear even when Transformer Engine is absent
    moe_utils.te_general_gemm = getattr(moe_utils, "te_general_gemm", None)
    # the dropout RNG fork swaps CUDA generator states: a no-op here (dropout is 0)
    random_mod.CudaRNGStatesTracker.fork = lambda self, name="": contextlib.nullcontext()  # type: ignore[method-assign]
    gg.grouped_gemm = True


def build(case: Case, ep: int) -> torch.nn.Module:
    """One GPT layer on CPU (fp32 tensors, bf16 flag), Megatron-Core's local (non-TE) modules: RMSNorm, attention, dense MLP or MoE."""
    moe = case.local_experts > 0
    kw: dict[str, object] = {}
    if moe:
        kw = {
            "num_moe_experts": case.local_experts * ep,
            "moe_router_topk": min(case.topk, case.local_experts * ep),  # top-8 of 4 experts: 4
            "moe_ffn_hidden_size": 32,
            "moe_router_score_function": case.score,
            "moe_router_load_balancing_type": case.balance,
            "moe_aux_loss_coeff": 0.0 if case.balance == "none" else 1e-3,
            "moe_token_dispatcher_type": "alltoall",
            "moe_grouped_gemm": case.grouped,
            "moe_router_dtype": "fp32",
            **case.extra,
        }
    config = TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=4,
        ffn_hidden_size=128,
        expert_model_parallel_size=ep,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_dropout_fusion=False,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        **kw,
    )
    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts, moe_grouped_gemm=case.grouped, normalization="RMSNorm"
    )
    layer = TransformerLayer(config, spec.submodules, layer_number=1)
    config.bf16 = True  # GroupedMLP's forward asserts it; built fp32 so that the attention's softmax stays fp32
    return layer


class _Count(TorchDispatchMode):
    """Counts the ATen ops dispatched below autograd: all of them, and those that would launch a kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.kernels = 0
        self.part: list[str] = ["other"]  # the MoE part running (innermost last), see parts()
        self.by_part: dict[str, list[int]] = {}
        self.paused = False
        self.node_part: Callable[[int], str] | None = None  # backward: the part that made an autograd node

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.paused:
            return func(*args, **(kwargs or {}))
        self.ops += 1
        part = self.part[-1]
        if self.node_part is not None:
            node = torch._C._current_autograd_node()
            part = self.node_part(node._sequence_nr()) if node is not None else "other"
        counts = self.by_part.setdefault(part, [0, 0])
        counts[0] += 1
        if not (func.is_view or func.overloadpacket.__name__ in NO_KERNEL):
            self.kernels += 1
            counts[1] += 1
        return func(*args, **(kwargs or {}))


# causal, given explicitly (Megatron's default mask is built on a CUDA device)
MASK = torch.triu(torch.ones(1, 1, TOKENS, TOKENS), diagonal=1).bool()


# The MoE layer's forward in Megatron-Core's order (moe_layer.py MoELayer.forward, token_dispatcher.py
# MoEAlltoAllTokenDispatcher): (owner attribute of the MoELayer or "" for itself, method, part name)
MOE_PARTS = (
    ("", "route", "router: scores, top-k, aux loss"),
    ("router", "gating", "router: gating GEMM (fp32 casts and matmul)"),
    ("", "shared_experts_compute", "shared experts"),
    ("", "preprocess", "dispatch preprocess (token counts, splits, permutation 1)"),
    ("", "dispatch", "dispatch all-to-all"),
    ("token_dispatcher", "dispatch_postprocess", "permutation 2 (sort by local expert)"),
    ("experts", "forward", "experts"),
    ("token_dispatcher", "combine_preprocess", "unpermutation 2"),
    ("", "combine", "combine all-to-all"),
    ("", "postprocess", "unpermutation 1 (+ shared experts' add)"),
)


def parts(case: Case, ep: int) -> dict[str, list[int]]:
    """ATen ops (all, kernel-launching) of one MoE layer's FFN half by part (MOE_PARTS), forward and backward
    ("<part> bwd"). A backward op belongs to the part whose forward made the autograd node running it (nodes are
    numbered in creation order: the boundaries are the sequence numbers at each part's entry and exit)."""
    torch.manual_seed(0)
    layer = build(case, ep)
    moe = layer.mlp
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    for _ in range(3):
        _ffn_step(layer, x, True)
    count = _Count()
    bounds: list[tuple[int, str]] = []

    def mark() -> None:
        count.paused = True
        probe = torch.zeros(1, requires_grad=True) * 1  # its node takes the next sequence number
        count.paused = False
        bounds.append((probe.grad_fn._sequence_nr(), count.part[-1]))

    def wrap(fn, name):  # type: ignore[no-untyped-def]
        def inner(*a, **k):  # type: ignore[no-untyped-def]
            count.part.append(name)
            mark()
            try:
                return fn(*a, **k)
            finally:
                count.part.pop()
                mark()

        return inner

    for owner, method, name in MOE_PARTS:
        obj = getattr(moe, owner) if owner else moe
        setattr(obj, method, wrap(getattr(obj, method), name))
    with count:
        y, _ = moe(x)
    forward = count.by_part
    count.by_part = {}

    def node_part(seq: int) -> str:
        owner = "other"
        for start, name in bounds:
            if start > seq:
                break
            owner = name
        return owner

    count.node_part = node_part
    with count:
        y.sum().backward()
    return forward | {f"{k} bwd": v for k, v in count.by_part.items()}


def _layer_step(layer: torch.nn.Module, x: torch.Tensor, backward: bool) -> None:
    out, _ = layer(x, attention_mask=MASK)
    if backward:
        out.sum().backward()


def _ffn_step(layer: torch.nn.Module, x: torch.Tensor, backward: bool) -> None:
    out, _ = layer.mlp(x)  # the FFN half alone: MLP or MoELayer
    if backward:
        out.sum().backward()


def measure(case: Case, ep: int, reps: int) -> dict[str, float]:
    """For the whole layer and its FFN half: median host seconds forward and forward + backward, and ATen ops
    (all, kernel-launching) forward and backward."""
    torch.manual_seed(0)
    layer = build(case, ep)
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    out: dict[str, float] = {}
    for part, step in (("layer", _layer_step), ("ffn", _ffn_step)):
        for _ in range(10):
            step(layer, x, True)
        fwd, bwd = _Count(), _Count()
        with fwd:
            y, _ = layer(x, attention_mask=MASK) if part == "layer" else layer.mlp(x)
        with bwd:
            y.sum().backward()
        times: dict[str, list[float]] = {"fwd": [], "fwdbwd": []}
        for _ in range(reps):
            for key in times:
                if ep > 1:
                    dist.barrier()
                t0 = time.perf_counter()
                step(layer, x, key == "fwdbwd")
                times[key].append(time.perf_counter() - t0)
        out |= {
            f"{part}_fwd_s": statistics.median(times["fwd"]),
            f"{part}_fwdbwd_s": statistics.median(times["fwdbwd"]),
            f"{part}_fwd_ops": fwd.ops,
            f"{part}_fwd_kernels": fwd.kernels,
            f"{part}_bwd_ops": bwd.ops,
            f"{part}_bwd_kernels": bwd.kernels,
        }
    return out


def op_floor_s(reps: int) -> float:
    """Host seconds of one small eager op with autograd on this CPU (an fp32 add of 16 x 64 that records its
    backward node): the per-op floor the layer figures sit on."""
    a = torch.randn(TOKENS, HIDDEN, requires_grad=True)
    b = torch.randn(TOKENS, HIDDEN)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(100):
            a + b
        samples.append((time.perf_counter() - t0) / 100)
    return statistics.median(samples)


def _worker(rank: int, ep: int, experts: list[int], reps: int, port: int, queue: object) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    _cpu_shims()
    dist.init_process_group("gloo", rank=rank, world_size=ep)
    try:
        parallel_state.initialize_model_parallel(expert_model_parallel_size=ep)
        rows: list[tuple[Case, dict[str, float]]] = []
        for case in cases(experts):
            if ep > 1 and not case.local_experts:
                continue
            rows.append((case, measure(case, ep, reps)))
        split = parts(Case("parts", 8), ep)  # every rank: the dispatcher's collectives need them all
        if rank == 0:
            queue.put(Result(op_floor_s(reps), rows, split))  # type: ignore[attr-defined]
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


@dataclass(frozen=True)
class Result:
    """One EP size's figures (rank 0): the per-op floor, each case's figures, the forward ops by MoE part."""

    op_floor_s: float
    rows: list[tuple[Case, dict[str, float]]]
    parts: dict[str, list[int]]


def run(ep: int, experts: list[int], reps: int) -> Result:
    """All cases with ``ep`` gloo ranks (expert-parallel size); rank 0's figures."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + (os.getpid() + ep) % 1000
    procs = [ctx.Process(target=_worker, args=(r, ep, experts, reps, port, queue)) for r in range(ep)]
    for p in procs:
        p.start()
    rows: Result | None = None
    try:
        while rows is None and all(p.exitcode in (None, 0) for p in procs):
            try:
                rows = queue.get(timeout=2)
            except Empty:
                continue
    finally:
        for p in procs:
            p.join()
    if rows is None or any(p.exitcode for p in procs):
        sys.exit(f"a rank of the EP={ep} run failed")
    return rows


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def report(results: dict[int, Result], cmd: str, reps: int) -> str:
    """The tables and the per-local-expert fits, as markdown."""
    load = os.getloadavg()[0]
    floors = ", ".join(f"EP {ep}: {r.op_floor_s * 1e6:.1f} us" for ep, r in results.items())
    lines = [
        SECTION,
        "",
        f"`{cmd}` ({reps} reps, median). CPU: {_cpu()}, 1 thread per rank, 1-minute load {load:.2f} at the end; "
        f"torch {torch.__version__}, megatron-core {mcore.__version__}. One GPT layer, fp32 tensors, hidden {HIDDEN}, "
        f"{TOKENS} tokens, Megatron-Core's local (non-TE) modules, alltoall dispatcher, router in fp32; E = local "
        f"experts (top-k at most E * EP). One small eager op with autograd (fp32 add) on this CPU: {floors}. "
        "At EP 2 the times include waiting for the other rank in gloo's collectives (two processes on a shared "
        "CPU): read them for the op counts, EP 1 for the host time.",
        "Host (CPU) microseconds per micro-batch, median; ATen ops dispatched as all / those that would launch a GPU "
        "kernel (views, empty, detach launch none). FFN = the layer's MLP or MoELayer alone.",
        "",
        "| EP | layer | layer fwd us | layer fwd+bwd us | FFN fwd us | FFN fwd+bwd us | FFN fwd ops | FFN bwd ops "
        "| layer fwd ops | layer bwd ops |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for ep, res in results.items():
        for case, m in res.rows:
            cells = [f"{m[f'{p}_{k}_s'] * 1e6:.0f}" for p in ("layer", "ffn") for k in ("fwd", "fwdbwd")]
            cells += [
                f"{m[f'{p}_{k}_ops']:.0f}/{m[f'{p}_{k}_kernels']:.0f}" for p in ("ffn", "layer") for k in ("fwd", "bwd")
            ]
            lines.append(f"| {ep} | {case.name} | " + " | ".join(cells) + " |")
    lines += ["", "Least-squares fits over local experts E (a + b E), the MoE FFN half:", ""]
    for ep, res in results.items():
        for kind in ("grouped", "sequential"):
            pts = [(c, m) for c, m in res.rows if c.name.startswith(f"moe {kind} softmax aux top8")]
            if len(pts) < 2:
                continue
            for key, scale, unit in (
                ("ffn_fwdbwd_s", 1e6, "host us fwd+bwd"),
                ("ffn_fwd_kernels", 1, "kernel ops fwd"),
                ("ffn_bwd_kernels", 1, "kernel ops bwd"),
            ):
                a, b = fit([(c.local_experts, m[key] * scale) for c, m in pts])
                lines.append(f"- EP {ep}, {kind} experts: {unit} = {a:.1f} + {b:.2f} E")
    lines += [
        "",
        "ATen ops (all/kernel) of the MoE FFN half by part, forward and backward, grouped experts, softmax, aux loss, "
        "top-8, E 8 (a backward op counts for the part whose forward made its autograd node; 'other' in the "
        "backward: the gradient's seed and the weights' accumulation):",
        "",
        "| part | " + " | ".join(f"EP {ep} fwd | EP {ep} bwd" for ep in results) + " |",
        "|---|" + "---:|---:|" * len(results),
    ]
    for name in [p for _, _, p in MOE_PARTS] + ["other"]:
        cells = [results[ep].parts.get(n, [0, 0]) for ep in results for n in (name, f"{name} bwd")]
        lines.append(f"| {name} | " + " | ".join(f"{o}/{k}" for o, k in cells) + " |")
    return "\n".join(lines) + "\n"


def write_section(text: str) -> None:
    doc = DOC.read_text()
    start = doc.find(SECTION)
    if start < 0:
        doc = doc.rstrip("\n") + "\n\n" + text
    else:
        end = doc.find("\n## ", start + len(SECTION))
        doc = doc[:start] + text + (doc[end + 1 :] if end >= 0 else "")
    DOC.write_text(doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--ep", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--experts", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--write", action="store_true", help="replace the section of docs/benchmarks.md")
    args = ap.parse_args()
    results = {ep: run(ep, args.experts, args.reps) for ep in args.ep}
    cmd = "python benchmarks/moe_host_overhead.py " + " ".join(sys.argv[1:])
    text = report(results, cmd.strip(), args.reps)
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
