"""`lpdiag.Monitor`: a trace of a training run, around an existing model.

    with lpdiag.Monitor("run.h5", model) as mon:
        for step, batch in enumerate(loader):
            loss = ...; loss.backward(); gn = clip(...); opt.step()
            mon.record(step, loss, lr=lr, grad_norm=gn)

It finds the model's attention modules and their q/k/v weights in the common layouts (nanoGPT's
fused `c_attn`, Hugging Face's `q_proj`/`k_proj`/`v_proj`, a fused `qkv`), numbers them 0, 1, …
in module order, registers the weights with the trace, and while a module runs its forward tells
lpdiag.attention which layer it is (so calls without `layer=` are counted where they belong).
Where discovery cannot work, pass `roles={"h.0.attn": {"q": w_q, "k": w_k, "v": w_v}, ...}` or
`{"name": {"qkv": w_fused}}`, one entry per attention layer in order. Rank and world size come
from torch.distributed when it is initialized (one trace per rank: NAME.rank<k>.h5). Several
Monitors may run at once (two models): each records only its own layers' counters; counters of
a layer no Monitor holds are reported once (stderr, and an `unregistered_layer` event)."""
import json
import math
import sys

import torch

from ._library import load
from .attention import current_layer, current_level, current_observe, is_compiling, traced
from .guard import GuardSdpaMode, check_guard, current_guard
from .observe import head_mask, sdpa_mode_for_step

_HEAD_ATTRS = ("n_head", "num_heads", "num_attention_heads", "n_heads")


def _n_heads(module, model):
    for obj in (module, getattr(module, "config", None), getattr(model, "config", None)):
        for a in _HEAD_ATTRS:
            n = getattr(obj, a, None) if obj is not None else None
            if isinstance(n, int) and n > 0:
                return n
    return None


def discover(model):
    """[(name, module, {"qkv": W} or {"q": W, "k": W, "v": W})] for the model's attention modules, in order."""
    found = []
    for name, m in model.named_modules():
        sub = dict(m.named_children())
        if "c_attn" in sub and isinstance(sub["c_attn"], torch.nn.Linear):
            found.append((name, m, {"qkv": sub["c_attn"].weight}))
        elif all(k in sub for k in ("q_proj", "k_proj", "v_proj")):
            found.append((name, m, {r: sub[f"{r}_proj"].weight for r in "qkv"}))
        elif "qkv" in sub and isinstance(sub["qkv"], torch.nn.Linear):
            found.append((name, m, {"qkv": sub["qkv"].weight}))
    return found


