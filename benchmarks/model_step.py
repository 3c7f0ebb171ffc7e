"""Forward and training-step throughput of our pretraining model against Model Garden (and
Hugging Face PyTorch when installed), on random data of the pretraining shapes.

  python benchmarks/model_step.py --threads=1 --presets=mini,small

Prints one table: examples/s, tokens/s, achieved GFLOP/s and that as a fraction of the float32
matmul peak measured at the same thread count in the same run. FLOPs count the matmuls only
(2 per multiply-add): per layer 8SH^2 (Q, K, V, output) + 4SHI (FFN) + 4S^2H (attention),
plus the pooler, the masked LM transform 2PH^2 and its vocabulary projection 2PHV; a training
step counts 3x the forward pass.

These are the FLOPs of the full model, counted the same for every system. Ours prunes the last
transformer layer to the rows the heads read ([CLS] and the masked positions; identical logits,
about 13% fewer FLOPs at these shapes), so its GFLOP/s and "of peak" are effective rates and can
exceed the matmul peak.

The table goes to benchmarks/results/model_step_DATE.json (benchmarks/results_file.py). --smoke:
the tiny preset (2 layers of 128), batch 4, sequence 32, 4 predictions, one round, Hugging Face
left out; seconds.
"""

import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # pylint: disable=g-import-not-at-top,wrong-import-position  (before TensorFlow)
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_integer("threads", 1, "Intra-op threads (inter-op is 1).")
flags.DEFINE_list("presets", ["mini", "small"], "BertConfig presets to measure.")
flags.DEFINE_integer("batch_size", 32, "Examples per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per example.")
flags.DEFINE_integer("predictions", 20, "Masked positions per example.")
flags.DEFINE_integer("rounds", 5, "Timed rounds (one step of each system per round, after two "
                     "warm-up steps); the best round counts.")
flags.DEFINE_list("systems", ["ours", "ours_xla", "model_garden", "hf_torch"],
                  "What to measure; hf_torch is skipped when torch/transformers are missing "
                  "(imported before TensorFlow, as the other order crashed).")
flags.DEFINE_list("modes", ["forward", "train"], "forward and/or train.")
results_file.define_flags(flags)
FLAGS = flags.FLAGS


# Shared with length_aware.py (the FLOP count above and the peak it is compared with).
model_flops = peers.model_flops
matmul_peak_gflops = peers.matmul_peak_gflops
random_batch = peers.random_batch


def time_interleaved(steps_by_system, batch, rounds):
  """Best seconds per step of each system, timing them in turn round after round.

  Interleaving and taking the best round keep a busy shared machine from favouring whichever
  system happened to run in a quiet moment.
  """
  for step in steps_by_system.values():  # warm-up: tracing, compilation, allocation
    step(batch)
    step(batch)
  best = {name: float("inf") for name in steps_by_system}
  for _ in range(rounds):
    for name, step in steps_by_system.items():
      start = time.perf_counter()
      step(batch)
      best[name] = min(best[name], time.perf_counter() - start)
  return best


def ours_steps(config, jit_compile):
  """(forward, train) step functions of our Keras 3 model in tf.functions."""
  import tensorflow as tf
  from bert_tf.training import losses
  from bert_tf.training import optimization
  from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model
  # What run_pretraining trains: the last layer pruned to the rows the heads read, the
  # original's AdamWeightDecay and clipping.
  model = build_pretraining_model(config, prune_last_layer=True)
  optimizer = optimization.AdamWeightDecay(1e-4, weight_decay_rate=0.01, epsilon=1e-6)
  optimizer.build(model.trainable_variables)
  inputs = PRETRAINING_INPUTS

  @tf.function(jit_compile=jit_compile)
  def forward(batch):
    return model({k: batch[k] for k in inputs}, training=False)["masked_lm_logits"]

  @tf.function(jit_compile=jit_compile)
  def train(batch):
    with tf.GradientTape() as tape:
      outputs = model({k: batch[k] for k in inputs}, training=True)
      loss = losses.pretraining_losses(outputs, batch)["loss"]
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = optimization.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  return (lambda b: forward(b).numpy()), (lambda b: train(b).numpy())


