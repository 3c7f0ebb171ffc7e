"""Peers built from our BertConfig (Model Garden and Hugging Face), shared by the benchmark
scripts (imported by path).

Importing this module chooses TensorFlow's CPU kernels as the commands do (cli.choose_cpu_kernels:
oneDNN on x86-64 unless TF_ENABLE_ONEDNN_OPTS is set). The setting is process-wide and read when
TensorFlow is first imported, so the scripts import this module before TensorFlow: ours and the
peers then run on the same kernels, and kernels_text() reports which in each script's table
header.
"""

import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)
from bert_tf import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

cli.choose_cpu_kernels()  # the commands' kernels, before anything imports TensorFlow


def kernels_text():
  """Which CPU kernels TensorFlow runs in this process: "TensorFlow oneDNN kernels on" / "off"."""
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
    enabled = bool(_pywrap_util_port.IsMklEnabled())
  except (ImportError, AttributeError):
    enabled = os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "1"
  return f"TensorFlow oneDNN kernels {'on' if enabled else 'off'}"


def model_garden_encoder(config, encoder_class, initializer):
  """A Model Garden encoder (networks.BertEncoder or BertEncoderV2) of config's sizes, with the
  original's tanh GELU (our "gelu"), dropouts and initializer."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return encoder_class(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size, inner_dim=config.intermediate_size,
      inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
      output_dropout=config.hidden_dropout_prob,
      attention_dropout=config.attention_probs_dropout_prob, initializer=initializer)


def model_garden_adamw(learning_rate, total_steps, warmup):
  """Model Garden's own optimizer and schedule for fine-tuning, from its OptimizerFactory:
  "adamw" (legacy_adamw.AdamWeightDecay, which clips to a global norm of 1.0 itself; the
  original's decay exclusions), linear warmup over `warmup` steps and linear decay to 0 at
  total_steps. Build it under the strategy's scope."""
  from official.modeling.optimization import optimizer_factory  # pylint: disable=g-import-not-at-top
  from official.modeling.optimization.configs import optimization_config  # pylint: disable=g-import-not-at-top
  opt_config = optimization_config.OptimizationConfig({
      "optimizer": {"type": "adamw", "adamw": {
          "weight_decay_rate": 0.01, "epsilon": 1e-6, "gradient_clip_norm": 1.0,
          "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"]}},
      "learning_rate": {"type": "polynomial", "polynomial": {
          "initial_learning_rate": learning_rate, "decay_steps": total_steps,
          "end_learning_rate": 0.0}},
      "warmup": {"type": "polynomial", "polynomial": {"warmup_steps": warmup, "power": 1.0}}})
  factory = optimizer_factory.OptimizerFactory(opt_config)
  return factory.build_optimizer(factory.build_learning_rate())


def model_garden_pretrainer(config, initializer):
  """Model Garden's BertPretrainerV2 on our config's sizes (a BertConfig), with the
  next-sentence head as its users add it (a ClassificationHead named next_sentence)."""
  from official.nlp.modeling import layers as mg_layers  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import models as mg_models  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import networks as mg_networks  # pylint: disable=g-import-not-at-top
  encoder = model_garden_encoder(config, mg_networks.BertEncoderV2, initializer)
  next_sentence = mg_layers.ClassificationHead(
      inner_dim=config.hidden_size, num_classes=2, initializer=initializer,
      name="next_sentence")
  return mg_models.BertPretrainerV2(encoder_network=encoder, mlm_initializer=initializer,
                                    classification_heads=[next_sentence])


def hf_adamw(model, learning_rate, warmup, total_steps):
  """(optimizer, scheduler) as Hugging Face's examples set them up: torch AdamW with weight
  decay 0.01 but on biases and LayerNorm weights, epsilon 1e-6 (the original's), and a linear
  warm-up and decay."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  no_decay = ("bias", "LayerNorm.weight")
  groups = [
      {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
       "weight_decay": 0.01},
      {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
       "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=learning_rate, eps=1e-6)
  return optimizer, transformers.get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def hf_bert_config(config, **extra):
  """transformers.BertConfig of our config's sizes (`config` as BertConfig.to_dict()), with the
  original's tanh GELU ("gelu_new"), dropouts and initializer range; `extra` adds head settings
  (num_labels=...)."""
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.BertConfig(
      vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
      num_hidden_layers=config["num_hidden_layers"],
      num_attention_heads=config["num_attention_heads"],
      intermediate_size=config["intermediate_size"], hidden_act="gelu_new",  # the tanh GELU
      hidden_dropout_prob=config["hidden_dropout_prob"],
      attention_probs_dropout_prob=config["attention_probs_dropout_prob"],
      max_position_embeddings=config["max_position_embeddings"],
      type_vocab_size=config["type_vocab_size"], initializer_range=config["initializer_range"],
      **extra)


def model_flops(config, seq, predictions):
  """Matmul FLOPs of one example's forward pass of `seq` positions (2 per multiply-add): per
  layer 8SH^2 (Q, K, V, output) + 4SHI (FFN) + 4S^2H (attention), plus the pooler and, with
  `predictions` masked positions, the masked LM transform 2PH^2 and vocabulary projection 2PHV.
  A training step counts 3x this."""
  h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
  per_layer = 8 * seq * h * h + 4 * seq * h * i + 4 * seq * seq * h
  heads = 2 * h * h + 2 * predictions * h * h + 2 * predictions * h * v + 4 * h
  return config.num_hidden_layers * per_layer + heads


def random_batch(np, config, batch, seq, predictions, rng):
  """A random pretraining batch (numpy): rows of seq // 2 to seq real tokens in two segments,
  `predictions` masked positions in each row's first half."""
  lengths = rng.integers(seq // 2, seq + 1, size=batch)
  mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
  ids = rng.integers(1, config.vocab_size, size=(batch, seq)).astype(np.int32) * mask
  types = (np.arange(seq)[None, :] >= (lengths // 2)[:, None]).astype(np.int32) * mask
  positions = np.sort(rng.integers(1, seq // 2, size=(batch, predictions)), axis=1)
  return dict(
      input_word_ids=ids, input_mask=mask, input_type_ids=types,
      masked_lm_positions=positions.astype(np.int32),
      masked_lm_ids=rng.integers(0, config.vocab_size, (batch, predictions)).astype(np.int32),
      masked_lm_weights=np.ones((batch, predictions), np.float32),
      next_sentence_labels=rng.integers(0, 2, (batch, 1)).astype(np.int32))


def matmul_peak_gflops(tf):
  """Best float32 matmul rate (GFLOP/s) of 1024^3 products at the configured thread count."""
  a = tf.random.normal((1024, 1024))
  b = tf.random.normal((1024, 1024))
  matmul = tf.function(lambda x, y: tf.matmul(x, y))
  matmul(a, b).numpy()
  best = 0.0
  for _ in range(5):
    start = time.perf_counter()
    for _ in range(10):
      c = matmul(a, b)
    c.numpy()
    best = max(best, 10 * 2 * 1024 ** 3 / (time.perf_counter() - start) / 1e9)
  return best