class Monitor:
    """See the module's doc. Options: n_head (when the modules do not say), cadence (a dict of
    signal -> every N steps: weights and updates (default 10), attention and activations (default 1)), flush_every, compression
    (0-9), stop_on_nan, policy/fix (declared numerics, for layers the op has not run by the first
    record: "external:<backend>" when the model runs PyTorch's attention; layers the op ran are
    recorded as the op reports them, and a layer neither run nor declared as "external"),
    run_config (a dict), roles,
    activations (a dict name -> module whose output's max |x| and rms are recorded, e.g. each
    transformer block), level ("counters" or "off": what lpdiag.attention calls without a level
    run) and full_every (N, default 25: the steps that are multiples of N run at "full" instead,
    recording the O and δ error statistics the bias test needs; 0 or None: never), overwrite (False: an existing file
    at path is never replaced; the Monitor refuses it, and a directory, at once).
    Observing a kernel lpdiag did not write (lpdiag.observed, lpdiag.observe_sdpa): observe_every
    (N, default 50: the first step and every N-th are observed; 0: never), observe_layers and
    observe_heads (lists: a subset; None: all), observe_rows (query rows per head an observed
    call looks at, the leading batch elements that hold them; default 1024; 0: all).
    The online alarm (docs/reference/analyzers.md) runs on every record: alarm (True; False: off;
    "default", "slow-trigger" or "odds-trigger": which thresholds, docs/reference/analyzers.md), on_alarm (a
    callable given each alarm as a dict {step, kind, layer_index, head, evidence, guarded}, called
    from record(); what it raises is printed and training goes on), guard ("fp32", "sr", "paper"
    or None: from an alarm naming a layer on, that layer's attention runs under those numerics;
    lpdiag's op switches its policy or fix, an external kernel runs in fp32; the other layers keep
    theirs; each switch is a guard_switch event in the trace)."""

    def __init__(self, path, model, *, n_head=None, roles=None, cadence=None, flush_every=None, compression=None,
                 stop_on_nan=False, policy=None, fix="none", run_config=None, activations=None, level="counters",
                 full_every=25, overwrite=False, observe_every=50, observe_layers=None, observe_heads=None, observe_rows=1024,
                 alarm=True, on_alarm=None, guard=None):
        load()
        self._guard = check_guard(guard)
        # The alarm's named thresholds (AlarmParams::preset): "default", the frozen fit, and
        # "slow-trigger", which also warns when a growing head's repeated maxima rise slowly, and
        # "odds-trigger", which also warns when they were already common.
        names = list(torch.ops.lpdiag.alarm_thresholds())
        if isinstance(alarm, str) and alarm not in names:
            raise ValueError(f"lpdiag.Monitor: alarm must be True, False or the name of its thresholds "
                             f"({', '.join(names)}), got {alarm!r}")
        if guard is not None and not alarm:
            raise ValueError("lpdiag.Monitor: a guard acts on alarms; it needs alarm=True")
        if on_alarm is not None and not callable(on_alarm):
            raise TypeError(f"lpdiag.Monitor: on_alarm must be callable, got {type(on_alarm).__name__}")
        self._on_alarm, self._alarms, self._guarded = on_alarm, [], set()
        if level not in ("off", "counters", "full"):
            raise ValueError(f"lpdiag.Monitor: level must be off, counters or full, got {level!r}")
        if full_every is not None and int(full_every) < 0:
            raise ValueError(f"lpdiag.Monitor: full_every must be a number of steps >= 0 (0 or None: never), got {full_every!r}")
        self._level, self._full_every, self._next_step = level, (int(full_every) if full_every else None), 0
        self._step_level = self.step_level()  # kept as a string: what a compiled graph reads (and guards on)
        if observe_every is not None and int(observe_every) < 0:
            raise ValueError(f"lpdiag.Monitor: observe_every must be a number of steps >= 0 (0: never), got {observe_every!r}")
        if int(observe_rows) < 0:
            raise ValueError(f"lpdiag.Monitor: observe_rows must be >= 0 (0: all rows), got {observe_rows!r}")
        self._observe_every, self._observe_rows = int(observe_every or 0), int(observe_rows)
        self._first_observed = True  # the first step is observed whatever its number
        if roles is not None:
            mods = dict(model.named_modules())
            layers = [(name, mods.get(name), dict(w)) for name, w in roles.items()]
        else:
            layers = discover(model)
        if not layers:
            raise ValueError("lpdiag.Monitor: found no attention module (a child c_attn, q_proj/k_proj/v_proj or qkv Linear); "
                             "pass roles={'module.name': {'q': w_q, 'k': w_k, 'v': w_v}} or {'qkv': w}")
        heads = n_head or _n_heads(layers[0][1], model)
        if not heads:
            raise ValueError("lpdiag.Monitor: cannot tell the number of heads from the modules (no n_head / num_heads "
                             "attribute); pass n_head=")
        first = layers[0][2]
        width = (first["qkv"].shape[0] // 3) if "qkv" in first else first["q"].shape[0]
        if width % heads:
            raise ValueError(f"lpdiag.Monitor: q width {width} is not a multiple of n_head {heads}")
        dist = torch.distributed
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
        cfg = dict(run_config or {})
        cfg.setdefault("model", type(model).__name__)
        cfg.setdefault("level", level)  # how the run was observed; --reference does not compare these
        cfg.setdefault("full_every", self._full_every or 0)
        self._mon = torch.classes.lpdiag.Monitor(str(path), len(layers), heads, width // heads, json.dumps(cfg), rank, world,
                                                 bool(overwrite))
        # This Monitor's session: the op's layer ids of its layers start here (0 while it is the
        # only one alive), so two Monitors in one process never mix their counters.
        self._base = int(self._mon.layer_base())
        self.layers = [name for name, _, _ in layers]
        self._observe_mask = head_mask(observe_heads, heads)
        if observe_layers is not None:
            bad = [x for x in observe_layers if not 0 <= int(x) < len(layers)]
            if bad:
                raise ValueError(f"lpdiag.Monitor: observe_layers must be in [0, {len(layers)}), got {bad}")
        self._observe_layers = None if observe_layers is None else {int(x) for x in observe_layers}
        self._mon.set_observe_every(self._observe_every)
        if isinstance(alarm, str):
            self._mon.set_alarm_thresholds(alarm)
        else:
            self._mon.set_alarm(bool(alarm))
        if guard is not None:
            self._mon.set_guard(guard)
        self._step_observe = self.step_observed()
        for i, (name, _, w) in enumerate(layers):
            if "qkv" in w:
                self._mon.add_fused_qkv(name, i, w["qkv"])
            else:
                for r in "qkv":
                    # k's heads are its own: fewer than q's under grouped-query attention.
                    n = heads if r == "q" else (w[r].shape[0] // (width // heads) if r == "k" else 0)
                    self._mon.add_matrix(f"{name}.{r}", f"attn_{r}", i, n, w[r], 0, w[r].shape[0])
            if policy is not None:  # else the trace records what the op reports it ran
                self._mon.set_attention_numerics(i, policy, fix)
        for signal, every in (cadence or {}).items():
            self._mon.set_cadence(signal, int(every))
        if flush_every is not None:
            self._mon.set_flush_every(int(flush_every))
        if compression is not None:
            self._mon.set_compression(int(compression))
        if stop_on_nan:
            self._mon.set_stop_on_nan(True)
        self._hooks = []
        for i, (_, m, _) in enumerate(layers):
            if m is None:
                continue
            self._hooks.append(m.register_forward_pre_hook(self._enter_hook(i)))
            self._hooks.append(m.register_forward_hook(self._leave_hook()))
        for i, (name, module) in enumerate((activations or {}).items()):
            self._mon.add_activation(str(name), self._layer_of(module, layers, i))
            self._hooks.append(module.register_forward_hook(self._activation_hook(str(name))))
        self._tokens = []

    @staticmethod
    def _layer_of(module, layers, default):
        """The attention layer a watched module belongs to: the one it is or contains, else its position."""
        for i, (_, m, _) in enumerate(layers):
            if m is not None and (m is module or any(x is m for x in module.modules())):
                return i
        return min(default, len(layers) - 1)

    def _activation_hook(self, name):
        def hook(module, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            if isinstance(out, torch.Tensor):
                self._mon.observe_activation(name, out)
        return hook

    def step_level(self):
        """The level of the step whose forward runs next: "full" on multiples of full_every."""
        if self._full_every and self._next_step % self._full_every == 0:
            return "full"
        return self._level

    def step_observed(self):
        """Whether the step whose forward runs next is observed: the first, then every observe_every-th."""
        return bool(self._observe_every) and (self._first_observed or self._next_step % self._observe_every == 0)

    def _enter_hook(self, i):
        observe = (self._base + i, self._observe_rows, self._observe_mask)
        watched = self._observe_layers is None or i in self._observe_layers

        def hook(module, inputs):
            if is_compiling():  # TorchDynamo traces this store; it cannot trace ContextVar.set
                traced.layer, traced.level = self._base + i, self._step_level
                return
            observing = self._step_observe and watched
            mode = sdpa_mode_for_step() if observing else None  # observe_sdpa: only now, only here
            guarded = i in self._guarded
            guard_mode = GuardSdpaMode() if guarded and GuardSdpaMode is not None else None
            for m in (guard_mode, mode):  # the observer sees what the guarded call returned
                if m is not None:
                    m.__enter__()
            self._tokens.append((current_layer.set(self._base + i), current_level.set(self._step_level),
                                 current_observe.set(observe if observing else None), mode,
                                 current_guard.set("fp32" if guarded else None), guard_mode))
        return hook

    def _leave_hook(self):
        def hook(module, inputs, output):
            if is_compiling():
                traced.layer = traced.level = None
                return
            if self._tokens:
                layer_token, level_token, observe_token, mode, guard_token, guard_mode = self._tokens.pop()
                for m in (mode, guard_mode):
                    if m is not None:
                        m.__exit__(None, None, None)
                current_guard.reset(guard_token)
                current_observe.reset(observe_token)
                current_level.reset(level_token)
                current_layer.reset(layer_token)
        return hook

    def record(self, step, loss, *, lr=0.0, grad_norm=float("nan")):
        """One record per step; loss and grad_norm may be device tensors (never waited for).
        Returns False when stop_on_nan is set and the loss is not finite."""
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
        if isinstance(grad_norm, torch.Tensor):
            grad_norm = grad_norm.detach()
        self._next_step = int(step) + 1
        self._step_level = self.step_level()
        self._first_observed = False
        self._step_observe = self.step_observed()
        keep_going = self._mon.record(int(step), loss, float(lr), grad_norm)
        if self._mon.alarm_count() > len(self._alarms):
            self._take_alarms()
        return keep_going

    def _take_alarms(self):
        new = json.loads(self._mon.alarms_json())[len(self._alarms):]
        self._alarms.extend(new)
        for a in new:
            if a["guarded"]:
                self._guarded.add(int(a["layer_index"]))
            if self._on_alarm is not None:
                try:
                    self._on_alarm(dict(a))
                except Exception as e:  # noqa: BLE001 - a user's callback never stops training
                    print(f"lpdiag.Monitor: on_alarm raised {type(e).__name__}: {e}; training goes on", file=sys.stderr)

    @property
    def alarms(self):
        """The alarms so far: dicts {step, kind, layer_index, head, evidence, guarded} (guarded: the
        guard switched the layer)."""
        return list(self._alarms)

    def readings(self, prefix="lpdiag/", flat=True):
        """What the alarm read after the latest record it saw (on CUDA one record behind: a record's
        statistics land with the next step), for the user's own dashboard, e.g.
        `wandb.log(mon.readings(), step=step)`. Flat (the default): {name: float} with only the
        measured values, named `{prefix}loss_over_best` (the loss's running median over its best;
        the loss alarm fires at 2), `{prefix}median_growth` (the median head's log sigma_1 growth
        over the alarm's window), and per attention layer L `{prefix}layerL/excess_growth` (the
        largest growth beyond the median head's; the growth alarm wants 0.25),
        `.../excess_head`, `.../repeated_rate` and `.../repeated_ratio` (that head's
        repeated-maximum rate over the last window, and over the window before; the alarm wants
        2), `.../logit_max` (the layer's largest attention logit), and `{prefix}alarms` (how many so
        far). flat=False: the nested dict of `lpdiag alarm --readings`' quantities (None where
        unmeasured). {} when the alarm is off."""
        r = json.loads(self._mon.readings_json())
        if not flat or r is None:
            return r if r is not None else {}
        out = {}

        def put(name, x):
            if x is not None and math.isfinite(x):
                out[prefix + name] = float(x)

        put("loss_over_best", r["loss_over_best"])
        put("median_growth", r["median_growth"])
        for lay in r["layers"]:
            k = f"layer{lay['layer_index']}/"
            put(k + "excess_growth", lay["excess_growth"])
            put(k + "excess_head", lay["head"])
            put(k + "repeated_rate", lay["repeated_rate"])
            if lay["repeated_rate"] is not None and lay["repeated_rate_before"]:
                put(k + "repeated_ratio", lay["repeated_rate"] / lay["repeated_rate_before"])
            put(k + "logit_max", lay["logit_max"])
        out[prefix + "alarms"] = float(len(self._alarms))
        return out

    def guard_layer(self, layer, guard=None):
        """Switch layer `layer` (0-based) to safe numerics now, as an alarm with guard= would: guard
        "fp32", "sr" or "paper" (default: the Monitor's guard, else "fp32"). A guard_switch event
        records it."""
        layer = int(layer)
        if not 0 <= layer < len(self.layers):
            raise ValueError(f"lpdiag.Monitor.guard_layer: layer must be in [0, {len(self.layers)}), got {layer}")
        self._mon.guard_layer(layer, check_guard(guard or self._guard or "fp32"))
        self._guarded.add(layer)

    @property
    def guarded_layers(self):
        """This Monitor's layers (0-based) the guard has switched."""
        return sorted(self._guarded)

    def request_capture(self, layer, step):
        """Save attention layer `layer`'s inputs (q, k, v, and dO from its backward) and its output at
        training step `step` into a capture file beside the trace (NAME.capture.<step>.<layer>.h5,
        named by a `capture_written` event), for `lpdiag replay` to re-run offline under other
        numerics (`--policy recorded --fix recorded` re-runs what ran). `layer` counts this
        Monitor's attention layers from 0 (see `layers`)."""
        layer, step = int(layer), int(step)
        if not 0 <= layer < len(self.layers):
            raise ValueError(f"lpdiag.Monitor.request_capture: layer must be in [0, {len(self.layers)}), got {layer}")
        if step < 0:
            raise ValueError(f"lpdiag.Monitor.request_capture: step must be >= 0, got {step}")
        self._mon.request_capture(layer, step)

    def capture_on_trigger(self, rate, max_captures=1):
        """Capture a layer at the first step whose rate of rows with a repeated maximum exceeds
        `rate` (in (0, 1]), at most `max_captures` times."""
        if not 0 < float(rate) <= 1:
            raise ValueError(f"lpdiag.Monitor.capture_on_trigger: rate must be in (0, 1], got {rate}")
        if int(max_captures) < 1:
            raise ValueError(f"lpdiag.Monitor.capture_on_trigger: max_captures must be >= 1, got {max_captures}")
        self._mon.set_capture_trigger(float(rate), int(max_captures))

    def layer_id(self, layer):
        """The id to pass as lpdiag.attention(layer=...) for this Monitor's layer `layer` (only
        needed where calls give the layer themselves; the Monitor's module hooks supply it)."""
        return self._base + int(layer)

    @property
    def trace_path(self):
        """The trace being written, exactly the path given (rank files: ".rankN" before ".h5");
        None when no trace could be created (trace_error says why; training goes on)."""
        return self._mon.trace_path() or None

    def host_cost(self):
        """The host time record() took per record on average, by part, in ms: {"total", "land",
        "prepare", "counters", "stats", "rest", "records"} (a number to log beside the step time)."""
        return json.loads(self._mon.host_cost_json())

    @property
    def trace_error(self):
        """Why there is no trace ("" while there is one)."""
        return self._mon.trace_error()

    def close(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._mon.close()
        if self._mon.alarm_count() > len(self._alarms):  # the last record lands at close
            self._take_alarms()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
