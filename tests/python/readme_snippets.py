"""The README's snippets, run as written: every ```python block of README.md's "Wrapping a training
run" section and its ```sh block, in a namespace that holds what the text says they assume (a
nanoGPT-style `model` whose attention is the README's own `lpdiag.attention` line, `opt`,
`batches`, `loss_fn`). Asserts: the training block writes run.h5 with one record per batch; the
`lpdiag analyze run.h5` block exits 0 and gives a verdict; the patch_sdpa block (torch >= 2.0;
skipped visibly on 1.13) routes the SDPA calls of an unedited model (patch_sdpa's counters > 0).
    readme_snippets.py README.md LPDIAG_CLI"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

import lpdiag
from check_helpers import check, finish

readme, cli = sys.argv[1], os.path.abspath(sys.argv[2])
text = open(readme).read()
section = text[text.index("## Wrapping a training run"):]
section = section[:section.index("\n## ", 3)]
blocks = re.findall(r"```(python|sh)\n(.*?)```", section, re.S)
py = [b for lang, b in blocks if lang == "python"]
sh = [b for lang, b in blocks if lang == "sh"]
assert len(py) == 3 and len(sh) == 1, f"README's section changed: {len(py)} python and {len(sh)} sh blocks"
train, attention_line, patched = py


C, H, T, V = 64, 2, 16, 13
torch.manual_seed(0)


class Attn(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.n_head, self.sdpa = H, sdpa
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scope = {"lpdiag": lpdiag, "q": q, "k": k, "v": v}
            exec(attention_line, scope)  # the README's line, as written
            y = scope["y"]
        return x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def make(sdpa=False):
    model = nn.Sequential(nn.Embedding(V, C), Attn(sdpa), Attn(sdpa), nn.Linear(C, V))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(x, x) for x in (torch.randint(0, V, (2, T)) for _ in range(5))]
    loss_fn = lambda logits, y: F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    return {"model": model, "opt": opt, "batches": batches, "loss_fn": loss_fn}


with tempfile.TemporaryDirectory() as d:
    os.chdir(d)
    exec(train, make())
    check("training block wrote run.h5", os.path.exists("run.h5"))
    info = subprocess.run([cli, "info", "run.h5"], capture_output=True, text=True).stdout
    check("one record per batch (5)", "records     5" in info, info)
    for block in sh:
        for line in block.strip().splitlines():
            argv = shlex.split(line)
            assert argv[0] == "lpdiag", line
            r = subprocess.run([cli] + argv[1:], capture_output=True, text=True)
            check(f"`{line}` exits 0 with a verdict", r.returncode == 0 and "RUN HEALTHY" in r.stdout, r.stdout + r.stderr)
    if hasattr(F, "scaled_dot_product_attention"):
        os.remove("run.h5")
        scope = make(sdpa=True)
        scope["lpdiag"] = lpdiag
        from lpdiag import sdpa as sdpa_module
        seen = []
        orig = sdpa_module.SdpaMode.__exit__

        def spy(self, *a):
            seen.append(self.routed)
            return orig(self, *a)

        sdpa_module.SdpaMode.__exit__ = spy
        exec(patched, scope)
        sdpa_module.SdpaMode.__exit__ = orig
        check("patch_sdpa block routed every SDPA call (2 layers x 5 batches)", seen == [10], str(seen))
        check("patch_sdpa block wrote run.h5", os.path.exists("run.h5"))
    else:
        print(f"SKIP: the patch_sdpa block needs torch >= 2.0 (this is {torch.__version__})")
    os.chdir("/")
finish()
