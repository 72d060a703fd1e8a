"""Two CPU processes with torch.distributed (gloo): each rank's Monitor writes its own
NAME.rank<k>.h5, and lpdiag reads both as one run."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, lib, out):
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.ops.load_library(lib)
    torch.manual_seed(rank)
    w = torch.randn(48, 16, requires_grad=True)
    mon = torch.classes.lpdiag.Monitor(out, 1, 2, 8, "{}", dist.get_rank(), dist.get_world_size(), False)
    mon.add_fused_qkv("blk", 0, w)
    for step in range(4):
        q, k, v = (torch.matmul(torch.randn(2, 10, 16), w.t()).split(16, 2))
        q, k, v = (t.view(2, 10, 2, 8).transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
        loss = torch.ops.lpdiag.attention(q, k, v, torch.ops.lpdiag.attention_spec("fa2", "none", "counters", True), 0).float().pow(2).mean()
        loss.backward()
        dist.all_reduce(w.grad)
        mon.record(step, loss.item(), 1e-3, 1.0)
    mon.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    lib, lpdiag = sys.argv[1], sys.argv[2]
    out = os.path.join(tempfile.mkdtemp(), "run.h5")
    # Set before spawning, so both ranks agree on the rendezvous.
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(29500 + os.getpid() % 2000)
    mp.spawn(worker, args=(lib, out), nprocs=2, join=True)
    stem = out[:-3]
    for r in (0, 1):
        assert os.path.exists(f"{stem}.rank{r}.h5"), f"missing {stem}.rank{r}.h5"
    assert os.system(f"{lpdiag} info {stem}.rank1.h5 | grep -q 'rank 1 of 2'") == 0
    assert os.system(f"{lpdiag} analyze {stem}.rank0.h5 {stem}.rank1.h5 --json > /dev/null") in (0, 256)  # exit 0 or 1
    print("ok: two ranks, two traces, analyzed together")
