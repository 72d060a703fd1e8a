"""gpu: the observer on the kernels a user runs.
 - The probe families through the observer (lpdiag.observe.measure: the same core as
   lpdiag.observed) for lpdiag's kernel, each SDPA backend and FlexAttention: each kernel's z of
   the mean O and delta error must match the kernel survey (docs/results/data/kernel_survey_h200.json,
   measured by the probe bench against its own fp64 reference) within 10% of the survey's z
   (+0.5 for z near 0, where the kernels' delta is formed in fp32 and the observer's in fp64).
 - A model on CUDA under observe_sdpa: losses bit for bit those of the unobserved model, the trace
   naming external:<the backend PyTorch picked>.
 - Hugging Face's attn_implementation="lpdiag-observe" (where transformers is installed).
Exits 77 without a CUDA device.
    observe_cuda.py LPDIAG_CLI SURVEY_JSON"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)

import lpdiag
from check_helpers import check, finish
from lpdiag import kernels
from lpdiag.observe import measure

cli, survey_path = sys.argv[1], sys.argv[2]
survey = {(r["family"], r["causal"], r["kernel"]): r for r in json.load(open(survey_path))["results"]}
dev = torch.device("cuda")
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")


def agree(obs, ref):
    return abs(obs - ref) <= 0.1 * abs(ref) + 0.5


print(f"{'family':13s} {'causal':6s} {'kernel':15s} {'O z survey':>10s} {'O z obs':>9s} {'δ z survey':>10s} {'δ z obs':>9s} {'rep rows':>9s}")
names = ["lpdiag", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "flex"]
fns = {n: kernels.resolve(n) for n in names}
rows = []
for family in torch.ops.lpdiag.probe_families():
    for causal in (False, True):
        q, k, v, g, _ = torch.ops.lpdiag.probe_case(family, causal, 0)
        q, k, v, g = (t.to(dev, torch.bfloat16) for t in (q, k, v, g))
        for n in names:
            fn, why = fns[n]
            ref = survey.get((family, causal, n))
            if why or ref is None or ref.get("skipped"):
                print(f"{family:13s} {str(causal):6s} {n:15s} skipped: {why or 'not in the survey'}")
                continue
            o = fn(q, k, v, causal)
            m = measure(q, k, v, o, g, causal=causal)
            ok = agree(m["o_z"], ref["o_err_z"]) and agree(m["delta_z"], ref["delta_err_z"])
            rows.append({"family": family, "causal": causal, "kernel": n, "o_z": m["o_z"], "delta_z": m["delta_z"],
                         "survey_o_z": ref["o_err_z"], "survey_delta_z": ref["delta_err_z"],
                         "repeated_max_rows": m["repeated_max_rows"], "rows": m["rows"], "ok": ok})
            print(f"{family:13s} {str(causal):6s} {n:15s} {ref['o_err_z']:+10.1f} {m['o_z']:+9.1f} {ref['delta_err_z']:+10.1f} "
                  f"{m['delta_z']:+9.1f} {m['repeated_max_rows']:9d}  {'ok' if ok else 'FAIL'}", flush=True)
bad = [r for r in rows if not r["ok"]]
check(f"every kernel's observed z matches the survey within 10% (+0.5): {len(rows) - len(bad)} of {len(rows)}", not bad,
      json.dumps(bad[:6]))
if os.environ.get("OUT"):
    json.dump(rows, open(os.path.join(os.environ["OUT"], "observed_survey.json"), "w"), indent=1)

# A model on CUDA under observe_sdpa: training unchanged, the backend named in the trace.
C, H, T, V = 128, 2, 64, 17


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = H
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B = x.shape[0]
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2).to(torch.bfloat16) for t in self.c_attn(x).split(C, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.c_proj(y.transpose(1, 2).float().reshape(B, T, C))


def model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Embedding(V, C), Block(), Block(), nn.Linear(C, V)).to(dev)


def train(m, mon=None):
    gen = torch.Generator().manual_seed(3)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    out = []
    for step in range(6):
        idx = torch.randint(0, V, (4, T), generator=gen).to(dev)
        loss = F.cross_entropy(m(idx).reshape(-1, V), idx.roll(1, 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
        if mon:
            mon.record(step, loss.detach())
    return out


tmp = tempfile.mkdtemp()
base = train(model())
path = os.path.join(tmp, "sdpa.h5")
m = model()
with lpdiag.Monitor(path, m, observe_every=2) as mon, \
        lpdiag.observe_sdpa() as calls:
    seen = train(m, mon)
check("observe_sdpa on CUDA changes no loss (6 steps, bit for bit)", seen == base, f"{seen} vs {base}")
backend = calls.backends.most_common(1)[0][0] if calls.backends else None
print(f"PyTorch's backend for these calls: {backend} ({dict(calls.backends)}, {calls.calls} calls observed)")
check("observe_sdpa observed only the observed steps' calls (steps 0, 2, 4: 2 layers each)", calls.calls == 6, str(calls.calls))
j = json.loads(subprocess.run([cli, "analyze", path, "--json"], capture_output=True, text=True).stdout)
check("the trace names the backend PyTorch picked", j["attention_numerics"]["observed_kernels"] == f"external:{backend}",
      str(j["attention_numerics"]))

try:
    import transformers
except ImportError:
    transformers = None
if transformers is None:
    print("SKIP: transformers not installed (attn_implementation=\"lpdiag-observe\" not run)")
else:
    lpdiag.register_transformers()
    # A tiny Llama (q_proj/k_proj/v_proj Linear, grouped-query: 2 query heads share 1 k/v head);
    # transformers' GPT-2 keeps its c_attn in a Conv1D, which the Monitor's discovery does not take.
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=50, max_position_embeddings=64)
    hf = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="lpdiag-observe").to(dev, torch.bfloat16)
    hp = os.path.join(tmp, "hf.h5")
    with lpdiag.Monitor(hp, hf, observe_every=1) as mon:
        for step in range(2):
            idx = torch.randint(0, 50, (2, 64), device=dev)
            loss = hf(idx, labels=idx).loss
            loss.backward()
            mon.record(step, loss.detach())
    j = json.loads(subprocess.run([cli, "analyze", hp, "--json"], capture_output=True, text=True).stdout)
    check("Hugging Face lpdiag-observe: the trace names an observed SDPA backend",
          j["attention_numerics"]["observed"] and j["attention_numerics"]["observed_kernels"].startswith("external:"),
          str(j["attention_numerics"]))
finish()
