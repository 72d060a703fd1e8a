// GPT-2 training with lpdiag's hooks: bf16 attention through the lpdiag::attention operator,
// AdamW with warmup and cosine decay, gradient clipping, and the Monitor writing a trace.
//   gpt2_train --out out/demo.h5 [--steps 300] [--n-layer 2 --n-head 2 --n-embd 64 --block 64]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "autocast.hpp"
#include "clip.hpp"
#include "data.hpp"
#include "model.hpp"
#include "lpdiag/hooks/monitor.hpp"

namespace {
int train(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a log file as they are printed, even if the run is killed
  gpt2::Config cfg;
  int64_t steps = 300, batch = 8, warmup = 30, log_every = 25, seed = 1337, full_every = 0;
  double lr = 3e-3, min_lr = 3e-4, clip = 1.0, weight_decay = 0.1;
  std::string out = "out/gpt2.h5", text = "/usr/share/common-licenses/GPL-3";
  CLI::App app{"GPT-2 training with lpdiag hooks (CPU: emulated bf16 attention)", "gpt2_train"};
  app.add_option("--out", out, "Trace file")->capture_default_str();
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--n-layer", cfg.n_layer)->capture_default_str();
  app.add_option("--n-head", cfg.n_head)->capture_default_str();
  app.add_option("--n-embd", cfg.n_embd)->capture_default_str();
  app.add_option("--block", cfg.block)->capture_default_str();
  app.add_option("--lr", lr)->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  int64_t decay_steps = -1;
  app.add_option("--decay-steps", decay_steps,
                 "Step where the cosine decay reaches --min-lr; the lr stays there after it (default: --steps). Running on "
                 "past a run's end with --decay-steps set to its --steps keeps the first run's schedule")
      ->capture_default_str();
  app.add_option("--min-lr", min_lr, "The lr at the end of the cosine decay")->capture_default_str();
  app.add_option("--policy", cfg.policy, "Attention numerics: fa2, seed, seed-mma, fp32, fp8-p (seed and seed-mma take :tile=N)")->capture_default_str();
  app.add_option("--fix", cfg.fix, "none, paper, safe")->capture_default_str();
  app.add_option("--level", cfg.instrument, "Instrumentation level of the attention op: off, counters, full")->capture_default_str();
  app.add_option("--full-every", full_every,
                 "With --level full: full (O and delta errors) every N steps, counters in between; 0 = every step")
      ->capture_default_str();
  app.add_option("--text", text, "Training text")->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  std::string device = "cpu";
  bool no_monitor = false, overwrite = false;
  int64_t observe_every = 50;
  int64_t timed_from = 10, weights_every = 10;
  app.add_option("--device", device, "cpu or cuda (cuda runs the op's CUDA kernels)")->capture_default_str();
  app.add_option("--attention", cfg.attention,
                 "lpdiag (the op), sdpa (PyTorch's own in bf16, LibTorch >= 2) or sdpa-fp32 (PyTorch's own in fp32: the counterfactual)")
      ->capture_default_str();
  bool autocast = false;
  app.add_flag("--autocast", autocast, "Run the model under bf16 autocast (CUDA; the paper's recipe), parameters and AdamW in fp32");
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay (the paper: 0)")->capture_default_str();
  std::string lr_spike;
  app.add_option("--lr-spike", lr_spike,
                 "STEP:FACTOR:LEN multiplies the scheduled lr by FACTOR for LEN steps from STEP (a loss spike induced mid-run)");
  int64_t compression = 0, flush_every = 100;
  app.add_option("--flush-every", flush_every, "Records between trace flushes")->capture_default_str();
  app.add_option("--log-every", log_every, "Steps between log lines")->capture_default_str();
  app.add_option("--compression", compression, "Deflate level of the trace (0..9)")->capture_default_str();
  int64_t data_seed = -1;
  app.add_option("--data-seed", data_seed, "Seed of the batch order (default: --seed); counterfactual runs keep it")->capture_default_str();
  app.add_option("--observe-every", observe_every,
                 "With --attention sdpa: observe PyTorch's attention kernel on the first step and every N-th (0: never)")
      ->capture_default_str();
  app.add_option("--observe-rows", cfg.observe_rows, "Query rows per head an observed call looks at (0: all)")->capture_default_str();
  std::string guard;
  app.add_option("--guard", guard,
                 "fp32, sr or paper: when the Monitor's online alarm names a layer, that layer's attention switches to these "
                 "numerics from the next step (with --attention sdpa: fp32 whatever the guard, PyTorch's kernel having no fix)")
      ->check(CLI::IsMember({"fp32", "sr", "paper"}));
  std::string guard_at;
  app.add_option("--guard-at", guard_at,
                 "STEP:LAYER switches LAYER to the --guard numerics after STEP without an alarm (what a false alarm costs)");
  std::string alarm_thresholds = "default";
  app.add_option("--alarm-thresholds", alarm_thresholds,
                 "The online alarm's thresholds: default, slow-trigger (also warns when a growing head's repeated maxima rise "
                 "slowly), or odds-trigger (also warns when they were already common)")
      ->capture_default_str()
      ->check(CLI::IsMember(lpdiag::alarm::alarm_preset_names()));
  bool alarm_switches = true;
  app.add_flag("!--no-alarm-switch", alarm_switches,
               "With --guard-at: the alarms are still raised and recorded but switch nothing, so --guard-at alone decides "
               "when a layer switches (how late a switch still saves a run)");
  bool deterministic = false;
  app.add_flag("--deterministic", deterministic,
               "PyTorch's deterministic algorithms and cuBLAS's fixed workspace, for runs meant to repeat exactly (a guarded arm "
               "and its unguarded arm up to the switch; a run run on past its end); PyTorch warns of any op it has no "
               "deterministic form of. lpdiag's attention kernels are deterministic either way");
  app.add_flag("--no-monitor", no_monitor, "Train without the Monitor (the overhead benchmark's baseline)");
  app.add_flag("--overwrite", overwrite, "Replace an existing trace at --out (without it, an existing file is refused and left untouched)");
  bool activations = true;
  app.add_flag("!--no-activations", activations, "Do not record the blocks' output statistics");
  app.add_option("--weights-every", weights_every, "Monitor cadence of weight and update statistics (steps)")->capture_default_str();
  app.add_option("--timed-from", timed_from, "Steady-state timing starts at this step")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cfg.n_embd % cfg.n_head != 0) {
    std::fprintf(stderr, "gpt2_train: --n-embd must be a multiple of --n-head\n");
    return 2;
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "gpt2_train: --device must be cpu or cuda, got '%s'\n", device.c_str());
    return 2;
  }
  if (device == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "gpt2_train: --device cuda but this LibTorch sees no CUDA device; use --device cpu\n");
    return 2;
  }
  if (autocast && device != "cuda") {
    std::fprintf(stderr, "gpt2_train: --autocast needs --device cuda\n");
    return 2;
  }
  if (cfg.attention != "lpdiag" && cfg.attention != "sdpa" && cfg.attention != "sdpa-fp32") {
    std::fprintf(stderr, "gpt2_train: --attention must be lpdiag, sdpa or sdpa-fp32, got '%s'\n", cfg.attention.c_str());
    return 2;
  }
  int64_t spike_step = -1, spike_len = 0;
  double spike_factor = 1;
  if (!lr_spike.empty()) {
    long long a = 0, c = 0;
    double b = 0;
    char tail = 0;
    if (std::sscanf(lr_spike.c_str(), "%lld:%lf:%lld%c", &a, &b, &c, &tail) != 3 || a < 0 || c < 1 || !(b > 0)) {
      std::fprintf(stderr, "gpt2_train: --lr-spike wants STEP:FACTOR:LEN (e.g. 300:20:10), got '%s'\n", lr_spike.c_str());
      return 2;
    }
    spike_step = a, spike_factor = b, spike_len = c;
  }
  const torch::Device dev(device == "cuda" ? torch::kCUDA : torch::kCPU);
  if (device == "cuda") at::globalContext().setAllowTF32CuBLAS(true);  // the non-attention matmuls in TF32
  if (deterministic) {
    // Before the first cuBLAS handle exists: cuBLAS picks its reduction order per workspace size.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);  // a warning names any op without a deterministic form
  }
  torch::manual_seed(static_cast<uint64_t>(seed));
  const gpt2::Corpus corpus = gpt2::load_corpus(text);
  cfg.vocab = corpus.vocab;
  gpt2::GPT model(cfg);
  model->to(dev);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(weight_decay));

  const std::string run_config = "{\"model\":\"gpt2\",\"n_layer\":" + std::to_string(cfg.n_layer) + ",\"n_head\":" +
                                 std::to_string(cfg.n_head) + ",\"n_embd\":" + std::to_string(cfg.n_embd) + ",\"block\":" +
                                 std::to_string(cfg.block) + ",\"batch\":" + std::to_string(batch) + ",\"lr\":" + std::to_string(lr) +
                                 ",\"warmup\":" + std::to_string(warmup) + ",\"steps\":" + std::to_string(steps) +
                                 ",\"decay_steps\":" + std::to_string(decay_steps < 0 ? steps : decay_steps) + ",\"min_lr\":" + std::to_string(min_lr) +
                                 ",\"deterministic\":" + (deterministic ? "true" : "false") + ",\"seed\":" +
                                 std::to_string(seed) + ",\"data_seed\":" + std::to_string(data_seed < 0 ? seed : data_seed) +
                                 ",\"lr_spike\":\"" + lr_spike + "\",\"device\":\"" + device + "\",\"attention\":\"" + cfg.attention +
                                 "\",\"optimizer\":\"adamw\",\"weight_decay\":" + std::to_string(weight_decay) +
                                 ",\"schedule\":\"warmup+cosine\",\"precision\":\"" +
                                 (cfg.attention == "sdpa-fp32" ? "fp32 attention" : "bf16 attention") + (autocast ? ", bf16 autocast" : "") + "\",\"policy\":\"" +
                                 cfg.policy + "\",\"fix\":\"" + cfg.fix + "\",\"text\":\"" + corpus.source + "\"}";
  // lpdiag: the Monitor and its role map (fused c_attn -> q, k, v of each layer).
  auto monitor = no_monitor ? c10::intrusive_ptr<lpdiag::hooks::Monitor>()
                            : c10::make_intrusive<lpdiag::hooks::Monitor>(out, cfg.n_layer, cfg.n_head, cfg.n_embd / cfg.n_head, run_config, 0, 1, overwrite);
  for (int64_t l = 0; monitor && l < cfg.n_layer; ++l) {
    auto& b = model->blocks[static_cast<std::size_t>(l)];
    if (cfg.attention == "lpdiag") monitor->set_attention_numerics(l, cfg.policy, cfg.fix);
    else if (!(cfg.attention == "sdpa" && observe_every > 0)) monitor->set_attention_numerics(l, "external:" + cfg.attention, "none");
    // observed: the observer reports external:<the backend PyTorch picked> itself
    monitor->add_fused_qkv("h." + std::to_string(l) + ".attn", l, b->c_attn->weight);
    monitor->add_matrix("h." + std::to_string(l) + ".attn.c_proj", "attn_o", l, 0, b->attn_proj->weight, 0, cfg.n_embd);
    monitor->add_matrix("h." + std::to_string(l) + ".mlp.c_fc", "mlp_in", l, 0, b->c_fc->weight, 0, 4 * cfg.n_embd);
  }
  if (monitor && activations) {
    // Each block's output (the residual stream): max |x| and rms per record.
    for (int64_t l = 0; l < cfg.n_layer; ++l) monitor->add_activation("h." + std::to_string(l) + ".out", l);
    model->observe = [&monitor](std::size_t l, const torch::Tensor& x) { monitor->observe_activation("h." + std::to_string(l) + ".out", x); };
  }
  if (monitor) monitor->set_compression(compression), monitor->set_flush_every(flush_every);
  if (monitor && cfg.attention == "sdpa") monitor->set_observe_every(observe_every), model->cfg.layer_base = monitor->layer_base();
  for (auto& b : model->blocks) b->cfg.layer_base = model->cfg.layer_base;
  if (monitor) monitor->set_cadence("weights", weights_every), monitor->set_cadence("updates", weights_every);
  if (monitor) monitor->add_matrix("lm_head", "lm_head", -1, 0, model->lm_head->weight, 0, cfg.vocab);
  if (!guard.empty() && !monitor) {
    std::fprintf(stderr, "gpt2_train: --guard acts on the Monitor's alarms; drop --no-monitor\n");
    return 2;
  }
  int64_t guard_step = -1, guard_layer = -1;
  if (!guard_at.empty()) {
    long long a = 0, b = 0;
    char tail = 0;
    if (guard.empty() || std::sscanf(guard_at.c_str(), "%lld:%lld%c", &a, &b, &tail) != 2 || a < 0 || b < 0 || b >= cfg.n_layer) {
      std::fprintf(stderr, "gpt2_train: --guard-at wants STEP:LAYER (LAYER < --n-layer) and a --guard, got '%s'\n", guard_at.c_str());
      return 2;
    }
    guard_step = a, guard_layer = b;
  }
  if (monitor && alarm_thresholds != "default") {
    monitor->set_alarm_thresholds(alarm_thresholds);
    std::printf("alarm thresholds: %s\n", alarm_thresholds.c_str());
  }
  if (!alarm_switches && guard_at.empty()) {
    std::fprintf(stderr, "gpt2_train: --no-alarm-switch leaves only --guard-at to switch a layer; give --guard-at STEP:LAYER\n");
    return 2;
  }
  if (monitor && !guard.empty() && alarm_switches) {
    monitor->set_guard(guard);
    // PyTorch's SDPA has no fix to switch: a guarded layer's SDPA runs in fp32.
    if (cfg.attention == "sdpa")
      monitor->set_on_alarm([&model](const lpdiag::alarm::Alarm& a) {
        if (a.layer_index >= 0 && a.layer_index < static_cast<int64_t>(model->blocks.size()))
          model->blocks[static_cast<std::size_t>(a.layer_index)]->cfg.guard_fp32 = true;
      });
  }

  std::printf("text: %s (%zu tokens, vocab %lld); model: %lld layers, %lld heads, width %lld, block %lld\n", corpus.source.c_str(),
              corpus.tokens.size(), (long long)cfg.vocab, (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd,
              (long long)cfg.block);
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(data_seed < 0 ? seed : data_seed));
  // Nothing in a step waits for the device (the loss and the gradient norm stay there), except
  // the log lines every log_every steps, with or without the Monitor.
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize();
  };
  double first_loss = NAN, last_loss = NAN;
  torch::Tensor loss;
  const auto t0 = std::chrono::steady_clock::now();
  auto t_steady = t0;
  double record_secs = 0;  // host time inside Monitor::record over the steady state
  double copy_secs = 0;    // host time in the batch's copy to the device, which waits for the last step
  auto t_log = t0;
  int64_t log_step = 0;
  const int64_t decay_end = decay_steps < 0 ? steps : decay_steps;
  for (int64_t step = 0; step < steps; ++step) {
    const double cur_lr = step < warmup ? lr * double(step + 1) / double(warmup)
                          : step >= decay_end ? min_lr
                                              : min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(M_PI * double(step - warmup) / double(std::max<int64_t>(1, decay_end - warmup))));
    const double step_lr = step >= spike_step && step < spike_step + spike_len ? cur_lr * spike_factor : cur_lr;
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(step_lr);
    if (step == timed_from) sync(), t_steady = std::chrono::steady_clock::now();
    if (full_every > 0 && cfg.instrument == "full") model->set_instrument(step % full_every == 0 ? "full" : "counters");
    if (monitor && cfg.attention == "sdpa" && observe_every > 0) model->set_observe(step == 0 || step % observe_every == 0);
    auto [xc, yc] = corpus.batch(batch, cfg.block, gen);
    const auto c0 = std::chrono::steady_clock::now();
    const torch::Tensor x = xc.to(dev), y = yc.to(dev);
    if (step >= timed_from) copy_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    {
      const gpt2::Bf16Autocast amp(autocast);
      torch::Tensor logits = model->forward(x);
      loss = torch::nn::functional::cross_entropy(logits.view({-1, cfg.vocab}), y.view({-1}));
    }
    opt.zero_grad();
    loss.backward();
    const torch::Tensor grad_norm = gpt2::clip_grad_norm(model->parameters(), clip);
    opt.step();
    if (step == 0) first_loss = loss.item<double>();
    const auto r0 = std::chrono::steady_clock::now();
    const bool keep = !monitor || monitor->record(step, loss.detach(), step_lr, grad_norm);  // lpdiag: one call per step
    if (step == guard_step) {  // a false alarm, on purpose
      monitor->guard_layer(guard_layer, guard);
      if (cfg.attention == "sdpa") model->blocks[static_cast<std::size_t>(guard_layer)]->cfg.guard_fp32 = true;
    }
    if (step >= timed_from) record_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
    if (!keep) {
      std::printf("step %lld: loss is not finite; stopping as configured\n", (long long)step);
      break;
    }
    if (step % log_every == 0 || step == steps - 1) {
      // The wall time per step since the last log line (the loss read waits for the device): a
      // guarded run's cost after its switch shows here.
      const double l = loss.item<double>();
      const auto now = std::chrono::steady_clock::now();
      std::printf("step %5lld  loss %.4f  lr %.2e  grad_norm %.3f", (long long)step, l, step_lr, grad_norm.item<double>());
      if (step > log_step)
        std::printf("  %.1f ms/step", 1e3 * std::chrono::duration<double>(now - t_log).count() / double(step - log_step));
      std::printf("\n");
      t_log = now, log_step = step;
    }
  }
  // The steady state ends with the last step: closing the trace (its final flush) happens once
  // per run and is reported on its own, not spread over the timed steps.
  sync();
  const auto t1 = std::chrono::steady_clock::now();
  if (loss.defined()) last_loss = loss.item<double>();
  if (monitor) std::printf("Monitor::record host time per record, ms: %s\n", monitor->host_cost_json().c_str());
  if (monitor) monitor->close();
  if (monitor) std::printf("alarms: %s\n", monitor->alarms_json().c_str());
  const double close_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  if (steps > timed_from + 1) {
    const double ss = std::chrono::duration<double>(t1 - t_steady).count();
    const double n = double(steps - timed_from);
    std::printf("steady state (steps %lld..%lld): %.2f ms/step, %.0f tokens/s, of which Monitor::record %.2f ms/step, "
                "waiting at the batch copy %.2f ms/step; closing the trace %.1f ms\n",
                (long long)timed_from, (long long)steps - 1, 1e3 * ss / n, n * double(batch * cfg.block) / ss, 1e3 * record_secs / n,
                1e3 * copy_secs / n, close_ms);
  }
  std::printf("trained %lld steps in %.1f s (%.1f ms/step, %.0f tokens/s); loss %.4f -> %.4f; trace %s\n", (long long)steps, secs,
              1e3 * secs / double(steps), double(steps * batch * cfg.block) / secs, first_loss, last_loss, monitor ? monitor->trace_path().c_str() : "(no monitor)");
  return last_loss < first_loss ? 0 : 1;
}
}  // namespace

// One line for an error that stops the run before training (a path another writer holds, say).
int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "gpt2_train: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_train: %s\n", e.what());
  }
  return 2;
}
