"""The README's snippets, run as written: every ```python block of README.md's "Quick start"
section and its ```sh block, in a namespace that holds what the text says they assume (a
nanoGPT-style `model` whose attention is the README's own `lpdiag.attention` line, `opt`,
`batches`, `loss_fn`). Asserts: the training block writes run.h5 with one record per batch, and a
trace in which every link of the chain can be looked for (`lpdiag check --require-data` runs every
test: loss, attention counters, delta-error statistics, per-head spectral norms); the
`lpdiag analyze run.h5` block gives a verdict (exit 0 healthy or 1 a finding); the patch_sdpa block (torch >= 2.0;
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
section = text[text.index("## Quick start"):]
section = section[:section.index("\n## ", 3)]
blocks = re.findall(r"```(python|sh)\n(.*?)```", section, re.S)
py = [b for lang, b in blocks if lang == "python"]
sh = [b for lang, b in blocks if lang == "sh"]
assert len(py) == 3 and len(sh) == 1, f"README's section changed: {len(py)} python and {len(sh)} sh blocks"
train, attention_line, patched = py


C, H, T, V = 64, 2, 16, 13
STEPS = 60  # enough records to judge (analyze needs >= 10), and two at the default full_every
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
    batches = [(x, x) for x in (torch.randint(0, V, (2, T)) for _ in range(STEPS))]
    loss_fn = lambda logits, y: F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    return {"model": model, "opt": opt, "batches": batches, "loss_fn": loss_fn}


with tempfile.TemporaryDirectory() as d:
    os.chdir(d)
    exec(train, make())
    check("training block wrote run.h5", os.path.exists("run.h5"))
    info = subprocess.run([cli, "info", "run.h5"], capture_output=True, text=True).stdout
    check(f"one record per batch ({STEPS})", f"records     {STEPS}" in info, info)
    r = subprocess.run([cli, "check", "--require-data", "run.h5"], capture_output=True, text=True)
    check("the quick start's trace holds the data of every link (check --require-data runs every test)",
          "not run" not in r.stderr and r.returncode in (0, 1), r.stdout + r.stderr)
    for block in sh:
        for line in block.strip().splitlines():
            argv = shlex.split(line)
            assert argv[0] == "lpdiag", line
            r = subprocess.run([cli] + argv[1:], capture_output=True, text=True)
            verdict = re.search(r"^(HEALTHY|FAILED)", r.stdout, re.M)
            check(f"`{line}` gives a verdict first, with the exit code it documents", verdict is not None
                  and r.returncode == (0 if verdict.group(1) == "HEALTHY" else 1), r.stdout + r.stderr)
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
        check(f"patch_sdpa block routed every SDPA call (2 layers x {STEPS} batches)", seen == [2 * STEPS], str(seen))
        check("patch_sdpa block wrote run.h5", os.path.exists("run.h5"))
    else:
        print(f"SKIP: the patch_sdpa block needs torch >= 2.0 (this is {torch.__version__})")
    os.chdir("/")
finish()
