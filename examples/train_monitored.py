"""A small real training job under commlens' monitor: a few transformer layers under DDP or FSDP2.

Run it as any training script is run::

    torchrun --nproc-per-node 4 examples/train_monitored.py --parallel ddp --steps 60 --jsonl-dir mon/

The monitor lines are the three marked ``# commlens``. The other options make
it a test subject: ``--slow-rank R --slow-from STEP --slow-ms MS`` gives rank R
that much extra real compute per step from that step on (a slow host's rank),
``--hang-rank R --hang-at STEP`` makes rank R stop issuing collectives (the
others hang in theirs), ``--no-monitor`` runs the same loop unmonitored, and
``--step-times FILE`` writes each step's time (for the overhead benchmark).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--parallel",
        choices=("ddp", "fsdp2", "allreduce", "comms"),
        default="ddp",
        help="ddp: DDP (bucketed all-reduces overlap backward); fsdp2: FSDP2 (prefetched all-gathers); allreduce: "
        "the gradients flattened and all-reduced once after backward (communication not overlapped with compute); "
        "comms: no compute, each step --comm-calls blocking collectives back to back on buffers of the model's "
        "gradient size (a PARAM-style communication loop)",
    )
    p.add_argument("--comm-calls", type=int, default=6, help="collectives per step with --parallel comms")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--window-steps", type=int, default=None)
    p.add_argument("--port", type=int, default=None, help="base port of the ranks' endpoints (none: no endpoint)")
    p.add_argument("--jsonl-dir", default=None)
    p.add_argument("--store", default=None)
    p.add_argument("--topology", default="auto")
    p.add_argument("--hang-deadline-s", type=float, default=300.0)
    p.add_argument("--no-monitor", action="store_true")
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-from", type=int, default=0)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--hang-rank", type=int, default=None)
    p.add_argument("--hang-at", type=int, default=0)
    p.add_argument("--step-times", default=None, help="write this rank's step times (JSON) to FILE.RANK")
    p.add_argument("--sleep-after-s", type=float, default=0.0, help="keep the endpoints up this long at the end")
    p.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="record the steps after the first 3 under the PyTorch profiler; each rank writes DIR/rank<R>.json",
    )
    return p.parse_args()


def burn(ms: float) -> None:
    """Real compute for about ``ms`` milliseconds of this rank's CPU time (a slow host does more work)."""
    a = torch.randn(64, 64)
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        a = torch.tanh(a @ a)


def build(args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [
        torch.nn.TransformerEncoderLayer(args.dim, 4, args.dim * 4, dropout=0.0, batch_first=True)
        for _ in range(args.layers)
    ]
    model = torch.nn.Sequential(*layers)
    if args.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, bucket_cap_mb=1)
    if args.parallel in ("allreduce", "comms"):
        return model
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def allreduce_grads(model: torch.nn.Module) -> None:
    """Average the gradients over the ranks with one blocking all-reduce of them all, after backward."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def comm_buffers(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The buffers of --parallel comms, made once: the whole gradient's size, a quarter of it, and the quarter
    gathered from every rank."""
    n = sum(p.numel() for p in model.parameters())
    flat = torch.ones(n)
    return flat, flat[: n // 4], torch.empty(n // 4 * dist.get_world_size())


def comm_loop(buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor], calls: int) -> None:
    """One step of --parallel comms: an all-reduce of the whole gradient, one of a quarter of it, an all-gather
    of the quarter, in turn, each blocking, nothing computed between them."""
    flat, quarter, gathered = buffers
    for i in range(calls):
        if i % 3 == 0:
            dist.all_reduce(flat)
        elif i % 3 == 1:
            dist.all_reduce(quarter)
        else:
            dist.all_gather_into_tensor(gathered, quarter)


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    mon = None
    if not args.no_monitor:
        from commlens import monitor  # commlens

        mon = monitor.start(  # commlens
            window_s=args.window_s,
            window_steps=args.window_steps,
            port=args.port,
            jsonl_dir=args.jsonl_dir,
            store=args.store,
            topology=None if args.topology == "none" else args.topology,
            hang_deadline_s=args.hang_deadline_s,
        )
    model = build(args)
    if mon is not None and args.parallel == "ddp":
        monitor.watch_ddp(model)  # commlens: DDP's all-reduces through Python, recorded
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.seq, args.dim, generator=gen)
    comm = comm_buffers(model) if args.parallel == "comms" else None
    times = []
    prof = None
    for step in range(args.steps):
        if args.profile and step == min(3, args.steps - 1):
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
            prof.start()
        t0 = time.perf_counter()
        if args.hang_rank == rank and step >= args.hang_at:
            time.sleep(3600)
        if args.slow_rank == rank and step >= args.slow_from and args.slow_ms > 0:
            burn(args.slow_ms)
        if args.parallel == "comms":
            comm_loop(comm, args.comm_calls)
            if mon is not None:
                monitor.step()  # commlens
            times.append(time.perf_counter() - t0)
            if prof is not None:
                prof.step()
            continue
        loss = model(x).pow(2).mean()
        loss.backward()
        if args.parallel == "allreduce":
            allreduce_grads(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mon is not None:
            monitor.step()  # commlens
        times.append(time.perf_counter() - t0)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
        os.makedirs(args.profile, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.profile, f"rank{rank}.json"))
    if args.step_times:
        with open(f"{args.step_times}.{rank}", "w") as fp:
            json.dump(times, fp)
    if args.sleep_after_s:
        time.sleep(args.sleep_after_s)
    if mon is not None:
        monitor.stop()
    dist.destroy_process_group()
    # On torch 2.13.0 (CPU, gloo), a job that imports torch._dynamo after init_process_group (building the
    # optimizer does) aborts at interpreter exit in 16 of 40 runs ("terminate called without an active
    # exception", after all its work). A collection right after destroy_process_group frees what is left of
    # the group while Python still runs: 0 of 40.
    gc.collect()
    if rank == 0 and os.environ.get("TRAIN_SAY_DONE"):
        print("done", flush=True)


if __name__ == "__main__":
    main()