def plain_pretraining_loss(tf, mlm_logits, nsp_logits, batch):
  """The original's loss with stock TensorFlow ops, as a Model Garden user computes it."""
  weights = tf.cast(batch["masked_lm_weights"], tf.float32)
  mlm_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=batch["masked_lm_ids"], logits=tf.cast(mlm_logits, tf.float32))
  nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.reshape(batch["next_sentence_labels"], [-1]),
      logits=tf.cast(nsp_logits, tf.float32))
  return (tf.reduce_sum(weights * mlm_nll) / (tf.reduce_sum(weights) + 1e-5)
          + tf.reduce_mean(nsp_nll))


def model_garden_steps(config):
  """(forward, train) of Model Garden's BertPretrainerV2 (tf_keras) with an NSP head, trained
  with Model Garden's AdamWeightDecay and the original's decay exclusions."""
  import tensorflow as tf
  from official.modeling.optimization import legacy_adamw
  from official.nlp.modeling import layers as mg_layers
  from official.nlp.modeling import models as mg_models
  from official.nlp.modeling import networks as mg_networks
  encoder = mg_networks.BertEncoderV2(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      inner_dim=config.intermediate_size, max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size)
  nsp = mg_layers.ClassificationHead(inner_dim=config.hidden_size, num_classes=2,
                                     name="next_sentence")
  model = mg_models.BertPretrainerV2(encoder_network=encoder, classification_heads=[nsp])
  optimizer = legacy_adamw.AdamWeightDecay(
      learning_rate=1e-4, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  def call(batch, training):
    return model(dict(input_word_ids=batch["input_word_ids"], input_mask=batch["input_mask"],
                      input_type_ids=batch["input_type_ids"],
                      masked_lm_positions=batch["masked_lm_positions"]), training=training)

  @tf.function
  def forward(batch):
    return call(batch, False)["mlm_logits"]

  @tf.function
  def train(batch):
    with tf.GradientTape() as tape:
      outputs = call(batch, True)
      loss = plain_pretraining_loss(tf, outputs["mlm_logits"], outputs["next_sentence"], batch)
    grads = tape.gradient(loss, model.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 1.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  return (lambda b: forward(b).numpy()), (lambda b: train(b).numpy())


def import_torch():
  """(torch, transformers) with BertForPreTraining loaded, or None when either is missing.

  Called before TensorFlow is imported: with TensorFlow loaded first, importing transformers'
  model code (which loads torch's compiler stack and triton) crashed this process with a
  segmentation fault (torch 2.14, transformers 5.23, TensorFlow 2.20); the other order runs.
  """
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    transformers.BertForPreTraining  # pylint: disable=pointless-statement  (loads the model code)
  except ImportError:
    return None
  return torch, transformers


def hf_torch_steps(config, threads, modules):
  """(forward, train) of Hugging Face's PyTorch BertForPreTraining, eager, from import_torch()'s
  modules."""
  torch, transformers = modules
  torch.set_num_threads(threads)
  hf_config = transformers.BertConfig(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      intermediate_size=config.intermediate_size, hidden_act="gelu_new",
      max_position_embeddings=config.max_position_embeddings)
  model = transformers.BertForPreTraining(hf_config)
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6)

  def to_torch(batch):
    return {k: torch.as_tensor(v).long() if v.dtype != "float32" else torch.as_tensor(v)
            for k, v in batch.items()}

  def forward(batch):
    model.eval()
    with torch.no_grad():
      b = to_torch(batch)
      return model(input_ids=b["input_word_ids"], attention_mask=b["input_mask"],
                   token_type_ids=b["input_type_ids"]).prediction_logits

  def train(batch):
    # Hugging Face computes the vocabulary logits for every position (no gather), as it does.
    model.train()
    b = to_torch(batch)
    labels = torch.full_like(b["input_word_ids"], -100)
    labels.scatter_(1, b["masked_lm_positions"], b["masked_lm_ids"])
    out = model(input_ids=b["input_word_ids"], attention_mask=b["input_mask"],
                token_type_ids=b["input_type_ids"], labels=labels,
                next_sentence_label=b["next_sentence_labels"][:, 0])
    optimizer.zero_grad()
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return out.loss

  return forward, train


def main(argv):
  del argv
  if FLAGS.smoke:
    FLAGS.presets, FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions = ["tiny"], 4, 32, 4
    FLAGS.rounds = 1
    FLAGS.systems = results_file.without_torch(FLAGS.systems, True)
  torch_modules = import_torch() if "hf_torch" in FLAGS.systems else None  # before TensorFlow
  import numpy as np
  import tensorflow as tf
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  from bert_tf.config import preset

  peak = matmul_peak_gflops(tf)
  print(f"float32 matmul peak at {FLAGS.threads} thread(s): {peak:.1f} GFLOP/s")
  b, s, p = FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions
  rng = np.random.default_rng(0)
  rows = []
  for name in FLAGS.presets:
    config = preset(name)
    batch = random_batch(np, config, b, s, p, rng)
    flops = model_flops(config, s, p)
    systems = {}
    for system in FLAGS.systems:
      if system == "ours":
        systems[system] = ours_steps(config, jit_compile=False)
      elif system == "ours_xla":
        systems[system] = ours_steps(config, jit_compile=True)
      elif system == "model_garden":
        systems[system] = model_garden_steps(config)
      elif system == "hf_torch":
        if torch_modules is None:
          print("hf_torch: torch/transformers not installed, skipped")
          continue
        systems[system] = hf_torch_steps(config, FLAGS.threads, torch_modules)
      else:
        raise app.UsageError(f"unknown system {system!r}")
    for mode in FLAGS.modes:
      index = 0 if mode == "forward" else 1
      seconds = time_interleaved({k: v[index] for k, v in systems.items()}, batch, FLAGS.rounds)
      for system, t in seconds.items():
        gflops = (3 if mode == "train" else 1) * flops * b / t / 1e9
        rows.append((name, mode, system, b / t, b * s / t, gflops, gflops / peak))
        print(f"  {name} {mode} {system}: {b / t:.2f} examples/s", flush=True)
  print()
  print(f"batch {b}, sequence {s}, {p} predictions, {FLAGS.threads} thread(s), "
        f"{peers.kernels_text()}, peak {peak:.1f} GFLOP/s; GFLOP/s counts the full model's "
        f"FLOPs for every system "
        f"(effective rates for ours, whose last layer is pruned)")
  print(f"| preset | mode | system | examples/s | tokens/s | GFLOP/s | of peak | vs model_garden |")
  print(f"| --- | --- | --- | --- | --- | --- | --- | --- |")
  reference = {(r[0], r[1]): r[3] for r in rows if r[2] == "model_garden"}
  table = []
  for name, mode, system, eps, tps, gflops, fraction in rows:
    ratio = eps / reference[(name, mode)] if (name, mode) in reference else float("nan")
    print(f"| {name} | {mode} | {system} | {eps:.2f} | {tps:.0f} | {gflops:.1f} | "
          f"{fraction:.0%} | {ratio:.2f}x |")
    table.append(dict(preset=name, mode=mode, system=system, examples_per_second=eps,
                      tokens_per_second=tps, gflops=gflops, of_peak=fraction,
                      vs_model_garden=ratio if ratio == ratio else None))
  results_file.write("model_step", dict(
      batch_size=b, seq_length=s, predictions=p, threads=FLAGS.threads, rounds=FLAGS.rounds,
      peak_gflops=peak, kernels=peers.kernels_text(), rows=table), FLAGS.smoke,
      FLAGS.results_file)


if __name__ == "__main__":
  app.run(main)
